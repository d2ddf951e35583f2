"""Unit tests of the control law: floor, ceiling, ramps, hysteresis, sum/max, CPU, override."""

from __future__ import annotations

import pytest
from fan_fixtures import config
from junkyard_fan.config import FanZone
from junkyard_fan.control import CpuZoneController, GpuZoneController, gpu_target

ZONE = FanZone(name="z", fan_id=1, gpus=(0, 1, 2, 3), kind="gpu")
CPU = FanZone(name="cpu", fan_id=0, gpus=(), kind="cpu")


def law(**kw):
    base = {"aggregate": "sum", "power_low_w": 60, "power_high_w": 260, "duty_floor": 20,
            "duty_ceiling": 90, "ramp_up": 50, "ramp_down": 2, "hysteresis": 4,
            "temp_limit_c": 85, "temp_hysteresis_c": 5}
    base.update(kw)
    return config(control={"gpu": base}).gpu_law


def test_idle_power_gives_the_floor_and_full_power_the_ceiling():
    g = law()
    assert gpu_target(g, [10, 10, 10, 10]) == 20
    assert gpu_target(g, [60, 60, 60, 60]) == 20
    assert gpu_target(g, [260, 260, 260, 260]) == 90
    assert gpu_target(g, [300, 300, 300, 300]) == 90  # clamped at the ceiling


def test_duty_is_linear_in_power_between_the_two_points():
    g = law()
    assert gpu_target(g, [160] * 4) == pytest.approx(55.0)  # half way: 20 + 35


def test_sum_and_max_aggregate_differently():
    one_hot = [260, 60, 60, 60]
    assert gpu_target(law(aggregate="sum"), one_hot) == pytest.approx(20 + 70 * 0.25)
    assert gpu_target(law(aggregate="max"), one_hot) == 90


def test_first_valid_input_sets_the_duty_without_ramping():
    c = GpuZoneController(ZONE, law())
    assert c.update([160] * 4, [50] * 4, now=0.0) == pytest.approx(55.0)


def test_ramp_up_is_fast_and_bounded_per_second():
    c = GpuZoneController(ZONE, law(ramp_up=30))
    c.update([60] * 4, [50] * 4, now=0.0)  # 20 %
    assert c.update([260] * 4, [50] * 4, now=1.0) == pytest.approx(50.0)  # +30 in 1 s
    assert c.update([260] * 4, [50] * 4, now=2.0) == pytest.approx(80.0)
    assert c.update([260] * 4, [50] * 4, now=3.0) == pytest.approx(90.0)  # reached


def test_ramp_down_is_slow():
    c = GpuZoneController(ZONE, law(ramp_down=2))
    c.update([260] * 4, [50] * 4, now=0.0)  # 90 %
    assert c.update([60] * 4, [50] * 4, now=1.0) == pytest.approx(88.0)
    assert c.update([60] * 4, [50] * 4, now=6.0) == pytest.approx(78.0)


def test_hysteresis_holds_small_decreases_but_not_increases():
    c = GpuZoneController(ZONE, law(hysteresis=4, ramp_down=100))
    start = c.update([160] * 4, [50] * 4, now=0.0)  # 55 %
    slightly_lower = [150] * 4  # target 51.5 %: 3.5 below, inside the dead band
    assert c.update(slightly_lower, [50] * 4, now=1.0) == start
    assert c.update([170] * 4, [50] * 4, now=2.0) > start  # up moves right away
    # A drop beyond the band is followed all the way down, not stopped at the band.
    assert c.update([100] * 4, [50] * 4, now=3.0) == pytest.approx(gpu_target(c.law, [100] * 4))


def test_hysteresis_stops_hunting_on_a_noisy_load():
    c = GpuZoneController(ZONE, law(hysteresis=4, ramp_down=100, ramp_up=100))
    c.update([160] * 4, [50] * 4, now=0.0)
    duties = {round(c.update([p] * 4, [50] * 4, now=float(t)), 3)
              for t, p in enumerate([155, 158, 152, 157, 154] * 4, start=1)}
    assert duties == {55.0}


def test_temperature_override_forces_full_and_releases_with_hysteresis():
    c = GpuZoneController(ZONE, law(temp_limit_c=85, temp_hysteresis_c=5, ramp_down=100,
                                    temp_gain=0))
    assert c.update([60] * 4, [50, 50, 50, 86], now=0.0) == 100  # above the ceiling too
    assert c.out.overridden
    assert c.update([60] * 4, [50, 50, 50, 82], now=1.0) == 100  # not yet 5 C below
    assert c.update([60] * 4, [50, 50, 50, 79], now=2.0) == 20
    assert not c.out.overridden


def test_temperature_feedback_adds_to_the_power_feed_forward():
    g = law(temp_gain=4, temp_target_c=70)
    idle = [60] * 4
    assert gpu_target(g, idle, [50, 60, 70, 65]) == 20  # at or below the target: power only
    assert gpu_target(g, idle, [50, 60, 75, 65]) == pytest.approx(40.0)  # hottest 5 C above
    assert gpu_target(g, [160] * 4, [76] * 4) == pytest.approx(55.0 + 24.0)
    assert gpu_target(g, [160] * 4, [84] * 4) == 90  # never above the ceiling
    assert gpu_target(g, [160] * 4) == pytest.approx(55.0)  # no temperatures: power only
    assert gpu_target(law(temp_gain=0), idle, [84] * 4) == 20


def test_cpu_zone_follows_the_temperature_curve():
    cfg = config(control={"cpu": {"curve": [[40, 20], [80, 100]], "duty_floor": 25,
                                  "temp_limit_c": 95}})
    c = CpuZoneController(CPU, cfg.cpu_law)
    assert c.target([30]) == 25  # below the curve: floor
    assert c.target([60]) == pytest.approx(60.0)
    assert c.target([55, 60]) == pytest.approx(60.0)  # hottest sensor counts
    assert c.target([90]) == 100


def test_cpu_zone_override_above_its_limit():
    cfg = config(control={"cpu": {"curve": [[40, 20], [80, 60]], "temp_limit_c": 85}})
    c = CpuZoneController(CPU, cfg.cpu_law)
    assert c.update([70], now=0.0) == pytest.approx(50.0)
    assert c.update([86], now=1.0) == 100
