"""The control law: one controller per fan zone, pure and clock-driven.

A controller turns its zone's inputs into a duty (percent). GPU zones follow
the electrical power of the GPUs they cool (feed-forward: power rises before
temperature does), plus a temperature feedback term when the zone has GPU
temperatures; the CPU zone follows a CPU temperature curve. Both share the
same output stage: floor and ceiling, fast ramp-up, slow ramp-down with a dead
band (hysteresis) so the fans don't hunt, and a temperature override that
forces 100 % above a limit until the temperature drops ``temp_hysteresis_c``
below it.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from .config import CpuLaw, FanZone, GpuLaw

FULL = 100.0


def clamp(x: float, lo: float, hi: float) -> float:
    return max(lo, min(hi, x))


def gpu_target(law: GpuLaw, powers_w: Sequence[float],
               temps_c: Sequence[float] = ()) -> float:
    """Duty for a zone's GPU powers (and temperatures), before ramps.

    Feed-forward: ``sum`` compares the zone's total with ``power_*_w`` times
    the GPU count, ``max`` the busiest GPU's power with ``power_*_w``; the
    result runs from ``duty_floor`` to ``duty_ceiling``. Feedback (when the
    zone has GPU temperatures): plus ``temp_gain`` % per degree the hottest
    GPU is above ``temp_target_c``. See bench/fan_thermal.py for why both.
    """
    n = len(powers_w)
    if law.aggregate == "sum":
        p, lo, hi = sum(powers_w), law.power_low_w * n, law.power_high_w * n
    else:
        p, lo, hi = max(powers_w), law.power_low_w, law.power_high_w
    frac = clamp((p - lo) / (hi - lo), 0.0, 1.0)
    duty = law.duty_floor + frac * (law.duty_ceiling - law.duty_floor)
    if temps_c and law.temp_gain:
        duty += law.temp_gain * max(0.0, max(temps_c) - law.temp_target_c)
    return clamp(duty, law.duty_floor, law.duty_ceiling)


def curve_target(law: CpuLaw, temp_c: float) -> float:
    """Duty from the CPU curve (linear between points, flat outside)."""
    pts = law.curve
    if temp_c <= pts[0][0]:
        duty = pts[0][1]
    elif temp_c >= pts[-1][0]:
        duty = pts[-1][1]
    else:
        duty = pts[-1][1]
        for (t0, d0), (t1, d1) in itertools.pairwise(pts):
            if t0 <= temp_c <= t1:
                duty = d0 + (d1 - d0) * (temp_c - t0) / (t1 - t0)
                break
    return clamp(duty, law.duty_floor, law.duty_ceiling)


@dataclass
class Output:
    """The shared output stage: ramps, dead band, override latch."""

    duty_floor: float
    duty_ceiling: float
    ramp_up: float
    ramp_down: float
    hysteresis: float
    temp_limit_c: float
    temp_hysteresis_c: float
    duty: float | None = None
    last_t: float | None = None
    overridden: bool = False
    falling: bool = False

    def step(self, target: float, hottest_c: float | None, now: float) -> float:
        if hottest_c is not None:
            if hottest_c >= self.temp_limit_c:
                self.overridden = True
            elif hottest_c < self.temp_limit_c - self.temp_hysteresis_c:
                self.overridden = False
        dt = 0.0 if self.last_t is None else max(0.0, now - self.last_t)
        self.last_t = now
        if self.overridden:
            self.duty = FULL
            return FULL
        target = clamp(target, self.duty_floor, self.duty_ceiling)
        cur = self.duty
        if cur is None:
            self.duty = target  # first valid input: no ramp from an unknown state
        elif target >= cur:
            self.falling = False
            self.duty = min(target, cur + self.ramp_up * dt)
        else:
            # Going down starts only once the target is a dead band below the
            # duty, then follows it down slowly all the way.
            if self.falling or cur - target >= self.hysteresis:
                self.falling = True
                self.duty = max(target, cur - self.ramp_down * dt)
                if self.duty <= target:
                    self.falling = False
        return self.duty

    def force(self, duty: float, now: float) -> None:
        """Record a duty set from outside the law (fail-safe): ramps start from it."""
        self.duty = duty
        self.last_t = now


class ZoneController:
    """Base: a zone, its output stage and the sensors it needs."""

    def __init__(self, zone: FanZone, out: Output) -> None:
        self.zone = zone
        self.out = out

    @property
    def duty(self) -> float | None:
        return self.out.duty


class GpuZoneController(ZoneController):
    def __init__(self, zone: FanZone, law: GpuLaw) -> None:
        super().__init__(zone, Output(law.duty_floor, law.duty_ceiling, law.ramp_up,
                                      law.ramp_down, law.hysteresis, law.temp_limit_c,
                                      law.temp_hysteresis_c))
        self.law = law

    def target(self, powers_w: Sequence[float], temps_c: Sequence[float] = ()) -> float:
        return gpu_target(self.law, powers_w, temps_c)

    def update(self, powers_w: Sequence[float], temps_c: Sequence[float], now: float) -> float:
        return self.out.step(self.target(powers_w, temps_c), max(temps_c) if temps_c else None,
                             now)


class CpuZoneController(ZoneController):
    def __init__(self, zone: FanZone, law: CpuLaw) -> None:
        super().__init__(zone, Output(law.duty_floor, law.duty_ceiling, law.ramp_up,
                                      law.ramp_down, law.hysteresis, law.temp_limit_c,
                                      law.temp_hysteresis_c))
        self.law = law

    def target(self, temps_c: Sequence[float]) -> float:
        return curve_target(self.law, max(temps_c))

    def update(self, temps_c: Sequence[float], now: float) -> float:
        return self.out.step(self.target(temps_c), max(temps_c), now)
