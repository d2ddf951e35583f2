"""rollout_lease: one rollout at a time, on the real file system (the lease file, its
flock, the rename), with processes racing for it the way two ansible-playbook runs would."""

from __future__ import annotations

import io
import json
import multiprocessing
import time
from contextlib import redirect_stdout

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.junkyard.cluster.plugins.module_utils import rollout_lease as rl
from ansible_collections.junkyard.cluster.plugins.modules import rollout_lease


def run(args, check=False):
    out = io.StringIO()
    with patch_module_args({**args, "_ansible_check_mode": check, "_ansible_diff": True}), \
            redirect_stdout(out), pytest.raises(SystemExit):
        rollout_lease.main()
    return json.loads(out.getvalue())


def take(path, run_id, owner="alice@ops1", version="v2", ttl=600, check=False):
    return run({"path": str(path), "run_id": run_id, "owner": owner, "image": "bookworm",
                "version": version, "ttl": ttl}, check=check)


def test_a_second_run_is_refused_naming_the_first(tmp_path):
    path = tmp_path / "junkyard" / "rollout.lease"  # the directory is made
    first = take(path, "run-1")
    assert first["changed"] and first["lease"]["run_id"] == "run-1"
    on_disk = json.loads(path.read_text())
    assert on_disk["owner"] == "alice@ops1" and on_disk["version"] == "v2"
    assert 590 < on_disk["expires"] - time.time() <= 600
    second = take(path, "run-2", owner="bob@ops2", version="v3")
    assert second.get("failed"), second
    msg = second["msg"]
    assert f"another rollout holds {path}: run run-1 by alice@ops1 (bookworm -> v2)" in msg
    assert f"started {rl.iso(on_disk['started'])}" in msg
    assert f"expires {rl.iso(on_disk['expires'])}" in msg
    # the refused run changed nothing
    assert json.loads(path.read_text()) == on_disk


def test_check_mode_refuses_too_and_writes_nothing(tmp_path):
    path = tmp_path / "junkyard" / "rollout.lease"
    would = take(path, "run-1", check=True)
    assert would["changed"] and would["lease"]["run_id"] == "run-1"
    assert not path.parent.exists()  # not even the directory or the lock file
    take(path, "run-1")
    refused = take(path, "run-2", check=True)
    assert refused.get("failed") and "run run-1 by alice@ops1" in refused["msg"]


def test_an_expired_lease_counts_as_released(tmp_path):
    path = tmp_path / "rollout.lease"
    take(path, "dead-run", owner="carol@ops3", ttl=1)
    dead = json.loads(path.read_text())
    dead["expires"] = time.time() - 5  # the run died and stopped renewing
    path.write_text(json.dumps(dead))
    got = take(path, "run-2")
    assert got["changed"] and got["lease"]["run_id"] == "run-2"
    assert got["replaced"]["run_id"] == "dead-run"
    assert "took over the expired lease of run dead-run by carol@ops3" in got["message"]


def test_renew_release_and_a_lost_lease(tmp_path):
    path = tmp_path / "rollout.lease"
    first = take(path, "run-1", ttl=100)
    renewed = run({"path": str(path), "run_id": "run-1", "state": "renewed", "ttl": 900,
                   "nodes": ["node02"]})
    assert renewed["lease"]["expires"] > first["lease"]["expires"] + 700
    assert renewed["lease"]["started"] == first["lease"]["started"]
    assert json.loads(path.read_text())["nodes"] == ["node02"]
    # another run cannot renew or release it
    foreign = run({"path": str(path), "run_id": "run-2", "state": "renewed"})
    assert foreign.get("failed") and "held by run run-1 of alice@ops1" in foreign["msg"]
    left = run({"path": str(path), "run_id": "run-2", "state": "released"})
    assert not left["changed"] and path.exists() and "not held by run run-2" in left["message"]
    # check mode releases nothing; the holder's release removes the file
    assert run({"path": str(path), "run_id": "run-1", "state": "released"}, check=True)[
        "changed"] and path.exists()
    gone = run({"path": str(path), "run_id": "run-1", "state": "released"})
    assert gone["changed"] and not path.exists()
    assert gone["diff"]["after"] == {}
    # renewing a lease that is gone stops the run
    lost = run({"path": str(path), "run_id": "run-1", "state": "renewed"})
    assert lost.get("failed") and "is gone" in lost["msg"]
    # releasing again is no change
    assert not run({"path": str(path), "run_id": "run-1", "state": "released"})["changed"]


def test_a_file_that_is_not_a_lease_is_never_overwritten(tmp_path):
    path = tmp_path / "rollout.lease"
    path.write_text("somebody's notes\n")
    res = take(path, "run-1")
    assert res.get("failed") and "is not a rollout lease" in res["msg"]
    assert path.read_text() == "somebody's notes\n"


def test_query_reads_only(tmp_path):
    path = tmp_path / "rollout.lease"
    assert run({"path": str(path), "state": "query"})["lease"] is None
    take(path, "run-1")
    q = run({"path": str(path), "state": "query"})
    assert not q["changed"] and q["live"] and "live lease of run run-1" in q["message"]


def _racer(path, run_id, start, results):
    start.wait()
    try:
        rl.acquire(path, f"user{run_id}@host", run_id, "bookworm", "v2", 600)
        results.put((run_id, "won"))
    except rl.LeaseHeld as exc:
        results.put((run_id, exc.lease["run_id"]))


@pytest.mark.parametrize("stale", [False, True], ids=["free", "expired-lease"])
def test_processes_racing_for_the_lease_one_wins(tmp_path, stale):
    """8 processes released at once, 15 rounds: each round exactly one holds the lease, and
    every loser is refused naming the winner (also when they race to take over a dead run's
    expired lease, where a read-then-write without the lock lets two think they won)."""
    ctx = multiprocessing.get_context("fork")
    for rnd in range(15):
        path = str(tmp_path / f"round{rnd}.lease")
        if stale:
            rl.acquire(path, "dead@host", "dead", "bookworm", "v1", 1, now=time.time() - 10)
        start, results = ctx.Barrier(8), ctx.Queue()
        procs = [ctx.Process(target=_racer, args=(path, f"r{rnd}-{i}", start, results))
                 for i in range(8)]
        for p in procs:
            p.start()
        outcome = dict(results.get(timeout=30) for _unused in procs)
        for p in procs:
            p.join(timeout=30)
        winners = [r for r, what in outcome.items() if what == "won"]
        assert len(winners) == 1, outcome
        assert all(what == winners[0] for r, what in outcome.items() if r != winners[0])
        assert rl.read(path)["run_id"] == winners[0]
