"""Issue 4, "the storage head", on the lab head VM: real ZFS, real kernel NFS.

Runs after test_site.py (file order): the pool, datasets and exports are the
ones site.yml made from inventories/lab, and the nodes are up to mount them.
"""

from __future__ import annotations

import json
import sys

import pytest
import yaml
from ansible_collections.junkyard.cluster.plugins.module_utils import draid
from labtools import REPO, lab_cli

pytestmark = pytest.mark.lab

LAB_VARS = yaml.safe_load((REPO / "inventories/lab/group_vars/all/cluster.yml").read_text())
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
                name = f"tank/nodes/{node}/{w['path'].strip('/').replace('/', '-')}"
                assert name in rows, (name, sorted(rows))
    assert rows["tank/images/bookworm/v1"][0] == "off", rows["tank/images/bookworm/v1"]
    assert rows["tank/data/scratch"][1] == "1M", rows["tank/data/scratch"]
    snaps = head(lab, "zfs list -H -t snapshot -o name -r tank/images")
    assert "tank/images/bookworm/v1@v1" in snaps.split(), snaps


def mount_on(lab, node: str, source: str, then: str) -> object:
    """Mount source on node at a scratch point, run then, unmount; the result of it all."""
    cmd = (f"set -e; d=$(mktemp -d); "
           f"trap 'cd /; umount $d 2>/dev/null || true; rmdir $d' EXIT; "
           f"mount -t nfs -o vers=3,tcp,nolock,soft,timeo=50,retrans=1 {source} $d; "
           f"cd $d; {then}")
    return lab.node_ssh(node, cmd)


def test_a_node_mounts_its_own_dataset_read_write(lab, site):
    res = mount_on(lab, "node01", "10.77.0.1:/tank/nodes/node01/var-log",
                   "echo ok > rw-probe && cat rw-probe && rm rw-probe")
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stdout + res.stderr


def test_a_node_mounts_the_image_read_only(lab, site):
    res = mount_on(lab, "node01", "10.77.0.1:/tank/images/bookworm/v1",
                   "test -x bin/sh && touch ro-probe")
    assert res.returncode != 0
    assert "Read-only file system" in res.stderr, res.stderr


def test_a_node_is_refused_another_nodes_dataset(lab, site):
    res = mount_on(lab, "node01", "10.77.0.1:/tank/nodes/node02/var-log", "ls")
    assert res.returncode != 0
    assert "access denied" in res.stderr.lower(), res.stderr


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


def test_exports_are_least_privilege(lab, site):
    out = head(lab, "exportfs -v")
    flat = " ".join(out.split())
    assert "/tank/images/bookworm/v1 10.77.0.0/24(" in flat and "ro," in flat, out
    assert "/tank/nodes/node01/var-log 10.77.0.11(" in flat, out
    assert "/tank/data/scratch 10.78.0.0/24(" in flat, out
    assert "10.78.0.0/24" not in flat.split("/tank/data/scratch", maxsplit=1)[0], out


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
