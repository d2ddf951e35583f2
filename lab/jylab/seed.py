"""The node image seed: the lab's image tree, built natively on the lab machine.

Under software emulation the head VM needs over half an hour to debootstrap
and configure an image.  So the lab runs the very same plays
(playbooks/image_build.yml, the lab inventory) on this machine against a
chroot under the cache, with the storage head reached locally, and keeps the
finished tree as an uncompressed tar keyed by everything that shapes it.
The head VM sees the tar as a read-only disk (virtio serial ``jyseed``);
node_image unpacks it into the empty version dataset (``node_image_seed``)
and site.yml then configures the image as it would any other tree: the
in-VM run is a real re-run of the image layer, not a copy of a result.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import yaml

from . import host
from .config import REPO, Lab, LabError

# Everything that shapes the image tree: the plays, the roles they run, the
# plugins and the daemon they install, and the lab inventory.
INPUTS = (
    "ansible.cfg",
    "playbooks/image_build.yml",
    "playbooks/model.yml",
    "roles/cluster_model",
    "roles/common",
    "roles/node_image",
    "roles/stateless_root",
    "roles/node_network",
    "roles/rocm",
    "roles/gpu_fan_daemon",
    "roles/ecc_monitor",
    "plugins",
    "daemon/src",
    "inventories/lab",
    "lab/jylab/seed.py",
)
SEED_DISK_SERIAL = "jyseed"


def _files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    return sorted(p for p in path.rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc")


def seed_key(repo: Path = REPO, pubkey: bytes = b"") -> str:
    """The seed's cache key: its input files, the mirrors, the proxy port (the
    image's apt configuration names it) and the lab's SSH public key (the
    image's authorized_keys): the seed counts as the image's convergence on the
    head, so whatever the image holds must be in the key."""
    h = hashlib.sha256()
    for rel in INPUTS:
        for f in _files(repo / rel):
            for part in (str(f.relative_to(repo)).encode(), f.read_bytes()):
                h.update(len(part).to_bytes(8, "little"))
                h.update(part)
    for var in ("JUNKYARD_LAB_MIRROR", "JUNKYARD_LAB_SECURITY_MIRROR",
                "JUNKYARD_LAB_PROXY_PORT"):
        h.update(os.environ.get(var, "").encode() + b"\0")
    h.update(pubkey)
    return h.hexdigest()[:16]


def seed_path(lab: Lab) -> Path:
    pub = lab.ssh_key.with_suffix(".pub")
    return lab.cache / f"seed-{seed_key(lab.repo, pub.read_bytes() if pub.exists() else b'')}.tar"


def seed_inventory(lab: Lab, out: Path) -> Path:
    """The lab inventory with the storage head reached locally: the image plays then
    build on this machine through community.general.chroot."""
    hosts_file = lab.inventory / "hosts.yml" if lab.inventory.is_dir() else lab.inventory
    data = yaml.safe_load(hosts_file.read_text())
    heads = data["all"]["children"]["storage_head"]["hosts"]
    for name, hv in heads.items():
        hv = dict(hv or {})
        for key in [k for k in hv if k.startswith("ansible_")]:
            del hv[key]
        hv.update(ansible_connection="local", ansible_python_interpreter="/usr/bin/python3")
        heads[name] = hv
    out.mkdir(parents=True, exist_ok=True)
    (out / "hosts.yml").write_text(yaml.safe_dump(data, sort_keys=False))
    link = out / "group_vars"
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to((hosts_file.parent / "group_vars").resolve())
    return out


def _mounts_under(tree: Path) -> list[str]:
    prefix = str(tree) + "/"
    with open("/proc/mounts") as f:
        points = [line.split()[1] for line in f]
    return sorted((p for p in points if p.startswith(prefix)), key=len, reverse=True)


def _clear(tree: Path) -> None:
    """Remove a build tree, unmounting what a failed build left mounted in it first
    (rmtree across a mounted /proc or bind mount would reach outside the tree)."""
    for point in _mounts_under(tree):
        subprocess.run(["umount", "-l", point], check=False)
    if _mounts_under(tree):
        raise LabError(f"{tree}: could not unmount {', '.join(_mounts_under(tree))}")
    shutil.rmtree(tree, ignore_errors=True)


# The running seed builds: lab up builds the seed in a thread beside the head
# image, and stops it through stop_all() when it gives up.
BUILDS: set[subprocess.Popen] = set()
STOPPED = threading.Event()


def stop(proc: subprocess.Popen) -> None:
    """Stop a build's process group (ansible-playbook and its workers) if it runs."""
    host.stop_group(proc)


def stop_all() -> None:
    STOPPED.set()  # a build that has not started yet does not start
    for proc in list(BUILDS):
        stop(proc)


def ensure(lab: Lab) -> tuple[Path, bool]:
    """The cached seed tar, built if missing. Returns (path, built_now).

    JUNKYARD_LAB_SEED names a tar to use as it is (developing the image roles:
    site.yml applies their changes to the unpacked tree anyway)."""
    given = os.environ.get("JUNKYARD_LAB_SEED")
    if given:
        if not Path(given).is_file():
            raise LabError(f"JUNKYARD_LAB_SEED={given}: no such file")
        return Path(given), False
    out = seed_path(lab)
    if out.exists():
        return out, False
    lab.cache.mkdir(parents=True, exist_ok=True)
    tree = out.with_suffix(".tree")
    _clear(tree)
    tree.mkdir(parents=True)
    inventory = seed_inventory(lab, lab.state / "seed-inventory")
    log = lab.cache / "seed-build.log"
    venv = lab.repo / ".venv" / "bin"
    program = venv / "ansible-playbook"
    cmd = [str(program) if program.exists() else "ansible-playbook",
           "-i", str(inventory), "playbooks/image_build.yml",
           "-e", json.dumps({"node_image_tree_prefix": str(tree), "node_image_seed": "",
                             "node_image_allow_plain_dir": True, "cluster_image_state": {}})]
    env = dict(lab.env(), PATH=f"{venv}:{os.environ.get('PATH', '')}")
    print(f"  building the node image seed natively under {tree} (log: {log}); "
          "this takes several minutes")
    start = time.monotonic()
    try:
        with log.open("w") as f:
            f.write("+ " + " ".join(cmd) + "\n")
            f.flush()
            if STOPPED.is_set():
                raise LabError("the node image seed build was stopped (lab up gave up)")
            proc = subprocess.Popen(cmd, cwd=lab.repo, env=env, stdout=f,
                                    stderr=subprocess.STDOUT, start_new_session=True)
            BUILDS.add(proc)
            try:
                rc = proc.wait()
            finally:
                BUILDS.discard(proc)
                stop(proc)
        if rc != 0:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
            raise LabError(f"building the node image seed failed (exit {rc}); log {log}:\n{tail}")
        roots = sorted(p.parents[2] for p in tree.glob("**/etc/junkyard/image.conf"))
        if len(roots) != 1:
            raise LabError(f"{tree}: expected one built image tree, found {len(roots)}: "
                           f"{', '.join(map(str, roots)) or 'none'}")
        if _mounts_under(tree):
            raise LabError(f"{tree}: still mounted after the build: "
                           f"{', '.join(_mounts_under(tree))}")
        tmp = out.with_suffix(".tar.tmp")
        res = subprocess.run(["tar", "--create", f"--file={tmp}", "--numeric-owner",
                              "--xattrs", "--xattrs-include=*", f"--directory={roots[0]}", "."],
                             capture_output=True, text=True, check=False)
        if res.returncode != 0:
            raise LabError(f"tar of {roots[0]} failed: {res.stderr.strip()[-500:]}")
        tmp.rename(out)
    finally:
        _clear(tree)
    for old in lab.cache.glob("seed-*.tar"):
        if old != out:
            old.unlink(missing_ok=True)
    size = out.stat().st_size / 2**20
    print(f"  node image seed built in {time.monotonic() - start:.0f}s ({size:.0f} MiB)")
    return out, True
