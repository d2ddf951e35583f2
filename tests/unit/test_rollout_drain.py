"""rollout_drain: the exact Slurm commands the rollout runs and how it reads their answers
(table-driven, as every module here).  Slurm itself is exercised on the lab
(tests/lab/test_upgrade.py: a job on the moving node, the drain, the skip, the resume)."""

from __future__ import annotations

import io
import json
import time
from contextlib import redirect_stdout

import pytest
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args
from ansible_collections.junkyard.cluster.plugins.module_utils import rollout_lease as rl
from ansible_collections.junkyard.cluster.plugins.module_utils import rollout_slurm as rs
from ansible_collections.junkyard.cluster.plugins.modules import rollout_drain

REASON = "junkyard rollout bookworm/v2 (run r1)"
BUSY = "CONFIGURING,RUNNING,SUSPENDED,COMPLETING,STOPPED,SIGNALING"


def node_line(name, state, reason=None):
    line = (f"NodeName={name} Arch=x86_64 CoresPerSocket=2 CPUAlloc=0 State={state} "
            "ThreadsPerCore=1 Partitions=gpu")
    return line + (f" Reason={reason} [root@2026-12-06T21:40:01]" if reason else "")


class Slurm:
    """The commands the module runs, answered in order; every command must be expected."""

    def __init__(self, script):
        self.script = list(script)
        self.ran = []

    def run_command(self, argv, *args, **kwargs):
        assert self.script, f"unexpected command {argv}"
        expected, rc, out = self.script.pop(0)
        assert argv == expected, (argv, expected)
        self.ran.append(argv)
        return rc, out, "" if rc == 0 else "slurm_update error: Invalid node name specified"


@pytest.fixture
def clock(monkeypatch):
    """Module time: each sleep advances it (no real waiting in these tests)."""
    now = [1000.0]
    monkeypatch.setattr(rollout_drain.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(rollout_drain.time, "sleep", lambda s: now.__setitem__(0, now[0] + s))
    return now


def run(monkeypatch, script, check=False, **args):
    slurm = Slurm(script)
    monkeypatch.setattr(basic.AnsibleModule, "run_command",
                        lambda self, argv, *a, **k: slurm.run_command(argv))
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path",
                        lambda self, name, required=False, opt_dirs=None: f"/usr/bin/{name}")
    out = io.StringIO()
    with patch_module_args({**args, "_ansible_check_mode": check}), redirect_stdout(out), \
            pytest.raises(SystemExit):
        rollout_drain.main()
    assert not slurm.script, f"commands not run: {slurm.script}"
    return json.loads(out.getvalue()), slurm.ran


SHOW = ["/usr/bin/scontrol", "show", "node", "-o"]


def squeue(nodes):
    return ["/usr/bin/squeue", "-h", "-t", BUSY, "-w", nodes, "-o", "%i|%u|%N"]


def test_an_idle_wave_is_drained_and_ready_at_once(monkeypatch, clock):
    res, _unused = run(monkeypatch, [
        (SHOW, 0, node_line("node01", "IDLE") + "\n" + node_line("node02", "MIXED") + "\n"),
        (["/usr/bin/scontrol", "update", "nodename=node02", "state=drain", f"reason={REASON}"],
         0, ""),
        (squeue("node02"), 0, ""),
    ], nodes=["node02"], reason=REASON, timeout=60)
    assert res["changed"] and res["drained"] == ["node02"] and res["ready"] == ["node02"]
    assert res["skipped"] == {} and res["prior"]["node02"]["state"] == "MIXED"


def test_a_job_delays_the_node_until_it_ends(monkeypatch, clock):
    res, _unused = run(monkeypatch, [
        (SHOW, 0, node_line("node02", "ALLOCATED")),
        (["/usr/bin/scontrol", "update", "nodename=node02", "state=drain", f"reason={REASON}"],
         0, ""),
        (squeue("node02"), 0, "41|alice|node02\n"),
        (squeue("node02"), 0, "41|alice|node02\n"),
        (squeue("node02"), 0, ""),
    ], nodes=["node02"], reason=REASON, timeout=60, poll=10)
    assert res["ready"] == ["node02"] and res["skipped"] == {} and res["waited"] == 20


def test_default_policy_skips_a_node_busy_after_the_timeout_and_gives_it_back(
        monkeypatch, clock):
    res, _unused = run(monkeypatch, [
        (SHOW, 0, node_line("node01", "IDLE") + "\n" + node_line("node02", "ALLOCATED")),
        (["/usr/bin/scontrol", "update", "nodename=node01,node02", "state=drain",
          f"reason={REASON}"], 0, ""),
        (squeue("node01,node02"), 0, "41|alice|node[01-02]\n42|bob|node02\n"),
        (squeue("node01,node02"), 0, "42|bob|node02\n"),
        (squeue("node01,node02"), 0, "42|bob|node02\n"),
        # skipped: undrained (the rollout drained it); node01 moves
        (["/usr/bin/scontrol", "update", "nodename=node02", "state=resume"], 0, ""),
    ], nodes=["node01", "node02"], reason=REASON, timeout=15, poll=10)
    assert res["ready"] == ["node01"]
    assert res["skipped"] == {"node02": ["42 (bob)"]} and res["resumed"] == ["node02"]
    assert res["killed"] == {}


def test_an_operators_drain_is_kept_and_never_given_back(monkeypatch, clock):
    operator = "operator: reseat GPU 3"
    res, ran = run(monkeypatch, [
        (SHOW, 0, node_line("node02", "MIXED+DRAIN", operator)),
        (squeue("node02"), 0, "42|bob|node02\n"),
    ], nodes=["node02"], reason=REASON, timeout=0)
    assert not res["changed"] and res["drained"] == []
    assert res["left_drained"] == {"node02": operator}
    assert res["skipped"] == {"node02": ["42 (bob)"]} and res["resumed"] == []
    assert all("state=drain" not in argv and "state=resume" not in argv for argv in ran)
    # and a resume leaves it drained
    res, ran = run(monkeypatch, [(SHOW, 0, node_line("node02", "IDLE+DRAIN", operator))],
                   nodes=["node02"], state="resumed")
    assert res["resumed"] == [] and res["left_drained"] == {"node02": operator}
    assert not res["changed"]


def test_wait_keeps_waiting_and_kill_cancels_only_after_the_timeout(monkeypatch, clock):
    busy = (squeue("node02"), 0, "42|bob|node02\n")
    res, _unused = run(monkeypatch, [
        (SHOW, 0, node_line("node02", "IDLE+DRAIN", REASON)),
        busy, busy, busy, busy, (squeue("node02"), 0, ""),
    ], nodes=["node02"], reason=REASON, timeout=10, poll=5, busy_policy="wait")
    assert res["ready"] == ["node02"] and res["waited"] == 20 and res["killed"] == {}
    res, _unused = run(monkeypatch, [
        (SHOW, 0, node_line("node02", "ALLOCATED")),
        (["/usr/bin/scontrol", "update", "nodename=node02", "state=drain", f"reason={REASON}"],
         0, ""),
        busy, busy,
        (["/usr/bin/scancel", "--nodelist=node02"], 0, ""),
        (squeue("node02"), 0, "42|bob|node02\n"),  # still completing
        (squeue("node02"), 0, ""),
    ], nodes=["node02"], reason=REASON, timeout=5, poll=5, busy_policy="kill")
    assert res["ready"] == ["node02"] and res["killed"] == {"node02": ["42 (bob)"]}


def test_a_failed_verify_relabels_the_rollouts_drain(monkeypatch, clock):
    failed = rs.reason_for("bookworm", "v2", "r1", "verify failed")
    res, _unused = run(monkeypatch, [
        (SHOW, 0, node_line("node01", "IDLE+DRAIN", REASON)),
        (["/usr/bin/scontrol", "update", "nodename=node01", "state=drain", f"reason={failed}"],
         0, ""),
        (squeue("node01"), 0, ""),
    ], nodes=["node01"], reason=failed, timeout=0)
    assert res["changed"] and res["drained"] == [] and res["ready"] == ["node01"]


def test_resume_gives_back_the_nodes_the_rollout_drained(monkeypatch, clock):
    res, _unused = run(monkeypatch, [
        (SHOW, 0, node_line("node01", "IDLE+DRAIN", REASON) + "\n"
         + node_line("node02", "IDLE")),
        (["/usr/bin/scontrol", "update", "nodename=node01", "state=resume"], 0, ""),
    ], nodes=["node01", "node02"], state="resumed")
    assert res["changed"] and res["resumed"] == ["node01"]


def test_check_mode_reports_the_busy_nodes_and_changes_nothing(monkeypatch, clock):
    res, ran = run(monkeypatch, [
        (SHOW, 0, node_line("node01", "IDLE") + "\n" + node_line("node02", "ALLOCATED")),
        (squeue("node01,node02"), 0, "42|bob|node02\n"),
    ], check=True, nodes=["node01", "node02"], reason=REASON)
    assert res["changed"] and res["drained"] == ["node01", "node02"]
    assert res["busy"] == {"node02": ["42 (bob)"]} and res["ready"] == ["node01"]
    assert len(ran) == 2  # no update, no wait


def test_an_unknown_node_and_a_failing_command_are_named(monkeypatch, clock):
    res, _unused = run(monkeypatch, [(SHOW, 0, node_line("node01", "IDLE"))],
                       nodes=["node01", "gpu07"], reason=REASON)
    assert res["failed"] and "nodes gpu07 are not Slurm nodes of this controller" in res["msg"]
    res, _unused = run(monkeypatch, [
        (SHOW, 0, node_line("node01", "IDLE")),
        (["/usr/bin/scontrol", "update", "nodename=node01", "state=drain", f"reason={REASON}"],
         1, ""),
    ], nodes=["node01"], reason=REASON)
    assert res["failed"] and "draining the nodes failed (exit 1)" in res["msg"]
    assert "Invalid node name" in res["msg"]
    res, _unused = run(monkeypatch, [], nodes=["node01"], reason="maintenance")
    assert res["failed"] and "must start with 'junkyard rollout '" in res["msg"]


def test_the_lease_is_renewed_while_waiting_and_a_lost_lease_stops(monkeypatch, clock,
                                                                   tmp_path):
    lease = str(tmp_path / "rollout.lease")
    rl.acquire(lease, "alice@ops1", "r1", "bookworm", "v2", 60, now=0)  # long expired
    busy = (squeue("node02"), 0, "42|bob|node02\n")
    res, _unused = run(monkeypatch, [
        (SHOW, 0, node_line("node02", "IDLE+DRAIN", REASON)), busy,
        (squeue("node02"), 0, ""),
    ], nodes=["node02"], reason=REASON, lease={"path": lease, "run_id": "r1", "ttl": 600})
    assert res["ready"] == ["node02"]
    assert rl.live(rl.read(lease), now=time.time() + 500)
    rl.release(lease, "r1")
    rl.acquire(lease, "bob@ops2", "r2", "bookworm", "v3", 600)
    res, _unused = run(monkeypatch, [
        (SHOW, 0, node_line("node02", "IDLE+DRAIN", REASON)), busy,
    ], nodes=["node02"], reason=REASON, lease={"path": lease, "run_id": "r1", "ttl": 600})
    assert res["failed"] and "held by run r2 of bob@ops2" in res["msg"]


@pytest.mark.parametrize(("expr", "names"), [
    ("node02", ["node02"]),
    ("node[01-03,07]", ["node01", "node02", "node03", "node07"]),
    ("gpu[8-10],head", ["gpu8", "gpu9", "gpu10", "head"]),
    ("", []),
])
def test_host_lists(expr, names):
    assert rs.expand_hostlist(expr) == names


def test_node_lines_with_a_spaced_reason_and_flags():
    infos = rs.parse_nodes(node_line("node01", "IDLE+DRAIN*", "operator: reseat GPU 3")
                           + "\n" + node_line("node02", "DOWN*+NOT_RESPONDING"))
    assert infos["node01"] == {"state": "IDLE", "flags": ["DRAIN"],
                               "reason": "operator: reseat GPU 3"}
    assert rs.drained(infos["node01"]) and not rs.ours(infos["node01"])
    assert infos["node02"] == {"state": "DOWN", "flags": ["NOT_RESPONDING"], "reason": ""}
    commented = rs.parse_nodes(node_line("node03", "IDLE+DRAIN", "a [b] c")
                               + " Comment=rack 4 Extra=x")
    assert commented["node03"]["reason"] == "a [b] c"
    assert not rs.drained(infos["node02"])
