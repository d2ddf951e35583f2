"""playbooks/burn_in.yml through ansible-runner on this machine (local
connection, a node without GPUs: the lab's node01 on lab-vm, its g292-z20
profile without the GPUs): a short memory stress with stress-ng passes and
says the GPU part was skipped; a corrected error that appears in the EDAC
counters during the run stops the load and fails the node.  The paths and the
GPU limit shared with the health report are read under their health_report_*
names and under their deprecated health_* ones."""

from __future__ import annotations

import copy
import json
import shutil
import threading
import time
from pathlib import Path

import ansible_runner
import pytest
import yaml
from rasdaemon_fixtures import edac_tree
from test_health_playbook import inventory as health_inventory
from test_health_playbook import node_fixtures

from tests.conftest import REPO
from tests.inventory_files import keep_gpus

pytestmark = pytest.mark.skipif(shutil.which("stress-ng") is None,
                                reason="needs stress-ng (apt-get install stress-ng)")


NO_FAN_PROBE = "fan probe: not run (no fan daemon configuration for profile lab-vm)"


def inventory(tmp_path):
    """The health report's inventory with node01 on lab-vm: its g292-z20 without GPUs
    (no GPU, no GPU current sensor, no GPU in a fan zone), as this machine has none."""
    inv = health_inventory(tmp_path)
    cluster_file = inv / "group_vars" / "all" / "cluster.yml"
    cluster = yaml.safe_load(cluster_file.read_text())
    profiles = cluster["cluster_hardware_profiles"]
    profiles["lab-vm"] = copy.deepcopy(profiles["g292-z20"])
    keep_gpus(profiles["lab-vm"], 0)
    profiles["lab-vm"]["gpu"] = {"count": 0}
    cluster_file.write_text(yaml.safe_dump(cluster))
    hosts_file = inv / "hosts.yml"
    hosts = yaml.safe_load(hosts_file.read_text())
    hosts["all"]["children"]["gpu_nodes"]["hosts"]["node01"]["node_profile"] = "lab-vm"
    hosts_file.write_text(yaml.safe_dump(hosts, sort_keys=False))
    return inv


def run(tmp_path, names="current", **extra):
    pdd = tmp_path / "runner"
    pdd.mkdir()
    fixtures = node_fixtures(tmp_path, names)
    r = ansible_runner.run(
        private_data_dir=str(pdd),
        playbook=str(REPO / "playbooks" / "burn_in.yml"),
        inventory=str(inventory(tmp_path) / "hosts.yml"),
        envvars={"ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"},
        # the head is never contacted: no image state to read from it
        extravars={**fixtures, "health_report_dir": str(tmp_path / "reports"),
                   "cluster_image_state": {},
                   # no fan daemon configuration on this machine: no fan probe
                   "gpu_fan_daemon_config_dir": str(tmp_path / "no-fan-config"),
                   "burn_in_node": "node01", "burn_in_duration_s": 6,
                   "burn_in_interval_s": 2, "burn_in_memory_workers": 1,
                   "burn_in_memory_bytes": "32M", **extra},
        quiet=True,
    )
    out = r.stdout.read()
    shutil.rmtree(pdd / "artifacts", ignore_errors=True)
    reports = sorted((tmp_path / "reports" / "burn-in").glob("node01-*.json"))
    assert len(reports) == 1, out[-5000:]
    return r, out, json.loads(reports[0].read_text()), reports[0].with_suffix(".md").read_text()


def test_memory_burn_in_passes_and_skips_the_gpus(tmp_path):
    # the fixture's GPU0_TEMP is 97 C: under the health report's limit, 99
    r, out, verdict, md = run(tmp_path, health_report_gpu_temp_limit_c=99)
    assert r.rc == 0, out[-5000:]
    assert verdict["passed"] is True
    assert verdict["notes"] == ["gpu stress skipped: the hardware profile has no GPU",
                                NO_FAN_PROBE]
    assert verdict["samples"] >= 4  # first, 3 during the run, last
    assert "# Burn-in of node01: PASSED" in md
    assert "node01 passed its burn-in" in out


def stress_running():
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if args and args[0].endswith(b"stress-ng") and b"32M" in args:
            return True
    return False


def test_new_corrected_error_fails_the_node(tmp_path):
    def bump():
        # Once the load runs (the first sample has been taken), a DIMM
        # counts a corrected error.
        deadline = time.monotonic() + 120
        while not stress_running() and time.monotonic() < deadline:
            time.sleep(0.2)
        edac_tree(tmp_path / "edac", [(0, 0, "DIMM_P0_A0", "csrow 0 channel 0", 0, 0),
                                      (1, 0, "DIMM_P0_B0", "csrow 0 channel 0", 13, 0)])
    t = threading.Thread(target=bump)
    t.start()
    try:
        # 12 s of load, a sample every 3 s: the load still runs when the sample after the
        # error comes, on a busy machine too
        r, out, verdict, md = run(tmp_path, burn_in_gpu_temp_limit_c=99,
                                  burn_in_duration_s=12, burn_in_interval_s=3)
    finally:
        t.join()
    assert r.rc != 0
    assert "DIMM DIMM_P0_B0: 1 corrected new error(s) during the burn-in" in verdict["problems"]
    assert any(n.startswith("the load was stopped at sample") and "1 new memory error(s)" in n
               for n in verdict["notes"]), verdict["notes"]
    assert "node01 FAILED its burn-in: DIMM DIMM_P0_B0" in out
    assert "# Burn-in of node01: FAILED" in md


def test_hot_gpu_fails_the_node(tmp_path):
    # The fan metrics fixture reports GPU0_TEMP at 97 C; the paths and the limit
    # (96: not the default) under their deprecated names.
    # The load must still run when the first sample after its start comes: that sample
    # starts a module (seconds on a busy machine; a 2 s load had ended before it in CI).
    # The stop ends the stress at once, so only the second sample's pause is waited out.
    r, out, verdict, _unused = run(tmp_path, names="deprecated", health_gpu_temp_limit_c=96,
                                   burn_in_duration_s=12, burn_in_interval_s=6)
    assert r.rc != 0
    assert "GPU0_TEMP reached 97 C (limit 96 C)" in verdict["problems"]
    # The first sample of the run saw it and stopped the memory stress.
    assert verdict["notes"][-2].startswith("the load was stopped at sample 2: GPU0_TEMP at 97 C")
    assert verdict["notes"][-1] == NO_FAN_PROBE
    assert "FAILED its burn-in" in out


def test_burn_in_needs_a_node(tmp_path):
    pdd = tmp_path / "runner"
    pdd.mkdir()
    r = ansible_runner.run(
        private_data_dir=str(pdd), playbook=str(REPO / "playbooks" / "burn_in.yml"),
        inventory=str(inventory(tmp_path) / "hosts.yml"),
        envvars={"ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"},
        extravars={"burn_in_node": "head", "cluster_image_state": {}}, quiet=True)
    out = r.stdout.read()
    assert r.rc != 0
    assert "Name the node to burn in with -e burn_in_node=<node>, one of the group gpu_nodes " \
           "(node01, node02); got head." in " ".join(out.split())
