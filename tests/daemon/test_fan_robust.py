"""No path that leaves the fans low: the daemon against ipmi_sim on 127.0.0.1.

Errors anywhere (the transport, the metrics writer, the control law, a removed
run directory) end with every zone commanded to 100 %; a BMC that drops two
requests of three, or answers in 150 ms, is regulated at the DEFAULT timings;
implausible readings fail towards cooling. Every assertion is on what the
simulator received. Time is only bounded where it is the point ("at least one
update in every 5 s"), and then counted over a bounded run.
"""

from __future__ import annotations

import shutil
import signal
import threading
import time

import pytest
import yaml
from bmc_helpers import (
    CPU,
    FRONT,
    REAR,
    duty,
    fake_smi,
    sensor_reads,
    settled,
    wait_for,
    write_config,
)
from junkyard_fan import metrics
from junkyard_fan.config import load_config
from junkyard_fan.control import GpuZoneController
from junkyard_fan.daemon import Daemon
from junkyard_fan.ipmi import Bmc

pytestmark = [
    pytest.mark.bmc,
    pytest.mark.skipif(shutil.which("ipmi_sim") is None or shutil.which("ipmi-sensors") is None,
                       reason="needs ipmi_sim (openipmi) and freeipmi-tools"),
]

ALL_FULL = {FRONT: 100, REAR: 100, CPU: 100}
GPU6_TEMP_SENSOR = 0x17


def last_duties(sim, since: float) -> dict[int, int]:
    out: dict[int, int] = {}
    for rec in sim.fan_commands(since):
        fan, value = duty(rec)
        out[fan] = value
    return out


# ------------------------------------------------------- errors end at 100 %
def in_process(tmp_path, sim, **sections) -> Daemon:
    """The daemon in this process, with the real freeipmi transport to the simulator."""
    cfg = load_config(write_config(tmp_path, sim, **sections))
    d = Daemon(cfg, Bmc(cfg.bmc, cfg.timings))
    d.setup()
    return d


def run_until_broken(d: Daemon, sim, breaker) -> float:
    """Run the loop; after two cycles call ``breaker`` and change the load so a
    write is due. Returns the time the fault was injected."""
    state = {"cycles": 0, "at": 0.0}

    def sleep(_s: float) -> None:
        state["cycles"] += 1
        if state["cycles"] == 2:
            state["at"] = time.time()
            breaker()
            sim.set_gpu_current(1, 22.0)
        if state["cycles"] > 20:
            raise AssertionError("the fault never reached the loop")

    with pytest.raises(Exception) as exc:  # any error: the point of the test
        d.run(sleep=sleep)
    assert not isinstance(exc.value, AssertionError), exc.value
    return state["at"]


def test_error_in_the_transport_ends_at_full(tmp_path, sim):
    d = in_process(tmp_path, sim)

    def broken(_requests):
        raise RuntimeError("transport bug")

    def breaker():
        d.bmc.transport.raw = broken  # the batch path the loop and the fail-safe use

    at = run_until_broken(d, sim, breaker)
    # The fail-safe's other way (one request per call) got through.
    assert last_duties(sim, at) == ALL_FULL


def test_error_in_the_metrics_writer_ends_at_full(tmp_path, sim, monkeypatch):
    d = in_process(tmp_path, sim)

    def broken(_path, _text):
        raise ValueError("metrics bug")

    at = run_until_broken(d, sim, lambda: monkeypatch.setattr(metrics, "write_textfile", broken))
    assert last_duties(sim, at) == ALL_FULL


def test_error_in_the_control_law_ends_at_full(tmp_path, sim, monkeypatch):
    d = in_process(tmp_path, sim)

    def broken(self, powers, temps, now):
        raise ZeroDivisionError("control law bug")

    at = run_until_broken(
        d, sim, lambda: monkeypatch.setattr(GpuZoneController, "update", broken))
    assert last_duties(sim, at) == ALL_FULL


def test_error_during_start_up_ends_at_full(tmp_path, sim, monkeypatch):
    from junkyard_fan import cli

    def broken(self, touch_fans=True):
        raise KeyError("start-up bug")

    monkeypatch.setattr(Daemon, "setup", broken)
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:
        rc = cli.main(["-c", str(write_config(tmp_path, sim))])
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
    assert rc == 1
    assert last_duties(sim, 0.0) == ALL_FULL


def test_removed_run_directory_ends_at_full(tmp_path, sim, run_daemon):
    """/run/junkyard-fan removed (or full) under the running daemon."""
    run = tmp_path / "run"
    cfg = write_config(tmp_path, sim)
    raw = yaml.safe_load(cfg.read_text())
    raw["bmc"]["cache_dir"] = str(run / "cache")
    cfg.write_text(yaml.safe_dump(raw))
    d = run_daemon(cfg)
    assert wait_for(lambda: settled(sim), 30, "initial duties", d)[REAR] == 25
    shutil.rmtree(run)
    run.write_text("not a directory any more\n")  # nothing can be created under it
    broken_at = time.time()
    for g in (4, 5, 6, 7):
        sim.set_gpu_current(g, 22.0)  # a write is due at once
    wait_for(lambda: last_duties(sim, broken_at) == ALL_FULL, 40,
             "every zone at 100 % after the run directory went", d)
    assert "Traceback" not in d.text()


def test_non_utf8_configuration_is_refused_cleanly(tmp_path, sim, run_daemon):
    cfg = write_config(tmp_path, sim)
    cfg.write_bytes(cfg.read_bytes() + "# r\xe9glage\n".encode("latin-1"))
    d = run_daemon(cfg)
    assert d.proc.wait(timeout=60) == 2
    d.out.close()
    assert "not UTF-8 text (byte 0xe9" in d.text()
    assert "Traceback" not in d.text()
    assert sim.fan_commands() == []


@pytest.mark.parametrize(("timings", "control", "message"), [
    ({"stale_after": 30, "deadline": 10}, {},
     "timings.stale_after: must not exceed timings.deadline (10)"),
    ({}, {"gpu": {"duty_floor": 0}}, "control.gpu.duty_floor: must be >= 10, got 0"),
])
def test_unsafe_settings_are_refused_before_the_bmc_is_touched(
        tmp_path, sim, run_daemon, timings, control, message):
    d = run_daemon(write_config(tmp_path, sim, timings=timings, control=control))
    assert d.proc.wait(timeout=60) == 2
    d.out.close()
    assert message in d.text()
    assert sim.fan_commands() == []


# ------------------------------------------------- a bad BMC, default timings
def rising_load(sim, stop: threading.Event) -> None:
    """GPU0 from 4 A to 25 A in 3 A steps, once a second, then again: every
    cycle has news, and every value is a plausible GPU current."""
    amps = 4.0
    while not stop.is_set():
        amps = amps + 3.0 if amps < 25.0 else 4.0
        sim.set_gpu_current(0, amps)
        stop.wait(1.0)


def front_updates(sim, seconds: float) -> list[int]:
    """The front zone's duties commanded while GPU0's load rises and falls."""
    stop = threading.Event()
    t = threading.Thread(target=rising_load, args=(sim, stop))
    start = time.time()
    t.start()
    try:
        time.sleep(seconds)
    finally:
        stop.set()
        t.join()
    return [duty(r)[1] for r in sim.fan_commands(start) if duty(r)[0] == FRONT]


def assert_regulated(duties: list[int]) -> None:
    # Regulating means following the load: several different duties, and never
    # the fail-safe 100 % that a zone gets once its input is older than the
    # deadline. (No wall-clock bound: the deadline is the daemon's to keep.)
    assert len(duties) >= 4, f"front zone commands: {duties}"
    assert len(set(duties)) >= 3, f"front zone commands: {duties}"
    assert 100 not in duties, f"front zone commands: {duties}"


def test_two_of_three_requests_dropped_at_default_settings(tmp_path, sim, run_daemon):
    d = run_daemon(write_config(tmp_path, sim, defaults=True))
    wait_for(lambda: settled(sim), 60, "initial duties", d)
    faults_at = time.time()
    sim.set_faults(drop_count=2, drop_every=3, log_all=True)
    duties = front_updates(sim, 20)
    assert sum(r.result == "drop" for r in sim.oem_log(faults_at)) >= 30  # faults happened
    assert_regulated(duties)
    assert "BMC does not answer" not in d.text()
    assert d.proc.poll() is None


def test_bmc_answering_in_150_ms_at_default_settings(tmp_path, sim, run_daemon):
    d = run_daemon(write_config(tmp_path, sim, defaults=True))
    wait_for(lambda: settled(sim), 60, "initial duties", d)
    slow_at = time.time()
    sim.set_faults(delay_ms=150, log_all=True)
    # The daemon learns the BMC's pace (a call or two may overrun while it
    # does); then it must regulate, not sit in bmc_lost.
    sim.set_gpu_current(2, 22.0)
    wait_for(lambda: any(duty(r) == (FRONT, 38) for r in sim.fan_commands(slow_at)), 60,
             "regulation at 150 ms per request", d)
    assert_regulated(front_updates(sim, 20))
    assert d.proc.poll() is None


# ------------------------------------------------------------- plausibility
def test_zero_amps_after_load_is_not_idle(tmp_path, sim, run_daemon):
    d = run_daemon(write_config(tmp_path, sim, defaults=True))
    wait_for(lambda: settled(sim), 60, "initial duties", d)
    loaded_at = time.time()
    for g in (4, 5, 6, 7):
        sim.set_gpu_current(g, 22.0)  # 4 x 264 W
    wait_for(lambda: last_duties(sim, loaded_at).get(REAR) == 89, 30, "rear zone loaded", d)
    dropped_at = time.time()
    for g in (4, 5, 6, 7):
        sim.set_gpu_current(g, 0.0)  # the current sensors drop out under load
    # Held (never lowered), then 100 % once the deadline (10 s) has passed.
    wait_for(lambda: last_duties(sim, dropped_at).get(REAR) == 100, 30, "rear zone at 100 %", d)
    rear = [duty(r)[1] for r in sim.fan_commands(dropped_at) if duty(r)[0] == REAR]
    assert min(rear) >= 89, f"rear zone commands after 0 A: {rear}"
    assert "zone gpu-rear: no valid input: holding the duty" in d.text()


def test_implausibly_high_reading_raises_the_duty_at_once(tmp_path, sim, run_daemon):
    d = run_daemon(write_config(tmp_path, sim, defaults=True))
    assert wait_for(lambda: settled(sim), 60, "initial duties", d)[REAR] == 25
    hot_at = time.time()
    sim.set_gpu_temp(6, 200)  # no GPU reads 200 C: a broken sensor, or a real fire
    cmd = wait_for(lambda: [r for r in sim.fan_commands(hot_at) if duty(r)[0] == REAR], 30,
                   "rear zone command", d)[0]
    assert duty(cmd) == (REAR, 100)
    # At once: within two reads of the sensor, not after the deadline (ten).
    reads = [r for r in sensor_reads(sim, GPU6_TEMP_SENSOR, hot_at) if r.time < cmd.time]
    assert len(reads) <= 2
    assert "GPU6_TEMP reads 200.0: implausibly high" in d.text()


# ---------------------------------------------------------------- PSU cap
def cap_metric(prom) -> str | None:
    if not prom.exists():
        return None
    for line in prom.read_text().splitlines():
        if line.startswith("junkyard_fan_power_cap_active "):
            return line.split()[1]
    return None


def test_cap_is_lifted_after_a_restart_once_both_psus_are_healthy(tmp_path, sim, run_daemon):
    guard, state, calls = fake_smi(tmp_path)
    cfg = write_config(tmp_path, sim, power_guard=guard)
    prom = tmp_path / "fan.prom"
    d = run_daemon(cfg)
    wait_for(lambda: settled(sim), 30, "initial duties", d)
    sim.set_psu_failed(2, True)
    wait_for(lambda: cap_metric(prom) == "1", 20, "the cap in the metrics", d)
    assert state.read_text().strip() == "198"
    assert d.stop() == 0  # restarted while capped ...
    sim.set_psu_failed(2, False)  # ... and the PSU comes back meanwhile
    prom.unlink()
    d = run_daemon(cfg)
    # The new daemon reads the cap back: active, then lifted after lift_after.
    wait_for(lambda: cap_metric(prom) == "1", 30, "the inherited cap in the metrics", d)
    wait_for(lambda: cap_metric(prom) == "0", 30, "the cap lifted", d)
    assert state.read_text().strip() == "290"
    assert calls.read_text().splitlines() == ["cap 198", "reset"]
    assert "a GPU power cap is in place (read back: 198 W)" in d.text()
    assert d.stop() == 0


def test_cap_is_judged_by_reading_it_back(tmp_path, sim, run_daemon):
    guard, _state, calls = fake_smi(tmp_path, rc=1)  # caps every GPU, then exits 1
    prom = tmp_path / "fan.prom"
    d = run_daemon(write_config(tmp_path, sim, power_guard=guard))
    wait_for(lambda: settled(sim), 30, "initial duties", d)
    sim.set_psu_failed(2, True)
    wait_for(lambda: cap_metric(prom) == "1", 20, "the cap in the metrics", d)
    time.sleep(3)  # a few more cycles
    assert cap_metric(prom) == "1"
    assert calls.read_text().splitlines() == ["cap 198"]  # in place: not sent again
    assert "junkyard_fan_power_cap_watts 198" in prom.read_text()
    assert d.stop() == 0
