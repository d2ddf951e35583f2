"""bench/fan_thermal.py: its model, its baseline selection, and that it runs the
daemon's default law (a wrong model or a baseline that spends more airflow
would print a wrong verdict)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from junkyard_fan.config import CpuLaw

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import fan_thermal as ft


def constant(value: float):
    return lambda _t: value


def test_the_model_settles_where_its_steady_state_says():
    full = CpuLaw(curve=((0.0, 100.0), (1.0, 100.0)), **ft.COMMON)  # always 100 %
    r = ft.simulate(full, 1500.0, constant(ft.FULL_W), constant(ft.T_INLET), seed=1)
    assert r.peak_c == pytest.approx(ft.steady_die(ft.FULL_W, 100.0), abs=0.3)
    assert r.mean_duty == pytest.approx(100.0)
    # The heat sink is slow: after 60 s at the floor the die is far from its
    # steady state, after 10 s of load it has risen by at least the die's own step.
    floor = CpuLaw(curve=((200.0, 25.0), (201.0, 100.0)), **{**ft.COMMON, "temp_limit_c": 200.0})
    short = ft.simulate(floor, 60.0, constant(ft.FULL_W), constant(ft.T_INLET), seed=1)
    idle = ft.steady_die(ft.IDLE_W, 25.0)
    assert idle + ft.FULL_W * ft.R_DS < short.peak_c < ft.steady_die(ft.FULL_W, 25.0) - 30


def test_the_baseline_never_spends_more_airflow_than_the_law():
    def run(peak: float, duty: float) -> ft.Run:
        return ft.Run({"s": ft.Result(peak_c=peak, duty_sum=duty, samples=1)})

    curves = [((50.0, 60.0), run(70.0, 80.0)), ((60.0, 70.0), run(72.0, 60.0)),
              ((65.0, 75.0), run(75.0, 50.0))]
    (chosen, base) = ft.best_within(curves, 65.0)
    assert chosen == (60.0, 70.0) and base.mean_duty <= 65.0
    assert ft.best_within(curves, 40.0) is None


def test_the_bench_runs_the_daemons_default_law():
    law = ft.hybrid_law()
    assert (law.power_low_w, law.power_high_w, law.temp_gain, law.temp_target_c) == (
        60.0, 300.0, 4.0, 70.0)
    assert ft.POWER.temp_gain == 0  # the pure power law, for comparison
