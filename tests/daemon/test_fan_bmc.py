"""The daemon against a real IPMI peer: OpenIPMI's ipmi_sim on 127.0.0.1.

Sensors come from the SDR file of bmc_sim/, values change at run time through
the simulator console, and bmc_sim/fanmod.c answers and logs the OEM fan
commands and injects faults. Every scenario asserts on what the simulator
received. No wall-clock assertions: "within one cycle" is counted in sensor
reads the simulator saw.
"""

from __future__ import annotations

import shutil
import signal
import time

import pytest
import yaml
from bmc_helpers import duty, sensor_reads, settled, wait_for, write_config

pytestmark = [
    pytest.mark.bmc,
    pytest.mark.skipif(shutil.which("ipmi_sim") is None or shutil.which("ipmi-sensors") is None,
                       reason="needs ipmi_sim (openipmi) and freeipmi-tools"),
]

FRONT, REAR, CPU = 1, 2, 0
GPU0_CURRENT_SENSOR = 0x01
PSU2_SENSOR = 0x42


def test_current_step_moves_its_zone_within_one_cycle_and_not_the_other(
        tmp_path, sim, run_daemon):
    d = run_daemon(write_config(tmp_path, sim))
    first = wait_for(lambda: settled(sim), 30, "initial duties", d)
    assert first == {FRONT: 25, REAR: 25, CPU: 29}  # idle: 8 x 48 W, CPU 45 C
    sim.set_gpu_current(1, 22.0)  # GPU1: 264 W; front zone 3 x 48 + 264 = 408 W
    step_at = time.time()  # every read logged from now on sees the step
    moved = wait_for(lambda: [r for r in sim.fan_commands(step_at) if duty(r)[0] == FRONT],
                     15, "front zone command", d)
    # 408 W over [4 x 60, 4 x 300] W maps to 25 + 75 * 0.175 = 38 %, reached at once.
    assert duty(moved[0]) == (FRONT, 38)
    # Within one cycle: at most one read of the GPU currents happened between
    # the step and the command (the read that saw the step).
    reads = [r for r in sensor_reads(sim, GPU0_CURRENT_SENSOR, step_at) if r.time < moved[0].time]
    assert len(reads) <= 1
    time.sleep(2.5)  # a few more cycles
    assert all(duty(r)[1] == 25 for r in sim.fan_commands(step_at) if duty(r)[0] == REAR)
    assert d.stop() == 0


def test_z45_calibration_halves_the_reading(tmp_path, sim, run_daemon):
    sim.set_gpu_current(0, 40.0)  # the Z45 BMC says 40 A for a GPU drawing 20 A (240 W)
    z20 = tmp_path / "z20"
    z20.mkdir()
    d = run_daemon(write_config(z20, sim, calibration=1.0))
    assert wait_for(lambda: settled(sim), 30, "Z20 duties", d)[FRONT] == 55  # 624 W
    d.stop()
    after = time.time()
    z45 = tmp_path / "z45"
    z45.mkdir()
    d = run_daemon(write_config(z45, sim, calibration=0.5))
    # Halved: 3 x 24 W + 240 W = 312 W -> 25 + 75 * 72 / 960 = 31 %
    assert wait_for(lambda: settled(sim, after), 30, "Z45 duties", d)[FRONT] == 31
    assert 'junkyard_fan_gpu_power_watts{gpu="0"} 240' in wait_for(
        lambda: (z45 / "fan.prom").exists() and (z45 / "fan.prom").read_text(), 10, "metrics")


def test_bmc_silent_past_the_deadline_puts_every_zone_to_full(tmp_path, sim, run_daemon):
    d = run_daemon(write_config(tmp_path, sim))
    wait_for(lambda: settled(sim), 30, "initial duties", d)
    silent_at = time.time()
    sim.silence()
    # Nothing gets through (not even a session), so the simulator sees no fan
    # command; the daemon notices, and keeps trying past the 4 s deadline.
    wait_for(lambda: "BMC does not answer" in d.text(), 30, "the daemon to notice", d)
    prom = tmp_path / "fan.prom"
    wait_for(lambda: 'junkyard_fan_zone_state{state="bmc_lost",zone="gpu-front"} 1'
             in prom.read_text(), 30, "bmc_lost state in the metrics", d)
    time.sleep(max(0.0, silent_at + 6 - time.time()))
    back_at = time.time()
    sim.set_faults(log_all=True)
    first_back = wait_for(lambda: settled(sim, back_at), 30, "commands after the silence", d)
    assert first_back == {FRONT: 100, REAR: 100, CPU: 100}
    assert sim.fan_commands(silent_at)[0].time >= back_at  # nothing got through before
    assert "BMC does not answer" in d.text()
    assert d.text().count("BMC does not answer") == 1  # logged once, not per cycle


def test_sigterm_leaves_every_zone_at_full(tmp_path, sim, run_daemon):
    d = run_daemon(write_config(tmp_path, sim))
    assert wait_for(lambda: settled(sim), 30, "initial duties", d)[FRONT] == 25
    before = time.time()
    assert d.stop(signal.SIGTERM) == 0
    last = {}
    for rec in sim.fan_commands(before):
        fan, value = duty(rec)
        last[fan] = value
    assert last == {FRONT: 100, REAR: 100, CPU: 100}


def test_psu_failure_caps_power_and_recovery_lifts_it(tmp_path, sim, run_daemon):
    caps = tmp_path / "powercap.log"
    d = run_daemon(write_config(tmp_path, sim))
    wait_for(lambda: settled(sim), 30, "initial duties", d)
    assert not caps.exists()
    failed_at = time.time()
    sim.set_psu_failed(2, True)
    wait_for(lambda: caps.exists() and caps.read_text(), 15, "power cap", d)
    assert caps.read_text().splitlines() == ["cap 198"]
    assert 8 * 198 + 500 <= 2200  # eight GPUs at the cap plus the rest fit one PSU
    # The decision came from the PSU2 status the BMC reported.
    assert sensor_reads(sim, PSU2_SENSOR, failed_at)
    wait_for(lambda: "junkyard_fan_power_cap_watts 198" in (tmp_path / "fan.prom").read_text(),
             10, "the cap in the metrics", d)
    sim.set_psu_failed(2, False)
    wait_for(lambda: "reset" in caps.read_text(), 15, "cap lifted", d)
    assert caps.read_text().splitlines() == ["cap 198", "reset"]
    # the daemon writes the reset, then logs it: wait for the log line too
    wait_for(lambda: "GPU power cap lifted" in d.text(), 10, "the lift in the log", d)
    assert d.stop() == 0


def test_one_shot_prints_and_changes_nothing(tmp_path, sim, run_daemon):
    sim.set_gpu_current(5, 22.0)
    d = run_daemon(write_config(tmp_path, sim), "--once")
    assert d.proc.wait(timeout=60) == 0
    d.out.close()
    out = d.text()
    assert "GPU5_12V_I" in out and "22.00 A -> 264 W" in out
    assert "gpu-rear     fan_id 2: GPU power sum 408 W -> 38.1 %" in out
    assert "power: PSUs healthy -> no cap (would cap at 198 W per GPU)" in out
    assert sim.fan_commands() == []  # nothing was sent to the fans


def test_sensor_missing_from_the_bmc_is_a_config_error(tmp_path, sim, run_daemon):
    cfg = write_config(tmp_path, sim)
    raw = yaml.safe_load(cfg.read_text())
    raw["profile"]["bmc"]["gpu_current_sensors"][3] = "GPU3_12V_AMPS"
    cfg.write_text(yaml.safe_dump(raw))
    d = run_daemon(cfg, "--check")
    assert d.proc.wait(timeout=60) == 2
    d.out.close()
    assert ("profile.bmc.gpu_current_sensors[3]: sensor 'GPU3_12V_AMPS' is not in the BMC's SDR"
            in d.text())
    assert sim.fan_commands() == []


@pytest.mark.parametrize("tool", ["ipmitool"])
def test_ipmitool_access_regulates_too(tmp_path, sim, run_daemon, tool):
    if shutil.which("ipmitool") is None:
        pytest.skip("ipmitool not installed")
    sim.set_gpu_current(6, 22.0)
    d = run_daemon(write_config(tmp_path, sim, tool=tool))
    assert wait_for(lambda: settled(sim), 30, "duties via ipmitool", d) == {
        FRONT: 25, REAR: 38, CPU: 29}
    assert d.stop() == 0
