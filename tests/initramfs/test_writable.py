"""The initramfs writable-path script against a fake read-only root.

Each case renders the table with the image filters from the lab's cluster
model, runs roles/stateless_root/.../junkyard-writable.sh in a privileged
podman container (busybox sh, klibc mount/nfsmount, as in the initramfs; no
network: --network=none) and checks the mounts, the console messages and the
markers it leaves.  There is no NFS server here (and this kernel has no NFS):
persistent mounts are pointed at an invalid or an unreachable (127.0.0.1)
server, which is exactly the failure the policies are for.
"""

from __future__ import annotations

import copy
import hashlib
import os
import re
import subprocess
from pathlib import Path

import pytest
from ansible_collections.junkyard.cluster.plugins.filter.image import writable_table
from ansible_collections.junkyard.cluster.plugins.module_utils.cluster_model import build_model

from tests.conftest import REPO
from tests.unit.test_cluster_model import lab_data

HERE = Path(__file__).resolve().parent
SCRIPT = (REPO / "roles/stateless_root/files/initramfs-tools/scripts/init-bottom"
          / "junkyard-writable.sh")
ENV = dict(os.environ, CONTAINERS_CONF=str(REPO / "molecule" / "containers.conf"))


@pytest.fixture(scope="session")
def harness_image():
    subprocess.run([str(REPO / "tools" / "build-test-image")], check=True, cwd=REPO, env=ENV,
                   capture_output=True)
    base = subprocess.run(["podman", "image", "inspect", "--format", "{{.Id}}",
                           "localhost/junkyard-openrc:latest"], env=ENV, check=True,
                          capture_output=True, text=True).stdout.strip()
    # A new base image or a changed recipe builds a new harness image.
    digest = hashlib.sha256((HERE / "Containerfile").read_bytes() + base.encode()).hexdigest()[:12]
    name = f"localhost/junkyard-initramfs-harness:{digest}"
    if subprocess.run(["podman", "image", "exists", name], env=ENV, check=False).returncode != 0:
        subprocess.run(["podman", "build", "-q", "-t", name, "-f", str(HERE / "Containerfile"),
                        str(HERE)], check=True, env=ENV, capture_output=True)
    return name


def lab_model(policy="stop", paths=None):
    data = lab_data()
    data["cluster"]["writable_failure_policy"] = policy
    if paths is not None:
        data["cluster"]["writable_paths"] = paths
    model, errors = build_model(copy.deepcopy(data))
    assert errors == []
    return model


class Run:
    def __init__(self, out: str):
        self.out = out
        sections = dict(re.findall(r"^--- (\w+)(?: (\d+))?\n", out, re.M))
        self.rc = int(sections["rc"])
        self.script = out.split("--- script\n", 1)[1].split("--- rc", 1)[0]
        block = out.split("--- mounts\n", 1)[1].split("--- files\n", 1)[0]
        self.mounts = {}
        for line in block.splitlines():
            path, fstype, opts = line.split(" ", 2)
            self.mounts[path] = (fstype, opts)
        self.files = out.split("--- files\n", 1)[1].split("--- probes\n", 1)[0]
        self.probes = out.split("--- probes\n", 1)[1].split("--- end", 1)[0]

    def file_lines(self, name):
        return [line.split(": ", 1)[1] for line in self.files.splitlines()
                if line.startswith(name + ": ")]


def run_case(image, tmp_path, table, cmdline, max_panics=1):
    case = tmp_path / "case"
    case.mkdir(parents=True)
    (case / "writable.conf").write_text(table)
    proc = subprocess.run(
        ["podman", "run", "--rm", "--privileged", "--network=none",
         "-v", f"{case}:/case:ro", "-v", f"{SCRIPT}:/scripts/junkyard-writable:ro",
         "-v", f"{HERE / 'harness.sh'}:/harness.sh:ro",
         image, "/bin/sh", "/harness.sh", cmdline, str(max_panics)],
        env=ENV, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return Run(proc.stdout)


CMDLINE = ("root=/dev/nfs nfsroot=10.77.0.1:/tank/images/bookworm/v1,vers=3,tcp "
           "ip=10.77.0.11:::255.255.255.0:node01::off ro junkyard.node={node} "
           "junkyard.image=bookworm/v1 console=ttyS0,115200")

NO_PERSISTENT = [
    {"path": "/tmp", "kind": "tmpfs", "size": "64m"},
    {"path": "/var/lib/dhcp", "kind": "tmpfs"},
    {"path": "/run/junkyard", "kind": "tmpfs"},
    {"path": "/etc/ssh", "kind": "overlay"},
]


def test_tmpfs_and_overlay_mount_over_the_read_only_root(harness_image, tmp_path):
    # The model adds every node's host-key dataset, a persistent path; with no
    # NFS server here it falls back (policy tmpfs) and the other kinds are seen.
    table = writable_table(lab_model("tmpfs", paths=NO_PERSISTENT), attempts=1, timeout=1)
    table = _point_at(table, "nfs-server.invalid")
    r = run_case(harness_image, tmp_path, table, CMDLINE.format(node="node01"))
    assert r.rc == 0, r.out
    assert [line.split(" ", 1)[0] for line in r.file_lines("run/junkyard-writable/degraded")] \
        == ["/var/lib/ssh-host-keys"]
    assert r.mounts["/fake/root/tmp"][0] == "tmpfs"
    # size from the inventory, mode and owner from the image directory
    assert re.search(r"size=65536k", r.mounts["/fake/root/tmp"][1]), r.mounts
    assert "mode=755" in r.mounts["/fake/root/var/lib/dhcp"][1]
    assert "nosuid" in r.mounts["/fake/root/tmp"][1]
    assert r.mounts["/fake/root/var/lib/dhcp"][0] == "tmpfs"
    # /run paths go under the initramfs's /run, which init moves to the root
    assert r.mounts["/fake/run/junkyard"][0] == "tmpfs"
    assert "/fake/root/run/junkyard" not in r.mounts
    fstype, opts = r.mounts["/fake/root/etc/ssh"]
    assert fstype == "overlay"
    assert "lowerdir=/fake/root/etc/ssh" in opts
    assert "upperdir=/fake/run/junkyard-writable/overlay/etc-ssh/upper" in opts
    # the overlay keeps the image's files and accepts the node's; the rest of
    # the root stays read-only
    assert "write etc/ssh ok" in r.probes
    assert "etc/ssh key: image-key" in r.probes
    assert "write srv refused" in r.probes
    assert "mode /fake/root/tmp 1777 0:0" in r.probes
    assert r.file_lines("run/junkyard-writable/node") == ["node01"]
    assert r.file_lines("run/junkyard-writable/mounted") == [
        "/tmp tmpfs", "/var/lib/dhcp tmpfs", "/run/junkyard tmpfs", "/etc/ssh overlay",
        "/var/lib/ssh-host-keys tmpfs-fallback"]
    assert "PANIC" not in r.script
    assert ("junkyard-writable: node node01 mounted: /tmp(tmpfs) /var/lib/dhcp(tmpfs) "
            "/run/junkyard(tmpfs) /etc/ssh(overlay)") in r.script


def _point_at(table, server):
    return table.replace("10.77.0.1:/tank/nodes/", f"{server}:/tank/nodes/")


def test_stop_policy_panics_with_the_reason_and_retries(harness_image, tmp_path):
    table = _point_at(writable_table(lab_model("stop"), attempts=1), "nfs-server.invalid")
    r = run_case(harness_image, tmp_path, table, CMDLINE.format(node="node01"), max_panics=2)
    assert r.rc == 77, r.out  # the panic stub ended the script on the 2nd panic
    why = ("cannot mount nfs-server.invalid:/tank/nodes/node01/var-log on /var/log "
           "(NFS, 1 attempts, 60s each)")
    assert f"junkyard-writable: FATAL: {why}" in r.script
    assert "FATAL: /var/log must be persistent (policy stop); refusing to boot" in r.script
    # leaving the panic shell retried the mount, then panicked again
    assert r.file_lines("panics") == [f"junkyard-writable: {why}"] * 2
    assert "/fake/root/var/log" not in r.mounts
    assert "write var/log refused" in r.probes
    # the console message also went to the kernel log
    assert any(why in line for line in r.file_lines("kmsg"))
    # nothing after the failing path was mounted behind the operator's back
    assert "/fake/root/tmp" not in r.mounts


def test_tmpfs_policy_falls_back_and_leaves_a_marker(harness_image, tmp_path):
    # 127.0.0.1 has no NFS server: nfsmount keeps retrying until the timeout.
    table = _point_at(writable_table(lab_model("tmpfs"), attempts=2, timeout=2), "127.0.0.1")
    r = run_case(harness_image, tmp_path, table, CMDLINE.format(node="node02"))
    assert r.rc == 0, r.out
    assert "PANIC" not in r.script
    for path in ("/var/log", "/var/lib/rasdaemon"):
        assert r.mounts[f"/fake/root{path}"][0] == "tmpfs"
    # the fallback keeps the image directory's mode and owner
    assert "mode /fake/root/var/log 750 0:4" in r.probes
    assert "write var/log ok" in r.probes
    assert "var/log from-image: cat:" in r.probes  # the image's content is hidden
    why = "cannot mount 127.0.0.1:/tank/nodes/node02/var-log on /var/log (NFS, 2 attempts, 2s each)"
    assert f"junkyard-writable: WARNING: {why}" in r.script
    assert ("WARNING: /var/log falls back to an empty tmpfs: what is written there is lost "
            "at reboot") in r.script
    assert r.file_lines("run/junkyard-writable/degraded") == [
        f"/var/log {why}",
        "/var/lib/rasdaemon cannot mount 127.0.0.1:/tank/nodes/node02/var-lib-rasdaemon on "
        "/var/lib/rasdaemon (NFS, 2 attempts, 2s each)",
        "/var/lib/prometheus/node-exporter cannot mount 127.0.0.1:/tank/nodes/node02/metrics on "
        "/var/lib/prometheus/node-exporter (NFS, 2 attempts, 2s each)",
        "/var/lib/ssh-host-keys cannot mount 127.0.0.1:/tank/nodes/node02/ssh-host-keys on "
        "/var/lib/ssh-host-keys (NFS, 2 attempts, 2s each)"]
    assert ("WARNING: node node02 boots with tmpfs in place of: /var/log /var/lib/rasdaemon "
            "/var/lib/prometheus/node-exporter /var/lib/ssh-host-keys" in r.script)
    # nfsmount was given NFS options only: the table's nosuid,nodev are for
    # the remount after it (klibc's nfsmount refuses them: "bad option")
    assert "vers=3,tcp,nosuid,nodev" in table
    assert "bad option" not in r.script, r.script
    # the other kinds are mounted as usual
    assert r.mounts["/fake/root/etc/ssh"][0] == "overlay"
    assert r.mounts["/fake/root/var/tmp"][0] == "tmpfs"


@pytest.mark.parametrize("cmdline,problem", [
    (CMDLINE.format(node="node09"),
     "node node09 is not in /case/writable.conf (it knows: node01 node02)"),
    (CMDLINE.replace(" junkyard.node={node}", ""),
     "the kernel command line has no junkyard.node=<name>"),
])
def test_unknown_identity(harness_image, tmp_path, cmdline, problem):
    stop = run_case(harness_image, tmp_path / "stop", writable_table(lab_model("stop")),
                    cmdline)
    assert stop.rc == 77
    assert f"FATAL: {problem}" in stop.script
    assert stop.file_lines("panics")[0].startswith(f"junkyard-writable: {problem}")
    fallback = run_case(harness_image, tmp_path / "tmpfs", writable_table(lab_model("tmpfs")),
                        cmdline)
    assert fallback.rc == 0
    assert fallback.mounts["/fake/root/var/log"][0] == "tmpfs"
    assert [line.split(" ", 1)[0] for line in fallback.file_lines(
        "run/junkyard-writable/degraded")] == ["/var/log", "/var/lib/rasdaemon",
                                               "/var/lib/prometheus/node-exporter",
                                               "/var/lib/ssh-host-keys"]


def test_each_node_finds_its_own_source_in_the_shared_table(harness_image, tmp_path):
    table = _point_at(writable_table(lab_model("tmpfs"), attempts=1), "nfs-server.invalid")
    for node in ("node01", "node02"):
        r = run_case(harness_image, tmp_path / node, table, CMDLINE.format(node=node))
        degraded = r.file_lines("run/junkyard-writable/degraded")
        assert degraded[0].startswith(
            f"/var/log cannot mount nfs-server.invalid:/tank/nodes/{node}/var-log on /var/log")
        assert r.file_lines("run/junkyard-writable/node") == [node]
