"""Configuration: YAML in, frozen dataclasses out, validated in full before the loop.

Every problem is reported with the dotted key it is about
(``profile.fan_zones[1].gpus[0]: GPU 9 does not exist (profile.gpu.count is 8)``),
and all problems are reported at once, not the first one only.
See daemon/README.md for the schema.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


class ConfigError(ValueError):
    """The configuration is invalid; ``problems`` lists every ``key: message``."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("invalid configuration:\n  " + "\n  ".join(problems))


# ----------------------------------------------------------------- dataclasses
SensorRef = str | int  # an SDR id string, or a sensor number


@dataclass(frozen=True)
class RawCommand:
    """A raw IPMI request template: netfn, cmd and data bytes with placeholders."""

    netfn: int
    cmd: int
    data: tuple[int | str, ...]  # str items are placeholders: "fan_id", "duty"

    def render(self, **values: int) -> tuple[int, int, bytes]:
        out = bytearray()
        for item in self.data:
            out.append(values[item] if isinstance(item, str) else item)
        return self.netfn, self.cmd, bytes(out)


@dataclass(frozen=True)
class FanZone:
    name: str
    fan_id: int
    gpus: tuple[int, ...]
    kind: str  # "gpu" or "cpu"
    # The zone's fan tachometers (for ``--probe``: do the fans follow the command?)
    tach_sensors: tuple[SensorRef, ...] = ()


@dataclass(frozen=True)
class Profile:
    gpu_count: int
    gpu_max_power_w: float
    supply_voltage: float
    current_calibration: float
    gpu_current_sensors: tuple[SensorRef, ...]
    gpu_temp_sensors: tuple[SensorRef, ...]
    cpu_temp_sensors: tuple[SensorRef, ...]
    psu_status_sensors: tuple[SensorRef, ...]
    psu_count: int
    psu_rating_w: float
    fan_zones: tuple[FanZone, ...]
    set_duty: RawCommand
    auto: RawCommand | None
    manual: RawCommand | None
    duty_scale: int  # the byte value written for 100 %
    # PCI addresses (0000:03:00.0) in GPU order: ties the GPU numbers of the
    # current sensors and zones to amdgpu's devices. Empty: PCI address order.
    gpu_pci_addresses: tuple[str, ...] = ()


@dataclass(frozen=True)
class GpuLaw:
    aggregate: str  # "sum" or "max"
    power_low_w: float  # per GPU: at or below -> duty_floor
    power_high_w: float  # per GPU: at or above -> duty_ceiling
    duty_floor: float
    duty_ceiling: float
    ramp_up: float  # % per second
    ramp_down: float  # % per second
    hysteresis: float  # % dead band before going down
    temp_limit_c: float
    temp_hysteresis_c: float
    # Temperature feedback on top of the power feed-forward: this many % per
    # degree the zone's hottest GPU is above temp_target_c (0: power only).
    temp_gain: float = 0.0
    temp_target_c: float = 70.0


@dataclass(frozen=True)
class CpuLaw:
    curve: tuple[tuple[float, float], ...]  # (degC, duty %) points, rising
    duty_floor: float
    duty_ceiling: float
    ramp_up: float
    ramp_down: float
    hysteresis: float
    temp_limit_c: float
    temp_hysteresis_c: float


@dataclass(frozen=True)
class Timings:
    interval: float
    bmc_timeout: float
    retries: int
    stale_after: float
    deadline: float
    rewrite_every: float
    exit_budget: float


@dataclass(frozen=True)
class BmcAccess:
    access: str  # "lan" or "inband"
    tool: str  # "kernel" (in-band only), "freeipmi" or "ipmitool"
    host: str | None
    port: int
    username: str | None
    password: str | None = field(repr=False)
    password_source: str | None
    cipher_suite: int
    privilege: str
    workarounds: tuple[str, ...]
    cache_dir: Path
    device: str | None
    retransmit_timeout: float | None = None  # None: adapted to the BMC ("auto")


@dataclass(frozen=True)
class PowerGuard:
    enabled: bool
    command: tuple[str, ...]
    reset_command: tuple[str, ...]
    non_gpu_power_w: float
    margin: float
    min_gpu_cap_w: float
    failure_offsets: tuple[int, ...]
    require_presence: bool
    lift_after: float
    command_timeout: float
    read_command: tuple[str, ...] = ()  # prints the per-GPU power caps in W


@dataclass(frozen=True)
class Metrics:
    textfile: Path | None


HWMON_TEMPERATURES = ("edge", "junction", "mem")


@dataclass(frozen=True)
class Hwmon:
    """In-band GPU sensors: amdgpu's hwmon files under ``sysfs_root``."""

    enabled: bool = True  # used for temperatures when the profile has no BMC GPU temperatures
    sysfs_root: Path = Path("/sys")
    temperature: str = "edge"  # the hwmon channel (temp*_label) the zones follow
    power_check: bool = True  # compare the BMC's GPU power with amdgpu's power1_average
    power_ratio: tuple[float, float] = (0.6, 1.6)  # BMC / amdgpu within this: plausible


@dataclass(frozen=True)
class Probe:
    """``--probe``: does the fan command move the fans? Its result gates the daemon."""

    result_file: Path = Path("/var/log/junkyard-fan/probe.json")
    duties: tuple[float, float] = (40.0, 100.0)
    settle: float = 10.0  # seconds after a command before the tachometers are read
    min_change: float = 0.2  # each fan's RPM must rise by this share of its high-duty RPM


@dataclass(frozen=True)
class Config:
    profile: Profile
    gpu_law: GpuLaw
    cpu_law: CpuLaw
    timings: Timings
    bmc: BmcAccess
    power_guard: PowerGuard
    metrics: Metrics
    log_level: str
    hwmon: Hwmon = field(default_factory=Hwmon)
    probe: Probe = field(default_factory=Probe)

    def gpu_cap_w(self) -> float:
        """Per-GPU power cap that keeps the node within one PSU's rating."""
        pg, pr = self.power_guard, self.profile
        budget = pr.psu_rating_w * pg.margin - pg.non_gpu_power_w
        cap = budget / pr.gpu_count if pr.gpu_count else 0.0
        return float(int(min(max(cap, pg.min_gpu_cap_w), pr.gpu_max_power_w)))


# ------------------------------------------------------------------ validation
_MISSING = object()
# Informational keys of the inventory's hardware profile that the daemon does
# not use; they are accepted so a role can render the profile verbatim.
_PROFILE_IGNORED = {"description", "cpu_sockets", "cpu_cores_per_socket",
                    "cpu_threads_per_core", "memory", "kernel_cmdline",
                    "kernel_module_blacklist", "initramfs_modules"}
_GPU_IGNORED = {"model", "gfx_target"}


class _V:
    """Collects problems while walking the raw YAML tree."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def err(self, key: str, msg: str) -> None:
        self.problems.append(f"{key}: {msg}")

    def mapping(self, raw: Any, key: str, allowed: set[str], ignored: frozenset[str] | set[str]
                = frozenset()) -> dict[str, Any]:
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            self.err(key, f"must be a mapping, got {type(raw).__name__}")
            return {}
        for k in raw:
            if not isinstance(k, str):
                self.err(key, f"keys must be strings, got {k!r}")
            elif k not in allowed and k not in ignored:
                self.err(f"{key}.{k}" if key else k,
                         f"unknown key (allowed: {', '.join(sorted(allowed))})")
        return raw

    def get(self, m: dict[str, Any], key: str, name: str, default: Any = _MISSING) -> Any:
        full = f"{key}.{name}" if key else name
        if name not in m or m[name] is None:
            if default is _MISSING:
                self.err(full, "is required")
                return None
            return default
        return m[name]

    def number(self, m: dict[str, Any], key: str, name: str, default: Any = _MISSING, *,
               minimum: float | None = None, maximum: float | None = None,
               positive: bool = False, integer: bool = False) -> Any:
        full = f"{key}.{name}" if key else name
        value = self.get(m, key, name, default)
        if value is None:
            return None
        kinds = (int,) if integer else (int, float)
        if isinstance(value, bool) or not isinstance(value, kinds):
            self.err(full, f"must be {'an integer' if integer else 'a number'}, got {value!r}")
            return None
        if positive and value <= 0:
            self.err(full, f"must be > 0, got {value}")
            return None
        if minimum is not None and value < minimum:
            self.err(full, f"must be >= {minimum}, got {value}")
            return None
        if maximum is not None and value > maximum:
            self.err(full, f"must be <= {maximum}, got {value}")
            return None
        return value

    def choice(self, m: dict[str, Any], key: str, name: str, choices: tuple[str, ...],
               default: Any = _MISSING) -> Any:
        value = self.get(m, key, name, default)
        if value is not None and value not in choices:
            self.err(f"{key}.{name}" if key else name,
                     f"must be one of {', '.join(choices)}, got {value!r}")
            return None
        return value

    def boolean(self, m: dict[str, Any], key: str, name: str, default: bool) -> bool:
        value = self.get(m, key, name, default)
        if not isinstance(value, bool):
            self.err(f"{key}.{name}", f"must be true or false, got {value!r}")
            return default
        return value

    def sensors(self, m: dict[str, Any], key: str, name: str, default: Any = _MISSING
                ) -> tuple[SensorRef, ...]:
        full = f"{key}.{name}"
        value = self.get(m, key, name, default)
        if value is None:
            return ()
        if not isinstance(value, list):
            self.err(full, f"must be a list of sensor names or numbers, got {value!r}")
            return ()
        out: list[SensorRef] = []
        for i, item in enumerate(value):
            if isinstance(item, bool) or not isinstance(item, str | int):
                self.err(f"{full}[{i}]", f"must be a sensor name or number, got {item!r}")
            elif isinstance(item, int) and not 0 <= item <= 255:
                self.err(f"{full}[{i}]", f"sensor number must be 0-255, got {item}")
            elif isinstance(item, str) and not item.strip():
                self.err(f"{full}[{i}]", "sensor name is empty")
            else:
                out.append(item)
        seen: set[SensorRef] = set()
        for i, item in enumerate(out):
            if item in seen:
                self.err(f"{full}[{i}]", f"sensor {item!r} is listed twice")
            seen.add(item)
        return tuple(out)

    def command_list(self, m: dict[str, Any], key: str, name: str, default: list[str]
                     ) -> tuple[str, ...]:
        value = self.get(m, key, name, default)
        if (not isinstance(value, list) or not value
                or not all(isinstance(v, str | int | float) for v in value)):
            self.err(f"{key}.{name}", f"must be a non-empty list of arguments, got {value!r}")
            return ()
        return tuple(str(v) for v in value)


_PLACEHOLDER = re.compile(r"^\{(\w+)\}$")


def _raw_command(v: _V, value: Any, key: str, placeholders: set[str]) -> RawCommand | None:
    if not isinstance(value, str):
        v.err(key, f"must be a string of bytes like '0x30 0x70 {{fan_id}} {{duty}}', "
                   f"got {value!r}")
        return None
    items: list[int | str] = []
    for tok in value.split():
        ph = _PLACEHOLDER.match(tok)
        if ph:
            if ph.group(1) not in placeholders:
                v.err(key, f"unknown placeholder {tok} (allowed: "
                           f"{', '.join('{' + p + '}' for p in sorted(placeholders))})")
                return None
            items.append(ph.group(1))
            continue
        try:
            byte = int(tok, 0)
        except ValueError:
            v.err(key, f"{tok!r} is not a byte (use 0x.. or decimal) or a placeholder")
            return None
        if not 0 <= byte <= 255:
            v.err(key, f"{tok} is not a byte value")
            return None
        items.append(byte)
    if len(items) < 2 or isinstance(items[0], str) or isinstance(items[1], str):
        v.err(key, "needs at least netfn and cmd as numbers")
        return None
    netfn, cmd = items[0], items[1]
    assert isinstance(netfn, int) and isinstance(cmd, int)
    if netfn % 2:
        v.err(key, f"netfn {netfn:#04x} is a response netfn (odd)")
        return None
    return RawCommand(netfn=netfn, cmd=cmd, data=tuple(items[2:]))


def _profile(v: _V, raw: Any) -> Profile | None:
    k = "profile"
    m = v.mapping(raw, k, {"gpu", "bmc", "psu", "fan_zones", "fan_commands"}, _PROFILE_IGNORED)
    if raw is None:
        v.err(k, "is required")
        return None
    gpu_keys = {"count", "max_power_w", "pci_addresses"}
    gpu = v.mapping(v.get(m, k, "gpu", {}), f"{k}.gpu", gpu_keys, _GPU_IGNORED)
    gpu_count = v.number(gpu, f"{k}.gpu", "count", integer=True, minimum=0)
    max_power = v.number(gpu, f"{k}.gpu", "max_power_w", 300, positive=True)
    pci = _pci_addresses(v, gpu.get("pci_addresses"), f"{k}.gpu.pci_addresses", gpu_count)

    kb = f"{k}.bmc"
    bmc = v.mapping(v.get(m, k, "bmc"), kb, {
        "supply_voltage", "current_calibration", "gpu_current_sensors", "gpu_temp_sensors",
        "cpu_temp_sensors", "psu_status_sensors"})
    voltage = v.number(bmc, kb, "supply_voltage", 12.0, positive=True)
    calibration = v.number(bmc, kb, "current_calibration", 1.0, positive=True)
    currents = v.sensors(bmc, kb, "gpu_current_sensors")
    temps = v.sensors(bmc, kb, "gpu_temp_sensors", [])
    cpu_temps = v.sensors(bmc, kb, "cpu_temp_sensors", [])
    psus = v.sensors(bmc, kb, "psu_status_sensors", [])
    if gpu_count is not None and bmc:
        if len(currents) != gpu_count and "gpu_current_sensors" in bmc:
            v.err(f"{kb}.gpu_current_sensors",
                  f"lists {len(currents)} sensors but profile.gpu.count is {gpu_count}: "
                  "one current sensor per GPU, in GPU order")
        if temps and len(temps) != gpu_count:
            v.err(f"{kb}.gpu_temp_sensors",
                  f"lists {len(temps)} sensors but profile.gpu.count is {gpu_count}")
    all_refs: dict[SensorRef, str] = {}
    for name, refs in (("gpu_current_sensors", currents), ("gpu_temp_sensors", temps),
                       ("cpu_temp_sensors", cpu_temps), ("psu_status_sensors", psus)):
        for i, ref in enumerate(refs):
            if ref in all_refs and all_refs[ref] != name:
                v.err(f"{kb}.{name}[{i}]", f"sensor {ref!r} is also in {kb}.{all_refs[ref]}")
            all_refs.setdefault(ref, name)

    kp = f"{k}.psu"
    psu = v.mapping(v.get(m, k, "psu"), kp, {"count", "rating_w"})
    psu_count = v.number(psu, kp, "count", 2, integer=True, minimum=1)
    rating = v.number(psu, kp, "rating_w", positive=True)
    if psu_count is not None and psus and len(psus) != psu_count:
        v.err(f"{kb}.psu_status_sensors",
              f"lists {len(psus)} sensors but {kp}.count is {psu_count}")

    zones = _zones(v, v.get(m, k, "fan_zones"), f"{k}.fan_zones", gpu_count, cpu_temps)

    kc = f"{k}.fan_commands"
    cmds = v.mapping(v.get(m, k, "fan_commands"), kc,
                     {"set_duty", "auto", "manual", "duty_scale"})
    set_duty = auto = manual = None
    if cmds:
        set_duty = _raw_command(v, v.get(cmds, kc, "set_duty"), f"{kc}.set_duty",
                                {"fan_id", "duty"})
        if set_duty and "duty" not in set_duty.data:
            v.err(f"{kc}.set_duty", "must contain the {duty} placeholder")
        if cmds.get("auto") is not None:
            auto = _raw_command(v, cmds["auto"], f"{kc}.auto", {"fan_id"})
        if cmds.get("manual") is not None:
            manual = _raw_command(v, cmds["manual"], f"{kc}.manual", {"fan_id"})
    scale = v.number(cmds, kc, "duty_scale", 100, integer=True, minimum=1, maximum=255)

    if None in (gpu_count, max_power, voltage, calibration, rating, psu_count, set_duty, zones,
                scale):
        return None
    assert set_duty is not None and zones is not None
    return Profile(
        gpu_count=gpu_count, gpu_max_power_w=float(max_power), supply_voltage=float(voltage),
        current_calibration=float(calibration), gpu_current_sensors=currents,
        gpu_temp_sensors=temps, cpu_temp_sensors=cpu_temps, psu_status_sensors=psus,
        psu_count=psu_count, psu_rating_w=float(rating), fan_zones=zones, set_duty=set_duty,
        gpu_pci_addresses=pci,
        auto=auto, manual=manual, duty_scale=scale,
    )


_PCI_ADDRESS = re.compile(r"^(?:([0-9a-f]{4}):)?([0-9a-f]{2}):([0-1][0-9a-f])\.([0-7])$")


def normalise_pci(address: str) -> str | None:
    """``03:00.0`` or ``0000:03:00.0`` (any case) -> ``0000:03:00.0``; None if not one."""
    m = _PCI_ADDRESS.match(address.strip().lower())
    if not m:
        return None
    return f"{m.group(1) or '0000'}:{m.group(2)}:{m.group(3)}.{m.group(4)}"


def _pci_addresses(v: _V, raw: Any, key: str, gpu_count: int | None) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        v.err(key, f"must be a list of PCI addresses in GPU order, got {raw!r}")
        return ()
    out: list[str] = []
    for i, item in enumerate(raw):
        addr = normalise_pci(item) if isinstance(item, str) else None
        if addr is None:
            v.err(f"{key}[{i}]", f"is not a PCI address like 0000:03:00.0, got {item!r}")
        elif addr in out:
            v.err(f"{key}[{i}]", f"PCI address {addr} is listed twice")
        else:
            out.append(addr)
    if gpu_count is not None and len(raw) != gpu_count:
        v.err(key, f"lists {len(raw)} addresses but profile.gpu.count is {gpu_count}: "
                   "one per GPU, in GPU order")
    return tuple(out)


def _zones(v: _V, raw: Any, key: str, gpu_count: int | None,
           cpu_temps: tuple[SensorRef, ...]) -> tuple[FanZone, ...] | None:
    if raw is None:
        return None
    if not isinstance(raw, list) or not raw:
        v.err(key, "must be a non-empty list of zones")
        return None
    zones: list[FanZone] = []
    names: dict[str, int] = {}
    fan_ids: dict[int, int] = {}
    owner: dict[int, str] = {}
    ok = True
    for i, zraw in enumerate(raw):
        kz = f"{key}[{i}]"
        z = v.mapping(zraw, kz, {"name", "fan_id", "gpus", "kind", "tach_sensors"})
        name = v.get(z, kz, "name")
        tachs = v.sensors(z, kz, "tach_sensors", [])
        fan_id = v.number(z, kz, "fan_id", integer=True, minimum=0, maximum=255)
        gpus = v.get(z, kz, "gpus", [])
        if name is not None and (not isinstance(name, str) or not re.fullmatch(r"[\w.-]+", name)):
            v.err(f"{kz}.name", f"must be a word ([A-Za-z0-9_.-]), got {name!r}")
            name = None
        if isinstance(name, str):
            if name in names:
                v.err(f"{kz}.name", f"zone {name!r} is already defined at {key}[{names[name]}]")
            names[name] = i
        if fan_id is not None:
            if fan_id in fan_ids:
                v.err(f"{kz}.fan_id",
                      f"fan_id {fan_id} is already used by {key}[{fan_ids[fan_id]}]")
            fan_ids[fan_id] = i
        gpu_list: list[int] = []
        if not isinstance(gpus, list):
            v.err(f"{kz}.gpus", f"must be a list of GPU numbers, got {gpus!r}")
            ok = False
        else:
            for j, g in enumerate(gpus):
                if isinstance(g, bool) or not isinstance(g, int):
                    v.err(f"{kz}.gpus[{j}]", f"must be a GPU number, got {g!r}")
                elif gpu_count is not None and not 0 <= g < gpu_count:
                    v.err(f"{kz}.gpus[{j}]",
                          f"GPU {g} does not exist (profile.gpu.count is {gpu_count})")
                elif g in owner:
                    v.err(f"{kz}.gpus[{j}]", f"GPU {g} is already cooled by zone {owner[g]!r}")
                else:
                    owner[g] = str(name)
                    gpu_list.append(g)
        default_kind = "gpu" if gpu_list else "cpu"
        kind = v.choice(z, kz, "kind", ("gpu", "cpu"), default_kind)
        if kind == "gpu" and isinstance(gpus, list) and not gpus:
            v.err(f"{kz}.gpus", "a gpu zone needs at least one GPU")
        if kind == "cpu" and not cpu_temps:
            v.err(f"{kz}", "is a CPU zone but profile.bmc.cpu_temp_sensors is empty")
        if name is None or fan_id is None or kind is None:
            ok = False
            continue
        zones.append(FanZone(name=name, fan_id=fan_id, gpus=tuple(gpu_list), kind=kind,
                             tach_sensors=tachs))
    if gpu_count:
        uncooled = sorted(set(range(gpu_count)) - set(owner))
        if uncooled and ok:
            v.err(key, f"GPUs {uncooled} are in no fan zone")
    return tuple(zones) if ok else None


def _gpu_law(v: _V, raw: Any, max_power: float) -> GpuLaw | None:
    k = "control.gpu"
    m = v.mapping(raw, k, {"aggregate", "power_low_w", "power_high_w", "duty_floor",
                           "duty_ceiling", "ramp_up", "ramp_down", "hysteresis",
                           "temp_limit_c", "temp_hysteresis_c", "temp_gain", "temp_target_c"})
    law = dict(
        aggregate=v.choice(m, k, "aggregate", ("sum", "max"), "sum"),
        power_low_w=v.number(m, k, "power_low_w", round(0.2 * max_power), minimum=0),
        power_high_w=v.number(m, k, "power_high_w", round(max_power), positive=True),
        temp_gain=v.number(m, k, "temp_gain", 4, minimum=0, maximum=50),
        temp_target_c=v.number(m, k, "temp_target_c", 70, positive=True),
        **_common_law(v, m, k, 25, 85),
    )
    if None in law.values():
        return None
    if law["power_high_w"] <= law["power_low_w"]:
        v.err(f"{k}.power_high_w", f"must be above {k}.power_low_w ({law['power_low_w']})")
        return None
    if law["temp_target_c"] >= law["temp_limit_c"]:
        v.err(f"{k}.temp_target_c", f"must be below {k}.temp_limit_c ({law['temp_limit_c']})")
        return None
    return GpuLaw(**{n: float(x) if n != "aggregate" else x for n, x in law.items()})


DUTY_FLOOR_MIN = 10


def _common_law(v: _V, m: dict[str, Any], k: str, floor: float, temp_limit: float
                ) -> dict[str, Any]:
    out = dict(
        # 0 % stops the fans (and some BMCs take it as "automatic"); below
        # about 10 % most fans stall.
        duty_floor=v.number(m, k, "duty_floor", floor, minimum=DUTY_FLOOR_MIN, maximum=100),
        duty_ceiling=v.number(m, k, "duty_ceiling", 100, minimum=1, maximum=100),
        ramp_up=v.number(m, k, "ramp_up", 50, positive=True),
        ramp_down=v.number(m, k, "ramp_down", 2, positive=True),
        hysteresis=v.number(m, k, "hysteresis", 3, minimum=0, maximum=50),
        temp_limit_c=v.number(m, k, "temp_limit_c", temp_limit, positive=True),
        temp_hysteresis_c=v.number(m, k, "temp_hysteresis_c", 5, minimum=0),
    )
    if (out["duty_floor"] is not None and out["duty_ceiling"] is not None
            and out["duty_floor"] > out["duty_ceiling"]):
        v.err(f"{k}.duty_floor", f"must not exceed {k}.duty_ceiling ({out['duty_ceiling']})")
        out["duty_floor"] = None
    return out


def _cpu_law(v: _V, raw: Any) -> CpuLaw | None:
    k = "control.cpu"
    m = v.mapping(raw, k, {"curve", "duty_floor", "duty_ceiling", "ramp_up", "ramp_down",
                           "hysteresis", "temp_limit_c", "temp_hysteresis_c"})
    curve_raw = v.get(m, k, "curve", [[40, 25], [60, 40], [75, 70], [85, 100]])
    curve: list[tuple[float, float]] = []
    if not isinstance(curve_raw, list) or len(curve_raw) < 2:
        v.err(f"{k}.curve", "must be a list of at least two [temperature_c, duty] points")
    else:
        for i, pt in enumerate(curve_raw):
            if (not isinstance(pt, list) or len(pt) != 2
                    or not all(isinstance(x, int | float) and not isinstance(x, bool)
                               for x in pt)):
                v.err(f"{k}.curve[{i}]", f"must be [temperature_c, duty], got {pt!r}")
                continue
            if not 0 <= pt[1] <= 100:
                v.err(f"{k}.curve[{i}]", f"duty must be 0-100, got {pt[1]}")
                continue
            if curve and pt[0] <= curve[-1][0]:
                v.err(f"{k}.curve[{i}]", "temperatures must rise from point to point")
                continue
            curve.append((float(pt[0]), float(pt[1])))
    common = _common_law(v, m, k, 20, 90)
    if None in common.values() or len(curve) < 2:
        return None
    return CpuLaw(curve=tuple(curve), **common)


def _timings(v: _V, raw: Any) -> Timings | None:
    k = "timings"
    m = v.mapping(raw, k, {"interval", "bmc_timeout", "retries", "stale_after", "deadline",
                           "rewrite_every", "exit_budget"})
    t = dict(
        interval=v.number(m, k, "interval", 1.0, positive=True),
        bmc_timeout=v.number(m, k, "bmc_timeout", 2.0, positive=True),
        retries=v.number(m, k, "retries", 5, integer=True, minimum=1, maximum=20),
        stale_after=v.number(m, k, "stale_after", 3.0, positive=True),
        deadline=v.number(m, k, "deadline", 10.0, positive=True),
        rewrite_every=v.number(m, k, "rewrite_every", 10.0, positive=True),
        exit_budget=v.number(m, k, "exit_budget", 10.0, positive=True),
    )
    if None in t.values():
        return None
    if t["deadline"] < t["interval"]:
        v.err(f"{k}.deadline", f"must be at least {k}.interval ({t['interval']})")
        return None
    if t["stale_after"] > t["deadline"]:
        # A reading that counts for longer than the deadline would keep a zone
        # regulating on a sensor that is gone, past the point of failing safe.
        v.err(f"{k}.stale_after", f"must not exceed {k}.deadline ({t['deadline']})")
        return None
    return Timings(**{n: float(x) if n != "retries" else x for n, x in t.items()})


def _bmc(v: _V, raw: Any, env: dict[str, str], base: Path) -> BmcAccess | None:
    k = "bmc"
    m = v.mapping(raw, k, {"access", "tool", "host", "port", "username", "password_file",
                           "password_env", "cipher_suite", "privilege", "workarounds",
                           "cache_dir", "device", "retransmit_timeout"})
    access = v.choice(m, k, "access", ("lan", "inband"), "inband")
    # In-band, the daemon talks to the kernel's device itself (no process per
    # cycle); over LAN a tool holds the session.
    tool = v.choice(m, k, "tool", ("kernel", "freeipmi", "ipmitool"),
                    "freeipmi" if access == "lan" else "kernel")
    if access == "lan" and tool == "kernel":
        v.err(f"{k}.tool", "kernel is in-band only (/dev/ipmi0 on the node): "
              "use freeipmi or ipmitool with access: lan")
    port = v.number(m, k, "port", 623, integer=True, minimum=1, maximum=65535)
    cipher = v.number(m, k, "cipher_suite", 3, integer=True, minimum=0, maximum=17)
    privilege = v.choice(m, k, "privilege", ("USER", "OPERATOR", "ADMIN"), "ADMIN")
    workarounds = v.get(m, k, "workarounds", [])
    if not isinstance(workarounds, list) or not all(isinstance(w, str) for w in workarounds):
        v.err(f"{k}.workarounds", f"must be a list of strings, got {workarounds!r}")
        workarounds = []
    cache_dir = Path(str(v.get(m, k, "cache_dir", "/var/cache/junkyard-fan")))
    device = v.get(m, k, "device", None)
    retransmit: Any = m.get("retransmit_timeout", "auto")
    if retransmit == "auto" or retransmit is None:
        retransmit = "auto"
    else:
        retransmit = v.number(m, k, "retransmit_timeout", positive=True)
    host = username = password = source = None
    if access == "lan":
        host = v.get(m, k, "host")
        username = v.get(m, k, "username")
        pw_file, pw_env = m.get("password_file"), m.get("password_env")
        if pw_file is None and pw_env is None:
            v.err(f"{k}.password_file", "LAN access needs password_file or password_env")
        elif pw_file is not None and pw_env is not None:
            v.err(f"{k}.password_file", "give password_file or password_env, not both")
        elif pw_file is not None:
            path = Path(str(pw_file))
            path = path if path.is_absolute() else base / path
            try:
                password = path.read_text().rstrip("\n")
                source = f"file {path}"
            except OSError as err:
                v.err(f"{k}.password_file", f"cannot read {path}: {err.strerror}")
        else:
            if not isinstance(pw_env, str) or pw_env not in env:
                v.err(f"{k}.password_env", f"environment variable {pw_env!r} is not set")
            else:
                password = env[pw_env]
                source = f"environment {pw_env}"
        if password is not None and not password:
            v.err(f"{k}.password_file" if pw_file else f"{k}.password_env", "password is empty")
    else:
        for name in ("host", "username", "password_file", "password_env"):
            if m.get(name) is not None:
                v.err(f"{k}.{name}", "only used with access: lan")
    if None in (access, tool, port, cipher, privilege, retransmit) or (access == "lan" and (
            host is None or username is None or password is None)):
        return None
    return BmcAccess(access=access, tool=tool, host=host, port=port, username=username,
                     password=password, password_source=source, cipher_suite=cipher,
                     privilege=privilege, workarounds=tuple(workarounds), cache_dir=cache_dir,
                     device=device,
                     retransmit_timeout=None if retransmit == "auto" else float(retransmit))


DEFAULT_CAP_COMMAND = ["rocm-smi", "--setpoweroverdrive", "{watts}", "--autorespond", "y"]
DEFAULT_RESET_COMMAND = ["rocm-smi", "--resetpoweroverdrive", "--autorespond", "y"]
DEFAULT_READ_COMMAND = ["rocm-smi", "--showmaxpower", "--json"]


def _power_guard(v: _V, raw: Any, profile: Profile | None) -> PowerGuard | None:
    k = "power_guard"
    m = v.mapping(raw, k, {"enabled", "command", "reset_command", "non_gpu_power_w", "margin",
                           "min_gpu_cap_w", "failure_offsets", "require_presence",
                           "lift_after", "command_timeout", "read_command"})
    offsets = v.get(m, k, "failure_offsets", [1, 3])
    if (not isinstance(offsets, list) or not offsets
            or not all(isinstance(o, int) and not isinstance(o, bool) and 0 <= o <= 14
                       for o in offsets)):
        v.err(f"{k}.failure_offsets", f"must be a list of event offsets 0-14, got {offsets!r}")
        offsets = None
    command = v.command_list(m, k, "command", DEFAULT_CAP_COMMAND)
    if command and not any("{watts}" in a for a in command):
        v.err(f"{k}.command", "must contain the {watts} placeholder")
    g = dict(
        enabled=v.boolean(m, k, "enabled", True),
        command=command,
        reset_command=v.command_list(m, k, "reset_command", DEFAULT_RESET_COMMAND),
        non_gpu_power_w=v.number(m, k, "non_gpu_power_w", 500, minimum=0),
        margin=v.number(m, k, "margin", 0.95, positive=True, maximum=1.0),
        min_gpu_cap_w=v.number(m, k, "min_gpu_cap_w", 100, positive=True),
        failure_offsets=tuple(offsets) if offsets else None,
        require_presence=v.boolean(m, k, "require_presence", True),
        lift_after=v.number(m, k, "lift_after", 10.0, minimum=0),
        command_timeout=v.number(m, k, "command_timeout", 30.0, positive=True),
        read_command=v.command_list(m, k, "read_command", DEFAULT_READ_COMMAND),
    )
    if None in g.values() or not command or not g["reset_command"] or not g["read_command"]:
        return None
    if profile is not None and g["enabled"]:
        if not profile.psu_status_sensors:
            v.err(f"{k}.enabled", "needs profile.bmc.psu_status_sensors")
            return None
        budget = profile.psu_rating_w * g["margin"] - g["non_gpu_power_w"]
        if profile.gpu_count and budget / profile.gpu_count < g["min_gpu_cap_w"]:
            v.err(f"{k}.non_gpu_power_w",
                  f"leaves {budget:.0f} W of one {profile.psu_rating_w:.0f} W PSU for "
                  f"{profile.gpu_count} GPUs, below min_gpu_cap_w ({g['min_gpu_cap_w']} W) "
                  "each: the node cannot run on one PSU")
    return PowerGuard(**g)


def _hwmon(v: _V, raw: Any) -> Hwmon | None:
    k = "hwmon"
    m = v.mapping(raw, k, {"enabled", "sysfs_root", "temperature", "power_check",
                           "power_ratio"})
    root = v.get(m, k, "sysfs_root", "/sys")
    if not isinstance(root, str) or not root.startswith("/"):
        v.err(f"{k}.sysfs_root", f"must be an absolute path, got {root!r}")
        root = None
    ratio = v.get(m, k, "power_ratio", [0.6, 1.6])
    if (not isinstance(ratio, list) or len(ratio) != 2
            or not all(isinstance(r, int | float) and not isinstance(r, bool) for r in ratio)
            or not 0 < ratio[0] < 1 < ratio[1]):
        v.err(f"{k}.power_ratio", f"must be [low, high] with 0 < low < 1 < high, got {ratio!r}")
        ratio = None
    h = dict(
        enabled=v.boolean(m, k, "enabled", True),
        temperature=v.choice(m, k, "temperature", HWMON_TEMPERATURES, "edge"),
        power_check=v.boolean(m, k, "power_check", True),
    )
    if root is None or ratio is None or None in h.values():
        return None
    return Hwmon(sysfs_root=Path(root), power_ratio=(float(ratio[0]), float(ratio[1])), **h)


def _probe(v: _V, raw: Any) -> Probe | None:
    k = "probe"
    m = v.mapping(raw, k, {"result_file", "duties", "settle", "min_change"})
    path = v.get(m, k, "result_file", "/var/log/junkyard-fan/probe.json")
    if not isinstance(path, str) or not path.startswith("/"):
        v.err(f"{k}.result_file", f"must be an absolute path, got {path!r}")
        path = None
    duties = v.get(m, k, "duties", [40, 100])
    if (not isinstance(duties, list) or len(duties) != 2
            or not all(isinstance(d, int | float) and not isinstance(d, bool) for d in duties)
            or not 10 <= duties[0] < duties[1] <= 100):
        v.err(f"{k}.duties", f"must be [low, high] % with 10 <= low < high <= 100, "
                             f"got {duties!r}")
        duties = None
    settle = v.number(m, k, "settle", 10.0, minimum=0, maximum=120)
    change = v.number(m, k, "min_change", 0.2, positive=True, maximum=0.9)
    if None in (path, duties, settle, change):
        return None
    assert isinstance(path, str) and isinstance(duties, list)
    return Probe(result_file=Path(path), duties=(float(duties[0]), float(duties[1])),
                 settle=float(settle), min_change=float(change))


def parse_config(raw: Any, *, env: dict[str, str] | None = None,
                 base: Path | None = None) -> Config:
    """Validate a loaded YAML document; raise ConfigError listing every problem."""
    v = _V()
    env = dict(os.environ) if env is None else env
    base = base or Path.cwd()
    top = v.mapping(raw, "", {"profile", "control", "timings", "bmc", "power_guard",
                              "metrics", "log_level", "hwmon", "probe"})
    if raw is None or not isinstance(raw, dict):
        if raw is None:
            v.err("(top level)", "the configuration is empty")
        raise ConfigError(v.problems)
    profile = _profile(v, top.get("profile"))
    control = v.mapping(top.get("control"), "control", {"gpu", "cpu"})
    max_power = profile.gpu_max_power_w if profile else 300.0
    gpu_law = _gpu_law(v, control.get("gpu"), max_power)
    cpu_law = _cpu_law(v, control.get("cpu"))
    timings = _timings(v, top.get("timings"))
    bmc = _bmc(v, top.get("bmc"), env, base)
    guard = _power_guard(v, top.get("power_guard"), profile)
    mraw = v.mapping(top.get("metrics"), "metrics", {"textfile"})
    textfile = mraw.get("textfile")
    if textfile is not None and not isinstance(textfile, str):
        v.err("metrics.textfile", f"must be a path, got {textfile!r}")
    log_level = v.choice(top, "", "log_level", ("debug", "info", "warning", "error"), "info")
    hwmon = _hwmon(v, top.get("hwmon"))
    probe = _probe(v, top.get("probe"))
    if v.problems:
        raise ConfigError(v.problems)
    assert profile and gpu_law and cpu_law and timings and bmc and guard and log_level
    assert hwmon and probe
    return Config(profile=profile, gpu_law=gpu_law, cpu_law=cpu_law, timings=timings, bmc=bmc,
                  power_guard=guard,
                  metrics=Metrics(textfile=Path(textfile) if isinstance(textfile, str) else None),
                  log_level=log_level, hwmon=hwmon, probe=probe)


def load_config(path: Path, env: dict[str, str] | None = None) -> Config:
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as err:
        raise ConfigError([f"{path}: cannot read: {err.strerror}"]) from err
    except UnicodeDecodeError as err:
        raise ConfigError([f"{path}: not UTF-8 text (byte {err.object[err.start]:#04x} at "
                           f"offset {err.start})"]) from err
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError([f"{path}: not valid YAML: {err}"]) from err
    return parse_config(raw, env=env, base=path.parent)
