#!/usr/bin/env python3
"""Fill a local flat apt repository for a molecule scenario and copy it into its container.

The container never talks to a Debian mirror: this script resolves the
packages against the container's own dpkg status with a private apt
configuration on the test machine (which may reach the mirror), downloads
them into ``.cache/rocm-apt/<key>/`` (key: the container's dpkg status, the
package list and this script), writes a ``Packages`` index with dpkg-deb only,
and ``podman cp``s the result to ``/srv/junkyard-apt`` in the container.

Besides the requested packages the repository holds, so that apt's refusal of
DKMS packages can be shown on packages apt really knows:
- Debian's real ``zfs-dkms`` (contrib), without its dependencies;
- a stand-in ``amdgpu-dkms`` built here (AMD's package cannot be fetched).

Usage: apt_repo.py CONTAINER CACHE_DIR PACKAGE...
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SUITES = ("bookworm", "bookworm-updates")
KNOWN_ONLY = ("zfs-dkms",)


def run(argv, **kw):
    return subprocess.run(argv, check=True, text=True, capture_output=True, **kw)


def mirror():
    for src in sorted(Path("/etc/apt/sources.list.d").glob("*.sources")):
        for line in src.read_text().splitlines():
            if line.startswith("URIs:") and "/debian" in line and "security" not in line:
                return line.split(":", 1)[1].strip()
    return "http://deb.debian.org/debian"


def apt_options(base: Path, status: Path):
    return [
        "-o", f"Dir::Etc::SourceList={base / 'sources.list'}",
        "-o", "Dir::Etc::SourceParts=/nonexistent",
        "-o", "Dir::Etc::PreferencesParts=/nonexistent",
        "-o", f"Dir::State::Lists={base / 'lists'}",
        "-o", f"Dir::Cache={base / 'cache'}",
        "-o", f"Dir::State::status={status}",
        "-o", "APT::Install-Recommends=false",
        "-o", "Acquire::Languages=none",
    ]


def fake_deb(out: Path, name: str, version: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp, name)
        (root / "DEBIAN").mkdir(parents=True)
        (root / "DEBIAN" / "control").write_text(
            f"Package: {name}\nVersion: {version}\nArchitecture: all\n"
            "Maintainer: junkyard.cluster tests <tests@invalid>\n"
            f"Description: test stand-in for {name}\n"
            " Built by molecule/rocm/apt_repo.py; never installable on a node.\n")
        deb = out / f"{name}_{version.replace(':', '%3a')}_all.deb"
        run(["dpkg-deb", "--root-owner-group", "-b", str(root), str(deb)])


def write_index(repo: Path) -> None:
    stanzas = []
    for deb in sorted(repo.glob("*.deb")):
        control = run(["dpkg-deb", "-f", str(deb)]).stdout.rstrip("\n")
        data = deb.read_bytes()
        stanzas.append(
            f"{control}\nFilename: ./{deb.name}\nSize: {len(data)}\n"
            f"MD5sum: {hashlib.md5(data).hexdigest()}\n"
            f"SHA256: {hashlib.sha256(data).hexdigest()}\n")
    (repo / "Packages").write_text("\n".join(stanzas))


def main(argv):
    container, cache, *packages = argv
    cache = Path(cache).resolve()
    status_text = run(["podman", "exec", container, "cat", "/var/lib/dpkg/status"]).stdout
    key = hashlib.sha256("\0".join(
        [status_text, *sorted(packages), Path(__file__).read_text()]).encode()).hexdigest()[:16]
    repo = cache / key
    if not (repo / "Packages").exists():
        base = cache / "apt"
        (base / "lists" / "partial").mkdir(parents=True, exist_ok=True)
        (base / "cache" / "archives" / "partial").mkdir(parents=True, exist_ok=True)
        (base / "sources.list").write_text("".join(
            f"deb {mirror()} {suite} main contrib\n" for suite in SUITES))
        status = base / "status"
        status.write_text(status_text)
        opts = apt_options(base, status)
        run(["apt-get", *opts, "-qq", "update"])
        tmp_repo = cache / f"{key}.tmp"
        shutil.rmtree(tmp_repo, ignore_errors=True)
        (tmp_repo / "partial").mkdir(parents=True)
        run(["apt-get", *opts, "-qq", "-y", "--download-only",
             "-o", f"Dir::Cache::archives={tmp_repo}", "install", *packages])
        run(["apt-get", *opts, "-qq", "download", *KNOWN_ONLY], cwd=tmp_repo)
        fake_deb(tmp_repo, "amdgpu-dkms", "1:6.8.5.60204-2049441.22.04")
        shutil.rmtree(tmp_repo / "partial", ignore_errors=True)
        (tmp_repo / "lock").unlink(missing_ok=True)
        write_index(tmp_repo)
        shutil.rmtree(repo, ignore_errors=True)
        tmp_repo.rename(repo)
    run(["podman", "exec", container, "rm", "-rf", "/srv/junkyard-apt"])
    run(["podman", "exec", container, "mkdir", "-p", "/srv"])
    run(["podman", "cp", str(repo), f"{container}:/srv/junkyard-apt"])
    print(repo)


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except subprocess.CalledProcessError as exc:
        sys.exit(f"apt_repo: {' '.join(exc.cmd)} failed ({exc.returncode}):\n{exc.stderr}")
