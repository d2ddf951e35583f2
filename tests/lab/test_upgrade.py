"""Issues 6 and 16 on the lab: image-version upgrades, the canary, jobs that delay a move,
one rollout at a time, the automatic revert of a canary that cannot boot, the rollback and the
prune, with real ZFS clones on the head, real Slurm jobs and real reboots through the BMCs.

Runs after test_health.py (LAB_FILE_ORDER in conftest.py): it reboots both nodes.  Each step is
checked on the head and on the nodes themselves (and, throughout, each node's own SSH host
key: different per node, the same after every reboot and version move, issue 22):
1. a job of the cluster's user runs on the canary node01; the upgrade to v2 (one package more:
   ``hello``) with the defaults drains node01 and waits for the job; meanwhile a second
   upgrade is refused, naming the first run (owner and run id from the lease on the head);
   once the job ended (exit 0, by itself) node01 moves, passes its checks and the health gate
   (the image's Slurm health check: GPUs, ECC, fan daemon, writable paths, root), then node02;
   v2 is promoted;
2. a job on node01 again; the upgrade to v3 (Debian's ``linux-image-cloud-amd64``: another
   kernel, served through v3's own /boot bind mount) with a short drain timeout and the
   default busy policy (skip): the canary is skipped, given back to Slurm with its job, and
   nothing moves; v3 is built and sealed;
3. v3's cloud kernel is given an initramfs without NFS root support (the kernel has neither
   ROOT_NFS nor IP_PNP built in: without its initramfs it cannot mount its root, panics, and
   ``panic=10`` restarts it); the same upgrade again: node01 boots v3, panics, starts again;
   the head sees its third kernel fetch (a boot loop) and reverts it to v2 by itself: it
   boots v2 again, passes its checks there and is back in Slurm; the state file and node01's
   GRUB file say what happened; nothing is promoted; node02 is never touched;
4. rollback.yml with both nodes in one wave: both boot v1 again, v1 is current; a version a
   node boots is not pruned (checked before the rollback);
5. prune_images.yml -e versions=[v2,v3]: their datasets, snapshots and TFTP mounts are gone.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import time

import pytest
import yaml
from ansible_collections.junkyard.cluster.plugins.module_utils import rollout_boot, rollout_slurm
from labtools import LAB_CMD, REPO, lab_cli, mount_on

from tests.inventory_files import LAB, group_vars

pytestmark = pytest.mark.lab

NEW_KERNEL = "linux-image-cloud-amd64"
PACKAGE = "hello"
IMAGES = "tank/images/bookworm"
TFTP = "/srv/tftp/images/bookworm"
STATE = "/etc/junkyard/image-state.yml"
LEASE = "/run/junkyard/rollout.lease"
ACCESS_LOG = "/var/log/nginx/junkyard-netboot.access.log"
USER = group_vars(LAB, "all")["cluster_users"][0]["name"]
RELEASE = "/tmp/junkyard-test-release-job"
# the job runs until the test creates RELEASE on its node (at most 20 min), then exits 0
JOB = (f"for i in $(seq 1200); do if [ -e {RELEASE} ]; then exit 0; fi; "
       "sleep 1; done; exit 3")


def on_node(lab, node: str) -> dict:
    """What a node runs, read on the node: its root, kernel, image version and whether the new
    kernel's package and the upgrade's package are installed in the image it booted."""
    out = lab.node_ssh(node, (
        "findmnt -n -o SOURCE,OPTIONS /; uname -r; "
        "tr ' ' '\\n' < /proc/cmdline | grep '^junkyard.image='; "
        f"for p in {NEW_KERNEL} {PACKAGE}; do dpkg-query -W -f='${{Status}}' $p 2>/dev/null "
        "| grep -c 'ok installed' || true; done"
    ), timeout=60)
    assert out.returncode == 0, (node, out.stdout, out.stderr)
    lines = out.stdout.split("\n")
    source, options = lines[0].split()
    return {"root": source, "ro": "ro" in options.split(","), "kernel": lines[1],
            "image": lines[2].split("=", 1)[1], "cloud_kernel_package": lines[3] == "1",
            "package": lines[4] == "1"}


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


def slurm_node(lab, node: str) -> tuple[str, str]:
    """(state, reason) of a node as slurmctld has them: sinfo's long state (``draining``,
    ``drained``, ``idle``, ...) and the whole reason from scontrol."""
    out = lab.ssh(f"sinfo -h -N -n {node} -o '%T'").stdout.strip().splitlines()
    show = rollout_slurm.parse_nodes(lab.ssh(f"scontrol show node -o {node}").stdout)
    return (out[0] if out else ""), show[node]["reason"]


def submit_job(lab, node: str) -> str:
    """A job of the cluster's user on ``node`` that runs until RELEASE exists there; returns
    its id once it runs."""
    assert lab.node_ssh(node, f"rm -f {RELEASE}").returncode == 0  # left by an earlier run
    # srun, as test_slurm's jobs (a batch script exits 13 on the lab's nodes), left running
    # in the background on the head
    cmd = (f"nohup srun -w {node} -N1 -n1 --time=30 --chdir=/tmp sh -c {shlex.quote(JOB)} "
           "> /dev/null 2>&1 &")
    res = lab.ssh(f"su - {USER} -c {shlex.quote(cmd)}")
    assert res.returncode == 0, res.stdout + res.stderr

    def job_id() -> str:
        return lab.ssh(f"squeue -h -u {USER} -w {node} -o %i").stdout.strip()

    job = wait_for("the job's id", job_id, 120)
    deadline = time.monotonic() + 300
    while lab.ssh(f"squeue -h -j {job} -o %T").stdout.strip() != "RUNNING":
        assert time.monotonic() < deadline, lab.ssh(f"scontrol show job {job}").stdout
        time.sleep(3)
    return job


def wait_for(what, check, timeout: float, every: float = 3):
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(every)
    return value


def host_keys(lab) -> dict[str, str]:
    """The ed25519 host key each node presents, read from the head (ssh-keyscan)."""
    res = lab.ssh("ssh-keyscan -T 20 -t ed25519 10.77.0.11 10.77.0.12 2>/dev/null")
    keys = {}
    for line in res.stdout.splitlines():
        ip, kind, key = line.split()
        keys[{"10.77.0.11": "node01", "10.77.0.12": "node02"}[ip]] = f"{kind} {key}"
    assert set(keys) == {"node01", "node02"}, res.stdout + res.stderr
    return keys


def in_service(lab) -> None:
    """Both nodes in Slurm service before the upgrades: an earlier test leaves node01 drained by
    the health check (test_fan stops its fan daemon; the check rightly drains it and never
    resumes it) and node02 down from its power-off; the operator resumes them."""
    for node in ("node01", "node02"):
        if slurm_node(lab, node)[0].startswith(("drain", "down")):
            assert lab.ssh(f"scontrol update nodename={node} state=resume").returncode == 0
    wait_for("both nodes idle in Slurm", lambda: all(
        slurm_node(lab, n)[0] == "idle" for n in ("node01", "node02")), 300)


def job_end(lab, job: str) -> str:
    """Release the test job (it exits 0 by itself) and return its record once it ended."""
    assert lab.ssh(f"squeue -h -j {job} -o %T").stdout.strip() == "RUNNING"
    node = lab.ssh(f"squeue -h -j {job} -o %N").stdout.strip()
    assert lab.node_ssh(node, f"touch {RELEASE}").returncode == 0
    # the record is kept MinJobAge (300 s) after the end
    return wait_for("the job's end", lambda: (
        out if "JobState=COMPLETED" in (out := lab.ssh(f"scontrol show job {job}").stdout)
        or "JobState=FAILED" in out else ""), 120)


def start(lab_log, playbook: str, extra: dict, name: str):
    """A playbook run in the background (its output in a file beside the lab log)."""
    log = lab_log.with_name(f"test_upgrade-{name}.log")
    out = log.open("w")
    proc = subprocess.Popen([*LAB_CMD, "run", playbook, "-e", json.dumps(extra)], stdout=out,
                            stderr=subprocess.STDOUT, text=True, cwd=REPO)
    return proc, log, out


def finish(lab_log, proc, log, out, what: str, started: float) -> tuple[object, float]:
    try:
        proc.wait(timeout=3000)
    finally:
        if proc.poll() is None:
            proc.kill()
        out.close()
    took = time.monotonic() - started
    res = subprocess.CompletedProcess(proc.args, proc.returncode, log.read_text(), "")
    with lab_log.open("a") as f:
        f.write(f"[test_upgrade] {what}: exit {res.returncode} in {took:.0f} s\n{res.stdout}\n")
    return res, took


def kernel_fetches(lab, ip: str, since_line: int) -> list[str]:
    """The kernels ``ip`` fetched over HTTP (paths, in order) after line ``since_line`` of the
    head's access log."""
    out = lab.ssh(f"tail -n +{since_line + 1} {ACCESS_LOG}").stdout
    requests = [r for r in map(rollout_boot.parse_line, out.splitlines()) if r is not None]
    return [path for client, method, path, status in requests
            if client == ip and method == "GET" and status == 200
            and path.endswith("/boot/vmlinuz")]


def log_lines(lab) -> int:
    return int(lab.ssh(f"wc -l < {ACCESS_LOG}").stdout.strip() or 0)


def test_upgrade_jobs_lease_revert_rollback_and_prune(lab, site, lab_log):
    node01, node02 = lab.cfg.node("node01"), lab.cfg.node("node02")
    # the health test left node02 booting: both must be up on v1 first
    for node in ("node01", "node02"):
        assert lab.wait_login(node, timeout=900), f"{node} is not up"
    in_service(lab)
    before = {n: on_node(lab, n) for n in ("node01", "node02")}
    old_kernel = before["node01"]["kernel"]
    for facts in before.values():
        assert facts["root"] == f"10.77.0.1:/{IMAGES}/v1" and facts["ro"], facts
        assert facts["image"] == "bookworm/v1" and not facts["cloud_kernel_package"], facts
        assert not facts["package"], facts
    # Issue 22: each node presents its own host key, the one the storage play made on the
    # head and wrote for Ansible (which checks it: every lab run reached the nodes); the image
    # carries none
    keys = host_keys(lab)
    assert keys["node01"] != keys["node02"], keys
    known = (lab.cfg.state / "known_hosts").read_text()
    for node, ip in (("node01", "10.77.0.11"), ("node02", "10.77.0.12")):
        assert any(line.startswith(f"{node},") and ip in line.split()[0].split(",")
                   and line.endswith(keys[node]) for line in known.splitlines()), known
    assert lab.ssh(f"ls /{IMAGES}/v1/etc/ssh/ | grep -c ssh_host_").stdout.strip() == "0"
    pids = {n: lab.qemu_pid(lab.cfg.node(n)) for n in ("node01", "node02")}

    # 1. a job on the canary: the upgrade to v2 waits for it; a second upgrade is refused
    v2 = {"version": "v2", "upgrade_packages": [PACKAGE], "upgrade_serial": 1}
    job = submit_job(lab, "node01")
    started = time.monotonic()
    first = start(lab_log, "playbooks/upgrade_rocm.yml", v2, "v2")
    try:
        wait_for("node01 draining", lambda: slurm_node(lab, "node01")[0] == "draining", 900)
        lease = json.loads(lab.ssh(f"cat {LEASE}").stdout)
        res, refused_took = run(lab_log, "playbooks/upgrade_rocm.yml", {**v2, "version": "v9"})
        out = " ".join(res.stdout.split())
        assert res.returncode != 0, res.stdout[-6000:]
        assert (f"another rollout holds {LEASE}: run {lease['run_id']} by {lease['owner']} "
                "(bookworm -> v2), started") in out, res.stdout[-4000:]
        assert lab.ssh(f"zfs list -H -o name {IMAGES}/v9").returncode != 0, "v9 was cloned"
        assert first[0].poll() is None, "the first run ended while the job ran"
        assert lab.qemu_pid(node01) == pids["node01"], "node01 was power-cycled under its job"
        # the job ends (the user's work is done), by itself, unharmed: node01 moves
        record = job_end(lab, job)
        assert "JobState=COMPLETED" in record and "ExitCode=0:0" in record, record
    finally:
        res, v2_took = finish(lab_log, *first, "upgrade to v2 waiting for a job", started)
    out = res.stdout
    assert res.returncode == 0, out[-6000:]
    assert "canary: node01 v1 -> v2" in out and "wave 1: node02 v1 -> v2" in out, out[-6000:]
    for node in ("node01", "node02"):
        assert f"{node}: health gate passed" in out, out[-6000:]
        assert not slurm_node(lab, node)[0].startswith("drain"), (node, slurm_node(lab, node))
        assert lab.qemu_pid(lab.cfg.node(node)) != pids[node], f"{node} was not power-cycled"
        facts = on_node(lab, node)
        assert facts["root"] == f"10.77.0.1:/{IMAGES}/v2" and facts["image"] == "bookworm/v2"
        assert facts["package"] and facts["kernel"] == old_kernel, facts
    assert "current version is now v2; moved and verified: node01, node02" in out, out[-3000:]
    zfs = lab.ssh(f"zfs get -H -o value origin,readonly,junkyard:origin {IMAGES}/v2"
                  ).stdout.split()
    assert zfs == [f"{IMAGES}/v1@v2", "on", "v1"], zfs
    st = state(lab)
    assert (st["images"]["bookworm"]["current"], st["images"]["bookworm"]["previous"]) == (
        "v2", "v1"), st
    assert st["nodes"] == {} and not st.get("reverted"), st
    assert lab.ssh(f"test -e {LEASE}").returncode != 0, "the run kept its lease"
    assert host_keys(lab) == keys, "a host key changed with the image version"
    pids = {n: lab.qemu_pid(lab.cfg.node(n)) for n in ("node01", "node02")}

    # 2. a job on the canary, a short drain timeout, the default busy policy (skip)
    v3 = {"version": "v3", "upgrade_packages": [NEW_KERNEL], "upgrade_serial": 1}
    job = submit_job(lab, "node01")
    res, skip_took = run(lab_log, "playbooks/upgrade_rocm.yml",
                         {**v3, "image_rollout_drain_timeout": 20})
    out = " ".join(res.stdout.split())
    assert res.returncode != 0, res.stdout[-6000:]
    assert "then a node still busy is skipped" in out and f"busy now: node01 (jobs {job} (" in (
        out), res.stdout[-6000:]
    assert "the canary did not move, so no other wave moves" in out, res.stdout[-6000:]
    assert (f"v3 is not promoted: skipped, busy after the drain timeout "
            "(image_rollout_busy_policy skip; left on their version and given back to Slurm):"
            f" node01 (jobs {job} ({USER})). Moved and verified: none.") in out, out[-3000:]
    assert {n: lab.qemu_pid(lab.cfg.node(n)) for n in ("node01", "node02")} == pids
    assert lab.ssh(f"squeue -h -j {job} -o %T").stdout.strip() == "RUNNING"
    assert not slurm_node(lab, "node01")[0].startswith("drain"), slurm_node(lab, "node01")
    assert lab.ssh(f"test -e {LEASE}").returncode != 0, "the skipping run kept its lease"
    record = job_end(lab, job)
    assert "JobState=COMPLETED" in record and "ExitCode=0:0" in record, record
    # v3 was built: a clone of v2 with the new kernel (vmlinuz.old: the old one, GRUB's
    # "previous kernel" entry); v2 serves its /boot through its own bind mount, nothing copied
    # (v3's is mounted once a node boots it, step 3)
    zfs = lab.ssh(f"zfs get -H -o value origin,readonly,junkyard:origin {IMAGES}/v3"
                  ).stdout.split()
    assert zfs == [f"{IMAGES}/v2@v3", "on", "v2"], zfs
    boots = lab.ssh(
        f"readlink -f /{IMAGES}/v3/boot/vmlinuz; readlink -f /{IMAGES}/v3/boot/initrd.img; "
        f"readlink /{IMAGES}/v3/boot/vmlinuz.old; findmnt -n -o SOURCE {TFTP}/v2/boot; "
        f"readlink -f {TFTP}/v2/boot/vmlinuz").stdout.split()
    assert len(boots) == 5, boots
    new_vmlinuz, new_initrd, old_link, source, v2_vmlinuz = boots
    assert new_vmlinuz.endswith("-cloud-amd64"), boots
    assert new_initrd.endswith(new_vmlinuz.rsplit("vmlinuz-", 1)[1]), boots
    assert old_link.endswith(old_kernel) and v2_vmlinuz.endswith(old_kernel), boots
    assert source == f"{IMAGES}/v2[/boot]", boots

    # 3. v3's kernel loses its NFS root: an initramfs with nothing in it (an operator's
    # broken kernel package, made here by hand on the sealed version)
    initrd = f"/{IMAGES}/v3/boot/{new_initrd.rsplit('/', 1)[1]}"
    broke = lab.ssh(f"set -e; zfs set readonly=off {IMAGES}/v3; "
                    f"printf 'TRAILER!!!' | cpio -o -H newc 2>/dev/null | gzip > {initrd}.new; "
                    f"mv {initrd}.new {initrd}; zfs set readonly=on {IMAGES}/v3")
    assert broke.returncode == 0, broke.stdout + broke.stderr
    mark = log_lines(lab)
    res, revert_took = run(lab_log, "playbooks/upgrade_rocm.yml", v3)
    out = " ".join(res.stdout.split())
    assert res.returncode != 0, res.stdout[-6000:]
    assert "upgrade v2 -> v3 (version exists)" in out, res.stdout[-6000:]
    assert "node01 started its boot 3 times" in out, res.stdout[-6000:]
    assert ("it was reverted automatically to v2, booted it again, passed its checks there "
            "and is back in Slurm") in out, res.stdout[-6000:]
    assert "node01: health gate passed" in out, res.stdout[-6000:]
    # the head saw it: v3's kernel three times (the loop), then v2's
    fetched = kernel_fetches(lab, "10.77.0.11", mark)
    assert fetched == ["/images/bookworm/v3/boot/vmlinuz"] * 3 + [
        "/images/bookworm/v2/boot/vmlinuz"], fetched
    assert kernel_fetches(lab, "10.77.0.12", mark) == [], "node02 booted"
    assert lab.qemu_pid(node02) == pids["node02"], "node02 was power-cycled"
    assert on_node(lab, "node01")["image"] == "bookworm/v2"
    assert on_node(lab, "node01")["root"] == f"10.77.0.1:/{IMAGES}/v2"
    assert not slurm_node(lab, "node01")[0].startswith("drain"), slurm_node(lab, "node01")
    st = state(lab)
    assert st["images"]["bookworm"]["current"] == "v2" and st["nodes"] == {}, st
    rev = st["reverted"]["node01"]
    assert (rev["image"], rev["version"], rev["to"]) == ("bookworm", "v3", "v2"), rev
    assert "started its boot 3 times" in rev["reason"] and rev["at"].endswith("Z"), rev
    mac = next(nic.mac for nic in node01.nics if nic.net == "mgmt")
    grub = lab.ssh("cat /srv/tftp/grub/grub.cfg-01-" + mac.replace(":", "-")).stdout
    assert "# Reverted automatically on " in grub and "bookworm version v3" in grub, grub
    entries = [line for line in grub.splitlines() if not line.startswith("#")]
    assert any("linux '(http,10.77.0.1)/images/bookworm/v2/boot/vmlinuz'" in line
               for line in entries), grub
    assert not any("/v3/" in line for line in entries), grub
    assert lab.ssh(f"test -e {LEASE}").returncode != 0, "the reverted run kept its lease"
    assert host_keys(lab) == keys, "a host key changed across the revert"

    # 4. a version nodes boot is not pruned; roll both back to v1 in one wave
    res, _unused = run(lab_log, "playbooks/prune_images.yml", {"versions": ["v2"]})
    assert res.returncode != 0 and "nothing was pruned" in res.stdout, res.stdout[-4000:]
    pids = {n: lab.qemu_pid(lab.cfg.node(n)) for n in ("node01", "node02")}
    res, rollback_took = run(lab_log, "playbooks/rollback.yml", {"upgrade_serial": 2})
    out = res.stdout
    assert res.returncode == 0, out[-6000:]
    assert "wave 1: node01 v2 -> v1, node02 v2 -> v1" in out, out[-6000:]
    for node in ("node01", "node02"):
        assert lab.qemu_pid(lab.cfg.node(node)) != pids[node], f"{node} was not rebooted"
        assert on_node(lab, node) == before[node], node
        assert not slurm_node(lab, node)[0].startswith("drain"), (node, slurm_node(lab, node))
    assert host_keys(lab) == keys, "a host key changed across the upgrades and the rollback"
    st = state(lab)
    assert st["images"]["bookworm"]["current"] == "v1" and st["nodes"] == {}, st
    assert not st.get("reverted"), st  # node01 moved again: its revert record is done
    assert set(st["images"]["bookworm"]["versions"]) == {"v1", "v2", "v3"}, st
    # each version is exported to the nodes that boot it only (issue 21)
    res = mount_on(lab, "node01", f"10.77.0.1:/{IMAGES}/v2", "ls")
    assert res.returncode != 0 and "access denied" in res.stderr.lower(), res.stderr

    # 5. the operator prunes v2 and v3 by name
    res, _unused = run(lab_log, "playbooks/prune_images.yml", {"versions": ["v2", "v3"]})
    assert res.returncode == 0, res.stdout[-6000:]
    gone = lab.ssh(f"zfs list -H -o name -t all -r {IMAGES}; findmnt -n {TFTP}/v2/boot "
                   f"{TFTP}/v3/boot; grep -c '{TFTP}/v[23]/boot' /etc/fstab").stdout
    for version in ("v2", "v3"):
        assert f"{IMAGES}/{version}" not in gone and f"@{version}" not in gone, gone
    assert gone.strip().endswith("0"), gone  # not mounted, not in fstab
    assert set(state(lab)["images"]["bookworm"]["versions"]) == {"v1"}
    with lab_log.open("a") as f:
        f.write(f"[test_upgrade] upgrade waiting for a job {v2_took:.0f} s (the refused run "
                f"{refused_took:.0f} s), skipping run {skip_took:.0f} s, reverted run "
                f"{revert_took:.0f} s, rollback {rollback_took:.0f} s\n")
