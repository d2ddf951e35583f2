"""Which fan law keeps a GPU coolest for the airflow it spends? A fair benchmark.

Every law runs through the daemon's own controllers (junkyard_fan.control:
floor, ceiling, ramps, dead band, the 85 C override) on the same model, the
same load shapes and the same sensors:

* the GPU: two thermal nodes. The die is light (C_DIE, R_DS: it follows its
  power within seconds); the heat sink is heavy (C_SINK: minutes). The sink
  gives its heat to the air through G(d) = G0 + G1 (d/100)^0.8 W/K at duty d
  (convection grows sub-linearly with airflow). Inlet air: 30 C (a rear GPU
  breathing the front GPUs' exhaust).
* what the daemon sees: the BMC samples the die temperature every 2 s through
  a sensor that lags it (first order, 2 s), with noise, in whole degrees; the
  12 V current every second, with noise, in 0.25 A steps. The daemon reads
  them once a cycle (1 s).
* load shapes: the things a GPU cluster runs (see ``shapes``).

The laws:

* ``power``: the pure power law (feed-forward only), as shipped before
  (60 W -> 25 %, 270 W -> 100 %).
* ``hybrid``: power feed-forward plus temperature feedback, the daemon's
  default now: a power curve (60 W -> 25 %, 300 W -> 100 %) plus
  ``temp_gain`` % for every degree the hottest GPU is above ``temp_target_c``
  (4 % per degree above 70 C).
* ``best temp``: the baseline. Temperature-only curves (floor up to T_low,
  linear to 100 % at T_high) swept over T_low and T_high on this model; the
  one kept is the one with the lowest peak temperature (averaged over the
  shapes; then the least time above the threshold) among those that spend no
  more airflow (mean duty over all shapes) than the law it is compared with.
  Each law gets its own baseline. (The worst single peak cannot tell the laws
  apart: a sustained full load needs 100 % under every law.)

Printed per shape: peak die temperature, seconds above THRESHOLD_C, mean
duty, and duty changes (commands that changed the duty byte: fan wear and
noise).

Run: python bench/fan_thermal.py   (pure Python, about a minute; no simulator)
"""

from __future__ import annotations

import random
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "daemon" / "src"))

from junkyard_fan.config import CpuLaw, FanZone, GpuLaw
from junkyard_fan.control import CpuZoneController, GpuZoneController

# ------------------------------------------------------------------ the model
T_INLET = 30.0  # C
C_DIE, R_DS = 40.0, 0.04  # J/K, K/W: die time constant 1.6 s, 12 K above the sink at 300 W
C_SINK = 800.0  # J/K: sink time constant ~100 s at full airflow, ~250 s at the floor
G0, G1 = 1.0, 7.0  # W/K at no airflow, and added at 100 %
DT = 0.25  # s, integration step
CYCLE = 1.0  # s, the daemon's cycle
TEMP_SAMPLE, TEMP_TAU, TEMP_NOISE = 2.0, 2.0, 0.7  # BMC temperature: period, lag, sigma
CURRENT_SAMPLE, CURRENT_NOISE = 1.0, 0.3  # BMC current: period, sigma (A)
VOLTS = 12.0
THRESHOLD_C = 75.0  # time above this is reported
IDLE_W, FULL_W = 50.0, 300.0
SEED = 14


def conductance(duty: float) -> float:
    return G0 + G1 * (duty / 100.0) ** 0.8


def steady_die(power: float, duty: float) -> float:
    return T_INLET + power / conductance(duty) + power * R_DS


# ---------------------------------------------------------------- load shapes
Shape = Callable[[float], float]  # time (s) -> watts


def shapes() -> dict[str, tuple[float, Shape, Shape]]:
    """name -> (duration s, power at time t, inlet air at time t)."""
    rng = random.Random(SEED)
    jitter = [rng.uniform(-12.0, 12.0) for _round in range(4000)]

    def bursts(t: float) -> float:  # inference: 20 s of work, 40 s waiting
        return FULL_W if t % 60 < 20 else 60.0

    def short_bursts(t: float) -> float:  # compute/data-loading: 5 s on, 5 s off
        return FULL_W if t % 10 < 5 else 80.0

    def ramp(t: float) -> float:  # a sweep of growing batch sizes, then idle
        if t < 60:
            return IDLE_W
        if t < 960:
            return IDLE_W + (FULL_W - IDLE_W) * (t - 60) / 900
        return FULL_W if t < 1260 else IDLE_W

    def training(t: float) -> float:  # steady training, evaluation every 5 min
        if t < 60:
            return IDLE_W
        if (t - 60) % 300 > 270:
            return 110.0
        return 285.0 + jitter[int(t) % len(jitter)]

    def step(t: float) -> float:  # a job starts, runs ten minutes, ends
        return FULL_W if 120 <= t < 720 else IDLE_W

    def half_load(t: float) -> float:  # a long job at 200 W ...
        return 200.0 if t >= 60 else IDLE_W

    def warming_room(t: float) -> float:  # ... while the room warms by 8 C in 30 min
        return T_INLET + 8.0 * min(1.0, t / 1800.0)

    def room(_t: float) -> float:
        return T_INLET

    return {
        "bursts 20/40 s": (1800.0, bursts, room),
        "bursts 5/5 s": (900.0, short_bursts, room),
        "ramp 15 min": (1800.0, ramp, room),
        "training": (2400.0, training, room),
        "step 10 min": (1500.0, step, room),
        "200 W, warm room": (2400.0, half_load, warming_room),
    }


# ---------------------------------------------------------------------- laws
ZONE = FanZone(name="gpu", fan_id=1, gpus=(0,), kind="gpu")
COMMON = dict(duty_floor=25.0, duty_ceiling=100.0, ramp_up=50.0, ramp_down=2.0,
              hysteresis=3.0, temp_limit_c=85.0, temp_hysteresis_c=5.0)
POWER = GpuLaw(aggregate="sum", power_low_w=60.0, power_high_w=270.0, **COMMON,
               temp_gain=0.0, temp_target_c=70.0)


def hybrid_law() -> GpuLaw:
    """The daemon's default GPU law (for a 300 W GPU)."""
    from junkyard_fan.config import parse_config

    raw = {
        "profile": {"gpu": {"count": 1, "max_power_w": 300},
                    "bmc": {"gpu_current_sensors": ["I"], "gpu_temp_sensors": ["T"]},
                    "psu": {"rating_w": 2200},
                    "fan_zones": [{"name": "gpu", "fan_id": 1, "gpus": [0]}],
                    "fan_commands": {"set_duty": "0x30 0x70 {fan_id} {duty}"}},
        "power_guard": {"enabled": False},
    }
    return parse_config(raw, env={}).gpu_law


def temp_curve(t_low: float, t_high: float) -> CpuLaw:
    return CpuLaw(curve=((t_low, COMMON["duty_floor"]), (t_high, 100.0)), **COMMON)


# ---------------------------------------------------------------- simulation
@dataclass
class Result:
    peak_c: float = 0.0
    above_s: float = 0.0
    duty_sum: float = 0.0
    samples: int = 0
    changes: int = 0

    @property
    def mean_duty(self) -> float:
        return self.duty_sum / self.samples if self.samples else 0.0


@dataclass
class Run:
    by_shape: dict[str, Result] = field(default_factory=dict)

    @property
    def mean_peak(self) -> float:
        return sum(r.peak_c for r in self.by_shape.values()) / len(self.by_shape)

    @property
    def above_s(self) -> float:
        return sum(r.above_s for r in self.by_shape.values())

    @property
    def mean_duty(self) -> float:
        n = sum(r.samples for r in self.by_shape.values())
        return sum(r.duty_sum for r in self.by_shape.values()) / n


def sensor_noise(seed: int) -> Iterator[float]:
    rng = random.Random(seed)
    while True:
        yield rng.gauss(0.0, 1.0)


def simulate(law: GpuLaw | CpuLaw, length: float, power_at: Shape, inlet_at: Shape,
             seed: int) -> Result:
    ctl: GpuZoneController | CpuZoneController
    if isinstance(law, GpuLaw):
        ctl = GpuZoneController(ZONE, law)
    else:
        ctl = CpuZoneController(FanZone("gpu", 1, (), "cpu"), law)
    noise = sensor_noise(seed)
    duty = law.duty_floor
    p0 = IDLE_W  # every shape starts from an idle GPU at the floor
    sink = T_INLET + p0 / conductance(duty)
    die = lagged = sink + p0 * R_DS
    temp_reading = float(round(lagged))
    amps_reading = p0 / VOLTS
    res = Result()
    last_byte = None
    steps = int(length / DT)
    every_cycle = round(CYCLE / DT)
    every_temp = round(TEMP_SAMPLE / DT)
    every_current = round(CURRENT_SAMPLE / DT)
    for i in range(steps):
        t = i * DT
        power = power_at(t)
        inlet = inlet_at(t)
        if i % every_temp == 0:  # the BMC samples its (lagging) temperature sensor
            temp_reading = float(round(lagged + TEMP_NOISE * next(noise)))
        if i % every_current == 0:
            amps = power / VOLTS + CURRENT_NOISE * next(noise)
            amps_reading = max(0.0, round(amps * 4) / 4)
        if i % every_cycle == 0:  # the daemon: read, decide, write
            if isinstance(ctl, GpuZoneController):
                duty = ctl.update([amps_reading * VOLTS], [temp_reading], t)
            else:
                duty = ctl.update([temp_reading], t)
            byte = round(duty)
            if last_byte is not None and byte != last_byte:
                res.changes += 1
            last_byte = byte
        flow = (die - sink) / R_DS
        die += DT * (power - flow) / C_DIE
        sink += DT * (flow - conductance(duty) * (sink - inlet)) / C_SINK
        lagged += DT * (die - lagged) / TEMP_TAU
        res.peak_c = max(res.peak_c, die)
        res.above_s += DT if die > THRESHOLD_C else 0.0
        res.duty_sum += duty
        res.samples += 1
    return res


def run_law(law: GpuLaw | CpuLaw) -> Run:
    run = Run()
    for k, (name, (length, shape, inlet)) in enumerate(shapes().items()):
        run.by_shape[name] = simulate(law, length, shape, inlet, SEED + k)
    return run


def sweep() -> list[tuple[tuple[float, float], Run]]:
    """Every temperature-only curve of the grid, run on every shape."""
    out = []
    for t_low in [40.0 + 2.5 * i for i in range(15)]:  # 40 .. 75 C
        for width in (5.0, 7.5, 10.0, 12.5, 15.0, 20.0, 25.0, 30.0):
            t_high = t_low + width
            if t_high > 100.0:
                continue
            out.append(((t_low, t_high), run_law(temp_curve(t_low, t_high))))
    return out


def best_within(curves: list[tuple[tuple[float, float], Run]], duty_budget: float
                ) -> tuple[tuple[float, float], Run] | None:
    fitting = [c for c in curves if c[1].mean_duty <= duty_budget + 1e-9]
    if not fitting:
        return None
    return min(fitting, key=lambda c: (round(c[1].mean_peak, 2), c[1].above_s,
                                       c[1].mean_duty))


# -------------------------------------------------------------------- report
def table(rows: list[tuple[str, Run]]) -> list[str]:
    above = f"s > {THRESHOLD_C:g} C"
    head = (f"{'load shape':<18}{'law':<35}{'peak C':>8}{above:>10}{'mean duty %':>13}"
            f"{'changes':>9}")
    lines = [head, "-" * len(head)]
    for shape in [*shapes(), "all (mean peak)"]:
        for label, run in rows:
            if shape.startswith("all"):
                peak, secs, duty = run.mean_peak, run.above_s, run.mean_duty
                changes = sum(r.changes for r in run.by_shape.values())
            else:
                r = run.by_shape[shape]
                peak, secs, duty, changes = r.peak_c, r.above_s, r.mean_duty, r.changes
            lines.append(f"{shape:<18}{label:<35}{peak:>8.1f}{secs:>10.0f}{duty:>13.1f}"
                         f"{changes:>9d}")
    return lines


def verdict(name: str, law: Run, base: Run) -> str:
    def cmp(pick) -> tuple[list[str], list[str]]:
        better = [s for s in law.by_shape if pick(law.by_shape[s]) < pick(base.by_shape[s]) - 0.05]
        worse = [s for s in law.by_shape if pick(law.by_shape[s]) > pick(base.by_shape[s]) + 0.05]
        return better, worse

    wins, loses = cmp(lambda r: r.peak_c)
    beats = law.mean_peak < base.mean_peak - 0.05
    return (f"{name}: {'beats' if beats else 'does not beat'} the best temperature curve "
            f"on peak temperature ({law.mean_peak:.2f} C vs {base.mean_peak:.2f} C averaged "
            f"over the shapes) with that curve spending no more airflow ({base.mean_duty:.1f} % "
            f"vs {law.mean_duty:.1f} % mean duty); lower peak on: {', '.join(wins) or 'none'}; "
            f"higher peak on: {', '.join(loses) or 'none'}; time above {THRESHOLD_C:g} C: "
            f"{law.above_s:.0f} s vs {base.above_s:.0f} s; duty changes: "
            f"{sum(r.changes for r in law.by_shape.values())} vs "
            f"{sum(r.changes for r in base.by_shape.values())}")


def main() -> None:
    hybrid = hybrid_law()
    print(f"model: die C={C_DIE:g} J/K R={R_DS:g} K/W (tau {C_DIE * R_DS:.1f} s), sink "
          f"C={C_SINK:g} J/K (tau {C_SINK / conductance(100):.0f}-{C_SINK / conductance(25):.0f}"
          f" s), G(d)={G0:g}+{G1:g}(d/100)^0.8 W/K, inlet {T_INLET:g} C; BMC temperature every "
          f"{TEMP_SAMPLE:g} s, lag {TEMP_TAU:g} s, noise {TEMP_NOISE:g} C, whole degrees; "
          f"current every {CURRENT_SAMPLE:g} s, noise {CURRENT_NOISE:g} A, 0.25 A steps; "
          f"cycle {CYCLE:g} s")
    print(f"steady state at {FULL_W:g} W: {steady_die(FULL_W, 100):.1f} C at 100 %, "
          f"{steady_die(FULL_W, 70):.1f} C at 70 %, {steady_die(FULL_W, 25):.1f} C at 25 %")
    print(f"power law: {POWER.power_low_w:g} W -> {POWER.duty_floor:g} %, "
          f"{POWER.power_high_w:g} W -> {POWER.duty_ceiling:g} %")
    print(f"hybrid law (default): {hybrid.power_low_w:g} W -> {hybrid.duty_floor:g} %, "
          f"{hybrid.power_high_w:g} W -> {hybrid.duty_ceiling:g} %, plus "
          f"{hybrid.temp_gain:g} % per C the GPU is above {hybrid.temp_target_c:g} C")
    power_run, hybrid_run = run_law(POWER), run_law(hybrid)
    curves = sweep()
    print(f"baseline: {len(curves)} temperature-only curves swept "
          "(T_low 40-75 C, T_high = T_low + 5-30 C)")
    rows: list[tuple[str, Run]] = [("power (feed-forward only)", power_run),
                                   ("hybrid (default)", hybrid_run)]
    verdicts = []
    for name, run in (("power", power_run), ("hybrid", hybrid_run)):
        best = best_within(curves, run.mean_duty)
        if best is None:
            verdicts.append(f"{name}: no temperature curve spends as little airflow")
            continue
        (t_low, t_high), base = best
        rows.append((f"best temp for {name}: {t_low:g}-{t_high:g} C", base))
        verdicts.append(verdict(name, run, base))
    print()
    print("\n".join(table(rows)))
    print()
    for v in verdicts:
        print(v)


if __name__ == "__main__":
    main()
