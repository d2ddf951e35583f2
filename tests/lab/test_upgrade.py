"""Issue 6 on the lab: an image-version upgrade, its canary, a verify failure, the waves and
the rollback, with real ZFS clones on the head and real reboots through the BMCs.

Runs last (LAB_FILE_ORDER in conftest.py): it reboots both nodes.  The package change in the
new version is a kernel: Debian's ``linux-image-cloud-amd64`` (the mirror carries one version
per flavour, so "another kernel" is another flavour; the cloud one is the smallest to unpack
and to build an initramfs for under TCG).  That one change proves the upgrade path and the
diskless boot together: the new version's /boot is served through its own TFTP bind mount,
with nothing copied, while the old version keeps serving the old kernel.  The cloud kernel has
no amdgpu module, which makes the injected verify failure a realistic one: the site check
``modinfo -F filename amdgpu`` fails on the canary, as it would on a GPU node upgraded to a
kernel without the in-tree driver.

One sequence, each step checked on the head and on the nodes themselves (and, throughout,
each node's own SSH host key: different per node, the same after every reboot and version
move, issue 22):
1. upgrade to v2 with the failing site check: v2 is a clone of v1, the canary (node01) boots
   it and fails its verify, node02 is never touched and stays on v1, nothing is promoted,
   neither node can mount the version the other boots, and prune_images.yml refuses to prune
   v2 (a node boots it);
2. the same upgrade without the failing check (the operator's "fix it and run it again"):
   the canary is verified again in place (not rebooted), node02 moves, v2 is promoted;
3. rollback.yml with both nodes in one wave: both boot v1 again, v1 is current, v2 is kept;
4. prune_images.yml -e versions=v2: the dataset, its snapshot and its TFTP mount are gone.
"""

from __future__ import annotations

import json
import time

import pytest
import yaml
from labtools import REPO, lab_cli, mount_on

pytestmark = pytest.mark.lab

NEW_KERNEL = "linux-image-cloud-amd64"
IMAGES = "tank/images/bookworm"
TFTP = "/srv/tftp/images/bookworm"
STATE = "/etc/junkyard/image-state.yml"
FAILING_CHECK = "modinfo -F filename amdgpu"


def on_node(lab, node: str) -> dict:
    """What a node runs, read on the node: its root, kernel, image version and whether the new
    kernel's package is installed in the image it booted."""
    out = lab.node_ssh(node, (
        "findmnt -n -o SOURCE,OPTIONS /; uname -r; "
        "tr ' ' '\\n' < /proc/cmdline | grep '^junkyard.image='; "
        f"dpkg-query -W -f='${{Status}}' {NEW_KERNEL} 2>/dev/null | grep -c 'ok installed' || true"
    ), timeout=60)
    assert out.returncode == 0, (node, out.stdout, out.stderr)
    lines = out.stdout.split("\n")
    source, options = lines[0].split()
    return {"root": source, "ro": "ro" in options.split(","), "kernel": lines[1],
            "image": lines[2].split("=", 1)[1], "cloud_kernel_package": lines[3] == "1"}


def state(lab) -> dict:
    res = lab.ssh(f"cat {STATE}")
    assert res.returncode == 0, res.stderr
    return yaml.safe_load(res.stdout)


def run(lab_log, playbook: str, extra: dict) -> tuple[object, float]:
    start = time.monotonic()
    res = lab_cli("run", playbook, "-e", json.dumps(extra), log=lab_log, timeout=3600)
    took = time.monotonic() - start
    with lab_log.open("a") as f:
        f.write(f"[test_upgrade] {playbook} {json.dumps(extra)}: exit {res.returncode} "
                f"in {took:.0f} s\n")
    return res, took


def host_keys(lab) -> dict[str, str]:
    """The ed25519 host key each node presents, read from the head (ssh-keyscan)."""
    res = lab.ssh("ssh-keyscan -T 20 -t ed25519 10.77.0.11 10.77.0.12 2>/dev/null")
    keys = {}
    for line in res.stdout.splitlines():
        ip, kind, key = line.split()
        keys[{"10.77.0.11": "node01", "10.77.0.12": "node02"}[ip]] = f"{kind} {key}"
    assert set(keys) == {"node01", "node02"}, res.stdout + res.stderr
    return keys


def test_upgrade_canary_failure_waves_rollback_and_prune(lab, site, lab_log):
    node01, node02 = lab.cfg.node("node01"), lab.cfg.node("node02")
    # the health test left node02 booting: both must be up on v1 first
    for node in ("node01", "node02"):
        assert lab.wait_login(node, timeout=900), f"{node} is not up"
    before = {n: on_node(lab, n) for n in ("node01", "node02")}
    old_kernel = before["node01"]["kernel"]
    for facts in before.values():
        assert facts["root"] == f"10.77.0.1:/{IMAGES}/v1" and facts["ro"], facts
        assert facts["image"] == "bookworm/v1" and not facts["cloud_kernel_package"], facts
    pid02 = lab.qemu_pid(node02)
    # Issue 22: each node presents its own host key, the one the storage play made on the
    # head and wrote for Ansible (which checks it: every lab run reached the nodes); the image
    # carries none
    keys = host_keys(lab)
    assert keys["node01"] != keys["node02"], keys
    known = (REPO / ".lab" / "known_hosts").read_text()
    for node, ip in (("node01", "10.77.0.11"), ("node02", "10.77.0.12")):
        assert any(line.startswith(f"{node},") and ip in line.split()[0].split(",")
                   and line.endswith(keys[node]) for line in known.splitlines()), known
    assert lab.ssh(f"ls /{IMAGES}/v1/etc/ssh/ | grep -c ssh_host_").stdout.strip() == "0"

    # 1. the canary boots v2 and fails the injected site check
    upgrade = {"version": "v2", "upgrade_packages": [NEW_KERNEL], "upgrade_serial": 1}
    res, took = run(lab_log, "playbooks/upgrade_rocm.yml",
                    {**upgrade, "rocm_verify_commands": [FAILING_CHECK]})
    out = res.stdout
    assert res.returncode != 0, out[-6000:]
    assert "canary: node01 v1 -> v2" in out and "wave 1: node02 v1 -> v2" in out, out[-6000:]
    assert (f"node01: site checks failed (rocm_verify_commands): [{FAILING_CHECK}] exited 1: "
            "modinfo: ERROR: Module amdgpu not found") in out, out[-6000:]
    # v2 is a clone of v1, read-only once built, with its lineage on the dataset
    zfs = lab.ssh(f"zfs get -H -o value origin,readonly,junkyard:origin {IMAGES}/v2"
                  ).stdout.split()
    assert zfs == [f"{IMAGES}/v1@v2", "on", "v1"], zfs
    # the kernel changed in v2 only; v2's /boot is served through its own bind mount
    boots = lab.ssh(
        f"readlink -f {TFTP}/v2/boot/vmlinuz; readlink -f {TFTP}/v2/boot/initrd.img; "
        f"readlink /{IMAGES}/v2/boot/vmlinuz.old; findmnt -n -o SOURCE {TFTP}/v2/boot; "
        f"readlink -f {TFTP}/v1/boot/vmlinuz").stdout.split()
    new_vmlinuz, new_initrd, old_link, source, v1_vmlinuz = boots
    assert new_vmlinuz.endswith("-cloud-amd64"), boots
    assert new_initrd.endswith(new_vmlinuz.rsplit("vmlinuz-", 1)[1]), boots
    assert old_link.endswith(old_kernel) and v1_vmlinuz.endswith(old_kernel), boots
    assert source == f"{IMAGES}/v2[/boot]", boots
    # the canary runs v2 and its kernel; node02 was never power-cycled and runs v1
    canary = on_node(lab, "node01")
    assert canary["root"] == f"10.77.0.1:/{IMAGES}/v2" and canary["ro"], canary
    assert canary["image"] == "bookworm/v2" and canary["cloud_kernel_package"], canary
    assert canary["kernel"].endswith("-cloud-amd64") and canary["kernel"] != old_kernel, canary
    assert lab.qemu_pid(node02) == pid02, "node02 was power-cycled by a stopped rollout"
    assert on_node(lab, "node02") == before["node02"]
    assert host_keys(lab) == keys, "the canary's host key changed with its image version"
    st = state(lab)
    assert st["images"]["bookworm"]["current"] == "v1", st
    assert st["images"]["bookworm"]["versions"]["v2"] == {"origin": "v1"}, st
    assert st["nodes"] == {"node01": "v2"}, st
    # the state's one writer kept the state before the canary moved (v2 recorded)
    prev = yaml.safe_load(lab.ssh(f"cat {STATE}.prev").stdout)
    assert prev["nodes"] == {} and "v2" in prev["images"]["bookworm"]["versions"], prev
    # each version is exported to the nodes that boot it only (issue 21)
    for node, other in (("node01", "v1"), ("node02", "v2")):
        res = mount_on(lab, node, f"10.77.0.1:/{IMAGES}/{other}", "ls")
        assert res.returncode != 0, f"{node} mounted {other}, which it does not boot"
        assert "access denied" in res.stderr.lower(), (node, res.stderr)
    # a version a node boots is never pruned
    res, _unused = run(lab_log, "playbooks/prune_images.yml", {"versions": ["v2"]})
    assert res.returncode != 0 and "nothing was pruned" in res.stdout, res.stdout[-4000:]
    assert lab.ssh(f"zfs list -H -o name {IMAGES}/v2").returncode == 0
    failed_took = took

    # 2. run again without the failing check: node01 verified in place, node02 moves
    pid01 = lab.qemu_pid(node01)
    res, clean_took = run(lab_log, "playbooks/upgrade_rocm.yml", upgrade)
    out = res.stdout
    assert res.returncode == 0, out[-6000:]
    assert "upgrade v1 -> v2 (version exists)" in out, out[-6000:]
    assert "verify again first (already on v2, no reboot): node01" in out, out[-6000:]
    assert "canary:" not in out and "wave 1: node02 v1 -> v2" in out, out[-6000:]
    assert "current version is now v2; moved and verified: node01, node02" in out
    assert lab.qemu_pid(node01) == pid01, "the canary was rebooted again"
    assert lab.qemu_pid(node02) != pid02, "node02 was not power-cycled"
    for node in ("node01", "node02"):
        facts = on_node(lab, node)
        assert facts["root"] == f"10.77.0.1:/{IMAGES}/v2", (node, facts)
        assert facts["kernel"] == canary["kernel"] and facts["cloud_kernel_package"], facts
    st = state(lab)
    assert (st["images"]["bookworm"]["current"], st["images"]["bookworm"]["previous"]) == (
        "v2", "v1"), st
    assert st["nodes"] == {}, st

    # 3. roll both back in one wave
    pids = {n: lab.qemu_pid(lab.cfg.node(n)) for n in ("node01", "node02")}
    res, rollback_took = run(lab_log, "playbooks/rollback.yml", {"upgrade_serial": 2})
    out = res.stdout
    assert res.returncode == 0, out[-6000:]
    assert "wave 1: node01 v2 -> v1, node02 v2 -> v1" in out, out[-6000:]
    for node in ("node01", "node02"):
        assert lab.qemu_pid(lab.cfg.node(node)) != pids[node], f"{node} was not rebooted"
        assert on_node(lab, node) == before[node], node
    assert host_keys(lab) == keys, "a host key changed across the upgrade and the rollback"
    st = state(lab)
    assert st["images"]["bookworm"]["current"] == "v1" and st["nodes"] == {}, st
    assert set(st["images"]["bookworm"]["versions"]) == {"v1", "v2"}, st  # nothing destroyed
    assert lab.ssh(f"zfs list -H -o name {IMAGES}/v2").returncode == 0

    # 4. the operator prunes v2 by name
    res, _unused = run(lab_log, "playbooks/prune_images.yml", {"versions": ["v2"]})
    assert res.returncode == 0, res.stdout[-6000:]
    gone = lab.ssh(f"zfs list -H -o name -t all -r {IMAGES}; findmnt -n {TFTP}/v2/boot; "
                   f"grep -c '{TFTP}/v2/boot' /etc/fstab").stdout
    assert f"{IMAGES}/v2" not in gone and "@v2" not in gone, gone
    assert gone.strip().endswith("0"), gone  # not mounted, not in fstab
    assert set(state(lab)["images"]["bookworm"]["versions"]) == {"v1"}
    for node in ("node01", "node02"):
        assert on_node(lab, node)["root"] == f"10.77.0.1:/{IMAGES}/v1"
    with lab_log.open("a") as f:
        f.write(f"[test_upgrade] failed canary run {failed_took:.0f} s, clean run "
                f"{clean_took:.0f} s, rollback {rollback_took:.0f} s\n")
