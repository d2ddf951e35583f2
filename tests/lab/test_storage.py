"""Issue 4, "the storage head", on the lab head VM: real ZFS, real kernel NFS.

Runs after test_site.py (file order): the pool, datasets and exports are the
ones site.yml made from inventories/lab, and the nodes are up to mount them.
"""

from __future__ import annotations

import json
import re
import sys

import pytest
from ansible_collections.junkyard.cluster.plugins.module_utils import draid, upgrade_plan
from labtools import lab_cli, mount_on

from tests.inventory_files import LAB, group_vars

pytestmark = pytest.mark.lab

LAB_VARS = group_vars(LAB, "all")
POOL = LAB_VARS["cluster_pool"]
MIB = 1024 * 1024


def head(lab, command: str, timeout: float = 300):
    res = lab.ssh(command, timeout=timeout)
    assert res.returncode == 0, f"{command}: {res.stdout}{res.stderr}"
    return res.stdout


def test_pool_has_the_inventory_layout(lab, site):
    status = head(lab, f"zpool status -P {POOL['name']}")
    vdev = POOL["vdevs"][0]
    name = (f"draid{vdev['parity']}:{vdev['data']}d:{len(vdev['disks'])}c:"
            f"{vdev['spares']}s-0")
    assert name in status, status
    for disk in vdev["disks"] + POOL["special"][0]["disks"]:
        assert f"{disk}-part1" in status, (disk, status)
    assert "special" in status and "mirror-1" in status, status
    props = head(lab, f"zpool get -H -p -o value ashift {POOL['name']}; "
                      f"zfs get -H -o value compression,atime {POOL['name']}").split()
    assert props == [str(POOL["ashift"]), "lz4", "off"], props


def test_datasets_follow_the_model(lab, site):
    out = head(lab, "zfs list -H -o name,acltype,recordsize,readonly -r tank")
    rows = {line.split("\t")[0]: line.split("\t")[1:] for line in out.splitlines()}
    for node in ("node01", "node02"):
        for w in LAB_VARS["cluster_writable_paths"]:
            if w["kind"] == "persistent":
                leaf = w.get("name") or w["path"].strip("/").replace("/", "-")
                name = f"tank/nodes/{node}/{leaf}"
                assert name in rows, (name, sorted(rows))
    assert rows["tank/images/bookworm/v1"][0] == "off", rows["tank/images/bookworm/v1"]
    assert rows["tank/data/scratch"][1] == "1M", rows["tank/data/scratch"]
    snaps = head(lab, "zfs list -H -t snapshot -o name -r tank/images")
    assert "tank/images/bookworm/v1@v1" in snaps.split(), snaps


def test_a_node_mounts_its_own_dataset_read_write(lab, site):
    res = mount_on(lab, "node01", "10.77.0.1:/tank/nodes/node01/var-log",
                   "echo ok > rw-probe && cat rw-probe && rm rw-probe")
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stdout + res.stderr


def test_a_node_mounts_the_image_read_only(lab, site):
    res = mount_on(lab, "node01", "10.77.0.1:/tank/images/bookworm/v1",
                   "test -x bin/sh && touch ro-probe")
    assert res.returncode != 0
    assert "Read-only file system" in res.stderr, res.stderr


@pytest.mark.parametrize("path", ["var-log", "ssh-host-keys"])
def test_a_node_is_refused_another_nodes_dataset(lab, site, path):
    res = mount_on(lab, "node01", f"10.77.0.1:/tank/nodes/node02/{path}", "ls")
    assert res.returncode != 0
    assert "access denied" in res.stderr.lower(), res.stderr


def test_a_node_reads_its_own_host_key_from_its_own_dataset(lab, site):
    res = lab.node_ssh("node01", "findmnt -n -o SOURCE /var/lib/ssh-host-keys; "
                                 "stat -c '%a %U' /var/lib/ssh-host-keys/ssh_host_ed25519_key; "
                                 "sshd -T | grep -i '^hostkey '")
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.split("\n")[:3] == [
        "10.77.0.1:/tank/nodes/node01/ssh-host-keys", "600 root",
        "hostkey /var/lib/ssh-host-keys/ssh_host_ed25519_key"], res.stdout


def test_science_data_is_served_on_the_data_network_only(lab, site):
    # mounted read-write, but root is squashed to nobody: the dataset's root
    # directory (root's, 0755) refuses its write
    res = mount_on(lab, "node01", "10.78.0.1:/tank/data/scratch",
                   "awk -v d=\"$d\" '$2 == d {print $4}' /proc/mounts; touch squash-probe")
    assert res.returncode != 0
    assert res.stdout.split(",")[0] == "rw", res.stdout
    assert "Permission denied" in res.stderr, res.stderr
    res = mount_on(lab, "node01", "10.77.0.1:/tank/data/scratch", "ls")
    assert res.returncode != 0, "the data set must not be exported to the management network"
    assert "access denied" in res.stderr.lower(), res.stderr


def exported(lab) -> dict[str, dict[str, list[str]]]:
    """The NFS server's live export table: path -> client -> options (exportfs -v)."""
    flat = " ".join(head(lab, "exportfs -v").split())
    table: dict[str, dict[str, list[str]]] = {}
    for path, client, options in re.findall(r"(/\S+) ([^\s(]+)\(([^)]*)\)", flat):
        table.setdefault(path, {})[client] = options.split(",")
    return table


def test_exports_are_least_privilege(lab, site):
    table = exported(lab)
    image = table["/tank/images/bookworm/v1"]
    # the head and the nodes that boot the version; nobody else on either subnet
    assert sorted(image) == ["10.77.0.1", "10.77.0.11", "10.77.0.12"], table
    assert all("ro" in o and "no_root_squash" in o for o in image.values()), image
    assert list(table["/tank/nodes/node01/var-log"]) == ["10.77.0.11"], table
    assert sorted(table["/tank/data/scratch"]) == ["10.78.0.11", "10.78.0.12"], table
    assert all("root_squash" in o for o in table["/tank/data/scratch"].values()), table
    # mp: a dataset that is not mounted is not exported as the directory beneath it
    for path, clients in table.items():
        for client, options in clients.items():
            assert "mountpoint" in options or "mp" in options, (path, client, options)


def test_the_data_network_cannot_mount_a_root_image(lab, site):
    res = mount_on(lab, "node01", "10.78.0.1:/tank/images/bookworm/v1", "ls")
    assert res.returncode != 0, "an image version must not be exported to the data network"
    assert "access denied" in res.stderr.lower(), res.stderr


SPARE = "/dev/disk/by-id/virtio-jydisk15"


def test_a_disk_holding_ext4_is_refused_and_its_data_kept(lab, site, lab_log):
    head(lab, f"wipefs -a -q {SPARE}; mkfs.ext4 -q -F -L keepme {SPARE} && "
              f"d=$(mktemp -d) && mount {SPARE} $d && echo precious > $d/data && "
              f"umount $d && rmdir $d")
    args = json.dumps({"name": "probe", "ashift": 12,
                       "vdevs": [{"type": "disk", "disks": [SPARE]}]})
    res = lab_cli("ansible", "head", "-m", "junkyard.cluster.zfs_pool", "-a", args,
                  log=lab_log, timeout=600)
    assert res.returncode != 0, res.stdout
    assert "virtio-jydisk15" in res.stdout and "ext4" in res.stdout, res.stdout
    assert "probe" not in head(lab, "zpool list -H -o name").split()
    kept = head(lab, f"d=$(mktemp -d) && mount -o ro {SPARE} $d && cat $d/data && "
                     f"umount $d && rmdir $d")
    assert kept.strip() == "precious"


# dRAID layouts over sparse files on the head: (parity, data, children, spares)
LAYOUTS = [(2, 4, 11, 1), (1, 4, 6, 0), (2, 6, 12, 0), (3, 8, 14, 2)]
FILE_SIZE = 1024 * MIB


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda lo: "draid{}:{}d:{}c:{}s".format(*lo))
def test_planner_capacity_equals_zfs_list(lab, layout):
    parity, data, children, spares = layout
    name = draid.draid_name(parity, data, children, spares)
    files = " ".join(f"/var/tmp/jyplan/f{i:02d}" for i in range(children))
    out = head(lab, f"mkdir -p /var/tmp/jyplan && truncate -s {FILE_SIZE} {files} && "
                    f"zpool create -o ashift=12 jyplan {name} {files} && "
                    f"zfs list -Hp -o used,avail jyplan; zpool destroy jyplan; "
                    f"rm -rf /var/tmp/jyplan")
    used, avail = (int(x) for x in out.split())
    model = draid.pool_space(FILE_SIZE, data, parity, children, spares, 12)
    sys.stderr.write(f"\n[{name} over {children} x {FILE_SIZE} B files: zfs list "
                     f"{used + avail}, planner {model.usable}, difference "
                     f"{used + avail - model.usable}]\n")
    assert used + avail == model.usable


@pytest.mark.parametrize("node", ["node01", "node02"])
def test_persistent_writable_mounts_are_nosuid_nodev(lab, site, node):
    # Issue 21: a node's own dataset is writable by root on the node, so a
    # setuid binary or a device node written there must not take effect.
    for w in LAB_VARS["cluster_writable_paths"]:
        if w["kind"] != "persistent":
            continue
        res = lab.node_ssh(node, f"findmnt -n -o FSTYPE,OPTIONS --mountpoint {w['path']}")
        assert res.returncode == 0, f"{node} {w['path']}: {res.stdout}{res.stderr}"
        fstype, options = res.stdout.split()
        assert fstype.startswith("nfs"), (w["path"], res.stdout)
        assert {"rw", "nosuid", "nodev"} <= set(options.split(",")), (w["path"], options)


PRUNE_CASES = [
    # pruned together: the clone first, then its parent and the snapshot it came from
    (["v2", "v3"], {"v1": "-"}),
    # the clone stays: promoted, it takes v2's origin v1@v2, which stays
    (["v2"], {"v1": "-", "v1@v2": "-", "v3": "v1@v2", "v3@v3": "-"}),
    # the first two go, the last stays with the snapshots it needs
    (["v1", "v2"], {"v3": "-", "v3@v2": "-", "v3@v3": "-"}),
]


@pytest.mark.parametrize(("pruned", "left"), PRUNE_CASES, ids=["chain", "keep-clone", "keep-last"])
def test_prune_steps_run_on_real_zfs(lab, site, pruned, left):
    """upgrade_plan's prune steps for versions cloned from each other (v1 <- v2 <- v3, as
    upgrades make them) run on the head's ZFS without an error and leave what they say, on
    scratch datasets of the pool (the first cut destroyed a snapshot a promoted clone had
    just taken as its origin)."""
    base = f"{POOL['name']}/junkyard-test-prune"
    head(lab, f"zfs destroy -r {base} 2>/dev/null; zfs create -o canmount=off {base}; "
              f"zfs create -o canmount=off {base}/v1; zfs snapshot {base}/v1@v2; "
              f"zfs clone -o canmount=off {base}/v1@v2 {base}/v2; zfs snapshot {base}/v2@v3; "
              f"zfs clone -o canmount=off {base}/v2@v3 {base}/v3")
    try:
        origins = dict(line.split("\t") for line in head(
            lab, f"zfs list -H -o name,origin -r {base}").splitlines())
        txg = dict(line.split("\t") for line in head(
            lab, f"zfs list -H -p -t snapshot -o name,createtxg -r {base}").splitlines())
        steps = upgrade_plan.prune_steps_many([f"{base}/{v}" for v in pruned], origins, txg)
        for action, name in steps:
            head(lab, f"zfs promote {name}" if action == "promote"
                 else f"zfs destroy -r {name}" if "@" not in name else f"zfs destroy {name}")
        now = dict(line.split("\t") for line in head(
            lab, f"zfs list -H -t all -o name,origin -r {base}").splitlines())
        assert now == {base: "-", **{f"{base}/{k}": (f"{base}/{v}" if v != "-" else v)
                                     for k, v in left.items()}}, (steps, now)
    finally:
        lab.ssh(f"zfs destroy -r {base}")
