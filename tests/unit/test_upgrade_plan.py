"""upgrade_plan: which version each node boots, upgrade plans (canary first, waves of N),
progress and stopping on a failed wave, rollback targets, state changes, prune refusals and
ZFS prune steps; the filter wrappers."""

from __future__ import annotations

import copy
import re

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.junkyard.cluster.plugins.filter import upgrade as filters
from ansible_collections.junkyard.cluster.plugins.module_utils import upgrade_plan as up

IMAGES = {"bookworm-rocm": {"suite": "bookworm", "current_version": "2026.11.1"},
          "bookworm-cpu": {"suite": "bookworm", "current_version": "c1"}}
NODES = {f"gpu0{i}": "bookworm-rocm" for i in range(1, 7)} | {"gpu07": "bookworm-cpu"}


def ctx(state=None, pins=None):
    return up.make_context(IMAGES, NODES, pins or {}, state)


def state(current="2026.11.1", previous=None, versions=None, nodes=None):
    img = {"current": current,
           "versions": versions or {"2026.11.1": {"origin": None}}}
    if previous:
        img["previous"] = previous
    return {"schema": 1, "images": {"bookworm-rocm": img}, "nodes": nodes or {}}


PROMOTED = state(current="2026.12.1", previous="2026.11.1",
                 versions={"2026.10.1": {"origin": None},
                           "2026.11.1": {"origin": "2026.10.1"},
                           "2026.12.1": {"origin": "2026.11.1"}})


# --------------------------------------------------------------------------- effective

def test_effective_versions_precedence():
    c = ctx(state(nodes={"gpu02": "2026.12.1"},
                  versions={"2026.11.1": {"origin": None}, "2026.12.1": {"origin": "2026.11.1"}}),
            pins={"gpu03": "2026.10.1"})
    eff = up.effective_versions(c)
    assert eff["gpu01"] == {"image": "bookworm-rocm", "version": "2026.11.1", "source": "state"}
    assert eff["gpu02"]["version"] == "2026.12.1" and eff["gpu02"]["source"] == "override"
    assert eff["gpu03"] == {"image": "bookworm-rocm", "version": "2026.10.1", "source": "pin"}
    assert eff["gpu07"] == {"image": "bookworm-cpu", "version": "c1", "source": "inventory"}


def test_state_current_wins_over_the_inventory():
    assert up.effective_versions(ctx(PROMOTED))["gpu01"]["version"] == "2026.12.1"


# --------------------------------------------------------------------------- upgrade

def test_upgrade_canary_first_then_waves_of_n():
    plan = up.plan_upgrade(ctx(), "bookworm-rocm", "2026.12.1", wave_size=2)
    assert plan["canary"] == "gpu01"
    assert plan["waves"] == [["gpu01"], ["gpu02", "gpu03"], ["gpu04", "gpu05"], ["gpu06"]]
    assert plan["moves"]["gpu04"] == {"from": "2026.11.1", "to": "2026.12.1"}
    assert "gpu07" not in plan["moves"]  # another image
    assert plan["build"] is True and plan["promote"] == "2026.12.1"


@pytest.mark.parametrize("size, waves", [
    (1, [["gpu04"], ["gpu01"], ["gpu02"], ["gpu03"], ["gpu05"], ["gpu06"]]),
    (3, [["gpu04"], ["gpu01", "gpu02", "gpu03"], ["gpu05", "gpu06"]]),
    (10, [["gpu04"], ["gpu01", "gpu02", "gpu03", "gpu05", "gpu06"]]),
])
def test_explicit_canary_and_wave_sizes(size, waves):
    plan = up.plan_upgrade(ctx(), "bookworm-rocm", "2026.12.1", canary="gpu04", wave_size=size)
    assert plan["waves"] == waves


def test_pinned_nodes_never_move():
    plan = up.plan_upgrade(ctx(pins={"gpu01": "2026.11.1"}), "bookworm-rocm", "2026.12.1",
                           wave_size=5)
    assert plan["canary"] == "gpu02"
    assert plan["pinned"] == {"gpu01": "2026.11.1"}
    assert "gpu01" not in plan["moves"]


def test_resume_after_a_stopped_rollout_skips_build_and_canary():
    s = state(nodes={"gpu01": "2026.12.1", "gpu02": "2026.12.1"},
              versions={"2026.11.1": {"origin": None}, "2026.12.1": {"origin": "2026.11.1"}})
    plan = up.plan_upgrade(ctx(s), "bookworm-rocm", "2026.12.1", wave_size=2)
    assert plan["build"] is False
    assert plan["canary"] is None
    assert plan["unchanged"] == ["gpu01", "gpu02"]
    # they moved but their verify may have failed: checked again before anyone else moves
    assert plan["recheck"] == ["gpu01", "gpu02"]
    assert plan["waves"] == [["gpu03", "gpu04"], ["gpu05", "gpu06"]]
    assert "  verify again first (already on 2026.12.1, no reboot): gpu01, gpu02" in (
        up.describe(plan))
    assert not any(line.startswith("  unchanged") for line in up.describe(plan))


def test_first_run_and_rollback_recheck_nobody():
    plan = up.plan_upgrade(ctx(), "bookworm-rocm", "2026.12.1", wave_size=2)
    assert plan["recheck"] == []
    assert not any("verify again" in line for line in up.describe(plan))
    s = state(nodes={"gpu01": "2026.12.1"},
              versions={"2026.11.1": {"origin": None}, "2026.12.1": {"origin": "2026.11.1"}})
    assert up.plan_rollback(ctx(s), "bookworm-rocm")["recheck"] == []


@pytest.mark.parametrize("kwargs, message", [
    ({"version": "2026.11.1"}, "already the current version of bookworm-rocm"),
    ({"version": "bad version"}, "upgrade_version 'bad version' is not a version name"),
    ({"version": "v2", "canary": "gpu07"}, "canary gpu07 is not a node of image bookworm-rocm"),
    ({"version": "v2", "wave_size": 0}, "upgrade_serial 0 must be an integer >= 1"),
    ({"version": "v2", "image": "nope"}, "upgrade_image 'nope' is not an image in cluster_images"),
])
def test_upgrade_refusals(kwargs, message):
    args = {"image": "bookworm-rocm", "canary": None, "wave_size": 2} | kwargs
    with pytest.raises(up.PlanError, match=message.replace("(", r"\(").replace(")", r"\)")):
        up.plan_upgrade(ctx(), args["image"], args["version"], args["canary"], args["wave_size"])


def test_pinned_canary_is_refused():
    with pytest.raises(up.PlanError, match=r"canary gpu02 is pinned to 2026\.11\.1"):
        up.plan_upgrade(ctx(pins={"gpu02": "2026.11.1"}), "bookworm-rocm", "v2", "gpu02")


def test_existing_version_from_another_origin_is_refused():
    s = state(versions={"2026.11.1": {"origin": None}, "v9": {"origin": "2026.10.1"}})
    with pytest.raises(up.PlanError, match=r"v9 exists and was cloned from 2026\.10\.1"):
        up.plan_upgrade(ctx(s), "bookworm-rocm", "v9")


# --------------------------------------------------------------------------- progress

def test_progress_stops_at_the_failed_wave():
    plan = up.plan_upgrade(ctx(), "bookworm-rocm", "2026.12.1", wave_size=2)
    p = up.progress(plan, ["gpu01", "gpu02"])  # gpu03 failed its verify
    assert p == {"complete": False, "waves_done": 1, "stopped_at": 1, "verified": ["gpu01"],
                 "failed": ["gpu03"], "not_started": ["gpu04", "gpu05", "gpu06"]}
    assert up.progress(plan, [])["failed"] == ["gpu01"]  # canary failed: nobody else moved
    assert up.progress(plan, [])["not_started"] == ["gpu02", "gpu03", "gpu04", "gpu05", "gpu06"]
    assert up.progress(plan, list(NODES))["complete"] is True


def test_a_failed_canary_leaves_every_other_node_on_the_old_version():
    c = ctx()
    plan = up.plan_upgrade(c, "bookworm-rocm", "2026.12.1", wave_size=2)
    c = up.make_context(IMAGES, NODES, {}, up.state_recorded(c, "bookworm-rocm", "2026.12.1",
                                                             "2026.11.1"))
    after = up.state_moved(c, "bookworm-rocm", {"gpu01": "2026.12.1"})
    eff = up.effective_versions(up.make_context(IMAGES, NODES, {}, after))
    assert eff["gpu01"]["version"] == "2026.12.1"
    assert {eff[n]["version"] for n in NODES if n not in ("gpu01", "gpu07")} == {"2026.11.1"}
    assert up.progress(plan, [])["complete"] is False


# --------------------------------------------------------------------------- state

def test_record_move_promote_round_trip():
    c = ctx(None)
    s1 = up.state_recorded(c, "bookworm-rocm", "2026.12.1", "2026.11.1")
    assert s1["images"]["bookworm-rocm"] == {
        "current": "2026.11.1",
        "versions": {"2026.11.1": {"origin": None}, "2026.12.1": {"origin": "2026.11.1"}}}
    c = up.make_context(IMAGES, NODES, {}, s1)
    s2 = up.state_moved(c, "bookworm-rocm", {"gpu01": "2026.12.1", "gpu02": "2026.12.1"})
    assert s2["nodes"] == {"gpu01": "2026.12.1", "gpu02": "2026.12.1"}
    c = up.make_context(IMAGES, NODES, {}, s2)
    s3 = up.state_promoted(c, "bookworm-rocm", "2026.12.1")
    assert s3["images"]["bookworm-rocm"]["current"] == "2026.12.1"
    assert s3["images"]["bookworm-rocm"]["previous"] == "2026.11.1"
    assert s3["nodes"] == {}
    assert up.load_state(s3) == s3


def test_moving_a_node_back_to_current_drops_its_override():
    c = ctx(state(nodes={"gpu01": "2026.12.1"},
                  versions={"2026.11.1": {"origin": None}, "2026.12.1": {"origin": "2026.11.1"}}))
    assert up.state_moved(c, "bookworm-rocm", {"gpu01": "2026.11.1"})["nodes"] == {}


@pytest.mark.parametrize("data, message", [
    ([], "must be a mapping"),
    ({"schema": 2}, "schema 2 is not 1"),
    ({"images": {"x": {"current": "a b"}}}, "images.x.current 'a b' is not a version name"),
    ({"nodes": {"gpu01": 3}}, "nodes.gpu01 3 is not a version name"),
])
def test_bad_state_is_refused(data, message):
    with pytest.raises(up.PlanError, match=message):
        up.load_state(data)


# --------------------------------------------------------------------------- rollback

def test_rollback_of_an_unpromoted_rollout_moves_only_the_moved_nodes():
    s = state(nodes={"gpu01": "2026.12.1", "gpu02": "2026.12.1"}, previous="2026.10.1",
              versions={"2026.10.1": {"origin": None}, "2026.11.1": {"origin": "2026.10.1"},
                        "2026.12.1": {"origin": "2026.11.1"}})
    plan = up.plan_rollback(ctx(s), "bookworm-rocm", wave_size=5)
    assert plan["moves"] == {"gpu01": {"from": "2026.12.1", "to": "2026.11.1"},
                             "gpu02": {"from": "2026.12.1", "to": "2026.11.1"}}
    assert plan["promote"] is None
    after = up.state_moved(ctx(s), "bookworm-rocm", plan["moves"])
    assert after["nodes"] == {}


def test_rollback_of_a_promoted_version_moves_everyone_and_demotes():
    plan = up.plan_rollback(ctx(PROMOTED), "bookworm-rocm", wave_size=4)
    assert plan["waves"] == [["gpu01", "gpu02", "gpu03", "gpu04"], ["gpu05", "gpu06"]]
    assert {m["to"] for m in plan["moves"].values()} == {"2026.11.1"}
    assert plan["promote"] == "2026.11.1"
    c = up.make_context(IMAGES, NODES, {},
                        up.state_moved(ctx(PROMOTED), "bookworm-rocm", plan["moves"]))
    demoted = up.state_promoted(c, "bookworm-rocm", "2026.11.1")
    img = demoted["images"]["bookworm-rocm"]
    assert (img["current"], img["previous"]) == ("2026.11.1", "2026.10.1")
    assert demoted["nodes"] == {}


def test_rollback_of_some_nodes_keeps_overrides_and_does_not_demote():
    plan = up.plan_rollback(ctx(PROMOTED), "bookworm-rocm", only=["gpu03", "gpu05"])
    assert plan["moves"] == {"gpu03": {"from": "2026.12.1", "to": "2026.11.1"},
                             "gpu05": {"from": "2026.12.1", "to": "2026.11.1"}}
    assert plan["promote"] is None
    s = up.state_moved(ctx(PROMOTED), "bookworm-rocm", plan["moves"])
    assert s["nodes"] == {"gpu03": "2026.11.1", "gpu05": "2026.11.1"}


def test_rollback_skips_pinned_nodes_and_still_demotes():
    plan = up.plan_rollback(ctx(PROMOTED, pins={"gpu06": "2026.12.1"}), "bookworm-rocm")
    assert "gpu06" not in plan["moves"] and plan["pinned"] == {"gpu06": "2026.12.1"}
    assert plan["promote"] == "2026.11.1"


def test_rollback_without_previous_version_is_refused():
    with pytest.raises(up.PlanError, match="no previous version is recorded"):
        up.plan_rollback(ctx(), "bookworm-rocm")


def test_rollback_of_unknown_nodes_is_refused():
    with pytest.raises(up.PlanError, match="nodes gpu99 are not in the gpu_nodes group"):
        up.plan_rollback(ctx(PROMOTED), "bookworm-rocm", only=["gpu99"])
    with pytest.raises(up.PlanError, match="nodes gpu07 do not boot image bookworm-rocm"):
        up.plan_rollback(ctx(PROMOTED), "bookworm-rocm", only=["gpu07"])


# --------------------------------------------------------------------------- prune

def test_prune_refusals():
    s = dict(copy.deepcopy(PROMOTED), nodes={"gpu02": "2026.10.1"})
    s["images"]["bookworm-rocm"]["versions"]["2026.09.1"] = {"origin": None}
    plan = up.plan_prune(ctx(s), "bookworm-rocm",
                         ["2026.12.1", "2026.11.1", "2026.10.1", "2026.09.1", "2025.01.1"])
    assert plan["prune"] == ["2026.09.1"]
    assert plan["refused"] == {
        "2026.12.1": "2026.12.1 is the current version of bookworm-rocm",
        "2026.11.1": "2026.11.1 is the previous version of bookworm-rocm, the rollback "
                     "target; roll forward another version first, or give "
                     "prune_allow_previous=true",
        "2026.10.1": "2026.10.1 is booted by gpu02",
        "2025.01.1": "2025.01.1 is not a recorded version of bookworm-rocm "
                     "(2026.09.1, 2026.10.1, 2026.11.1, 2026.12.1)"}


def test_prune_a_version_booted_through_an_inventory_pin_is_refused():
    plan = up.plan_prune(ctx(PROMOTED, pins={"gpu05": "2026.10.1"}), "bookworm-rocm",
                         ["2026.10.1"])
    assert plan == {"image": "bookworm-rocm", "current": "2026.12.1", "prune": [],
                    "refused": {"2026.10.1": "2026.10.1 is booted by gpu05"}}


def test_prune_needs_explicit_versions():
    with pytest.raises(up.PlanError, match="nothing is pruned by default"):
        up.plan_prune(ctx(PROMOTED), "bookworm-rocm", [])


def test_prune_steps_promote_the_clones_first():
    base = "tank/images/bookworm-rocm"
    origins = {base: "-", f"{base}/v1": "-", f"{base}/v2": f"{base}/v1@v2",
               f"{base}/v3": f"{base}/v2@v3", f"{base}/v2b": f"{base}/v2@v2b"}
    txg = {f"{base}/v1@v2": "100", f"{base}/v2@v3": "300", f"{base}/v2@v2b": "200"}
    # the first promoted clone takes v2's origin v1@v2: it stays
    assert up.prune_steps(f"{base}/v2", origins, txg) == [
        ["promote", f"{base}/v2b"], ["promote", f"{base}/v3"], ["destroy", f"{base}/v2"]]
    assert up.prune_steps(f"{base}/v1", origins, txg) == [
        ["promote", f"{base}/v2"], ["destroy", f"{base}/v1"]]
    with pytest.raises(up.PlanError, match="does not exist"):
        up.prune_steps(f"{base}/v9", origins, txg)


CHAIN = {"t/i": "-", "t/i/v1": "-", "t/i/v2": "t/i/v1@v2", "t/i/v3": "t/i/v2@v3"}
CHAIN_TXG = {"t/i/v1@v1": "50", "t/i/v1@v2": "100", "t/i/v2@v3": "300"}


def test_prune_of_a_version_whose_clone_stays_keeps_the_snapshot_the_clone_now_uses():
    # zfs promote t/i/v3 makes v3 a clone of t/i/v1@v2 (v2's origin): seen on the lab
    assert up.prune_steps("t/i/v2", CHAIN, CHAIN_TXG) == [
        ["promote", "t/i/v3"], ["destroy", "t/i/v2"]]


def test_prune_of_a_version_and_its_clone_together_goes_clone_first():
    steps = [["destroy", "t/i/v3"], ["destroy", "t/i/v2@v3"], ["destroy", "t/i/v2"],
             ["destroy", "t/i/v1@v2"]]
    assert up.prune_steps_many(["t/i/v2", "t/i/v3"], CHAIN, CHAIN_TXG) == steps
    assert up.prune_steps_many(["t/i/v3", "t/i/v2"], CHAIN, CHAIN_TXG) == steps
    # the inputs are not changed
    assert CHAIN["t/i/v3"] == "t/i/v2@v3" and "t/i/v2@v3" in CHAIN_TXG
    with pytest.raises(up.PlanError, match="t/i/v9 does not exist"):
        up.prune_steps_many(["t/i/v2", "t/i/v9"], CHAIN, CHAIN_TXG)


def test_prune_of_the_middle_and_the_first_version_keeps_the_last():
    # v1 and v2 pruned, v3 kept: v3 ends up owning what it needs and nothing else goes
    steps = up.prune_steps_many(["t/i/v1", "t/i/v2"], CHAIN, CHAIN_TXG)
    assert steps == [["promote", "t/i/v3"], ["destroy", "t/i/v2"],
                     ["promote", "t/i/v3"], ["destroy", "t/i/v1"]], steps


# --------------------------------------------------------------------------- display, filters

def test_describe():
    plan = up.plan_upgrade(ctx(pins={"gpu06": "2026.11.1"}), "bookworm-rocm", "2026.12.1",
                           wave_size=3)
    assert up.describe(plan) == [
        "bookworm-rocm: upgrade 2026.11.1 -> 2026.12.1 (build the new version)",
        "  canary: gpu01 2026.11.1 -> 2026.12.1",
        "  wave 1: gpu02 2026.11.1 -> 2026.12.1, gpu03 2026.11.1 -> 2026.12.1, "
        "gpu04 2026.11.1 -> 2026.12.1",
        "  wave 2: gpu05 2026.11.1 -> 2026.12.1",
        "  pinned by the inventory, not moved: gpu06 (2026.11.1)",
        "  then 2026.12.1 becomes the current version of bookworm-rocm"]
    assert up.describe(up.plan_rollback(ctx(PROMOTED), "bookworm-rocm", wave_size=6))[1] == (
        "  wave 1: " + ", ".join(f"gpu0{i} 2026.12.1 -> 2026.11.1" for i in range(1, 7)))


def test_filters_plan_from_the_models_context_and_report_plan_errors():
    f = filters.FilterModule().filters()
    assert "upgrade_context" not in f  # the model publishes the context
    c = up.make_context(IMAGES, NODES, {"gpu02": "2026.11.1", "gpu03": None}, None)
    assert c["pins"] == {"gpu02": "2026.11.1"}
    plan = f["upgrade_plan"](c, "bookworm-rocm", "2026.12.1", "", "2")
    assert plan["canary"] == "gpu01" and "gpu02" in plan["pinned"]
    assert f["upgrade_rollback_plan"](up.make_context(IMAGES, NODES, {}, PROMOTED),
                                      "bookworm-rocm", "gpu01, gpu03")["waves"] == [
        ["gpu01"], ["gpu03"]]
    with pytest.raises(AnsibleFilterError, match="already the current version"):
        f["upgrade_plan"](c, "bookworm-rocm", "2026.11.1")
    steps = f["upgrade_prune_steps"]("t/i/v1", "t/i/v1\t-\nt/i/v2\tt/i/v1@v2\n",
                                     "t/i/v1@v2\t5\n")
    assert steps == [["promote", "t/i/v2"], ["destroy", "t/i/v1"]]
    # a list: planned together, the clone first
    steps = f["upgrade_prune_steps"](["t/i/v1", "t/i/v2"], "t/i/v1\t-\nt/i/v2\tt/i/v1@v2\n",
                                     "t/i/v1@v2\t5\n")
    assert steps == [["destroy", "t/i/v2"], ["destroy", "t/i/v1@v2"], ["destroy", "t/i/v1"]]


def test_state_after_prune_relinks_the_lineage():
    s = up.state_pruned(ctx(PROMOTED), "bookworm-rocm", ["2026.10.1"])
    assert s["images"]["bookworm-rocm"]["versions"] == {
        "2026.11.1": {"origin": None}, "2026.12.1": {"origin": "2026.11.1"}}


def test_prune_the_previous_version_when_allowed():
    plan = up.plan_prune(ctx(PROMOTED), "bookworm-rocm", ["2026.11.1"], allow_previous=True)
    assert plan["prune"] == ["2026.11.1"] and plan["refused"] == {}


DRAIN_PLAN = {"to": "v2", "waves": [["node01"], ["node02", "node03"]]}


def test_drain_describe_shows_the_policy_and_the_busy_nodes():
    query = {"busy": {"node03": ["41 (alice)", "42 (bob)"], "other": ["9 (carol)"]},
             "left_drained": {"node02": "operator: reseat GPU 3"}}
    lines = filters.upgrade_drain_describe(DRAIN_PLAN, query)
    assert lines[0].startswith("  drain: each wave is drained in Slurm before it powers off "
                               "and its jobs are waited for up to 3600 s; then a node still "
                               "busy is skipped")
    assert "(image_rollout_busy_policy skip)" in lines[0] and "booted v2" in lines[0]
    assert lines[1:] == [
        "  busy now: node03 (jobs 41 (alice), 42 (bob))",
        "  drained by someone else (moves, stays drained): node02 (operator: reseat GPU 3)"]


@pytest.mark.parametrize(("query", "line"), [
    ({"busy": {}}, "  busy now: no job runs on the nodes that move"),
    ({"failed": True, "msg": 'Failed to find required executable "scontrol" in paths: /a:/b'},
     '  busy now: unknown (Slurm could not be asked: Failed to find required executable '
     '"scontrol")'),
    ({"skipped": True}, "  busy now: unknown (Slurm could not be asked: no answer)"),
])
def test_drain_describe_when_slurm_says_nothing_or_cannot_be_asked(query, line):
    assert filters.upgrade_drain_describe(DRAIN_PLAN, query)[-1] == line


def test_drain_describe_policies_and_no_drain():
    assert "the jobs still running are cancelled (scancel)" in filters.upgrade_drain_describe(
        DRAIN_PLAN, {"busy": {}}, True, "kill", 60)[0]
    assert "keeps waiting" in filters.upgrade_drain_describe(DRAIN_PLAN, {"busy": {}}, True,
                                                             "wait")[0]
    assert filters.upgrade_drain_describe(DRAIN_PLAN, None, False) == [
        "  Slurm: the nodes are not drained first (image_rollout_drain is false)"]
    assert filters.upgrade_drain_describe({"to": "v2", "waves": []}, None) == []


# --------------------------------------------------------------------------- reverted

V3 = {"2026.11.1": {"origin": None}, "2026.12.1": {"origin": "2026.11.1"},
      "2026.12.2": {"origin": "2026.12.1"}}
AT = "2026-12-07T01:02:03Z"


def record(version="2026.12.2", to="2026.12.1", reason="did not come up within 900 s",
           image="bookworm-rocm", at=AT):
    return {"image": image, "version": version, "to": to, "reason": reason, "at": at}


def reverted_state(reverted, nodes=None):
    return dict(state(current="2026.12.1", previous="2026.11.1", versions=V3, nodes=nodes),
                reverted=reverted)


@pytest.mark.parametrize("reverted", [None, {}, "missing"])
def test_a_state_without_reverts_loads_as_before(reverted):
    data = state(nodes={"gpu01": "2026.11.1"})
    if reverted != "missing":
        data["reverted"] = reverted
    loaded = up.load_state(data)
    assert "reverted" not in loaded
    assert loaded == state(nodes={"gpu01": "2026.11.1"})
    assert up.load_state(None) == {"schema": 1, "images": {}, "nodes": {}}


def test_a_revert_record_loads_and_an_unquoted_time_comes_back_as_written():
    import datetime
    data = reverted_state({"gpu02": record()})
    assert up.load_state(data) == data
    for at in (datetime.datetime(2026, 12, 7, 1, 2, 3),
               datetime.datetime(2026, 12, 7, 2, 2, 3,
                                 tzinfo=datetime.timezone(datetime.timedelta(hours=1)))):
        loaded = up.load_state(reverted_state({"gpu02": record(at=at)}))
        assert loaded["reverted"]["gpu02"]["at"] == AT


@pytest.mark.parametrize("reverted, message", [
    (["gpu02"], "image state: reverted ['gpu02'] must be a mapping of node to its revert "
                "record (image, version, to, reason, at)"),
    ({"gpu02": "v1"}, "image state: reverted.gpu02 'v1' must be a mapping "
                      "(image, version, to, reason, at)"),
    ({"gpu02": dict(record(), why="x")},
     "image state: reverted.gpu02 'why' is not a key of a revert record "
     "(image, version, to, reason, at)"),
    ({"gpu02": {k: v for k, v in record().items() if k != "reason"}},
     "image state: reverted.gpu02 'reason' is missing: a revert record has image, version, "
     "to, reason and at"),
    ({"gpu02": record(image=3)}, "image state: reverted.gpu02.image 3 is not an image name"),
    ({"gpu02": record(version="a b")},
     "image state: reverted.gpu02.version 'a b' is not a version name"),
    ({"gpu02": record(to=2026.11)}, "image state: reverted.gpu02.to 2026.11 is not a version "
                                    "name"),
    ({"gpu02": record(reason=" \n")}, "image state: reverted.gpu02.reason ' \\n' is not a "
                                      "reason (a non-empty string of at most 500 characters)"),
    ({"gpu02": record(reason="x" * 501)}, "image state: reverted.gpu02.reason 'xxx"),
    ({"gpu02": record(reason=["x"])}, "image state: reverted.gpu02.reason ['x'] is not a "
                                      "reason"),
    ({"gpu02": record(at="2026-12-07 01:02:03")},
     "image state: reverted.gpu02.at '2026-12-07 01:02:03' is not a UTC time like "
     "2026-12-07T01:02:03Z"),
    ({"gpu02": record(at="2026-13-07T01:02:03Z")},
     "image state: reverted.gpu02.at '2026-13-07T01:02:03Z' is not a UTC time"),
    ({"gpu02": record(at=1765069323)}, "image state: reverted.gpu02.at 1765069323 is not a "
                                       "UTC time"),
])
def test_a_bad_revert_record_is_refused_naming_field_and_value(reverted, message):
    with pytest.raises(up.PlanError) as exc:
        up.load_state(reverted_state(reverted))
    assert str(exc.value).startswith(message), str(exc.value)
    assert exc.value.field.startswith("reverted")


def test_state_problems_of_revert_records():
    s = reverted_state({
        "gpu02": record(version="2026.12.9"),          # failed on a version not recorded
        "gpu03": record(to="2026.10.1"),               # switched back to one not recorded
        "gpu04": record(),                             # fine
        "gpu09": record(version="x1", to="x2"),        # not a node (retired): not looked at
        "gpu07": record(version="x1", to="x2"),        # another image than gpu07's: stale
    })
    assert up.state_problems(ctx(s)) == [
        ("reverted.gpu02.version", "2026.12.9",
         "is not a recorded version of bookworm-rocm, the image of gpu02 "
         "(2026.11.1, 2026.12.1, 2026.12.2)"),
        ("reverted.gpu03.to", "2026.10.1",
         "is not a recorded version of bookworm-rocm, the image of gpu03 "
         "(2026.11.1, 2026.12.1, 2026.12.2)")]


def test_a_node_reverted_to_the_current_version_loses_its_override():
    before = ctx(reverted_state({}, nodes={"gpu02": "2026.12.2", "gpu03": "2026.12.2"}))
    after = up.state_reverted(before, "bookworm-rocm", {"gpu02": {
        "from": "2026.12.2", "to": "2026.12.1", "reason": "  did not come up within 900 s\n",
        "at": AT}})
    # exactly as state_moved records the move back, plus the record
    moved = up.state_moved(before, "bookworm-rocm", {"gpu02": "2026.12.1"})
    assert after == dict(moved, reverted={"gpu02": record()})
    assert after["nodes"] == {"gpu03": "2026.12.2"}
    eff = up.effective_versions(up.make_context(IMAGES, NODES, {}, after))
    assert eff["gpu02"] == {"image": "bookworm-rocm", "version": "2026.12.1", "source": "state"}
    assert up.load_state(after) == after


def test_a_node_reverted_to_another_version_keeps_an_override_and_other_records_stay():
    c = ctx(reverted_state({"gpu05": record()}, nodes={"gpu02": "2026.12.1"}))
    after = filters.FilterModule().filters()["upgrade_state_reverted"](
        c, "bookworm-rocm", {"gpu02": {"from": "2026.12.1", "to": "2026.11.1",
                                       "reason": "health gate: GPU 3 missing", "at": AT}})
    assert after["nodes"] == {"gpu02": "2026.11.1"}
    assert after["reverted"] == {
        "gpu05": record(),
        "gpu02": record(version="2026.12.1", to="2026.11.1",
                        reason="health gate: GPU 3 missing")}
    assert up.state_problems(up.make_context(IMAGES, NODES, {}, after)) == []


def test_a_long_reason_is_cut_to_500_characters():
    after = up.state_reverted(ctx(reverted_state({})), "bookworm-rocm", {"gpu02": {
        "from": "2026.12.2", "to": "2026.12.1", "reason": "y" * 900, "at": AT}})
    assert after["reverted"]["gpu02"]["reason"] == "y" * 497 + "..."


@pytest.mark.parametrize("reverts, message", [
    ({"gpu07": {"from": "2026.12.2", "to": "2026.12.1", "reason": "r", "at": AT}},
     "nodes gpu07 do not boot image bookworm-rocm"),
    ({"gpu99": {"from": "2026.12.2", "to": "2026.12.1", "reason": "r", "at": AT}},
     "nodes gpu99 are not in the gpu_nodes group"),
    ({"gpu02": {"to": "2026.12.1", "reason": "r", "at": AT}},
     "revert of gpu02 {'to': '2026.12.1', 'reason': 'r', 'at': '2026-12-07T01:02:03Z'} "
     "must be a mapping {from: <version>, to: <version>, reason, at}"),
    ({"gpu02": {"from": "2026.12.2", "to": "2026.10.1", "reason": "r", "at": AT}},
     "image state: reverted.gpu02.to '2026.10.1' is not a recorded version of bookworm-rocm"),
    ({"gpu02": {"from": "2026.12.2", "to": "2026.12.1", "reason": "", "at": AT}},
     "image state: reverted.gpu02.reason '' is not a reason"),
    ({"gpu02": {"from": "2026.12.2", "to": "2026.12.1", "reason": "r", "at": "now"}},
     "image state: reverted.gpu02.at 'now' is not a UTC time"),
])
def test_state_reverted_refuses_what_the_model_would_refuse(reverts, message):
    with pytest.raises(up.PlanError) as exc:
        up.state_reverted(ctx(reverted_state({})), "bookworm-rocm", reverts)
    assert str(exc.value).startswith(message), str(exc.value)
    with pytest.raises(AnsibleFilterError, match="^" + re.escape(message)):
        filters.FilterModule().filters()["upgrade_state_reverted"](
            ctx(reverted_state({})), "bookworm-rocm", reverts)


def test_a_move_drops_the_nodes_revert_record():
    c = ctx(reverted_state({"gpu02": record(), "gpu03": record()}))
    after = up.state_moved(c, "bookworm-rocm", {"gpu02": {"from": "2026.12.1",
                                                          "to": "2026.12.2"}})
    assert after["reverted"] == {"gpu03": record()}
    assert after["nodes"] == {"gpu02": "2026.12.2"}
    after = up.state_moved(up.make_context(IMAGES, NODES, {}, after), "bookworm-rocm",
                           {"gpu03": "2026.12.1"})
    assert "reverted" not in after  # the last one gone: the state reads as before
    assert after == up.load_state(after)


def test_prune_drops_the_revert_records_that_name_a_pruned_version():
    s = reverted_state({"gpu02": record(),                                  # failed on .2
                        "gpu03": record(version="2026.12.1", to="2026.11.1"),
                        "gpu07": record(image="bookworm-cpu", version="c2", to="c1")},
                       nodes={"gpu03": "2026.11.1"})
    after = up.state_pruned(ctx(s), "bookworm-rocm", ["2026.12.2"])
    assert set(after["reverted"]) == {"gpu03", "gpu07"}
    assert "2026.12.2" not in after["images"]["bookworm-rocm"]["versions"]
    after = up.state_pruned(up.make_context(IMAGES, NODES, {}, after), "bookworm-rocm",
                            ["2026.11.1"])
    assert after["reverted"] == {"gpu07": s["reverted"]["gpu07"]}  # another image's record
    after = up.state_pruned(ctx(reverted_state({"gpu02": record()})), "bookworm-rocm",
                            ["2026.12.2"])
    assert "reverted" not in after
