"""Issue 8, "health": the health report against the booted lab nodes, one of them
powered off through its BMC (runs after test_site.py: the nodes are up; right after
test_monitoring.py, whose last test powered node02 off already)."""

from __future__ import annotations

import json

import pytest
from labtools import lab_cli

pytestmark = pytest.mark.lab


def test_health_report_lists_every_node_and_the_one_powered_off(lab, site, lab_log, tmp_path):
    off = lab.cfg.node("node02")
    # test_monitoring.py's node-down test leaves node02 off just before this one
    if lab.qemu_pid(off) is not None:
        assert lab.ipmitool(off, "chassis", "power", "off").returncode == 0
    lab.wait_qemu(off, running=False, timeout=60)
    try:
        res = lab_cli("run", "playbooks/health_report.yml", "-e",
                      json.dumps({"health_report_dir": str(tmp_path)}),
                      log=lab_log, timeout=1800)
        assert res.returncode == 0, res.stdout[-5000:]
        [report_dir] = list(tmp_path.iterdir())
        report = json.loads((report_dir / "health.json").read_text())
        markdown = (report_dir / "health.md").read_text()
    finally:
        # powered on again (the last lab test: nothing waits for its boot)
        assert lab.ipmitool(off, "chassis", "power", "on").returncode == 0
    nodes = {n["name"]: n for n in report["nodes"]}
    assert set(nodes) == {"node01", "node02"}, nodes
    assert report["unreachable"] == ["node02"]
    assert nodes["node02"]["status"] == "unreachable" and not nodes["node02"]["reachable"]
    up = nodes["node01"]
    assert up["reachable"] and up["status"] != "unreachable", up
    assert up["image"]["booted"] == "bookworm/v1", up["image"]
    assert up["uptime_s"] > 0
    paths = {m["path"]: m for m in up["mounts"]}
    for path in ("/", "/var/log", "/var/lib/rasdaemon", "/data/scratch"):
        assert paths[path]["mounted"] and paths[path]["responsive"], paths.get(path)
    assert not [f for f in up["flags"] if f["what"] in ("nfs", "image")], up["flags"]
    assert "node02" in markdown and "unreachable" in markdown
