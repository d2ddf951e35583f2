"""Power-driven vs temperature-driven fan law on a first-order thermal model of a GPU.

Both laws use the daemon's own controllers (junkyard_fan.control) and the same
output stage (floor, ceiling, ramps, dead band); the temperature-driven law is
a curve through the two steady states of the power-driven one (idle and full
load), so both settle at the same duty and temperature. They differ only in
transients: this prints peak temperature, time above the limit and mean duty
for the same load trace.

Model, per GPU, two first-order nodes (die and heat sink):
    C_die  dT_die/dt  = P(t) - (T_die - T_sink) / R_DS
    C_sink dT_sink/dt = (T_die - T_sink) / R_DS - G(duty) (T_sink - T_inlet)
    G(d) = G0 + G1 d/100
and the BMC's temperature sensor lags the die by a first-order filter.

Run: python bench/fan_thermal.py   (no simulator needed; prints figures only)
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "daemon" / "src"))

from junkyard_fan.config import CpuLaw, FanZone, GpuLaw
from junkyard_fan.control import CpuZoneController, GpuZoneController

T_INLET = 30.0  # degC, air entering a 2U box full of GPUs
C_DIE, C_SINK = 40.0, 500.0  # J/K
R_DS = 0.04  # K/W, die to heat sink
G0, G1 = 1.5, 7.0  # W/K, heat sink to air at 0 % duty, and the extra at 100 %
SENSOR_TAU = 4.0  # s, BMC temperature sensor lag
DT = 0.1  # s, simulation step
CYCLE = 1.0  # s, daemon cycle
IDLE_W, FULL_W = 50.0, 300.0
LIMIT_C = 75.0


def conductance(duty: float) -> float:
    return G0 + G1 * duty / 100.0


def load_trace() -> list[tuple[str, float, float]]:
    """(part, duration s, watts): a long job, short bursts, a slow ramp."""
    phases = [("long job", 120, IDLE_W), ("long job", 600, FULL_W), ("long job", 300, IDLE_W)]
    phases += [("bursts", 30, FULL_W), ("bursts", 45, IDLE_W)] * 10
    phases += [("ramp", 30, IDLE_W + (FULL_W - IDLE_W) * i / 10) for i in range(11)]
    phases += [("ramp", 300, IDLE_W)]
    return phases


GPU_LAW = GpuLaw(aggregate="max", power_low_w=60, power_high_w=320, duty_floor=25,
                 duty_ceiling=100, ramp_up=50, ramp_down=2, hysteresis=3,
                 temp_limit_c=95, temp_hysteresis_c=5)


def steady_temp(power: float, duty: float) -> float:
    return T_INLET + power / conductance(duty) + power * R_DS


def matched_temperature_law() -> CpuLaw:
    """A temperature curve through the power law's two steady states."""
    d_idle = GpuZoneController(ZONE, GPU_LAW).target([IDLE_W])
    d_full = GpuZoneController(ZONE, GPU_LAW).target([FULL_W])
    t_idle, t_full = steady_temp(IDLE_W, d_idle), steady_temp(FULL_W, d_full)
    return CpuLaw(curve=((t_idle, d_idle), (t_full, d_full)), duty_floor=GPU_LAW.duty_floor,
                  duty_ceiling=100, ramp_up=GPU_LAW.ramp_up, ramp_down=GPU_LAW.ramp_down,
                  hysteresis=GPU_LAW.hysteresis, temp_limit_c=95, temp_hysteresis_c=5)


ZONE = FanZone(name="gpu", fan_id=1, gpus=(0,), kind="gpu")


@dataclass
class Part:
    peak_c: float = 0.0
    duty_sum: float = 0.0
    steps: int = 0
    above_s: float = 0.0

    @property
    def mean_duty(self) -> float:
        return self.duty_sum / self.steps if self.steps else 0.0


def simulate(kind: str) -> dict[str, Part]:
    if kind == "power":
        ctl: GpuZoneController | CpuZoneController = GpuZoneController(ZONE, GPU_LAW)
    else:
        ctl = CpuZoneController(FanZone("gpu", 1, (), "cpu"), matched_temperature_law())
    duty = GPU_LAW.duty_floor
    sink = T_INLET + IDLE_W / conductance(duty)
    die = sensor = sink + IDLE_W * R_DS
    t, next_cycle = 0.0, 0.0
    parts: dict[str, Part] = {}
    total = parts.setdefault("all", Part())
    for name, length, power in load_trace():
        part = parts.setdefault(name, Part())
        end = t + length
        while t < end:
            if t >= next_cycle:  # the daemon's cycle: read, decide, write
                if isinstance(ctl, GpuZoneController):
                    duty = ctl.update([power], [sensor], t)
                else:
                    duty = ctl.update([sensor], t)
                next_cycle += CYCLE
            flow = (die - sink) / R_DS
            die += DT * (power - flow) / C_DIE
            sink += DT * (flow - conductance(duty) * (sink - T_INLET)) / C_SINK
            sensor += DT * (die - sensor) / SENSOR_TAU
            for p in (part, total):
                p.peak_c = max(p.peak_c, die)
                p.duty_sum += duty
                p.steps += 1
                p.above_s += DT if die > LIMIT_C else 0.0
            t += DT
    return parts


def main() -> None:
    law = matched_temperature_law()
    total = sum(length for _, length, _ in load_trace())
    d_full = GpuZoneController(ZONE, GPU_LAW).target([FULL_W])
    print(f"two-node GPU model: C_die={C_DIE:g} J/K, R={R_DS:g} K/W, C_sink={C_SINK:g} J/K, "
          f"G(d)={G0:g}+{G1:g}*d/100 W/K, inlet {T_INLET:g} C, sensor lag {SENSOR_TAU:g} s, "
          f"cycle {CYCLE:g} s, trace {total:.0f} s")
    print(f"power law: {GPU_LAW.power_low_w:g}-{GPU_LAW.power_high_w:g} W -> "
          f"{GPU_LAW.duty_floor:g}-{GPU_LAW.duty_ceiling:g} %; temperature law through the "
          f"same steady states: {law.curve[0][0]:.1f} C -> {law.curve[0][1]:.1f} %, "
          f"{law.curve[1][0]:.1f} C -> {law.curve[1][1]:.1f} %")
    print(f"steady state at {FULL_W:g} W: {d_full:.1f} % duty, die "
          f"{steady_temp(FULL_W, d_full):.1f} C (both laws)")
    results = {kind: simulate(kind) for kind in ("power", "temperature")}
    print(f"{'part of the trace':<18}{'law':<13}{'peak C':>8}{'mean duty %':>13}"
          f"{'s above ' + format(LIMIT_C, 'g') + ' C':>14}")
    for part in ("long job", "bursts", "ramp", "all"):
        for kind, parts in results.items():
            p = parts[part]
            print(f"{part:<18}{kind:<13}{p.peak_c:>8.1f}{p.mean_duty:>13.1f}{p.above_s:>14.1f}")


if __name__ == "__main__":
    main()
