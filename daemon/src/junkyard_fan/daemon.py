"""The main loop: owns timing, the fail-safe and the power guard.

Per cycle: one BMC read of every sensor, one decision per zone, one batch of
fan commands (only when a duty changed, a write failed, or ``rewrite_every``
passed), the power guard, the metrics file.

Fail-safe rules:

* a reading that is missing, out of range or older than ``stale_after`` is no
  reading; a zone without a complete set of valid inputs holds its duty (never
  lowers it), and after ``deadline`` seconds without one goes to 100 %;
* if the BMC does not answer at all, every zone is set to 100 % as soon as it
  answers again (the laws then ramp down slowly from there);
* on exit, on a signal and on an unhandled error, :meth:`Daemon.failsafe` sets
  every zone to 100 % before the process ends.

Degraded states are logged once per change, and exported as metrics.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from . import hwmon, metrics
from .config import Config, ConfigError, FanZone, SensorRef
from .control import FULL, CpuZoneController, GpuZoneController, ZoneController
from .ipmi import (
    Bmc,
    BmcError,
    BmcLocalError,
    BmcNoAnswer,
    RawRequest,
    Reading,
    SensorInfo,
)
from .powerguard import PowerGuard

log = logging.getLogger("junkyard_fan")

CURRENT_MAX_A = 250.0  # anything above this from a 12 V GPU rail is a bad reading
TEMP_RANGE_C = (-20.0, 150.0)
# A powered GPU never draws less than this share of its limit (an MI100 idles
# at ~40 W of 300 W): a current below it (0 A under load: a sensor that
# dropped out) is no reading, so the zone holds, then fails safe.
GPU_POWER_MIN_SHARE = 0.05
# More than this many times its limit is no GPU's power: a broken sensor that
# may be telling the truth about heat. The zone goes to 100 % (towards cooling).
GPU_POWER_MAX_FACTOR = 2.0


class Shutdown(BaseException):
    """Raised by the signal handlers to leave the loop (through the fail-safe)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@dataclass
class SensorState:
    info: SensorInfo
    role: str  # "current", "gpu_temp", "cpu_temp", "psu", "gpu_power_hwmon"
    value: float | None = None
    states: int | None = None
    at: float | None = None  # monotonic time of the last valid reading
    high: bool = False  # the last reading was implausibly high: fail towards cooling
    source: str = "bmc"  # "bmc", or "hwmon" (amdgpu's sysfs file ``path``)
    path: Path | None = None

    def fresh(self, now: float, stale_after: float) -> bool:
        return self.at is not None and now - self.at <= stale_after


@dataclass
class ZoneState:
    zone: FanZone
    controller: ZoneController
    sensors: list[str] = field(default_factory=list)  # SensorState keys it needs
    last_input: float = 0.0
    state: str = "starting"
    duty: float | None = None
    written: int | None = None  # byte last acknowledged by the BMC
    logged_state: str = "starting"  # the state (with its reason) last logged


class Daemon:
    def __init__(self, cfg: Config, bmc: Bmc, guard: PowerGuard | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.cfg = cfg
        self.bmc = bmc
        self.guard = guard or PowerGuard(cfg)
        self.clock = clock
        self.sensors: dict[str, SensorState] = {}
        self.zones: list[ZoneState] = []
        self.bmc_reachable = True
        self.need_full = False  # BMC went silent: set 100 % as soon as it answers
        self.last_write = -1e9
        self.cycles = 0
        self.last_cycle_s = 0.0
        self.local_write_error_since: float | None = None
        self.ended_safe = False  # the exit fail-safe ran (or is running)
        self._logged: dict[str, str] = {}
        self.hwmon_problems: list[str] = []
        # Set when junkyard-fan --probe found that the fan command does not move
        # this node's fans: the daemon then never sends a fan command.
        self.hands_off: str | None = None
        self.power_mismatch: dict[int, bool] = {}  # GPU -> BMC power disagrees with amdgpu

    # ------------------------------------------------------------- set up
    def sensor_refs(self) -> dict[str, tuple[SensorRef, str]]:
        p = self.cfg.profile
        refs: dict[str, tuple[SensorRef, str]] = {}
        for name, role, items in (
            ("gpu_current_sensors", "current", p.gpu_current_sensors),
            ("gpu_temp_sensors", "gpu_temp", p.gpu_temp_sensors),
            ("cpu_temp_sensors", "cpu_temp", p.cpu_temp_sensors),
            ("psu_status_sensors", "psu", p.psu_status_sensors),
        ):
            for i, ref in enumerate(items):
                refs[f"profile.bmc.{name}[{i}]"] = (ref, role)
        return refs

    def setup(self, touch_fans: bool = True) -> None:
        """Read the SDR, resolve every configured sensor (ConfigError if missing).

        With ``touch_fans`` false (one-shot, checks) nothing is sent to the fans."""
        self.bmc.discover()
        refs = self.sensor_refs()
        infos = self.bmc.resolve({k: ref for k, (ref, _role) in refs.items()})
        self.sensors = {k: SensorState(info=infos[k], role=role)
                        for k, (_ref, role) in refs.items()}
        self.setup_hwmon()
        now = self.clock()
        p = self.cfg.profile
        self.zones = []
        for z in p.fan_zones:
            zs: ZoneState
            if z.kind == "gpu":
                zs = ZoneState(z, GpuZoneController(z, self.cfg.gpu_law))
                zs.sensors = [f"profile.bmc.gpu_current_sensors[{g}]" for g in z.gpus]
                if p.gpu_temp_sensors:
                    zs.sensors += [f"profile.bmc.gpu_temp_sensors[{g}]" for g in z.gpus]
                else:
                    zs.sensors += [key for g in z.gpus for key in [f"hwmon.gpu[{g}].temp"]
                                   if key in self.sensors]
            else:
                zs = ZoneState(z, CpuZoneController(z, self.cfg.cpu_law))
                zs.sensors = [f"profile.bmc.cpu_temp_sensors[{i}]"
                              for i in range(len(p.cpu_temp_sensors))]
            zs.last_input = now  # the deadline runs from start-up
            self.zones.append(zs)
        if self.hands_off is not None:
            log.error("not taking over the fans, they stay under the BMC's control: %s",
                      self.hands_off)
            if p.auto is not None and touch_fans:
                try:
                    self.bmc.raw([RawRequest(*p.auto.render(fan_id=z.fan_id))
                                  for z in p.fan_zones], op="auto")
                except BmcError as err:
                    log.warning("could not hand the fans to the BMC (auto command): %s", err)
            return
        if p.manual is not None and touch_fans:
            reqs = [RawRequest(*p.manual.render(fan_id=z.fan_id)) for z in p.fan_zones]
            try:
                self.bmc.raw(reqs, op="manual")
            except BmcError as err:
                log.warning("could not switch fans to manual mode yet: %s", err)

    def setup_hwmon(self) -> None:
        """Add amdgpu's hwmon files: GPU temperatures (when the profile has no BMC
        GPU temperatures) and GPU power (the cross-check of the BMC's currents)."""
        h, p = self.cfg.hwmon, self.cfg.profile
        if not h.enabled or not p.gpu_count:
            return
        gpus = hwmon.discover(h.sysfs_root)
        mapping, problems = hwmon.assign(gpus, p.gpu_count, p.gpu_pci_addresses)
        use_temps = not p.gpu_temp_sensors
        for i, gpu in sorted(mapping.items()):
            path = gpu.temps.get(h.temperature)
            if use_temps and path is None:
                problems.append(f"GPU {i} ({gpu.pci}): no {h.temperature} temperature in "
                                f"{gpu.hwmon} (it has: {', '.join(sorted(gpu.temps)) or 'none'})")
            elif use_temps:
                self.sensors[f"hwmon.gpu[{i}].temp"] = SensorState(
                    info=SensorInfo(name=f"GPU{i} {h.temperature} (amdgpu {gpu.pci})",
                                    number=-1, record_id=-1, discrete=False),
                    role="gpu_temp", source="hwmon", path=path)
            if gpu.power is not None:
                self.sensors[f"hwmon.gpu[{i}].power"] = SensorState(
                    info=SensorInfo(name=f"GPU{i} power (amdgpu {gpu.pci})", number=-1,
                                    record_id=-1, discrete=False),
                    role="gpu_power_hwmon", source="hwmon", path=gpu.power)
        self.hwmon_problems = problems
        for problem in problems:
            log.error("amdgpu hwmon: %s", problem)
        order = "profile.gpu.pci_addresses" if p.gpu_pci_addresses else "PCI address order"
        log.info("amdgpu hwmon: %d of %d GPUs found under %s (%s)%s", len(mapping),
                 p.gpu_count, h.sysfs_root, order,
                 f"; zones follow their {h.temperature} temperature" if use_temps and mapping
                 else "")

    def rediscover(self) -> None:
        """The BMC's SDR changed under us: read it again and re-resolve the sensors."""
        self.bmc.transport.sdr_changed = False
        log.warning("the BMC's sensor records changed: reading its SDR again")
        try:
            self.bmc.discover()
            infos = self.bmc.resolve({k: st.info.name for k, st in self.sensors.items()
                                      if st.source == "bmc"})
        except (BmcError, ConfigError) as err:
            # Zones whose sensors are gone get no input: hold, then 100 %.
            self._once("sdr", str(err), logging.ERROR, "SDR re-read failed: %s", err)
            return
        for key, info in infos.items():
            self.sensors[key].info = info

    # ------------------------------------------------------------ helpers
    def _once(self, key: str, value: str, level: int, msg: str, *args: object) -> None:
        """Log only when ``key`` changes to a new ``value``."""
        if self._logged.get(key) != value:
            self._logged[key] = value
            log.log(level, msg, *args)

    def plausibility(self, role: str, r: Reading) -> str:
        """``ok``, ``high`` (implausibly high: towards cooling), or ``none`` (no reading)."""
        if role == "psu":
            return "ok" if r.states is not None else "none"
        if r.value is None:
            return "none"
        if role == "gpu_power_hwmon":
            return "ok" if r.value >= 0 else "none"
        if role == "current":
            p = self.cfg.profile
            watts = r.value * p.current_calibration * p.supply_voltage
            if r.value > CURRENT_MAX_A or watts > GPU_POWER_MAX_FACTOR * p.gpu_max_power_w:
                return "high"
            if r.value < 0 or watts < GPU_POWER_MIN_SHARE * p.gpu_max_power_w:
                return "none"
            return "ok"
        if r.value > TEMP_RANGE_C[1]:
            return "high"
        return "ok" if r.value >= TEMP_RANGE_C[0] else "none"

    def valid(self, info: SensorInfo, r: Reading) -> bool:
        st = next((s for s in self.sensors.values() if s.info == info), None)
        return self.plausibility(st.role if st else "psu", r) != "none"

    def gpu_power_w(self, key: str) -> float:
        p = self.cfg.profile
        value = self.sensors[key].value
        assert value is not None
        return value * p.current_calibration * p.supply_voltage

    def _byte(self, duty: float) -> int:
        return round(duty * self.cfg.profile.duty_scale / 100.0)

    # -------------------------------------------------------------- cycle
    def read_hwmon(self) -> None:
        """Read amdgpu's hwmon files; a file that cannot be read is no reading."""
        at = self.clock()
        for st in self.sensors.values():
            if st.source != "hwmon" or st.path is None:
                continue
            value = (hwmon.read_temp_c(st.path) if st.role == "gpu_temp"
                     else hwmon.read_power_w(st.path))
            r = Reading(value=value)
            ok = self.plausibility(st.role, r) != "none"
            self._once(f"hwmon:{st.info.name}", str(ok), logging.INFO if ok else logging.WARNING,
                       "%s: %s", st.info.name, f"reading {st.path}" if ok
                       else f"no reading from {st.path} ({value!r})")
            if ok:
                self._apply(st, r, at)

    def _apply(self, st: SensorState, r: Reading, at: float) -> None:
        st.value, st.states, st.at = r.value, r.states, at
        high = self.plausibility(st.role, r) == "high"
        if high != st.high:
            self._once(f"high:{st.info.name}", str(high),
                       logging.ERROR if high else logging.INFO,
                       "%s reads %s: %s", st.info.name, r.value,
                       "implausibly high, its zone goes to 100 %" if high
                       else "plausible again")
        st.high = high

    def check_power(self, now: float) -> None:
        """Compare each GPU's power from the BMC's current with amdgpu's own figure.

        amdgpu reports the SoC's power, the BMC the 12 V rail of the whole card,
        so they never agree exactly; outside ``hwmon.power_ratio`` the BMC's
        current (or its calibration, like the G292-Z45's factor 2) is suspect."""
        h, p, t = self.cfg.hwmon, self.cfg.profile, self.cfg.timings
        if not h.power_check:
            return
        for i in range(p.gpu_count):
            cur = self.sensors.get(f"profile.bmc.gpu_current_sensors[{i}]")
            hw = self.sensors.get(f"hwmon.gpu[{i}].power")
            if (cur is None or hw is None or not cur.fresh(now, t.stale_after)
                    or not hw.fresh(now, t.stale_after) or hw.value is None):
                continue
            if hw.value < 0.3 * p.gpu_max_power_w:
                continue  # idle: small figures, large ratios, nothing learnt
            bmc_w = self.gpu_power_w(f"profile.bmc.gpu_current_sensors[{i}]")
            ratio = bmc_w / hw.value
            bad = not h.power_ratio[0] <= ratio <= h.power_ratio[1]
            if bad or self.power_mismatch.get(i):
                self._once(f"power:{i}", str(bad), logging.WARNING if bad else logging.INFO,
                           "GPU %d: the BMC's current gives %.0f W, amdgpu reports %.0f W "
                           "(ratio %.2f): %s", i, bmc_w, hw.value, ratio,
                           "check profile.bmc.current_calibration and the sensor order"
                           if bad else "they agree again")
            self.power_mismatch[i] = bad

    def read(self, now: float) -> bool:
        """One BMC read of all sensors. False if the BMC did not answer."""
        self.read_hwmon()
        infos = [s.info for s in self.sensors.values() if s.source == "bmc"]
        unique = list({i.record_id: i for i in infos}.values())
        try:
            got = self.bmc.read(unique, self.valid)
        except BmcNoAnswer as err:
            self._once("bmc", "unreachable", logging.ERROR,
                       "BMC does not answer (%s): all zones go to 100 %% as soon as it does",
                       err)
            return False
        except BmcError as err:
            self._once("bmc", "bad", logging.WARNING, "BMC answers badly: %s", err)
            return True
        self._once("bmc", "ok", logging.INFO, "BMC answers")
        if getattr(self.bmc.transport, "sdr_changed", False):
            self.rediscover()
        # A reading is as old as the read that brought it: a slow BMC's read
        # may take seconds, and its readings must not arrive stale.
        at = max(now, self.clock())
        for st in self.sensors.values():
            r = got.get(st.info.name) if st.source == "bmc" else None
            if r is not None:
                self._apply(st, r, at)
        self.check_power(at)
        return True

    def decide(self, now: float) -> None:
        t = self.cfg.timings
        if self.hands_off is not None:
            for zs in self.zones:
                zs.state, zs.duty = "bmc_control", None
            return
        for zs in self.zones:
            fresh = all(self.sensors[k].fresh(now, t.stale_after) for k in zs.sensors)
            ctl = zs.controller
            if self.need_full:
                state, duty = "bmc_lost", FULL
                ctl.out.force(FULL, now)
            elif fresh and any(self.sensors[k].high for k in zs.sensors):
                # A reading no GPU or CPU can produce: believe the heat, not the law.
                zs.last_input = min(self.sensors[k].at or now for k in zs.sensors)
                state, duty = "failsafe", FULL
                ctl.out.force(FULL, now)
            elif fresh:
                # The zone's input is as old as its oldest reading.
                zs.last_input = min(self.sensors[k].at or now for k in zs.sensors)
                if isinstance(ctl, GpuZoneController):
                    powers = [self.gpu_power_w(k) for k in zs.sensors
                              if self.sensors[k].role == "current"]
                    temps = [v for k in zs.sensors if self.sensors[k].role == "gpu_temp"
                             for v in [self.sensors[k].value] if v is not None]
                    duty = ctl.update(powers, temps, now)
                else:
                    assert isinstance(ctl, CpuZoneController)
                    temps = [v for k in zs.sensors for v in [self.sensors[k].value]
                             if v is not None]
                    duty = ctl.update(temps, now)
                state = "override" if ctl.out.overridden else "ok"
            elif now - zs.last_input > t.deadline:
                state, duty = "failsafe", FULL
                ctl.out.force(FULL, now)
            else:
                state, duty = "hold", ctl.duty
                if duty is not None:
                    ctl.out.force(duty, now)  # hold: never lower without input
            zs.duty = duty
            state_key = "failsafe_high" if state == "failsafe" and fresh else state
            if state_key != zs.logged_state:
                zs.logged_state = state_key
                level = logging.INFO if state == "ok" else logging.WARNING
                why = {
                    "ok": "regulating",
                    "override": f"temperature limit reached: {FULL:.0f} %",
                    "hold": "no valid input: holding the duty",
                    "failsafe": f"no valid input for {t.deadline:g} s: {FULL:.0f} %",
                    "failsafe_high": f"implausibly high reading: {FULL:.0f} %",
                    "bmc_lost": f"BMC lost: {FULL:.0f} % as soon as it answers",
                }[state_key]
                log.log(level, "zone %s: %s", zs.zone.name, why)
            zs.state = state

    def write(self, now: float) -> None:
        """Send the zones whose duty changed (or all, when a refresh is due)."""
        if self.hands_off is not None:
            return
        everything = self.need_full or now - self.last_write >= self.cfg.timings.rewrite_every
        todo = [zs for zs in self.zones if zs.duty is not None
                and (everything or zs.written != self._byte(zs.duty))]
        if not todo:
            return
        reqs = []
        for zs in todo:
            assert zs.duty is not None
            reqs.append(RawRequest(*self.cfg.profile.set_duty.render(
                fan_id=zs.zone.fan_id, duty=self._byte(zs.duty))))
        manual = self.cfg.profile.manual
        extra = []
        if everything and manual is not None:
            # A BMC that was reset is back in its own mode: re-assert manual.
            extra = [RawRequest(*manual.render(fan_id=zs.zone.fan_id)) for zs in todo]
        try:
            ok = self.bmc.raw(extra + reqs)[len(extra):]
        except BmcError as err:
            self._once("write", "failed", logging.ERROR, "fan commands not delivered: %s", err)
            for zs in todo:
                zs.written = None
            if isinstance(err, BmcLocalError):
                # Not the BMC: this process cannot send. Past the deadline, end
                # through the fail-safe (its other way) and let the supervisor
                # start a fresh process.
                if self.local_write_error_since is None:
                    self.local_write_error_since = now
                elif now - self.local_write_error_since > self.cfg.timings.deadline:
                    raise RuntimeError(f"fan commands cannot be sent: {err}") from err
            return
        self.local_write_error_since = None
        for zs, good in zip(todo, ok, strict=True):
            assert zs.duty is not None
            zs.written = self._byte(zs.duty) if good else None
        if all(ok):
            self._once("write", "ok", logging.INFO, "fan commands delivered")
            if everything:
                self.last_write = now
            if self.need_full:
                self.need_full = False
                log.warning("BMC answers again: every zone set to 100 %, regulating from there")
        else:
            self._once("write", "partial", logging.ERROR, "BMC rejected fan commands for %s",
                       ", ".join(zs.zone.name for zs, g in zip(todo, ok, strict=True) if not g))

    def cycle(self) -> None:
        start = self.clock()
        if self.need_full:
            # The BMC was lost: the fans come first, before reading anything.
            self.decide(start)
            self.write(start)
        answered = self.read(start)
        if not answered:
            self.bmc_reachable = False
            self.need_full = True
        else:
            self.bmc_reachable = True
        now = self.clock()
        self.decide(now)
        self.write(now)
        psus = [st for st in self.sensors.values() if st.role == "psu"]
        self.guard.update([st.states if st.fresh(now, self.cfg.timings.stale_after) else None
                           for st in psus], now)
        self.cycles += 1
        self.last_cycle_s = self.clock() - start
        self.export(now)

    # ----------------------------------------------------------- fail-safe
    def failsafe(self, reason: str) -> bool:
        """Set every zone to 100 %, trying until ``exit_budget`` runs out.

        Any error is survived here, not only the BMC's: tries alternate
        between the batch the loop uses and one request per call with its
        bytes on the command line (no standard input, no file), so a broken
        batch path or a full ``/run`` does not leave the fans where they were.
        """
        self.ended_safe = True
        if self.hands_off is not None:
            log.warning("%s: the fans are under the BMC's control, not touching them", reason)
            return True
        log.warning("%s: setting every fan zone to 100 %%", reason)
        p = self.cfg.profile
        zones = list(p.fan_zones)
        reqs = [RawRequest(*p.set_duty.render(fan_id=z.fan_id, duty=self._byte(FULL)))
                for z in zones]
        done = [False] * len(reqs)
        deadline = self.clock() + self.cfg.timings.exit_budget
        attempt = 0
        while True:
            todo = [i for i, ok in enumerate(done) if not ok]
            try:
                if attempt % 2 == 0:
                    for i, ok in zip(todo, self.bmc.raw([reqs[i] for i in todo], op="failsafe"),
                                     strict=True):
                        done[i] = done[i] or ok
                else:
                    for i in todo:
                        self.bmc.tries["failsafe"] += 1
                        ans = self.bmc.transport.raw_one(reqs[i])
                        done[i] = ans is not None and ans[0] == 0
            except Exception as err:  # the fail-safe outlives every error
                kind = err.kind if isinstance(err, BmcError) else "local"
                if not isinstance(err, BmcError) or attempt % 2:
                    self.bmc.errors[("failsafe", kind)] += 1
                log.error("fail-safe write failed (%s): %s: %s",
                          "batch" if attempt % 2 == 0 else "one by one",
                          type(err).__name__, err)
            attempt += 1
            if all(done):
                for zs in self.zones:
                    zs.duty, zs.written = FULL, self._byte(FULL)
                log.warning("every fan zone is at 100 %")
                return True
            if self.clock() >= deadline:
                log.critical("could not set the fans of %s to 100 %% within %g s",
                             ", ".join(z.name for z, ok in zip(zones, done, strict=True)
                                       if not ok), self.cfg.timings.exit_budget)
                return False
            time.sleep(0.2)

    def run(self, sleep: Callable[[float], None] = time.sleep) -> None:
        """Loop until a Shutdown (signal) or an error; always end with the fail-safe."""
        reason = "exit"
        try:
            while True:
                start = self.clock()
                self.cycle()
                sleep(max(0.0, self.cfg.timings.interval - (self.clock() - start)))
        except Shutdown as sig:
            reason = f"signal {sig.signum}"
            raise
        except BaseException as err:
            reason = f"unhandled error {type(err).__name__}: {err}"
            log.exception("unhandled error in the control loop")
            raise
        finally:
            self.failsafe(reason)

    # ------------------------------------------------------------- metrics
    def samples(self) -> list[tuple[str, dict[str, str], float]]:
        now = self.clock()
        out: list[tuple[str, dict[str, str], float]] = []
        for key, st in self.sensors.items():
            if st.value is not None and st.fresh(now, self.cfg.timings.stale_after):
                out.append(("sensor_reading", {"sensor": st.info.name, "role": st.role},
                            st.value))
            if st.role == "current" and st.value is not None:
                gpu = key.rsplit("[", 1)[1].rstrip("]")
                out.append(("gpu_power_watts", {"gpu": gpu}, self.gpu_power_w(key)))
        for gpu, bad in sorted(self.power_mismatch.items()):
            out.append(("gpu_power_mismatch", {"gpu": str(gpu)}, 1.0 if bad else 0.0))
        if self.cfg.hwmon.enabled and self.cfg.profile.gpu_count:
            out.append(("hwmon_gpus", {}, len({k.split("]")[0] for k, st in self.sensors.items()
                                               if st.source == "hwmon"})))
            out.append(("hwmon_problems", {}, len(self.hwmon_problems)))
        for zs in self.zones:
            if zs.duty is not None:
                out.append(("zone_duty_percent", {"zone": zs.zone.name}, zs.duty))
            for state in ("ok", "hold", "failsafe", "override", "bmc_lost", "bmc_control"):
                out.append(("zone_state", {"zone": zs.zone.name, "state": state},
                            1.0 if zs.state == state else 0.0))
            out.append(("zone_input_age_seconds", {"zone": zs.zone.name}, now - zs.last_input))
        out.append(("bmc_reachable", {}, 1.0 if self.bmc_reachable else 0.0))
        out.append(("bmc_info", {"access": self.cfg.bmc.access,
                                 "tool": getattr(self.bmc.transport, "name", "other")}, 1.0))
        out.append(("probe_failed", {}, 1.0 if self.hands_off is not None else 0.0))
        for (op, kind), n in sorted(self.bmc.errors.items()):
            out.append(("bmc_errors_total", {"op": op, "kind": kind}, n))
        for op, n in sorted(self.bmc.tries.items()):
            out.append(("bmc_tries_total", {"op": op}, n))
        psus = [st for st in self.sensors.values() if st.role == "psu"]
        for i, _st in enumerate(psus):
            out.append(("psu_failed", {"psu": str(i + 1)},
                        1.0 if (i + 1) in self.guard.failed else 0.0))
        out.append(("power_cap_active", {}, 1.0 if self.guard.active else 0.0))
        out.append(("power_cap_watts", {}, self.guard.cap_w if self.guard.active else 0.0))
        out.append(("power_cap_errors_total", {}, self.guard.errors))
        out.append(("cycles_total", {}, self.cycles))
        out.append(("cycle_seconds", {}, self.last_cycle_s))
        return out

    def export(self, now: float) -> None:
        path = self.cfg.metrics.textfile
        if path is None:
            return
        try:
            metrics.write_textfile(path, metrics.render(self.samples()))
        except OSError as err:
            self._once("metrics", "failed", logging.ERROR, "cannot write %s: %s", path, err)
