"""``junkyard-fan --probe`` against ipmi_sim, with fans that follow the command and with
a board that ignores it, and the daemon's refusal to take over fans that do not follow."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time

import pytest
import yaml
from ansible_collections.junkyard.cluster.plugins.module_utils.health_parsers import (
    fan_summary,
    parse_prometheus,
)
from bmc_helpers import REPO, DaemonProc, duty, settled, wait_for, write_config
from fan_fixtures import raw_config
from junkyard_fan import probe
from junkyard_fan.config import parse_config

from bmc_sim.simctl import BmcSim, SimOptions

needs_sim = pytest.mark.skipif(
    shutil.which("ipmi_sim") is None or shutil.which("ipmi-sensors") is None,
    reason="needs ipmi_sim (openipmi) and freeipmi-tools")

FRONT, REAR, CPU = 1, 2, 0
TACHS = {"gpu-front": ["FAN1", "FAN2", "FAN3"], "gpu-rear": ["FAN4", "FAN5", "FAN6"],
         "cpu": ["FAN7", "FAN8"]}


def probe_config(tmp_path, sim, tachs=None):
    path = write_config(tmp_path, sim, probe={"result_file": str(tmp_path / "probe.json"),
                                              "settle": 1.0})
    cfg = yaml.safe_load(path.read_text())
    for zone in cfg["profile"]["fan_zones"]:
        zone["tach_sensors"] = (tachs or TACHS)[zone["name"]]
    path.write_text(yaml.safe_dump(cfg))
    return path


def run_probe(path):
    env = {"PYTHONPATH": str(REPO / "daemon" / "src"), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    return subprocess.run([sys.executable, "-m", "junkyard_fan", "-c", str(path), "--probe"],
                          capture_output=True, text=True, timeout=120, env=env, check=False)


@pytest.fixture
def following(tmp_path):
    with BmcSim(tmp_path / "bmc", SimOptions(tach_tau_ms=150)) as sim:
        sim.set_faults(log_all=True)
        yield sim


@pytest.fixture
def ignoring(tmp_path):
    with BmcSim(tmp_path / "bmc", SimOptions(tach_tau_ms=150,
                                             ignores_fan_commands=True)) as sim:
        sim.set_faults(log_all=True)
        yield sim


@pytest.mark.bmc
@needs_sim
def test_probe_passes_where_the_fans_follow_and_the_daemon_takes_over(
        tmp_path, following, run_daemon):
    path = probe_config(tmp_path, following)
    out = run_probe(path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "zone gpu-front (fan_id 1): passed (FAN1 6600 -> 16500" in out.stdout
    result = json.loads((tmp_path / "probe.json").read_text())
    assert result["status"] == "passed"
    assert result["zones"]["cpu"]["rpm"] == {"FAN7": [6600, 16500], "FAN8": [6600, 16500]}
    # the probe ends with every zone at 100 %
    last = {}
    for rec in following.fan_commands():
        last[duty(rec)[0]] = duty(rec)[1]
    assert last == {FRONT: 100, REAR: 100, CPU: 100}
    started = time.time()
    d = run_daemon(path)
    assert wait_for(lambda: settled(following, started), 30, "regulated duties", d) == {
        FRONT: 25, REAR: 25, CPU: 29}
    assert "fan probe: probe passed" in d.text()
    assert d.stop() == 0


@pytest.mark.bmc
@needs_sim
def test_probe_names_the_zone_whose_tachometers_do_not_follow(tmp_path, following):
    # FAN7 and FAN8 are the CPU zone's fans: listed for the front zone by mistake
    path = probe_config(tmp_path, following, {**TACHS, "gpu-front": ["FAN7", "FAN8"]})
    out = run_probe(path)
    assert out.returncode == 4
    assert ("zone gpu-front (fan_id 1): failed: FAN7 16500 RPM at 40 %, 16500 RPM at 100 %"
            in out.stdout)
    assert "zone gpu-rear (fan_id 2): passed" in out.stdout
    assert json.loads((tmp_path / "probe.json").read_text())["status"] == "failed"


@pytest.mark.bmc
@needs_sim
def test_board_that_ignores_the_command_fails_and_the_daemon_leaves_its_fans_alone(
        tmp_path, ignoring, run_daemon):
    path = probe_config(tmp_path, ignoring)
    out = run_probe(path)
    assert out.returncode == 4, out.stdout + out.stderr
    for zone in ("gpu-front", "gpu-rear", "cpu"):
        assert f"zone {zone} " in out.stdout and "failed: " in out.stdout
    result = json.loads((tmp_path / "probe.json").read_text())
    assert result["status"] == "failed"
    assert result["zones"]["gpu-rear"]["rpm"]["FAN4"] == [5000, 5000]
    # after a failed probe the fans are handed back to the BMC (the auto command)
    autos = [r for r in ignoring.fan_commands() if r.data[4:] == (0, 0)]
    assert sorted(r.data[3] for r in autos) == [CPU, FRONT, REAR]
    started = time.time()
    d = run_daemon(path)
    prom = tmp_path / "fan.prom"
    text = wait_for(lambda: prom.exists() and "cycles_total 3" in prom.read_text()
                    and prom.read_text(), 30, "three cycles", d)
    assert 'junkyard_fan_zone_state{state="bmc_control",zone="gpu-rear"} 1' in text
    assert "junkyard_fan_probe_failed 1" in text
    summary = fan_summary(parse_prometheus(text, str(prom)))
    assert any("does not move this node's fans" in a for a in summary["alarms"])
    ignoring.set_gpu_current(5, 25.0)  # load: a regulating daemon would command a duty
    time.sleep(2.0)
    assert d.stop() == 0
    # not one set-duty command, not even the exit fail-safe's 100 %
    assert [r for r in ignoring.fan_commands(started) if r.data[4] == 1] == []
    assert "not taking over the fans" in d.text()


@pytest.mark.bmc
@needs_sim
def test_a_failed_result_of_another_fan_configuration_does_not_stop_the_daemon(
        tmp_path, following, run_daemon):
    path = probe_config(tmp_path, following)
    cfg = parse_config(yaml.safe_load(path.read_text()), env={}, base=tmp_path)
    probe.write(tmp_path / "probe.json", {"status": "failed", "fingerprint": "0" * 16,
                                          "zones": {}})
    status, why = probe.verdict(cfg)
    assert status == "unknown" and "another fan configuration" in why
    started = time.time()
    d = DaemonProc(path)
    try:
        assert wait_for(lambda: settled(following, started), 30, "regulated duties", d)
    finally:
        d.stop()


def test_verdict_without_a_result_or_for_untested_zones(tmp_path):
    raw = raw_config(probe={"result_file": str(tmp_path / "p.json")})
    cfg = parse_config(raw, env={})
    assert probe.verdict(cfg)[0] == "unknown"
    probe.write(tmp_path / "p.json", {"status": "untested", "fingerprint": probe.fingerprint(cfg),
                                      "zones": {}})
    assert probe.verdict(cfg)[0] == "untested"  # only "failed" keeps the daemon's hands off
    probe.write(tmp_path / "p.json", {"status": "failed", "fingerprint": probe.fingerprint(cfg),
                                      "time": "T", "zones": {"cpu": {"status": "failed",
                                                                     "problem": "FAN7 stays"}}})
    status, why = probe.verdict(cfg)
    assert status == "failed" and "cpu: FAN7 stays" in why
    # another fan command is another configuration: the old result no longer applies
    raw["profile"]["fan_commands"]["set_duty"] = "0x30 0x70 0x66 0x01 {fan_id} {duty}"
    assert probe.verdict(parse_config(raw, env={}))[0] == "unknown"
