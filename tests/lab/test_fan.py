"""Issue 22: the fan daemon regulates in-band on the booted lab nodes.

Each lab node is on one of the example's hardware profiles, and its simulated
BMC (bmc_sim) serves that profile's sensors: the daemon, enabled by the image
because the profile has fan zones, reads the GPU currents through the node's
/dev/ipmi0 (qemu's KCS interface to the simulator) and commands each side's
fans.  The simulated fans follow the commanded duty, so the test reads the
result where an operator would: the BMC's fan tachometers, over IPMI LAN.
Runs after test_slurm.py (its stops of the daemon drain node01 in Slurm, as
they should) and before test_health.py.
"""

from __future__ import annotations

import json
import time

import pytest
from labtools import lab_cli

pytestmark = pytest.mark.lab

FULL_RPM = 16500  # bmc_sim: duty 100 % is 165 counts of 100 RPM
IDLE_AMPS = 4.0  # bmc_sim's idle GPU current (48 W at 12 V)
METRICS = "/run/junkyard/metrics/junkyard_fan.prom"
LEFT_GPUS = (0, 1, 4, 5)  # the example's zone gpu-left (fan_id 1: FAN1-FAN3)
RIGHT_FAN, LEFT_FAN = 4, 1


def wait_rpm(sim, fan: int, ok, timeout: float = 240) -> int:
    """Poll FAN``fan``'s tachometer until ``ok(rpm)``; return the last reading."""
    deadline = time.monotonic() + timeout
    rpm = sim.fan_rpm(fan)
    while not ok(rpm) and time.monotonic() < deadline:
        time.sleep(2)
        rpm = sim.fan_rpm(fan)
    return rpm


@pytest.fixture
def sims(lab, site):
    opened = {n.name: lab.bmc_sim(n) for n in lab.nodes}
    yield opened
    for sim in opened.values():
        for gpu in range(8):
            sim.set_gpu_current(gpu, IDLE_AMPS)
        sim.close()


def test_fan_daemon_regulates_every_zone_of_every_node(lab, site):
    for node in lab.nodes:
        res = lab.node_ssh(node, f"rc-service junkyard-fan status; cat {METRICS}")
        assert "started" in res.stdout, (node.name, res.stdout, res.stderr)
        # the default: the daemon talks to /dev/ipmi0 itself, no tool per cycle
        assert 'junkyard_fan_bmc_info{access="inband",tool="kernel"} 1' in res.stdout, \
            (node.name, res.stdout[-3000:])
        for zone in ("gpu-left", "gpu-right", "cpu"):
            line = f'junkyard_fan_zone_state{{state="ok",zone="{zone}"}} 1'
            assert line in res.stdout, (node.name, zone, res.stdout[-3000:])


def test_gpu_currents_drive_their_sides_fans_and_a_stopped_daemon_leaves_them_full(
        lab, site, sims):
    node01, node02 = lab.cfg.node("node01"), lab.cfg.node("node02")
    s1, s2 = sims["node01"], sims["node02"]
    # idle GPUs: both sides of both nodes settle below full speed
    for sim in (s1, s2):
        for gpu in range(8):
            sim.set_gpu_current(gpu, IDLE_AMPS)
    for sim in (s1, s2):
        for fan in (LEFT_FAN, RIGHT_FAN):
            rpm = wait_rpm(sim, fan, lambda r: r < 0.6 * FULL_RPM)
            assert rpm < 0.6 * FULL_RPM, f"FAN{fan} at {rpm} RPM with idle GPUs"
    # the left GPUs at 25 A (300 W at 12 V) on both BMCs: node01's left fans go to
    # full speed, its right fans stay; node02's BMC reports currents twice the real
    # value (calibration 0.5), so the same readings are half the power there
    for sim in (s1, s2):
        for gpu in LEFT_GPUS:
            sim.set_gpu_current(gpu, 25.0)
    left1 = wait_rpm(s1, LEFT_FAN, lambda r: r > 0.95 * FULL_RPM)
    assert left1 > 0.95 * FULL_RPM, f"node01 FAN{LEFT_FAN} at {left1} RPM under full GPU load"
    assert s1.fan_rpm(RIGHT_FAN) < 0.6 * FULL_RPM, "node01's right fans followed the left GPUs"
    left2 = wait_rpm(s2, LEFT_FAN, lambda r: r > 0.65 * FULL_RPM, timeout=60)
    assert 0.35 * FULL_RPM < left2 < 0.85 * FULL_RPM, (
        f"node02 (currents read x2, calibrated x0.5) FAN{LEFT_FAN} at {left2} RPM")
    fan_commands = [c for c in s1.fan_commands() if c.answered_ok]
    assert fan_commands, "node01's BMC logged no fan command"
    # the daemon stopped: every fan of node01 at full speed, and they stay there
    # with the GPUs idle again (nothing lowers them)
    res = lab.node_ssh(node01, "rc-service junkyard-fan stop")
    assert res.returncode == 0, res.stdout + res.stderr
    try:
        for gpu in range(8):
            s1.set_gpu_current(gpu, IDLE_AMPS)
        time.sleep(10)
        rpms = {fan: wait_rpm(s1, fan, lambda r: r > 0.95 * FULL_RPM) for fan in range(1, 9)}
        assert all(r > 0.95 * FULL_RPM for r in rpms.values()), rpms
    finally:
        res = lab.node_ssh(node01, "rc-service junkyard-fan start")
        assert res.returncode == 0, res.stdout + res.stderr
    assert lab.qemu_pid(node02), "node02 went down during the fan test"


def test_burn_in_probes_the_fans_before_the_load(lab, site, lab_log, tmp_path):
    """playbooks/burn_in.yml on a booted node: junkyard-fan --probe first (the zones'
    tachometers follow the two duties it sets), then the load; the daemon regulates
    again afterwards."""
    node01 = lab.cfg.node("node01")
    res = lab_cli("run", "playbooks/burn_in.yml", "-e", json.dumps({
        "burn_in_node": "node01", "burn_in_duration_s": 6, "burn_in_interval_s": 2,
        "burn_in_memory_workers": 1, "burn_in_memory_bytes": "64M",
        # the VMs' GPUs are virtio GPUs: no amdgpu device for the GPU load
        "burn_in_gpu_tool": "none", "health_report_dir": str(tmp_path)}),
        log=lab_log, timeout=1800)
    assert res.returncode == 0, res.stdout[-5000:]
    [report] = sorted((tmp_path / "burn-in").glob("node01-*.json"))
    verdict = json.loads(report.read_text())
    assert verdict["passed"], verdict
    [probe] = [n for n in verdict["notes"] if n.startswith("fan probe: ")]
    for zone in ("gpu-left (fan_id 1)", "gpu-right (fan_id 2)", "cpu (fan_id 0)"):
        assert f"zone {zone}: passed" in probe, probe
    status = lab.node_ssh(node01, f"rc-service junkyard-fan status; cat {METRICS}").stdout
    assert "started" in status, status
    assert 'junkyard_fan_probe_failed 0' in status, status[-3000:]
