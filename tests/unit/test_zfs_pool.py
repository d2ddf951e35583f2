"""zfs_pool: exact commands, parsing of real `zpool status -P` layouts,
check mode, diff, and every refusal path with its message."""

import pytest
from ansible_collections.junkyard.cluster.plugins.module_utils import zfs_pool as zp
from ansible_collections.junkyard.cluster.plugins.modules import zfs_pool
from storage_harness import Cmd, fixture, run_module

ZPOOL = "/usr/sbin/zpool"
ZFS = "/usr/sbin/zfs"
WIPEFS = "/usr/sbin/wipefs"
LSBLK = "/usr/sbin/lsblk"
ZDB = "/usr/sbin/zdb"

DISKS45 = [f"/dev/disk/by-id/wwn-0x5000c500d00000{i:02d}" for i in range(1, 46)]
NVME = ["/dev/disk/by-id/nvme-SAMSUNG_MZ1L21T9HCLS-00A07_S666NA0T100001",
        "/dev/disk/by-id/nvme-SAMSUNG_MZ1L21T9HCLS-00A07_S666NA0T100002"]
NO_POOL = "cannot open 'tank': no such pool\n"
LSBLK_NOPARTS = '{"blockdevices": [{"name": "%s", "type": "disk"}]}\n'


def fx(name):
    return fixture("zfs_pool", name)


def tank_args(**kw):
    args = {
        "name": "tank",
        "ashift": 12,
        "vdevs": [{"type": "draid2:8d:45c:1s", "disks": DISKS45}],
        "special": [{"type": "mirror", "disks": NVME}],
        "pool_properties": {"autotrim": "on"},
        "filesystem_properties": {"compression": "lz4", "atime": False},
    }
    args.update(kw)
    return args


def inspect_clean(disk):
    return [
        Cmd([LSBLK, "--json", "--paths", "--output", "NAME,TYPE", disk], out=LSBLK_NOPARTS % disk),
        Cmd([WIPEFS, "--no-act", "--json", disk]),
        Cmd([ZDB, "-l", disk], rc=2, out=fx("zdb_nolabel.txt")),
    ]


CREATE_TANK = [
    ZPOOL, "create", "-o", "ashift=12", "-o", "autotrim=on",
    "-O", "atime=off", "-O", "compression=lz4", "tank",
    "draid2:8d:45c:1s", *DISKS45, "special", "mirror", *NVME,
]


def test_create_fresh_pool():
    cmds = [Cmd([ZPOOL, "status", "-P", "tank"], rc=1, err=NO_POOL)]
    for disk in DISKS45 + NVME:
        cmds += inspect_clean(disk)
    cmds += [Cmd(CREATE_TANK), Cmd([ZPOOL, "status", "-P", "tank"], out=fx("status_draid45.txt"))]
    res, _unused = run_module(zfs_pool.main, tank_args(), cmds)
    assert res["failed"] is False, res.get("msg")
    assert res["changed"] is True and res["created"] is True
    assert res["commands"] == [CREATE_TANK]
    assert res["wiped"] == []
    assert res["diff"]["before"] == ""
    assert res["diff"]["after"].splitlines()[0] == (
        "data: draid2:8d:45c:1s: " + " ".join(d + "-part1" for d in DISKS45))
    assert res["layout"][1] == {"class": "special", "type": "mirror",
                                "disks": [d + "-part1" for d in NVME]}
    assert "warnings" not in res


def test_create_check_mode_runs_only_read_commands():
    cmds = [Cmd([ZPOOL, "status", "-P", "tank"], rc=1, err=NO_POOL)]
    for disk in DISKS45 + NVME:
        cmds += inspect_clean(disk)
    res, table = run_module(zfs_pool.main, tank_args(), cmds, check_mode=True)
    assert res["changed"] is True
    assert res["commands"] == [CREATE_TANK]
    assert all(argv[1] != "create" for argv in table.ran)
    assert res["diff"]["after"].startswith("data: draid2:8d:45c:1s: " + DISKS45[0] + " ")


def test_identical_pool_is_ok():
    cmds = [
        Cmd([ZPOOL, "status", "-P", "tank"], out=fx("status_draid45.txt")),
        Cmd([ZPOOL, "get", "-H", "-p", "-o", "property,value", "autotrim,ashift", "tank"],
            out="autotrim\ton\nashift\t12\n"),
        Cmd([ZFS, "get", "-H", "-p", "-o", "property,value", "atime,compression", "tank"],
            out="atime\toff\ncompression\tlz4\n"),
    ]
    res, _unused = run_module(zfs_pool.main, tank_args(), cmds)
    assert res["changed"] is False
    assert res["commands"] == []
    assert res["filesystem_drift"] == {}
    assert res["diff"]["before"] == res["diff"]["after"]


def test_disk_order_and_short_draid_name_still_match():
    # draid2:8d:45c:1s written as draid2::1s is not valid; the short form
    # "draid2:8d:1s" takes children from the disk count (45).
    args = tank_args(vdevs=[{"type": "draid2:8d:1s", "disks": list(reversed(DISKS45))}],
                     pool_properties={}, filesystem_properties={}, ashift=None)
    cmds = [Cmd([ZPOOL, "status", "-P", "tank"], out=fx("status_draid45.txt"))]
    res, _unused = run_module(zfs_pool.main, args, cmds)
    assert res["changed"] is False


def test_inventory_form_of_draid_matches():
    # cluster_pool.vdevs form: type draid with parity/data/spares fields.
    args = tank_args(vdevs=[{"type": "draid", "parity": 2, "data": 8, "spares": 1,
                             "disks": DISKS45}],
                     pool_properties={}, filesystem_properties={}, ashift=None)
    cmds = [Cmd([ZPOOL, "status", "-P", "tank"], out=fx("status_draid45.txt"))]
    res, _unused = run_module(zfs_pool.main, args, cmds)
    assert res["failed"] is False, res.get("msg")
    assert res["changed"] is False


@pytest.mark.parametrize("vdev,kind", [
    ({"type": "draid", "parity": 2, "data": 8, "spares": 1}, "draid2:8d:1s"),
    ({"type": "draid", "parity": 3, "data": 4, "children": 14}, "draid3:4d:14c"),
    ({"type": "raidz", "parity": 2}, "raidz2"),
    ({"type": "mirror"}, "mirror"),
    ({}, "disk"),
])
def test_vdev_kind(vdev, kind):
    assert zp.vdev_kind(vdev, "vdevs[0]") == kind


def test_vdev_kind_rejects_fields_on_other_types():
    with pytest.raises(zp.LayoutError, match=r"^vdevs\[0\]: data, parity only combine with "
                                             r"type draid \(or parity with type raidz\), "
                                             r"not with mirror$"):
        zp.vdev_kind({"type": "mirror", "parity": 2, "data": 3}, "vdevs[0]")


def test_pool_property_drift_is_set_with_diff():
    cmds = [
        Cmd([ZPOOL, "status", "-P", "tank"], out=fx("status_draid45.txt")),
        Cmd([ZPOOL, "get", "-H", "-p", "-o", "property,value", "autotrim,ashift", "tank"],
            out="autotrim\toff\nashift\t12\n"),
        Cmd([ZFS, "get", "-H", "-p", "-o", "property,value", "atime,compression", "tank"],
            out="atime\toff\ncompression\tzstd\n"),
        Cmd([ZPOOL, "set", "autotrim=on", "tank"]),
    ]
    res, _unused = run_module(zfs_pool.main, tank_args(), cmds)
    assert res["changed"] is True
    assert res["commands"] == [[ZPOOL, "set", "autotrim=on", "tank"]]
    assert res["diff"]["before"].endswith("property: autotrim=off\n")
    assert res["diff"]["after"].endswith("property: autotrim=on\n")
    assert res["filesystem_drift"] == {"compression": {"want": "lz4", "have": "zstd"}}
    assert res["warnings"] == [
        "root dataset tank differs from filesystem_properties: compression=zstd (want lz4); "
        "zfs_pool applies them only at creation, use community.general.zfs to change them"]


def test_pool_property_drift_check_mode_does_not_set():
    cmds = [
        Cmd([ZPOOL, "status", "-P", "tank"], out=fx("status_draid45.txt")),
        Cmd([ZPOOL, "get", "-H", "-p", "-o", "property,value", "autotrim", "tank"],
            out="autotrim\toff\n"),
    ]
    args = tank_args(ashift=None, filesystem_properties={})
    res, table = run_module(zfs_pool.main, args, cmds, check_mode=True)
    assert res["changed"] is True
    assert res["commands"] == [[ZPOOL, "set", "autotrim=on", "tank"]]
    assert [ZPOOL, "set", "autotrim=on", "tank"] not in table.ran


def test_different_layout_fails_never_recreates():
    args = tank_args(vdevs=[{"type": "draid2:9d:45c:1s", "disks": DISKS45}])
    cmds = [Cmd([ZPOOL, "status", "-P", "tank"], out=fx("status_draid45.txt"))]
    res, table = run_module(zfs_pool.main, args, cmds)
    assert res["failed"] is True
    assert res["msg"] == (
        "pool tank exists with a different layout; zfs_pool never adds, removes or recreates "
        "vdevs: data: wanted draid2:9d:45c:1s " + " ".join(DISKS45) + " is not in the pool; "
        "data: pool has draid2:8d:45c:1s " + " ".join(d + "-part1" for d in DISKS45)
        + " that is not wanted")
    assert res["diff"]["before"].startswith("data: draid2:8d:45c:1s: ")
    assert res["diff"]["after"].startswith("data: draid2:9d:45c:1s: ")
    assert table.ran == [[ZPOOL, "status", "-P", "tank"]]


def test_missing_special_class_is_a_difference():
    args = tank_args(special=[], pool_properties={}, filesystem_properties={})
    cmds = [Cmd([ZPOOL, "status", "-P", "tank"], out=fx("status_draid45.txt"))]
    res, _unused = run_module(zfs_pool.main, args, cmds)
    assert res["failed"] is True
    assert res["msg"].endswith(
        "special: pool has mirror " + " ".join(d + "-part1" for d in NVME) + " that is not wanted")


def test_ashift_mismatch_fails():
    cmds = [
        Cmd([ZPOOL, "status", "-P", "tank"], out=fx("status_draid45.txt")),
        Cmd([ZPOOL, "get", "-H", "-p", "-o", "property,value", "ashift", "tank"],
            out="ashift\t9\n"),
    ]
    args = tank_args(pool_properties={}, filesystem_properties={})
    res, _unused = run_module(zfs_pool.main, args, cmds)
    assert res["failed"] is True
    assert res["msg"] == ("pool tank has ashift 9, wanted 12; ashift is fixed when a pool is "
                          "created")


def test_spare_in_use_counts_as_original_disk():
    cmds = [Cmd([ZPOOL, "status", "-P", "tank"], out=fx("status_draid45_spare_in_use.txt"))]
    args = tank_args(ashift=None, pool_properties={}, filesystem_properties={})
    res, _unused = run_module(zfs_pool.main, args, cmds)
    assert res["failed"] is False, res.get("msg")
    assert res["changed"] is False
    assert res["substituted"] == [{"device": DISKS45[7] + "-part1", "by": "draid2-0-0"}]


LAB = ["/dev/vdb", "/dev/vdc", "/dev/vdd", "/dev/vde", "/dev/vdf"]
LAB_CREATE = [ZPOOL, "create", "lab", "raidz2", *LAB, "log", "mirror", "/dev/vdg", "/dev/vdh",
              "cache", "/dev/vdi", "spare", "/dev/vdj"]


def lab_args(**kw):
    args = {"name": "lab", "vdevs": [{"type": "raidz2", "disks": LAB}],
            "log": [{"type": "mirror", "disks": ["/dev/vdg", "/dev/vdh"]}],
            "cache": ["/dev/vdi"], "spares": ["/dev/vdj"]}
    args.update(kw)
    return args


def test_lab_layout_with_log_cache_spare_matches():
    cmds = [Cmd([ZPOOL, "status", "-P", "lab"], out=fx("status_lab_raidz2.txt"))]
    res, _unused = run_module(zfs_pool.main, lab_args(), cmds)
    assert res["changed"] is False
    assert [(v["class"], v["type"]) for v in res["layout"]] == [
        ("data", "raidz2"), ("log", "mirror"), ("cache", "disk"), ("spare", "disk")]


def _lab_create_cmds(dirty, imported=None):
    """The read-only commands of a creation; ``imported`` is the output of
    `zpool list -H -p -o name,guid`, read when a disk carries a pool's label."""
    cmds = [Cmd([ZPOOL, "status", "-P", "lab"], rc=1,
                err="cannot open 'lab': no such pool\n")]
    for disk in [*LAB, "/dev/vdg", "/dev/vdh", "/dev/vdi", "/dev/vdj"]:
        cmds += dirty.get(disk) or inspect_clean(disk)
    if imported is not None:
        cmds.append(Cmd([ZPOOL, "list", "-H", "-p", "-o", "name,guid"], out=imported))
    return cmds


OLD_GUID = "6570127532718532416"  # pool_guid of oldpool in zdb_label.txt
ZPOOL_LIST = "tank\t11752398476343296015\n"  # another, unrelated pool is imported


def _dirty_with_old_pool(disk, name="oldpool", state=1):
    # GPT on the disk, the ZFS label of an exported pool (oldpool, see
    # zdb_label.txt) in partition 1, partition 9 blank.
    lsblk = fx("lsblk_sdb_parts.json").replace("/dev/sdb", disk)
    wipefs = fx("wipefs_zfs_member.json").replace('"oldpool"', f'"{name}"')
    zdb = fx("zdb_label.txt").replace("name: 'oldpool'", f"name: '{name}'").replace(
        "    state: 1\n", f"    state: {state}\n")
    return [
        Cmd([LSBLK, "--json", "--paths", "--output", "NAME,TYPE", disk], out=lsblk),
        Cmd([WIPEFS, "--no-act", "--json", disk + "1"], out=wipefs),
        Cmd([ZDB, "-l", disk + "1"], out=zdb),
        Cmd([WIPEFS, "--no-act", "--json", disk + "9"]),
        Cmd([ZDB, "-l", disk + "9"], rc=2, out=fx("zdb_nolabel.txt")),
        Cmd([WIPEFS, "--no-act", "--json", disk], out=fx("wipefs_gpt.json")),
        Cmd([ZDB, "-l", disk], rc=2, out=fx("zdb_nolabel.txt")),
    ]


def _dirty_ext4(disk):
    return [
        Cmd([LSBLK, "--json", "--paths", "--output", "NAME,TYPE", disk], out=LSBLK_NOPARTS % disk),
        Cmd([WIPEFS, "--no-act", "--json", disk], out=fx("wipefs_ext4.json")),
        Cmd([ZDB, "-l", disk], rc=2, out=fx("zdb_nolabel.txt")),
    ]


def test_dirty_disks_are_refused_with_what_was_found():
    dirty = {"/dev/vdc": _dirty_with_old_pool("/dev/vdc"), "/dev/vdi": _dirty_ext4("/dev/vdi")}
    res, table = run_module(zfs_pool.main, lab_args(), _lab_create_cmds(dirty, ZPOOL_LIST))
    assert res["failed"] is True
    assert res["msg"] == (
        "refusing to create pool lab: 2 disk(s) are not blank (list them in wipe_disks to erase "
        "them): /dev/vdc: /dev/vdc1 zfs_member+zfs_member+zfs label of pool oldpool "
        f"(guid {OLD_GUID}, exported, last used by host oldhead), /dev/vdc gpt+gpt+PMBR; "
        "/dev/vdi: /dev/vdi ext4")
    assert res["refused"] == ["/dev/vdc", "/dev/vdi"]
    assert not any(a[1] in ("create", "labelclear", "-a") for a in table.ran)


def test_only_listed_disks_are_wiped_then_created():
    dirty = {"/dev/vdc": _dirty_with_old_pool("/dev/vdc"), "/dev/vdi": _dirty_ext4("/dev/vdi")}
    create = LAB_CREATE
    wipes = [[ZPOOL, "labelclear", "-f", "/dev/vdc1"], [WIPEFS, "-a", "/dev/vdc"],
             [WIPEFS, "-a", "/dev/vdi"]]
    cmds = _lab_create_cmds(dirty, ZPOOL_LIST) + [Cmd(w) for w in wipes] + [
        Cmd(create), Cmd([ZPOOL, "status", "-P", "lab"], out=fx("status_lab_raidz2.txt"))]
    res, _unused = run_module(zfs_pool.main,
                              lab_args(wipe_disks=["/dev/vdc", "/dev/vdi", "/dev/vdb"],
                                       wipe_pools=[OLD_GUID]), cmds)
    assert res["failed"] is False, res.get("msg")
    assert "warnings" not in res
    assert res["wiped"] == ["/dev/vdc", "/dev/vdi"]
    assert res["commands"] == [*wipes, create]


def test_wipe_in_check_mode_only_reports():
    dirty = {"/dev/vdc": _dirty_with_old_pool("/dev/vdc")}
    res, table = run_module(zfs_pool.main, lab_args(wipe_disks=["/dev/vdc"],
                                                    wipe_pools=["oldpool"]),
                            _lab_create_cmds(dirty, ZPOOL_LIST), check_mode=True)
    assert res["changed"] is True
    assert res["commands"][:2] == [[ZPOOL, "labelclear", "-f", "/dev/vdc1"],
                                   [WIPEFS, "-a", "/dev/vdc"]]
    assert not any(a[1] in ("labelclear", "-a", "create") for a in table.ran)


def _never_wiped(table):
    return not any(a[1] in ("labelclear", "-a", "create") for a in table.ran)


@pytest.mark.parametrize("check_mode", [False, True])
def test_disks_of_an_exported_pool_are_not_wiped_unless_the_pool_is_named(check_mode):
    # Issue 21: listing the disks in wipe_disks is not enough when they hold
    # an exported pool: it may hold data and `zpool import` brings it back.
    dirty = {d: _dirty_with_old_pool(d) for d in ("/dev/vdc", "/dev/vdd")}
    res, table = run_module(zfs_pool.main, lab_args(wipe_disks=["/dev/vdc", "/dev/vdd"]),
                            _lab_create_cmds(dirty, ZPOOL_LIST), check_mode=check_mode)
    assert res["failed"] is True
    assert res["msg"] == (
        "refusing to create pool lab: /dev/vdc1, /dev/vdd1 carry the ZFS label of pool oldpool "
        f"(guid {OLD_GUID}, exported, last used by host oldhead); it may hold data: "
        f"`zpool import` lists it and `zpool import {OLD_GUID}` brings it back. Nothing is "
        "wiped unless the pool is named: to destroy it, add oldpool or its guid "
        f"{OLD_GUID} to wipe_pools (zfs_storage_wipe_pools in the zfs_storage role)")
    assert res["refused"] == ["/dev/vdc", "/dev/vdd"]
    assert res["commands"] == []
    assert _never_wiped(table)


@pytest.mark.parametrize("state,shown", [(0, "active"), (2, "destroyed"),
                                         (7, "potentially active")])
def test_a_pool_in_any_state_must_be_named(state, shown):
    # active: imported on another host sharing the disks, or not exported
    # cleanly; destroyed: `zpool import -D` still brings it back
    dirty = {"/dev/vdc": _dirty_with_old_pool("/dev/vdc", state=state)}
    res, table = run_module(zfs_pool.main, lab_args(wipe_disks=["/dev/vdc"]),
                            _lab_create_cmds(dirty, ""))
    assert res["failed"] is True
    assert f"pool oldpool (guid {OLD_GUID}, {shown}, last used by host oldhead)" in res["msg"]
    assert _never_wiped(table)


def test_a_pool_imported_under_another_name_is_never_wiped():
    # The label still says oldpool; the pool with that guid is imported as
    # "archive" (zpool import oldpool archive).  Naming it does not help.
    dirty = {"/dev/vdc": _dirty_with_old_pool("/dev/vdc", state=0)}
    imported = f"tank\t11752398476343296015\narchive\t{OLD_GUID}\n"
    res, table = run_module(zfs_pool.main,
                            lab_args(wipe_disks=["/dev/vdc"], wipe_pools=[OLD_GUID, "archive"]),
                            _lab_create_cmds(dirty, imported))
    assert res["failed"] is True
    assert res["msg"] == (
        "refusing to create pool lab: /dev/vdc1 carries the ZFS label of pool oldpool "
        f"(guid {OLD_GUID}, active, last used by host oldhead, imported here as archive): "
        "zfs_pool never wipes a disk of an imported pool (naming it in wipe_pools does not "
        "change that); export or destroy archive by hand first if it is really to go")
    assert res["refused"] == ["/dev/vdc"]
    assert _never_wiped(table)


def test_an_exported_pool_of_the_same_name_is_named_only_by_its_guid():
    # The lab's case: tank exported (not in zpool status), site.yml run with
    # its disks in wipe_disks.  "lab" in wipe_pools reads as the new pool, so
    # it does not name the old one; the message says how to get it back.
    dirty = {d: _dirty_with_old_pool(d, name="lab") for d in ("/dev/vdb", "/dev/vdc")}
    res, table = run_module(zfs_pool.main,
                            lab_args(wipe_disks=["/dev/vdb", "/dev/vdc"], wipe_pools=["lab"]),
                            _lab_create_cmds(dirty, ZPOOL_LIST))
    assert res["failed"] is True
    assert res["msg"] == (
        "refusing to create pool lab: /dev/vdb1, /dev/vdc1 carry the ZFS label of pool lab "
        f"(guid {OLD_GUID}, exported, last used by host oldhead); it may hold data: "
        f"`zpool import` lists it and `zpool import {OLD_GUID}` brings it back. Nothing is "
        f"wiped unless the pool is named: to destroy it, add its guid {OLD_GUID} (the name lab "
        "is also the name of the pool being created, so only the guid names the old one) to "
        "wipe_pools (zfs_storage_wipe_pools in the zfs_storage role); pool lab is not imported "
        "but its disks are here: `zpool import lab` brings it back")
    assert _never_wiped(table)


def test_an_exported_pool_of_the_same_name_without_wipe_disks_says_how_to_import_it():
    dirty = {"/dev/vdb": _dirty_with_old_pool("/dev/vdb", name="lab")}
    res, _unused = run_module(zfs_pool.main, lab_args(), _lab_create_cmds(dirty, ""))
    assert res["failed"] is True
    assert res["msg"].startswith("refusing to create pool lab: 1 disk(s) are not blank")
    assert f"zfs label of pool lab (guid {OLD_GUID}, exported" in res["msg"]
    assert res["msg"].endswith(
        "; pool lab is not imported but its disks are here: `zpool import lab` brings it back")


def test_the_old_pool_named_by_guid_is_wiped_and_the_new_one_created():
    dirty = {"/dev/vdb": _dirty_with_old_pool("/dev/vdb", name="lab")}
    wipes = [[ZPOOL, "labelclear", "-f", "/dev/vdb1"], [WIPEFS, "-a", "/dev/vdb"]]
    cmds = _lab_create_cmds(dirty, "") + [Cmd(w) for w in wipes] + [
        Cmd(LAB_CREATE), Cmd([ZPOOL, "status", "-P", "lab"], out=fx("status_lab_raidz2.txt"))]
    res, _unused = run_module(zfs_pool.main,
                              lab_args(wipe_disks=["/dev/vdb"], wipe_pools=[OLD_GUID]), cmds)
    assert res["failed"] is False, res.get("msg")
    assert res["commands"] == [*wipes, LAB_CREATE]
    assert res["wiped"] == ["/dev/vdb"]


def test_only_the_named_pool_is_wiped_when_disks_hold_two():
    other = "/dev/vdd"
    dirty = {"/dev/vdc": _dirty_with_old_pool("/dev/vdc"),
             other: [Cmd(c.argv, c.rc, c.out.replace(OLD_GUID, "42"), c.err)
                     for c in _dirty_with_old_pool(other, name="scratch")]}
    res, table = run_module(zfs_pool.main,
                            lab_args(wipe_disks=["/dev/vdc", other], wipe_pools=["oldpool"]),
                            _lab_create_cmds(dirty, ""))
    assert res["failed"] is True
    assert res["msg"].startswith("refusing to create pool lab: /dev/vdd1 carries the ZFS label "
                                 "of pool scratch (guid 42, exported")
    assert "oldpool" not in res["msg"]
    assert res["refused"] == [other]
    assert _never_wiped(table)


def test_a_label_zdb_cannot_unpack_still_names_its_pool():
    # blkid (wipefs) reads the pool name and guid even when zdb -l does not
    disk = "/dev/vdc"
    cmds = [Cmd(c.argv, 2, fx("zdb_nolabel.txt")) if c.argv[:2] == [ZDB, "-l"] else c
            for c in _dirty_with_old_pool(disk)]
    res, table = run_module(zfs_pool.main, lab_args(wipe_disks=[disk]),
                            _lab_create_cmds({disk: cmds}, ""))
    assert res["failed"] is True
    assert res["msg"].startswith(f"refusing to create pool lab: /dev/vdc1 carries the ZFS label "
                                 f"of pool oldpool (guid {OLD_GUID}, unknown state)")
    assert _never_wiped(table)


def test_a_wipe_pools_entry_that_matches_nothing_warns():
    dirty = {"/dev/vdi": _dirty_ext4("/dev/vdi")}
    cmds = [*_lab_create_cmds(dirty), Cmd([WIPEFS, "-a", "/dev/vdi"]), Cmd(LAB_CREATE),
            Cmd([ZPOOL, "status", "-P", "lab"], out=fx("status_lab_raidz2.txt"))]
    res, _unused = run_module(zfs_pool.main,
                              lab_args(wipe_disks=["/dev/vdi"], wipe_pools=["tank"]), cmds)
    assert res["failed"] is False, res.get("msg")
    assert res["warnings"] == ["wipe_pools names tank, which no disk of pool lab carries a "
                               "label of; nothing was wiped for it"]


@pytest.mark.parametrize("out,rc,want", [
    ("zdb_label.txt", 0, {"name": "oldpool", "guid": OLD_GUID, "state": "exported",
                          "hostname": "oldhead"}),
    ("zdb_nolabel.txt", 2, None),
])
def test_parse_zdb_label(out, rc, want):
    assert zp.parse_zdb_label(rc, fx(out)) == want


def test_parse_zdb_label_of_a_hot_spare_names_no_pool():
    spare = ("------------------------------------\nLABEL 0\n"
             "------------------------------------\n    version: 5000\n    state: 3\n"
             "    guid: 17446018405213486321\n    labels = 0 1 2 3 \n")
    assert zp.parse_zdb_label(0, spare) == {"name": None, "guid": None, "state": "spare",
                                            "hostname": None}


def test_wipe_disk_outside_layout_is_refused():
    res, table = run_module(zfs_pool.main, lab_args(wipe_disks=["/dev/sda"]), [])
    assert res["failed"] is True
    assert res["msg"] == ("wipe_disks names /dev/sda, not in the layout of pool lab; only disks "
                          "of the layout may be wiped")
    assert table.ran == []


def test_created_pool_reading_back_differently_warns():
    cmds = [
        *_lab_create_cmds({}),
        Cmd(LAB_CREATE),
        Cmd([ZPOOL, "status", "-P", "lab"],
            out=fx("status_lab_raidz2.txt").replace("/dev/vdj1", "/dev/sdz1")),
    ]
    res, _unused = run_module(zfs_pool.main, lab_args(), cmds)
    assert res["changed"] is True
    assert res["warnings"] == [
        "pool lab was created but reads back differently, so the next run will fail: "
        "spare: wanted disk /dev/vdj is not in the pool; spare: pool has disk /dev/sdz1 that "
        "is not wanted"]


def test_zpool_create_failure_reports_stderr():
    err = "invalid vdev specification\nuse '-f' to override the following errors:\n"
    cmds = [*_lab_create_cmds({}), Cmd(LAB_CREATE, rc=1, err=err)]
    res, _unused = run_module(zfs_pool.main, lab_args(), cmds)
    assert res["failed"] is True
    assert res["msg"].startswith(f"{ZPOOL} create lab raidz2 /dev/vdb")
    assert res["msg"].endswith("failed (rc=1): invalid vdev specification\n"
                               "use '-f' to override the following errors:")


def test_status_error_other_than_missing_pool_fails():
    cmds = [Cmd([ZPOOL, "status", "-P", "lab"], rc=1,
                err="The ZFS modules are not loaded.\nTry running 'modprobe zfs' as root.\n")]
    res, _unused = run_module(zfs_pool.main, lab_args(), cmds)
    assert res["failed"] is True
    assert res["msg"] == ("zpool status -P lab failed (rc=1): The ZFS modules are not loaded.\n"
                          "Try running 'modprobe zfs' as root.")


@pytest.mark.parametrize("params,msg", [
    ({"vdevs": [{"type": "draid2:8d:40c:1s", "disks": DISKS45}]},
     "vdevs[0]: draid2:8d:40c:1s names 40 children but 45 disks are listed"),
    ({"vdevs": [{"type": "draid3:8d:12c:2s", "disks": DISKS45[:12]}]},
     "vdevs[0]: draid3:8d:12c:2s: group width 11 exceeds children - spares (12 - 2)"),
    ({"vdevs": [{"type": "raidz2", "disks": LAB[:2]}]},
     "vdevs[0]: raidz2 needs at least 3 disks, got 2"),
    ({"vdevs": [{"type": "raid5", "disks": LAB}]},
     "vdevs[0]: unknown vdev type 'raid5' (use disk, mirror, raidz1-3 or "
     "draid<P>[:<D>d][:<C>c][:<S>s])"),
    ({"vdevs": [{"type": "mirror", "disks": LAB[:2]}],
      "special": [{"type": "draid1", "disks": LAB[2:5]}]},
     "special: draid1:2d:3c:0s vdevs are not allowed in this class"),
    ({"vdevs": [{"type": "mirror", "disks": LAB[:2]}], "cache": [LAB[1]]},
     "cache[0]: /dev/vdc is already used in vdevs[0]"),
    ({"vdevs": []}, "vdevs: at least one data vdev is required"),
])
def test_layout_validation(params, msg):
    args = {"name": "lab", **params}
    res, table = run_module(zfs_pool.main, args, [])
    assert res["failed"] is True
    assert res["msg"] == msg
    assert table.ran == []


@pytest.mark.parametrize("wanted,actual,same", [
    ("/dev/disk/by-id/wwn-0x5000c500d0000001", "/dev/disk/by-id/wwn-0x5000c500d0000001-part1",
     True),
    ("/dev/sdb", "/dev/sdb1", True),
    ("/dev/vdb", "/dev/vdb1", True),
    ("/dev/nvme0n1", "/dev/nvme0n1p1", True),
    ("/dev/sdb1", "/dev/sdb1", True),
    ("/dev/sdb", "/dev/sdb2", False),
    ("/dev/sdb", "/dev/sdb11", False),
    ("/dev/disk/by-id/wwn-0x1", "/dev/disk/by-id/wwn-0x1-part2", False),
    ("/var/tmp/d1.img", "/var/tmp/d1.img", True),
])
def test_same_device(wanted, actual, same):
    assert zp.same_device(wanted, actual) is same


def test_parse_status_degraded_layout():
    parsed = zp.parse_status(fx("status_draid45_spare_in_use.txt"))
    (kind, disks), = parsed["layout"]["data"]
    assert kind == "draid2:8d:45c:1s"
    assert len(disks) == 45 and disks[7] == DISKS45[7] + "-part1"
    assert parsed["layout"]["spare"] == []  # the distributed spare belongs to the dRAID
    assert parsed["layout"]["special"] == [("mirror", tuple(d + "-part1" for d in NVME))]


def test_parse_status_without_config_fails():
    with pytest.raises(zp.LayoutError, match="no 'config:' section"):
        zp.parse_status("  pool: tank\n state: ONLINE\n")


def test_parse_status_missing_device_shown_by_guid():
    text = fx("status_draid45.txt")
    line = next(x for x in text.splitlines() if DISKS45[2] + "-part1" in x)
    guid_line = line.replace(DISKS45[2] + "-part1", "9214318012457760373".ljust(
        len(DISKS45[2]) + 6)).replace("ONLINE       0     0     0",
                                      "UNAVAIL      0     0     0  was " + DISKS45[2] + "-part1")
    parsed = zp.parse_status(text.replace(line, guid_line))
    (_kind, disks), = parsed["layout"]["data"]
    assert disks[2] == DISKS45[2] + "-part1"


RACE = "cannot create 'lab': one or more devices is currently unavailable\n"
SETTLE = ["/usr/sbin/udevadm", "settle", "--timeout=60"]


def test_create_runs_again_when_a_new_partition_is_not_there_yet():
    cmds = [*_lab_create_cmds({}),
            Cmd(LAB_CREATE, rc=1, err=RACE),
            Cmd([ZPOOL, "status", "-P", "lab"], rc=1, err="cannot open 'lab': no such pool\n"),
            Cmd(SETTLE),
            Cmd(LAB_CREATE),
            Cmd([ZPOOL, "status", "-P", "lab"], out=fx("status_lab_raidz2.txt"))]
    res, table = run_module(zfs_pool.main, lab_args(), cmds)
    assert res["failed"] is False, res.get("msg")
    assert res["created"] is True
    assert table.ran.count(LAB_CREATE) == 2
    assert res["commands"].count(LAB_CREATE) == 1
    assert len(res["warnings"]) == 1
    assert "attempt 1 of 3" in res["warnings"][0]


def test_create_gives_up_after_three_attempts():
    missing = Cmd([ZPOOL, "status", "-P", "lab"], rc=1, err="cannot open 'lab': no such pool\n")
    cmds = [*_lab_create_cmds({})]
    for _attempt in range(2):
        cmds += [Cmd(LAB_CREATE, rc=1, err=RACE), missing, Cmd(SETTLE)]
    cmds += [Cmd(LAB_CREATE, rc=1, err=RACE)]
    res, table = run_module(zfs_pool.main, lab_args(), cmds)
    assert res["failed"] is True
    assert table.ran.count(LAB_CREATE) == 3
    assert res["msg"].endswith("one or more devices is currently unavailable")


def test_create_is_not_run_again_if_the_pool_appeared():
    cmds = [*_lab_create_cmds({}),
            Cmd(LAB_CREATE, rc=1, err=RACE),
            Cmd([ZPOOL, "status", "-P", "lab"], out=fx("status_lab_raidz2.txt"))]
    res, table = run_module(zfs_pool.main, lab_args(), cmds)
    assert res["failed"] is True
    assert table.ran.count(LAB_CREATE) == 1
    assert "exists now, so it was not run again" in res["msg"]
