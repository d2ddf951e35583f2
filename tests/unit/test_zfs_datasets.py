"""zfs_datasets: one zfs list + one zfs get, then only the commands needed."""

from __future__ import annotations

import pytest
from ansible_collections.junkyard.cluster.plugins.module_utils import zfs_datasets as zd
from ansible_collections.junkyard.cluster.plugins.modules import zfs_datasets

from tests.unit.storage_harness import Cmd, run_module

ZFS = "/usr/sbin/zfs"
LIST = [ZFS, "list", "-H", "-o", "name", "-t", "filesystem,volume"]

WANTED = [
    {"name": "tank/nodes", "properties": {"canmount": "off"}},
    {"name": "tank/nodes/node01", "properties": {"canmount": "off"}},
    {"name": "tank/nodes/node01/var-log"},
    {"name": "tank/data/scratch", "properties": {"recordsize": "1M"}},
]


def get_cmd(props, names):
    return [ZFS, "get", "-H", "-p", "-o", "name,property,value,source", props, *names]


@pytest.mark.parametrize(("prop", "value", "printed"), [
    ("recordsize", "1M", "1048576"),
    ("recordsize", "128K", "131072"),
    ("recordsize", 131072, "131072"),
    ("quota", "1.5G", str(3 << 29)),
    ("quota", "none", "0"),
    ("acltype", "noacl", "off"),
    ("acltype", "posixacl", "posix"),
    ("atime", False, "off"),
    ("compression", "lz4", "lz4"),
    ("canmount", "OFF", "off"),
])
def test_normalise_matches_zfs_get_p(prop, value, printed):
    assert zd.normalise(prop, value) == printed


def test_bad_size_is_refused():
    with pytest.raises(zd.DatasetError, match="recordsize value 'big' is not a size"):
        zd.normalise("recordsize", "big")


def test_everything_missing_is_created_parents_first():
    res, _unused = run_module(zfs_datasets.main, {"datasets": WANTED}, [
        Cmd(LIST, out="tank\n"),
        Cmd([ZFS, "create", "-p", "-o", "canmount=off", "tank/nodes"]),
        Cmd([ZFS, "create", "-p", "-o", "recordsize=1M", "tank/data/scratch"]),
        Cmd([ZFS, "create", "-p", "-o", "canmount=off", "tank/nodes/node01"]),
        Cmd([ZFS, "create", "-p", "tank/nodes/node01/var-log"]),
    ])
    assert res["changed"] is True
    assert res["created"] == ["tank/nodes", "tank/data/scratch", "tank/nodes/node01",
                              "tank/nodes/node01/var-log"]


def test_identical_is_ok_with_one_list_and_one_get():
    existing = "tank\ntank/data\n" + "".join(d["name"] + "\n" for d in WANTED)
    res, table = run_module(zfs_datasets.main, {"datasets": WANTED}, [
        Cmd(LIST, out=existing),
        Cmd(get_cmd("canmount,recordsize", sorted(d["name"] for d in WANTED)), out=(
            "tank/data/scratch\trecordsize\t1048576\tlocal\n"
            "tank/nodes\tcanmount\toff\tlocal\n"
            "tank/nodes/node01\tcanmount\toff\tlocal\n")),
    ])
    assert res["changed"] is False
    assert len(table.ran) == 2


def test_differing_property_is_set_and_diffed():
    existing = "".join(d["name"] + "\n" for d in WANTED)
    res, _unused = run_module(zfs_datasets.main, {"datasets": WANTED}, [
        Cmd(LIST, out=existing),
        Cmd(get_cmd("canmount,recordsize", sorted(d["name"] for d in WANTED)), out=(
            "tank/data/scratch\trecordsize\t131072\tdefault\n"
            "tank/nodes\tcanmount\toff\tlocal\n"
            "tank/nodes/node01\tcanmount\ton\tdefault\n")),
        Cmd([ZFS, "set", "recordsize=1M", "tank/data/scratch"]),
        Cmd([ZFS, "set", "canmount=off", "tank/nodes/node01"]),
    ])
    assert res["changed"] is True
    assert res["updated"] == {"tank/nodes/node01": {"canmount": "off"},
                              "tank/data/scratch": {"recordsize": "1M"}}
    assert "tank/data/scratch recordsize=131072" in res["diff"]["before"]
    assert "tank/data/scratch recordsize=1M" in res["diff"]["after"]


def test_check_mode_runs_only_reads():
    res, table = run_module(zfs_datasets.main, {"datasets": WANTED}, [
        Cmd(LIST, out="tank\n"),
    ], check_mode=True)
    assert res["changed"] is True
    assert table.ran == [LIST]
    assert [c[1] for c in res["commands"]] == ["create"] * 4


def test_removed_node_is_reported_never_destroyed():
    wanted = WANTED[:1]
    res, table = run_module(zfs_datasets.main, {"datasets": wanted}, [
        Cmd(LIST, out="tank\ntank/nodes\ntank/nodes/node01\ntank/nodes/node01/var-log\n"),
        Cmd(get_cmd("canmount", ["tank/nodes"]), out="tank/nodes\tcanmount\toff\tlocal\n"),
    ])
    assert res["changed"] is False
    assert res["unlisted"] == ["tank/nodes/node01"]
    assert all(argv[1] != "destroy" for argv in table.ran)


def test_create_only_property_drift_is_a_warning_not_a_change():
    wanted = [{"name": "tank/data/x", "properties": {"casesensitivity": "insensitive"}}]
    res, _unused = run_module(zfs_datasets.main, {"datasets": wanted}, [
        Cmd(LIST, out="tank\ntank/data\ntank/data/x\n"),
        Cmd(get_cmd("casesensitivity", ["tank/data/x"]),
            out="tank/data/x\tcasesensitivity\tsensitive\t-\n"),
    ])
    assert res["changed"] is False
    assert res["create_only_drift"] == [["tank/data/x", "casesensitivity", "sensitive",
                                         "insensitive"]]
    assert any("only sets it at creation" in w for w in res["warnings"])


@pytest.mark.parametrize(("wanted", "message"), [
    ([{"name": "tank"}], "datasets[0].name 'tank' is not a child dataset name"),
    ([{"name": "tank/a"}, {"name": "tank/a"}], "datasets[1].name tank/a is listed twice"),
    ([{"name": "tank/a@snap"}], "is not a child dataset name"),
])
def test_bad_input_is_refused_before_any_command(wanted, message):
    res, table = run_module(zfs_datasets.main, {"datasets": wanted}, [])
    assert res["failed"]
    assert message in res["msg"]
    assert table.ran == []


def test_failing_zfs_command_fails_with_its_error():
    res, _unused = run_module(zfs_datasets.main, {"datasets": WANTED[:1]}, [
        Cmd(LIST, out="tank\n"),
        Cmd([ZFS, "create", "-p", "-o", "canmount=off", "tank/nodes"], rc=1,
            err="cannot create 'tank/nodes': out of space\n"),
    ])
    assert res["failed"]
    assert "out of space" in res["msg"]
