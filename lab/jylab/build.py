"""Cached build artefacts: the head's pristine disk image, kernel and initrd."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from pathlib import Path

from . import host
from .config import LAB_DIR, Lab, LabError

BUILD_SCRIPT = LAB_DIR / "build-head.sh"
PACKAGES = LAB_DIR / "head-packages.txt"
# installed into the head image by BUILD_SCRIPT
ZIPCACHE = LAB_DIR / "jylab" / "zipcache.py"
ARTEFACTS = ("head.img", "vmlinuz", "initrd.img", "manifest")


def kernel_candidate() -> str:
    """The guest kernel apt would install now (part of the cache key), if apt knows."""
    try:
        res = subprocess.run(["apt-cache", "policy", "linux-image-amd64"], capture_output=True,
                             text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    for line in res.stdout.splitlines():
        if line.strip().startswith("Candidate:"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def head_key() -> str:
    h = hashlib.sha256()
    for part in (BUILD_SCRIPT.read_bytes(), PACKAGES.read_bytes(), ZIPCACHE.read_bytes(),
                 kernel_candidate().encode(),
                 os.environ.get("JUNKYARD_LAB_MIRROR", "").encode(),
                 os.environ.get("JUNKYARD_LAB_HEAD_SIZE", "").encode()):
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()[:16]


def head_dir(lab: Lab) -> Path:
    return lab.cache / f"head-{head_key()}"


def ensure_head(lab: Lab) -> tuple[Path, bool]:
    """The cached head artefacts, built if missing. Returns (dir, built_now)."""
    out = head_dir(lab)
    if all((out / a).exists() for a in ARTEFACTS):
        return out, False
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    log = lab.cache / "build-head.log"
    print(f"  building the head image into {out} (log: {log}); this takes several minutes")
    start = time.monotonic()
    with log.open("w") as f:
        proc = subprocess.Popen(["bash", str(BUILD_SCRIPT), str(tmp), str(PACKAGES)],
                                stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait()
        except BaseException:
            host.stop_group(proc)  # the build runs in its own session: all of it stops
            raise
    if rc != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        raise LabError(f"building the head image failed (exit {rc}); log {log}:\n{tail}")
    for line in log.read_text().splitlines():
        if line.startswith("[build-head"):
            print("   ", line)
    # drop the scratch root tree if the script did not; keep only the artefacts
    shutil.rmtree(tmp / "root", ignore_errors=True)
    tmp.rename(out)
    for old in lab.cache.glob("head-*"):
        if old != out and old.is_dir() and not old.name.endswith(".tmp"):
            shutil.rmtree(old, ignore_errors=True)
    print(f"  head image built in {time.monotonic() - start:.0f}s")
    return out, True


def manifest(path: Path) -> dict[str, str]:
    out = {}
    for line in (path / "manifest").read_text().splitlines():
        key, _sep, value = line.partition("=")
        out[key] = value
    return out


def make_run_disks(lab: Lab, head: Path) -> tuple[Path, list[Path]]:
    """A qcow2 overlay over the pristine head image and fresh sparse data disks."""
    run = lab.state / "disks"
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir(parents=True)
    overlay = run / "head.qcow2"
    res = subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", str(head / "head.img"),
                          "-F", "raw", str(overlay)], capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise LabError(f"qemu-img create failed: {res.stderr.strip()}")
    disks = []
    for i in range(1, lab.disks + 1):
        disk = run / f"jydisk{i:02d}.raw"
        with disk.open("wb") as f:
            f.truncate(lab.disk_size_mib * 1024 * 1024)
        disks.append(disk)
    return overlay, disks
