"""playbooks/health_report.yml (the role health_report) through ansible-runner
against two nodes: this machine over a local connection (its fan metrics,
rasdaemon database and EDAC tree are fixtures in tmp_path) and a node at
127.0.0.1 on a closed SSH port.  The report must list the second one as
unreachable, never as healthy, and still report the first one; the settings
work under their health_report_* names and under the deprecated health_* ones.

The lab test (real node VMs booted from the head) comes later: it needs the
node image with rasdaemon and the fan daemon, and a node VM booted over NFS.
"""

from __future__ import annotations

import copy
import json
import shutil
import socket
import sys
import time

import ansible_runner
import pytest
import yaml
from junkyard_fan import metrics as fan_metrics
from rasdaemon_fixtures import DAY, HOUR, create_db, edac_tree, mc_event, umc_mce

from tests.conftest import REPO
from tests.inventory_files import LAB, group_vars, hosts


def closed_port():
    """A loopback port nothing listens on (bound, then released)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def inventory(tmp_path):
    """The lab inventory's model (its cluster_* variables, node_image, node_bmc_defaults
    and hosts), node01 played by this machine, node02 behind a closed SSH port."""
    cluster = {k: v for k, v in group_vars(LAB, "all").items() if k.startswith("cluster_")}
    # DIMM_P0_C0: in neither EDAC nor the database, listed from the model
    cluster["cluster_hardware_profiles"]["g292-z20"]["memory"]["dimm_labels"] = [
        "DIMM_P0_A0", "DIMM_P0_B0", "DIMM_P0_C0"]
    node_group = {k: v for k, v in group_vars(LAB, "gpu_nodes").items()
                  if k in ("node_image", "node_bmc_defaults")}
    lab_head, lab_nodes = hosts(LAB)
    nodes = copy.deepcopy(lab_nodes)
    nodes["node01"].update(ansible_connection="local",
                           ansible_python_interpreter=sys.executable)
    nodes["node02"].update(ansible_connection="ssh", ansible_host="127.0.0.1",
                           ansible_port=closed_port(), ansible_user="root",
                           ansible_ssh_common_args="-o StrictHostKeyChecking=no "
                                                   "-o UserKnownHostsFile=/dev/null")
    inventory = {"all": {"children": {
        "storage_head": {"hosts": {"head": {
            "ansible_connection": "local", "head_interfaces": lab_head["head_interfaces"]}}},
        "gpu_nodes": {"hosts": nodes},
    }}}
    d = tmp_path / "inventory"
    (d / "group_vars" / "all").mkdir(parents=True)
    (d / "hosts.yml").write_text(yaml.safe_dump(inventory, sort_keys=False))
    (d / "group_vars" / "all" / "cluster.yml").write_text(yaml.safe_dump(cluster))
    (d / "group_vars" / "gpu_nodes.yml").write_text(yaml.safe_dump(node_group))
    return d


def node_fixtures(tmp_path, names="deprecated"):
    """The node's state as fixtures, the settings under their current names or their
    deprecated ones (health_<name> for health_report_<name>)."""
    settings = _node_fixtures(tmp_path)
    if names == "current":
        settings = {k.replace("health_", "health_report_", 1): v for k, v in settings.items()}
    return settings


def _node_fixtures(tmp_path):
    fan = tmp_path / "fan.prom"
    fan.write_text(fan_metrics.render([
        ("sensor_reading", {"sensor": "GPU0_TEMP", "role": "gpu_temp"}, 97.0),
        ("zone_duty_percent", {"zone": "gpu-front"}, 100.0),
        ("psu_failed", {"psu": "1"}, 0.0), ("psu_failed", {"psu": "2"}, 0.0),
        ("bmc_reachable", {}, 1.0)]))
    # the playbook judges ages against the node's real clock: events relative to now
    now = time.time()
    db = create_db(tmp_path / "ras-mc_event.db", mc_events=[
        mc_event(2 * HOUR, "DIMM_P0_B0", count=12, now=now),
        mc_event(3 * DAY, "DIMM_P0_B0", count=4, now=now)],
        mce_records=[umc_mce(HOUR, channel=6, now=now)])
    edac = edac_tree(tmp_path / "edac", [(0, 0, "DIMM_P0_A0", "csrow 0 channel 0", 0, 0),
                                         (1, 0, "DIMM_P0_B0", "csrow 0 channel 0", 12, 0)])
    return {"health_fan_metrics_path": str(fan), "health_rasdaemon_db": str(db),
            "health_edac_root": str(edac), "health_mount_timeout_s": 3}


def run(tmp_path, extravars):
    pdd = tmp_path / "runner"
    pdd.mkdir()
    r = ansible_runner.run(
        private_data_dir=str(pdd),
        playbook=str(REPO / "playbooks" / "health_report.yml"),
        inventory=str(inventory(tmp_path) / "hosts.yml"),
        envvars={"ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
                 "ANSIBLE_TIMEOUT": "5"},
        # the head is never contacted: no image state to read from it
        extravars={"cluster_image_state": {}, **extravars},
        quiet=True,
    )
    out = r.stdout.read()
    shutil.rmtree(pdd / "artifacts", ignore_errors=True)
    return r.rc, out


@pytest.mark.parametrize(("names", "fail_on_flags"), [
    ("current", False), ("current", True), ("deprecated", True)])
def test_report_with_an_unreachable_node(tmp_path, names, fail_on_flags):
    reports = tmp_path / "reports"
    fail = {"current": "health_report_fail_on_flags",
            "deprecated": "health_fail_on_flags"}[names]
    rc, out = run(tmp_path, {**node_fixtures(tmp_path, names),
                             "health_report_dir": str(reports), fail: fail_on_flags})
    written = sorted(reports.glob("*/health.json"))
    assert len(written) == 1, out[-5000:]
    report = json.loads(written[0].read_text())
    nodes = {n["name"]: n for n in report["nodes"]}

    assert set(nodes) == {"node01", "node02"}
    assert nodes["node02"]["status"] == "unreachable", nodes["node02"]
    assert report["unreachable"] == ["node02"]
    assert report["summary"]["unreachable"] == 1

    n1 = nodes["node01"]
    assert n1["reachable"] is True
    mem = {d["label"]: d for d in n1["memory"]}
    assert (mem["DIMM_P0_B0"]["ce_24h"], mem["DIMM_P0_B0"]["ce_7d"],
            mem["DIMM_P0_B0"]["ce_total"]) == (12, 16, 16)
    assert mem["DIMM_P0_B0"]["flagged"] is True
    assert mem["cpu0-umc6"]["ce_24h"] == 1
    # the profile's label without any event or EDAC counter: from cluster_model
    assert mem["DIMM_P0_C0"]["ce_total"] == 0 and mem["DIMM_P0_C0"]["ue_total"] == 0
    assert n1["gpu_temp_c"] == {"GPU0_TEMP": 97.0}
    messages = [f["message"] for f in n1["flags"]]
    assert "GPU0_TEMP at 97 C (limit 95 C)" in messages
    # This machine did not boot a cluster image from NFS: the report says so.
    assert any("booted image is unknown" in m for m in messages)
    assert any(m.startswith("/var/lib/rasdaemon (persistent)") for m in messages)
    assert n1["uptime_s"] > 0
    assert n1["status"] == "fail"

    md = (written[0].parent / "health.md").read_text()
    assert "| node02 | **unreachable** |" in md
    assert "| node01 | DIMM_P0_B0 | 12 | 16 | 16 |" in md
    assert "node02: fail: unreachable" in out
    # a node failed and one is unreachable: the run fails only when asked to
    flat = " ".join(out.split())
    if fail_on_flags:
        assert rc != 0, out[-3000:]
        assert "'fail': 1" in flat and "'unreachable': 1" in flat and "health.md" in flat
    else:
        assert rc == 0, out[-3000:]
    deprecated = "health_edac_root is deprecated: use health_report_edac_root"
    assert (deprecated in flat) == (names == "deprecated"), out[-3000:]


@pytest.mark.parametrize(("extravars", "message"), [
    ({"health_report_nodes": "head"},
     "head: is not a node of the cluster (gpu_nodes: node01, node02)"),
    ({"health_nodes": "node01", "health_gpu_temp_limit_c": 0},
     "node01: health_report_gpu_temp_limit_c 0 must be a number above 0"),
])
def test_a_host_or_limit_the_report_cannot_use_is_refused(tmp_path, extravars, message):
    reports = tmp_path / "reports"
    rc, out = run(tmp_path, {**node_fixtures(tmp_path), "health_report_dir": str(reports),
                             **extravars})
    assert rc != 0
    assert message in " ".join(out.split()), out[-3000:]
    assert not reports.exists()
