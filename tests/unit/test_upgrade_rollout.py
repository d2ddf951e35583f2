"""The rollout path of upgrade_rocm.yml for real, minus ZFS and the boot-entry rendering:
two nodes whose BMCs are OpenIPMI ipmi_sim instances on 127.0.0.1 (chassis power runs a
stand-in for the node), the storage head and the nodes played by this machine (connection
local), the image state in a temporary file with the new version already built.

- success: canary then the second wave are power-cycled through their BMCs, verified, and the
  version is promoted in the state; before each wave's power cycle the cluster model, derived
  again from the state file the wave wrote, boots the wave's nodes at the new version (a
  stand-in render role records the boot entries it is given);
- failure: the canary's verify fails (this machine did not boot junkyard.image=<image>/v2):
  the canary is reverted to v1 and power-cycled again, automatically, the rollout stops, the
  second node's BMC never gets a command, nothing is promoted, and the state records the
  revert; a canary that passes on v1 after its revert is back; without the revert
  (image_rollout_revert false) the state keeps the canary's move for the operator, and a
  re-run verifies it again in place.
"""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import sys
import time

import pytest
import yaml

from bmc_sim.simctl import BmcSim, SimOptions
from tests.conftest import REPO
from tests.inventory_files import LAB, hosts

pytestmark = [pytest.mark.bmc,
              pytest.mark.skipif(shutil.which("ipmi_sim") is None,
                                 reason="needs ipmi_sim (openipmi)")]

STATE = {"schema": 1, "nodes": {}, "images": {"bookworm": {
    "current": "v1", "versions": {"v1": {"origin": None}, "v2": {"origin": "v1"}}}}}


@pytest.fixture
def cluster(tmp_path):
    """Two simulated BMCs and an inventory of the lab cluster that points at them."""
    sims, markers = {}, {}
    for n, name in enumerate(("node01", "node02"), start=1):
        markers[name] = tmp_path / f"{name}.powered"
        opts = SimOptions(fanmod=False, kill_wait=1, poweroff_wait=0,
                          startcmd=f"sh -c 'echo on >> {markers[name]}; exec sleep 600'")
        sims[name] = BmcSim(tmp_path / f"bmc{n}", opts).start()
    inv = tmp_path / "inventory"
    inv.mkdir()
    (inv / "group_vars").symlink_to(LAB / "group_vars")
    # the lab's hosts, played by this machine; each node's BMC port is its simulator's (the
    # user and the password, from JUNKYARD_LAB_BMC_PASSWORD, are the lab's node_bmc_defaults)
    lab_head, lab_nodes = hosts(LAB)
    nodes = copy.deepcopy(lab_nodes)
    for name, node in nodes.items():
        node["node_bmc"]["port"] = sims[name].port
    inventory = {"all": {
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
        "children": {
            "storage_head": {"hosts": {"head": {
                "head_interfaces": lab_head["head_interfaces"]}}},
            "gpu_nodes": {"hosts": nodes}}}}
    (inv / "hosts.yml").write_text(yaml.safe_dump(inventory))
    state = tmp_path / "image-state.yml"
    state.write_text(yaml.safe_dump(STATE))
    try:
        yield inv / "hosts.yml", state, markers, sims
    finally:
        for sim in sims.values():
            sim.stop()


def probe_role(tmp_path):
    """A render role that records, per wave, the version each node's boot entry names."""
    tasks = tmp_path / "roles" / "jy_model_probe" / "tasks"
    tasks.mkdir(parents=True)
    record = tmp_path / "boot-entries.txt"
    tasks.joinpath("main.yml").write_text(yaml.safe_dump([{
        "name": "Record the boot entries of the model the wave derived",
        "ansible.builtin.shell": (
            "echo '{{ image_rollout_wave | join(\",\") }}: {{ cluster_model.nodes"
            " | map(attribute=\"boot.cmdline\") | map(\"regex_search\", \"junkyard.image=\\S+\")"
            " | join(\" \") }}' >> " + str(record)),
    }]))
    return tmp_path / "roles", record


def upgrade(inventory, state, *extra, render_roles=(), roles_path=None):
    argv = ["ansible-playbook", "-i", str(inventory), str(REPO / "playbooks" / "upgrade_rocm.yml"),
            "-e", "version=v2", "-e", "upgrade_serial=1", "-e",
            yaml.safe_dump({"upgrade_state_file": str(state),
                            "image_rollout_render_roles": [{"name": r} for r in render_roles],
                            # the head cannot watch this machine boot (no SSH port on
                            # the lab's addresses, no boot files served): Ansible's own
                            # connection instead (the lab watches for real)
                            "image_rollout_boot_watch": False, "image_rollout_boot_timeout": 60,
                            "rocm_verify_gpus": False,
                            # this machine runs no Slurm (the lab drains for real)
                            "image_rollout_drain": False,
                            "image_versions_lease_file": str(state.parent / "rollout.lease")},
                           default_flow_style=True).strip(),
            *extra]
    env = dict(os.environ, JUNKYARD_LAB_BMC_PASSWORD=SimOptions().password,
               ANSIBLE_NOCOLOR="1", ANSIBLE_CALLBACK_RESULT_FORMAT="json",
               ANSIBLE_CONFIG=str(REPO / "ansible.cfg"))
    if roles_path:
        env["ANSIBLE_ROLES_PATH"] = f"{roles_path}:{REPO / 'roles'}"
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
                          check=False)


def powered(marker, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    return marker.read_text().split() if marker.exists() else []


def test_rollout_power_cycles_verifies_and_promotes(cluster, tmp_path):
    inventory, state, markers, _unused = cluster
    roles, record = probe_role(tmp_path)
    # This machine never booted an image: the booted-version check is what the
    # failure test exercises; here it is off.
    proc = upgrade(inventory, state, "-e", "rocm_verify_boot_image=",
                   render_roles=["jy_model_probe"], roles_path=roles)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-5000:]
    # The model read the state each wave wrote: the canary alone first, then both.
    assert record.read_text().splitlines() == [
        "node01: junkyard.image=bookworm/v2 junkyard.image=bookworm/v1",
        "node02: junkyard.image=bookworm/v2 junkyard.image=bookworm/v2"]
    assert "canary: node01 v1 -> v2" in out and "wave 1: node02 v1 -> v2" in out
    assert powered(markers["node01"]) == ["on"]
    assert powered(markers["node02"]) == ["on"]
    assert "GPU checks skipped (rocm_verify_gpus is false)" in out
    final = yaml.safe_load(state.read_text())
    assert final["images"]["bookworm"]["current"] == "v2"
    assert final["images"]["bookworm"]["previous"] == "v1"
    assert final["nodes"] == {}
    assert "bookworm: current version is now v2; moved and verified: node01, node02" in out
    # the one writer keeps the state it replaced: both nodes moved, v1 still current
    before = yaml.safe_load(state.with_name(state.name + ".prev").read_text())
    assert before["nodes"] == {"node01": "v2", "node02": "v2"}
    assert before["images"]["bookworm"]["current"] == "v1"
    assert "image-state.yml.prev" in state.read_text().splitlines()[2]
    # the run's lease on the head was taken by the plan and released at the end
    assert "Take the rollout lease" in out and "released" in out
    assert not state.with_name("rollout.lease").exists()


def test_a_failed_canary_is_reverted_and_stops_the_rollout(cluster):
    """The canary fails its verify (this machine did not boot junkyard.image=bookworm/v2): it
    is switched back to v1 and power-cycled again, automatically; it fails there too (this
    machine did not boot v1 either), so it is left out; the second BMC never gets a command,
    nothing is promoted, and the state records the revert."""
    inventory, state, markers, _unused = cluster
    proc = upgrade(inventory, state)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "expected junkyard.image=bookworm/v2" in out
    assert "expected junkyard.image=bookworm/v1" in out
    assert "reverting automatically: node01 v2 -> v1" in out, out[-5000:]
    assert "it was reverted automatically to v1 but did not pass there either" in out
    assert powered(markers["node01"]) == ["on", "on"]  # the move, then the revert
    assert powered(markers["node02"], timeout=2) == []  # its BMC never got a command
    final = yaml.safe_load(state.read_text())
    assert final["images"]["bookworm"]["current"] == "v1"
    assert final["nodes"] == {}
    revert = final["reverted"]["node01"]
    assert (revert["image"], revert["version"], revert["to"]) == ("bookworm", "v2", "v1")
    assert "expected junkyard.image=bookworm/v2" in revert["reason"], revert
    assert "current version is now" not in out
    # the step before the revert: the canary's move
    assert yaml.safe_load(state.with_name(state.name + ".prev").read_text())["nodes"] == {
        "node01": "v2"}
    # the failed run gave the lease back: the operator's re-run is not refused
    assert "the rollout lease was released" in out
    assert not state.with_name("rollout.lease").exists()


def test_a_canary_failing_its_checks_is_back_on_its_old_version(cluster, tmp_path):
    """A site check fails on the canary's first run only (on v2) and passes after its revert
    (on v1): the canary is back on v1, passed its checks there; the rollout stops there."""
    inventory, state, markers, _unused = cluster
    flag = tmp_path / "checked-once"
    check = yaml.safe_dump({"rocm_verify_commands": [
        f"test -e {flag} || {{ touch {flag}; echo first run fails; exit 1; }}"]},
        default_flow_style=True).strip()
    proc = upgrade(inventory, state, "-e", "rocm_verify_boot_image=", "-e", check)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-5000:]
    assert "first run fails" in out
    assert ("it was reverted automatically to v1, booted it again, passed its checks there "
            "and is back in Slurm") in out, out[-5000:]
    assert powered(markers["node01"]) == ["on", "on"]
    assert powered(markers["node02"], timeout=2) == []
    final = yaml.safe_load(state.read_text())
    assert final["nodes"] == {} and final["images"]["bookworm"]["current"] == "v1"
    assert final["reverted"]["node01"]["version"] == "v2"
    assert "first run fails" in final["reverted"]["node01"]["reason"]


def test_a_rerun_verifies_the_stopped_canary_again_before_moving_on(cluster):
    """Without the revert (image_rollout_revert false) the canary that fails a site check stays
    on v2; running again with the check still failing stops before anyone else moves (the
    canary is not power-cycled again); once it passes, the canary is verified again in place,
    the next wave moves and the version is promoted."""
    inventory, state, markers, _unused = cluster
    check = ('{"rocm_verify_commands": ["true", "test -e /nonexistent/junkyard-check"], '
             '"image_rollout_revert": false}')
    for attempt in range(2):
        proc = upgrade(inventory, state, "-e", "rocm_verify_boot_image=", "-e", check)
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0, out[-5000:]
        assert ("node01: site checks failed (rocm_verify_commands): "
                "[test -e /nonexistent/junkyard-check] exited 1") in out
        assert ("verify again first (already on v2, no reboot): node01" in out) == (attempt == 1)
        assert powered(markers["node01"]) == ["on"]  # cycled once, by the first run
        assert powered(markers["node02"], timeout=2) == []
        assert yaml.safe_load(state.read_text())["nodes"] == {"node01": "v2"}
    proc = upgrade(inventory, state, "-e", "rocm_verify_boot_image=", "-e",
                   "image_rollout_revert=false")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-5000:]
    assert "canary:" not in out and "wave 1: node02 v1 -> v2" in out
    assert powered(markers["node01"]) == ["on"]
    assert powered(markers["node02"]) == ["on"]
    final = yaml.safe_load(state.read_text())
    assert final["images"]["bookworm"]["current"] == "v2" and final["nodes"] == {}
    assert "current version is now v2; moved and verified: node01, node02" in out


def rollback(inventory, state, *extra):
    argv = ["ansible-playbook", "-i", str(inventory), str(REPO / "playbooks" / "rollback.yml"),
            "-e", "upgrade_serial=2", "-e",
            yaml.safe_dump({"upgrade_state_file": str(state), "image_rollout_render_roles": [],
                            # the head cannot watch this machine boot (no SSH port on
                            # the lab's addresses, no boot files served): Ansible's own
                            # connection instead (the lab watches for real)
                            "image_rollout_boot_watch": False, "image_rollout_boot_timeout": 60,
                            "rocm_verify_gpus": False, "rocm_verify_boot_image": "",
                            "image_rollout_drain": False,
                            "image_versions_lease_file": str(state.parent / "rollout.lease")},
                           default_flow_style=True).strip(), *extra]
    env = dict(os.environ, JUNKYARD_LAB_BMC_PASSWORD=SimOptions().password,
               ANSIBLE_NOCOLOR="1", ANSIBLE_CALLBACK_RESULT_FORMAT="json",
               ANSIBLE_CONFIG=str(REPO / "ansible.cfg"))
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
                          check=False)


def test_rollback_after_a_promotion_demotes(cluster):
    inventory, state, markers, _unused = cluster
    assert upgrade(inventory, state, "-e", "rocm_verify_boot_image=").returncode == 0
    proc = rollback(inventory, state)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-5000:]
    assert "wave 1: node01 v2 -> v1, node02 v2 -> v1" in out
    final = yaml.safe_load(state.read_text())
    assert final["images"]["bookworm"]["current"] == "v1"
    assert "previous" not in final["images"]["bookworm"]
    assert final["nodes"] == {}
    assert set(final["images"]["bookworm"]["versions"]) == {"v1", "v2"}  # nothing destroyed
    # off and on again through each BMC, once per move: the stand-in started twice
    assert {n: m.read_text().split() for n, m in markers.items()} == {
        "node01": ["on", "on"], "node02": ["on", "on"]}
