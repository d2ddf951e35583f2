"""Issue 21 on the lab: the disks of an exported pool are never wiped by accident.

Runs after every other test that needs the nodes (LAB_FILE_ORDER in conftest.py):
it stops NFS and exports the pool under the booted nodes, so a failure here
cannot take the nodes away from the storage, health and upgrade tests.
"""

from __future__ import annotations

import json

import pytest
from labtools import lab_cli

from tests.inventory_files import LAB, group_vars

pytestmark = pytest.mark.lab

LAB_VARS = group_vars(LAB, "all")
POOL = LAB_VARS["cluster_pool"]


def head(lab, command: str, timeout: float = 300):
    res = lab.ssh(command, timeout=timeout)
    assert res.returncode == 0, f"{command}: {res.stdout}{res.stderr}"
    return res.stdout


def test_disks_of_an_exported_pool_are_not_wiped(lab, site, lab_log):
    """Issue 21: `zpool export tank`, then the storage play with every disk of
    tank in zfs_storage_wipe_disks: refused, naming the pool; `zpool import`
    brings tank back with a file written before.

    Runs after the upgrade test: NFS is stopped while tank is exported (the nodes'
    hard NFS mounts wait, then resume), and everything is put back in the
    finally clause even when an assertion fails."""
    pool = POOL["name"]
    disks = [d for v in POOL["vdevs"] + POOL["special"] for d in v["disks"]]
    guid = head(lab, f"zpool get -H -o value guid {pool}").strip()
    scratch = head(lab, f"zfs get -H -o value mountpoint {pool}/data/scratch").strip()
    head(lab, f"echo precious-{guid} > {scratch}/export-probe && sync")
    tftp = LAB_VARS.get("cluster_tftp_root", "/srv/tftp").rstrip("/") + "/"
    # the /boot bind mounts of the images (netboot) and Prometheus (its data on
    # <pool>/metrics) keep the pool busy
    binds = [t for t in head(lab, "findmnt -rn -t zfs -o TARGET").split() if t.startswith(tftp)]
    try:
        head(lab, "service nfs-kernel-server stop; service prometheus stop; "
                  + "".join(f"umount {t}; " for t in reversed(binds))
                  + f"zpool export {pool}")
        assert pool not in head(lab, "zpool list -H -o name").split()
        args = json.dumps({"zfs_storage_wipe_disks": disks})
        # only the model and zfs_storage, on the head; results as JSON (one
        # line per message: the YAML format folds long messages)
        res = lab_cli("run", "playbooks/storage.yml", "--limit", "head",
                      "--tags", "role::zfs_storage", "-e", args, log=lab_log, timeout=1200,
                      env={"ANSIBLE_CALLBACK_RESULT_FORMAT": "json"})
        out = res.stdout + res.stderr
        assert res.returncode != 0, out[-4000:]
        assert f"refusing to create pool {pool}:" in out, out[-4000:]
        assert f"ZFS label of pool {pool} (guid {guid}, exported" in out, out[-4000:]
        assert f"add its guid {guid}" in out and "zfs_storage_wipe_pools" in out, out[-4000:]
        assert f"`zpool import {pool}` brings it back" in out, out[-4000:]
        assert "virtio-jydisk01" in out, out[-4000:]
        # nothing was cleared: the pool is still complete and importable
        listing = head(lab, "zpool import -d /dev/disk/by-id")
        assert f"pool: {pool}" in listing and f"id: {guid}" in listing, listing
        assert "state: ONLINE" in listing, listing
    finally:
        lab.ssh(f"zpool list -H -o name {pool} >/dev/null 2>&1 || "
                f"zpool import -d /dev/disk/by-id {pool}; "
                + "".join(f"mount {t}; " for t in binds)
                + "service nfs-kernel-server start; service prometheus start", timeout=300)
    assert head(lab, f"cat {scratch}/export-probe").strip() == f"precious-{guid}"
    head(lab, f"rm {scratch}/export-probe")
    status = head(lab, f"zpool status -P {pool}")
    assert "state: ONLINE" in status and f"{disks[0]}-part1" in status, status
    for node in lab.nodes:  # their NFS root and writable paths came back
        assert lab.wait_login(node, timeout=600) is not None, f"{node.name} did not recover"
