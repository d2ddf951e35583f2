"""The node's Slurm health check (roles/slurm_node's junkyard-slurm-health), run
as slurmd runs it: the real program as a subprocess, on a node's files copied
into a tree (sysfs, procfs, /dev, /run), with a fake scontrol that records what
it is asked and answers `show node` like Slurm 22.05's.  Each condition drains
the node with a reason naming what and how much; a healthy node is left alone;
a node already drained (by an operator or by an earlier run) or set down by an
operator is never changed; nothing ever resumes a node.  That the real
scontrol does the same against a real slurmctld is the molecule scenario's
(molecule/slurm) and the lab's part."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import jinja2
import pytest
import yaml
from ansible_collections.junkyard.cluster.plugins.filter.slurm import slurm_gres_conf
from ansible_collections.junkyard.cluster.plugins.module_utils.cluster_model import build_model
from jinja2.nativetypes import NativeEnvironment
from junkyard_fan import metrics as fan_metrics

from tests.conftest import REPO
from tests.unit.test_cluster_model import lab_data

ROLE = REPO / "roles" / "slurm_node"
PROGRAM = ROLE / "files" / "usr" / "local" / "sbin" / "junkyard-slurm-health.py"
NODE = "node01"
RENDER = [f"/dev/dri/renderD{128 + i}" for i in range(8)]
DAY = 86400

# What `scontrol show node` prints (Slurm 22.05); State and Reason set per test.
SHOW_NODE = """\
NodeName={node} Arch=x86_64 CoresPerSocket=1
   CPUAlloc=0 CPUTot=1 CPULoad=0.02
   AvailableFeatures=(null)
   ActiveFeatures=(null)
   Gres=gpu:mi100:8
   NodeAddr=10.77.0.11 NodeHostName={node} Version=22.05.8
   OS=Linux 6.1.0-18-amd64 #1 SMP PREEMPT_DYNAMIC Debian 6.1.76-1 (2024-02-01)
   RealMemory=1024 AllocMem=0 FreeMem=731 Sockets=1 Boards=1
   State={state} ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   Partitions=gpu
   BootTime=2026-03-02T09:14:03 SlurmdStartTime=2026-03-02T09:15:11
   LastBusyTime=2026-03-02T09:15:11
   CfgTRES=cpu=1,mem=1G,billing=1
   AllocTRES=
   CapWatts=n/a
   CurrentWatts=0 AveWatts=0
   ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s
{reason}"""

# A fake scontrol: records its arguments (and SLURM_CONF) in calls.jsonl,
# answers `show node` from node.json, and applies `update ... state=drain` to
# node.json as slurmctld would (the reason gets its [user@time]).
FAKE_SCONTROL = """\
#!{python}
import json, os, sys
d = {directory!r}
args = sys.argv[1:]
with open(os.path.join(d, "calls.jsonl"), "a") as f:
    f.write(json.dumps({{"args": args, "SLURM_CONF": os.environ.get("SLURM_CONF")}}) + "\\n")
with open(os.path.join(d, "node.json")) as f:
    node = json.load(f)
if node.get("fail"):
    sys.stderr.write("slurm_load_node error: Unable to contact slurm controller\\n")
    sys.exit(1)
if args[:2] == ["show", "node"]:
    reason = f"   Reason={{node['reason']}}\\n" if node.get("reason") else ""
    sys.stdout.write({show!r}.format(node=args[2], state=node["state"], reason=reason))
    sys.exit(0)
if args[:1] == ["update"] and "state=drain" in args:
    text = next(a for a in args if a.startswith("reason="))[len("reason="):]
    node["state"] = node["state"].split("+")[0] + "+DRAIN"
    node["reason"] = text + " [root@2026-03-02T10:00:00]"
    with open(os.path.join(d, "node.json"), "w") as f:
        json.dump(node, f)
    sys.exit(0)
sys.exit(2)
"""


def _fan_file(states=None, bmc=True, probe=False):
    """The fan daemon's metrics file, written by the daemon's own renderer."""
    states = states or {}
    samples = []
    for zone in ("gpu-left", "gpu-right", "cpu"):
        now = states.get(zone, "ok")
        samples.append(("zone_duty_percent", {"zone": zone}, 100.0 if now != "ok" else 42.0))
        samples += [("zone_state", {"zone": zone, "state": s}, 1.0 if s == now else 0.0)
                    for s in ("ok", "hold", "failsafe", "override", "bmc_lost", "bmc_control")]
    samples += [("bmc_reachable", {}, 1.0 if bmc else 0.0),
                ("probe_failed", {}, 1.0 if probe else 0.0),
                ("cycles_total", {}, 812.0)]
    return fan_metrics.render(samples)


class Node:
    """A healthy lab node01 in a tree: its GPUs, EDAC, the fan daemon, the
    writable paths, root NFS from the head, and Slurm's view of it (idle)."""

    def __init__(self, root: Path):
        self.root = root
        self.sys, self.proc, self.dev, self.run = (root / d for d in ("sys", "proc", "dev", "run"))
        self.fake = root / "fake"
        self.bin = root / "bin"
        for d in (self.proc, self.fake, self.bin):
            d.mkdir(parents=True)
        self.config = root / "slurm-health.conf"
        self.settings = {
            "mgmt_subnet": "10.77.0.0/24", "ce_per_day_limit": "10",
            "state_dir": str(self.run / "junkyard-slurm-health"),
            "fan_nodes": "node01 node02", "fan_service": "junkyard-fan",
            "fan_metrics": str(self.run / "junkyard-fan/metrics/junkyard_fan.prom"),
            "fan_metrics_max_age": "30", "fan_boot_grace": "120",
            "openrc_dir": str(self.run / "openrc"),
            "gres_conf": str(self.run / "slurmd/conf-cache/gres.conf"),
            "slurm_conf": str(self.run / "slurmd/conf-cache/slurm.conf"),
            "writable_state": str(self.run / "junkyard-writable/mounted"),
            "scontrol": "scontrol", "slurm_user": "slurm",
        }
        self.write_settings()
        # gres.conf as the controller renders it for the lab (slurm_gres_conf)
        model, errors = build_model(lab_data())
        assert errors == []
        self.write("run/slurmd/conf-cache/gres.conf", slurm_gres_conf(model["slurm"]))
        self.write("run/slurmd/conf-cache/slurm.conf", "ClusterName=jylab\n")
        for path in RENDER:
            self.render_node(path)
        for mc in range(2):
            self.edac(mc, ce=0, ue=0)
        self.set_uptime(DAY * 3)
        self.write("proc/mounts",
                   "rootfs / rootfs rw 0 0\n"
                   "10.77.0.1:/tank/images/bookworm/v1 / nfs ro,relatime,vers=3,nolock,"
                   "proto=tcp,addr=10.77.0.1 0 0\n"
                   "10.77.0.1:/tank/nodes/node01/log /var/log nfs rw,addr=10.77.0.1 0 0\n")
        (self.run / "openrc" / "started").mkdir(parents=True)
        (self.run / "openrc" / "started" / "junkyard-fan").symlink_to("/etc/init.d/junkyard-fan")
        self.fan(_fan_file())
        # the initramfs's record, as junkyard-writable.sh writes it (note)
        self.write("run/junkyard-writable/mounted",
                   "/var/log persistent 10.77.0.1:/tank/nodes/node01/log\n"
                   "/var/lib/rasdaemon persistent 10.77.0.1:/tank/nodes/node01/rasdaemon\n"
                   "/tmp tmpfs\n/etc/ssh overlay\n")
        self.slurm("IDLE")
        scontrol = self.bin / "scontrol"
        scontrol.write_text(FAKE_SCONTROL.format(python=sys.executable, directory=str(self.fake),
                                                 show=SHOW_NODE))
        scontrol.chmod(0o755)

    def write(self, rel, text):
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def write_settings(self):
        lines = [f"{k} = {v}\n" for k, v in self.settings.items()]
        self.config.write_text("[health]\n" + "".join(lines))

    def render_node(self, path):
        """A character device for the check: a link to /dev/null."""
        local = self.dev / path[len("/dev/"):]
        local.parent.mkdir(parents=True, exist_ok=True)
        local.symlink_to("/dev/null")

    def edac(self, mc, ce, ue, label=None):
        base = f"sys/devices/system/edac/mc/mc{mc}"
        self.write(f"{base}/mc_name", "F19h_M10h UMC\n")
        self.write(f"{base}/ce_count", f"{ce}\n")
        self.write(f"{base}/ue_count", f"{ue}\n")
        self.write(f"{base}/dimm0/dimm_label", f"{label or f'P0_DIMM_{chr(65 + mc)}1'}\n")
        self.write(f"{base}/dimm0/dimm_ce_count", f"{ce}\n")
        self.write(f"{base}/dimm0/dimm_ue_count", f"{ue}\n")

    def set_uptime(self, seconds):
        self.write("proc/uptime", f"{seconds:.2f} {seconds * 3:.2f}\n")

    def fan(self, text, age=1.0):
        path = Path(self.settings["fan_metrics"])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        then = time.time() - age
        os.utime(path, (then, then))

    def slurm(self, state, reason=None, fail=False):
        (self.fake / "node.json").write_text(json.dumps(
            {"state": state, "reason": reason, "fail": fail}))

    def slurm_state(self):
        return json.loads((self.fake / "node.json").read_text())

    def calls(self):
        path = self.fake / "calls.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines()]

    def check(self, *args, env=None):
        if env is None:
            env = {"SLURMD_NODENAME": NODE,
                   "PATH": f"{self.bin}{os.pathsep}{os.environ['PATH']}"}
        return subprocess.run(
            [sys.executable, str(PROGRAM), "--config", str(self.config), "--sysfs",
             str(self.sys), "--procfs", str(self.proc), "--devfs", str(self.dev), *args],
            env=env, capture_output=True, text=True, timeout=60, check=False)


@pytest.fixture
def node(tmp_path):
    return Node(tmp_path)


def _drained_with(node, proc, reason):
    """The run drained the node once with ``reason``, and did nothing else."""
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert [c["args"] for c in node.calls()] == [
        ["show", "node", NODE],
        ["update", f"nodename={NODE}", "state=drain", f"reason={reason}"]]
    assert f"{NODE}: drained: reason={reason}\n" in proc.stdout
    assert node.slurm_state()["reason"].startswith(reason + " [")


def _never_resumed(node):
    for call in node.calls():
        assert call["args"][0] in ("show", "update"), call
        if call["args"][0] == "update":
            assert "state=drain" in call["args"], call
            assert not any(a.lower().startswith("state=") and a.lower() != "state=drain"
                           for a in call["args"]), call


def test_a_healthy_node_is_left_alone_without_asking_slurm(node):
    proc = node.check()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.endswith(f"{NODE}: healthy\n")
    lines = proc.stdout.splitlines()
    assert lines[1:6] == [
        "  gpu      OK    8 of 8 GPUs (gres.conf): every render node is there",
        "  ecc      OK    2 memory controllers, no uncorrected error, 0 corrected in the last "
        "24 h (limit 10/day per DIMM)",
        "  fan      OK    junkyard-fan regulates 3 fan zones, metrics 1 s old (limit 30 s)",
        "  writable OK    every writable path is mounted as configured",
        "  root     OK    / from NFS server 10.77.0.1 in the management subnet 10.77.0.0/24"]
    assert node.calls() == []


def test_a_missing_gpu_drains_the_node_naming_the_count_and_render_nodes(node):
    (node.dev / "dri" / "renderD130").unlink()
    (node.dev / "dri" / "renderD135").unlink()
    (node.dev / "dri" / "renderD135").write_text("")  # a file, not a device
    proc = node.check()
    _drained_with(node, proc, "junkyard-health: gpu: 6 of 8 GPUs (gres.conf), missing "
                              "/dev/dri/renderD130, /dev/dri/renderD135")
    _never_resumed(node)


def test_gres_conf_lists_and_ranges_and_other_nodes_lines(node):
    node.write("run/slurmd/conf-cache/gres.conf",
               "# hardware profile x\n"
               "NodeName=node[01-02],node07 Name=gpu Type=mi100 File=/dev/dri/renderD[128-129]\n"
               "NodeName=node02 Name=gpu Type=mi100 File=/dev/dri/renderD140\n"
               "Name=gpu File=/dev/dri/renderD141  # every node's\n")
    proc = node.check()
    assert "  gpu      SICK  2 of 3 GPUs (gres.conf), missing /dev/dri/renderD141\n" \
        in proc.stdout
    node.render_node("/dev/dri/renderD141")
    proc = node.check("--node", "node03")  # only the line without NodeName is its
    assert "  gpu      OK    1 of 1 GPUs" in proc.stdout


@pytest.mark.parametrize("text,why", [
    ("# No node has a GPU.\n", "names no GPU of node01"),
    ("NodeName=node02 Name=gpu Type=mi100 File=/dev/dri/renderD128\n", "names no GPU of node01"),
    (None, "(slurmd has not fetched it)"),
])
def test_a_node_without_gpus_in_gres_conf_has_none_to_check(node, text, why):
    path = Path(node.settings["gres_conf"])
    if text is None:
        path.unlink()
    else:
        path.write_text(text)
    for p in RENDER:
        (node.dev / p[len("/dev/"):]).unlink()
    proc = node.check()
    assert proc.returncode == 0, proc.stdout
    assert f"  gpu      SKIP  {f'no {path} ' if text is None else path}" in proc.stdout
    assert why in proc.stdout


def test_an_uncorrected_memory_error_drains_the_node(node):
    node.edac(1, ce=3, ue=2)
    _drained_with(node, node.check(),
                  "junkyard-health: ecc: uncorrected errors: 2 on P0_DIMM_B1 (mc1/dimm0)")


def test_corrected_errors_drain_at_the_limit_in_24_hours(node):
    node.edac(0, ce=5, ue=0)
    assert node.check().returncode == 0  # counted from this first run on (3 days of uptime)
    node.set_uptime(DAY * 3 + 600)
    node.edac(0, ce=14, ue=0)  # 9 in 10 minutes: below 10/day
    proc = node.check()
    assert proc.returncode == 0, proc.stdout
    assert "9 corrected in the last 24 h" in proc.stdout
    node.set_uptime(DAY * 3 + 660)
    node.edac(0, ce=15, ue=0)
    _drained_with(node, node.check(),
                  "junkyard-health: ecc: corrected errors in the last 24 h at or over 10/day: "
                  "10 on P0_DIMM_A1 (mc0/dimm0)")


def test_corrected_errors_older_than_a_day_do_not_count(node):
    node.edac(0, ce=0, ue=0)
    assert node.check().returncode == 0
    node.set_uptime(DAY * 3 + 3600)
    node.edac(0, ce=9, ue=0)
    assert node.check().returncode == 0
    node.set_uptime(DAY * 4 + 7200)  # the 9 are 25 h old
    node.edac(0, ce=18, ue=0)
    proc = node.check()
    assert proc.returncode == 0, proc.stdout
    assert "9 corrected in the last 24 h" in proc.stdout
    assert node.calls() == []


def test_corrected_errors_since_a_recent_boot_all_count(node):
    node.set_uptime(5400)
    node.edac(1, ce=12, ue=0, label="P0_DIMM_B1")
    _drained_with(node, node.check(),
                  "junkyard-health: ecc: corrected errors in the 1.5 h since boot at or over "
                  "10/day: 12 on P0_DIMM_B1 (mc1/dimm0)")


def test_a_node_without_edac_is_not_checked_for_memory_errors(node):
    for path in sorted((node.sys / "devices/system/edac/mc").rglob("*"), reverse=True):
        path.rmdir() if path.is_dir() else path.unlink()
    proc = node.check()
    assert proc.returncode == 0
    assert "  ecc      SKIP  no EDAC memory controller (EDAC not loaded): not checked\n" \
        in proc.stdout


def test_the_fan_daemon_stopped_drains_the_node(node):
    (node.run / "openrc" / "started" / "junkyard-fan").unlink()
    node.fan(_fan_file(), age=20)  # what it wrote before it was stopped
    _drained_with(node, node.check(), "junkyard-health: fan: junkyard-fan is not started (OpenRC)")


def test_stale_fan_metrics_drain_the_node(node):
    node.fan(_fan_file(), age=95)
    proc = node.check()
    reason = node.calls()[-1]["args"][-1]
    assert reason.startswith("reason=junkyard-health: fan: junkyard-fan metrics 9")
    assert reason.endswith(" s old (limit 30 s)")
    age = int(reason.split("metrics ")[1].split(" s")[0])
    assert 95 <= age <= 100
    _drained_with(node, proc, reason[len("reason="):])


def test_missing_fan_metrics_drain_the_node(node):
    Path(node.settings["fan_metrics"]).unlink()
    _drained_with(node, node.check(), "junkyard-health: fan: no metrics from junkyard-fan "
                                      f"({node.settings['fan_metrics']} is missing)")


@pytest.mark.parametrize("states,bmc,probe,what", [
    ({"gpu-left": "failsafe"}, True, False, "zone gpu-left in failsafe"),
    ({"gpu-left": "bmc_lost", "gpu-right": "bmc_lost", "cpu": "bmc_lost"}, False, False,
     "zones cpu, gpu-left, gpu-right in bmc_lost and BMC not answering"),
    ({"gpu-left": "bmc_control", "gpu-right": "bmc_control", "cpu": "bmc_control"}, True, True,
     "zones cpu, gpu-left, gpu-right in bmc_control and fans left to the BMC "
     "(junkyard-fan --probe: the fan command does not move them)"),
])
def test_a_fan_daemon_that_does_not_regulate_drains_the_node(node, states, bmc, probe, what):
    node.fan(_fan_file(states, bmc=bmc, probe=probe))
    _drained_with(node, node.check(), f"junkyard-health: fan: {what}")


def test_zones_that_hold_or_override_still_regulate(node):
    node.fan(_fan_file({"gpu-left": "hold", "cpu": "override"}))
    assert node.check().returncode == 0


def test_the_fan_daemon_has_until_the_boot_grace_to_start(node):
    node.set_uptime(45)
    (node.run / "openrc" / "started" / "junkyard-fan").unlink()
    Path(node.settings["fan_metrics"]).unlink()
    proc = node.check()
    assert proc.returncode == 0, proc.stdout
    assert "  fan      WAIT  junkyard-fan is not started yet, 45 s after boot (grace 120 s)\n" \
        in proc.stdout
    (node.run / "openrc" / "started" / "junkyard-fan").symlink_to("/etc/init.d/junkyard-fan")
    proc = node.check()
    assert "  fan      WAIT  no metrics from junkyard-fan yet, 45 s after boot" in proc.stdout
    assert node.calls() == []


def test_a_fan_daemon_still_starting_is_waited_for_after_the_boot_grace(node):
    # a slow boot: OpenRC is starting junkyard-fan (its start waits for the first
    # metrics) when the boot grace is over; the node is not drained meanwhile
    node.set_uptime(600)
    (node.run / "openrc" / "started" / "junkyard-fan").unlink()
    (node.run / "openrc" / "starting").mkdir()
    (node.run / "openrc" / "starting" / "junkyard-fan").symlink_to("/etc/init.d/junkyard-fan")
    Path(node.settings["fan_metrics"]).unlink()
    proc = node.check()
    assert proc.returncode == 0, proc.stdout
    assert "  fan      WAIT  junkyard-fan is starting, 600 s after boot\n" in proc.stdout
    assert node.calls() == []


def test_a_node_whose_profile_has_no_fan_zones_has_no_fan_daemon_to_check(node):
    node.settings["fan_nodes"] = "node02"
    node.write_settings()
    (node.run / "openrc" / "started" / "junkyard-fan").unlink()
    Path(node.settings["fan_metrics"]).unlink()
    proc = node.check()
    assert proc.returncode == 0, proc.stdout
    assert "  fan      SKIP  the hardware profile of node01 has no fan zones" in proc.stdout


def test_a_writable_path_on_its_fallback_drains_the_node(node):
    node.write("run/junkyard-writable/mounted",
               "/var/log persistent 10.77.0.1:/tank/nodes/node01/log\n"
               "/var/lib/rasdaemon tmpfs-fallback\n/tmp tmpfs\n")
    _drained_with(node, node.check(),
                  "junkyard-health: writable: /var/lib/rasdaemon on its tmpfs fallback")


def test_a_root_not_from_the_management_network_drains_the_node(node):
    node.write("proc/mounts",
               "rootfs / rootfs rw 0 0\n"
               "10.78.0.1:/tank/images/bookworm/v1 / nfs ro,vers=3,addr=10.78.0.1 0 0\n")
    _drained_with(node, node.check(), "junkyard-health: root: / from NFS server 10.78.0.1, "
                                      "outside the management subnet 10.77.0.0/24")


def test_a_root_that_is_not_nfs_is_not_checked(node):
    node.write("proc/mounts", "overlay / overlay rw,lowerdir=/a,upperdir=/b,workdir=/c 0 0\n")
    proc = node.check()
    assert proc.returncode == 0
    assert "  root     SKIP  / is overlay, not NFS: not checked\n" in proc.stdout


def test_every_problem_is_in_one_reason(node):
    (node.dev / "dri" / "renderD128").unlink()
    node.fan(_fan_file({"cpu": "failsafe"}))
    node.write("run/junkyard-writable/mounted", "/var/log tmpfs-fallback\n")
    _drained_with(node, node.check(),
                  "junkyard-health: gpu: 7 of 8 GPUs (gres.conf), missing /dev/dri/renderD128; "
                  "fan: zone cpu in failsafe; writable: /var/log on its tmpfs fallback")


@pytest.mark.parametrize("state,reason,why", [
    ("IDLE+DRAIN", "maintenance: DIMM swap [root@2026-03-01T08:00:00]",
     "drained or draining already"),
    ("MIXED+DRAIN", "maintenance [alice@2026-03-01T08:00:00]", "drained or draining already"),
    ("DOWN+DRAIN", "junkyard-health: gpu: 7 of 8 GPUs [root@2026-03-01T08:00:00]",
     "drained or draining already"),
    ("IDLE+FAIL", "PSU [root@2026-03-01T08:00:00]", "drained or draining already"),
    ("DOWN", "cabling [root@2026-03-01T08:00:00]", "down by an operator"),
])
def test_a_node_an_operator_or_an_earlier_run_took_out_is_left_as_it_is(node, state, reason, why):
    node.write("run/junkyard-writable/mounted", "/var/log tmpfs-fallback\n")
    node.slurm(state, reason)
    proc = node.check()
    assert proc.returncode == 1
    assert [c["args"] for c in node.calls()] == [["show", "node", NODE]]
    assert f"{NODE}: not healthy, left as it is: {why} (State={state} Reason={reason})\n" \
        in proc.stdout
    assert node.slurm_state() == {"state": state, "reason": reason, "fail": False}


def test_a_node_slurmctld_set_down_is_drained(node):
    node.write("run/junkyard-writable/mounted", "/var/log tmpfs-fallback\n")
    node.slurm("DOWN+NOT_RESPONDING", "Not responding [slurm@2026-03-02T09:10:00]")
    _drained_with(node, node.check(),
                  "junkyard-health: writable: /var/log on its tmpfs fallback")
    assert node.slurm_state()["state"] == "DOWN+DRAIN"


def test_its_own_drain_stays_and_a_fixed_node_is_never_resumed(node):
    node.write("run/junkyard-writable/mounted", "/var/log tmpfs-fallback\n")
    first = "junkyard-health: writable: /var/log on its tmpfs fallback"
    _drained_with(node, node.check(), first)
    # a second problem: the first reason stays
    (node.dev / "dri" / "renderD129").unlink()
    proc = node.check()
    assert proc.returncode == 1
    assert "left as it is: drained or draining already" in proc.stdout
    # fixed: healthy, and still drained until an operator resumes it
    node.write("run/junkyard-writable/mounted", "/var/log persistent 10.77.0.1:/x\n")
    node.render_node("/dev/dri/renderD129")
    proc = node.check()
    assert proc.returncode == 0
    assert node.slurm_state()["state"] == "IDLE+DRAIN"
    assert node.slurm_state()["reason"].startswith(first)
    assert len(node.calls()) == 3
    _never_resumed(node)


def test_when_slurm_does_not_answer_nothing_is_drained(node):
    node.write("run/junkyard-writable/mounted", "/var/log tmpfs-fallback\n")
    node.slurm("IDLE", fail=True)
    proc = node.check()
    assert proc.returncode == 1
    assert f"{NODE}: not healthy, not drained: scontrol show node {NODE} failed (rc 1): " \
        "slurm_load_node error: Unable to contact slurm controller\n" in proc.stdout
    assert [c["args"][0] for c in node.calls()] == ["show"]


def test_with_slurmds_environment_scontrol_gets_the_fetched_configuration(node):
    """slurmd runs the program with SLURMD_NODENAME as its whole environment."""
    node.settings["scontrol"] = str(node.bin / "scontrol")
    node.write_settings()
    node.write("run/junkyard-writable/mounted", "/var/log tmpfs-fallback\n")
    proc = node.check(env={"SLURMD_NODENAME": NODE})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert [c["SLURM_CONF"] for c in node.calls()] == [node.settings["slurm_conf"]] * 2
    assert node.calls()[1]["args"][1] == f"nodename={NODE}"


def test_a_dry_run_changes_nothing(node):
    node.write("run/junkyard-writable/mounted", "/var/log tmpfs-fallback\n")
    proc = node.check("--dry-run")
    assert proc.returncode == 1
    assert f"{NODE}: not healthy, would drain: reason=junkyard-health: writable: " in proc.stdout
    assert [c["args"][0] for c in node.calls()] == ["show"]
    assert not Path(node.settings["state_dir"]).exists()


@pytest.mark.parametrize("change,msg", [
    (("mgmt_subnet", None), "[health] lacks mgmt_subnet"),
    (("mgmt_subnet", "10.77.0/24"),
     "mgmt_subnet '10.77.0/24' is not a network address with prefix (e.g. 10.20.0.0/24)"),
    (("ce_per_day_limit", "0"), "ce_per_day_limit '0' must be a number > 0"),
    (("fan_metrics_max_age", "soon"), "fan_metrics_max_age 'soon' must be a number > 0"),
    (("fan_boot_grace", "-1"), "fan_boot_grace '-1' must be a number >= 0"),
    (("gres_conf", "gres.conf"), "gres_conf 'gres.conf' is not an absolute path"),
])
def test_unusable_settings_stop_the_check(node, change, msg):
    key, value = change
    if value is None:
        del node.settings[key]
    else:
        node.settings[key] = value
    node.write_settings()
    for args in ((), ("--check-config",)):
        proc = node.check(*args)
        assert proc.returncode == 2
        assert proc.stderr == f"junkyard-slurm-health: {node.config}: {msg}\n"
    assert node.calls() == []


def _render_role(model):
    """The role's defaults, vars and settings template, rendered as Ansible
    would for the lab's model (ansible_managed as a comment)."""
    native = NativeEnvironment()
    values = {"cluster_model": model}
    for rel in ("defaults/main.yml", "vars/main.yml"):
        for key, value in yaml.safe_load((ROLE / rel).read_text()).items():
            values[key] = native.from_string(value).render(values) \
                if isinstance(value, str) and "{{" in value else value
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters["comment"] = lambda text: f"#\n# {text}\n#"
    template = ROLE / "templates" / "etc" / "junkyard" / "slurm-health.conf.j2"
    return values, env.from_string(template.read_text()).render(
        values, ansible_managed="Ansible managed")


def test_the_roles_settings_for_the_lab_are_what_the_program_reads(tmp_path):
    model, errors = build_model(lab_data())
    assert errors == []
    values, text = _render_role(model)
    assert values["slurm_node_health_program"] == "/usr/local/sbin/junkyard-slurm-health"
    assert values["slurm_node_health_config"] == "/etc/junkyard/slurm-health.conf"
    config = tmp_path / "slurm-health.conf"
    config.write_text(text)
    proc = subprocess.run([sys.executable, str(PROGRAM), "--check-config", "--config",
                           str(config)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    settings = dict(line.split(" = ", 1) for line in text.splitlines() if " = " in line)
    assert settings == {
        "mgmt_subnet": "10.77.0.0/24", "ce_per_day_limit": "10",
        "state_dir": "/run/junkyard-slurm-health", "fan_nodes": "node01 node02",
        "fan_service": "junkyard-fan",
        "fan_metrics": "/run/junkyard/metrics/junkyard_fan.prom",
        "fan_metrics_max_age": "30", "fan_boot_grace": "120", "openrc_dir": "/run/openrc",
        "gres_conf": "/run/slurmd/conf-cache/gres.conf",
        "slurm_conf": "/run/slurmd/conf-cache/slurm.conf",
        "writable_state": "/run/junkyard-writable/mounted", "scontrol": "/usr/bin/scontrol",
        "slurm_user": "slurm"}
