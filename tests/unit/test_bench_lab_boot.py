"""bench/lab_boot.py: the phases, the bytes per node and the boot-storm projection it
prints are computed from what the head logged (a wrong parse would print wrong figures)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

sys.path.insert(0, str(REPO / "bench"))

import lab_boot

UA = "\"-\" \"GRUB 2.06-13+deb12u1\""
TS = "[02/Dec/2026:06:01:02 +0000]"
BOOT = "/images/bookworm/v1/boot"
NGINX = "".join(f'{ip} - - {TS} "GET {path} HTTP/1.1" {status} {size} {UA}\n'
                for ip, path, status, size in [
                    ("10.77.0.11", f"{BOOT}/vmlinuz", 200, 8123456),
                    ("10.77.0.12", f"{BOOT}/vmlinuz", 200, 8123456),
                    ("10.77.0.11", f"{BOOT}/initrd.img", 200, 26000000),
                    ("10.77.0.11", f"{BOOT}/", 403, 153)])

JOURNAL = """\
DHCPACK(mgmt) 10.77.0.11 52:54:00:77:00:11 node01
sent /srv/tftp/grub/boot.ipxe to 10.77.0.11
sent /srv/tftp/grub/i386-pc/core.0 to 10.77.0.11
sent /srv/tftp/grub/i386-pc/core.0 to 10.77.0.12
sent /srv/tftp/grub/grub.cfg to 10.77.0.11
"""


def test_http_bytes_count_what_one_node_was_sent():
    total, paths = lab_boot.http_bytes(NGINX, "10.77.0.11")
    assert total == 8123456 + 26000000
    assert paths == ["/images/bookworm/v1/boot/vmlinuz", "/images/bookworm/v1/boot/initrd.img"]


def test_tftp_paths_of_one_node():
    assert lab_boot.tftp_paths(JOURNAL, "10.77.0.11") == [
        "/srv/tftp/grub/boot.ipxe", "/srv/tftp/grub/i386-pc/core.0", "/srv/tftp/grub/grub.cfg"]


def test_phases_from_the_markers():
    marks = {"firmware, DHCP, GRUB": 20.0, "kernel + initrd fetch": 31.5,
             "kernel to init": 52.0}
    assert lab_boot.phase_times(marks, 70.0) == {
        "firmware, DHCP, GRUB": 20.0, "kernel + initrd fetch": 11.5,
        "kernel to init": 20.5, "init to SSH": 18.0}


def test_a_phase_not_seen_has_no_time_and_neither_has_the_next():
    marks = {"firmware, DHCP, GRUB": 20.0, "kernel to init": 52.0}
    times = lab_boot.phase_times(marks, None)
    assert times["kernel + initrd fetch"] is None and times["kernel to init"] is None
    assert times["init to SSH"] is None


def test_the_markers_match_the_consoles_lines():
    console = ("iPXE initialising devices...\nLoading (http,10.77.0.1)/images/bookworm/v1/boot/"
               "vmlinuz\n[    0.000000] Linux version 6.1.0-57-amd64 (debian-kernel@lists.debian"
               ".org)\nINIT: version 3.06 booting\n")
    found = [name for name, rx in lab_boot.PHASES if rx.search(console)]
    assert found == [name for name, _pattern in lab_boot.PHASES]
    assert lab_boot.PHASES[0][1].search("Loading /images/bookworm/v1/boot/vmlinuz over TFTP")


LINK = 117.5e6


def test_one_node_over_tftp_is_lockstep_bound():
    # 34 MB in 1024-byte blocks at 0.5 ms each: ~16.6 s, far from the link's 0.29 s
    t = lab_boot.storm_seconds(1, 0, 34_000_000, LINK, 1024, 0.0005, 50000)
    assert t == pytest.approx(-(-34_000_000 // 1024) * 0.0005)


def test_many_nodes_over_http_are_link_bound_and_tftp_is_worse():
    http = lab_boot.storm_seconds(600, 34_000_000, 60_000, LINK, 1024, 0.0005, 50000)
    tftp = lab_boot.storm_seconds(600, 0, 34_060_000, LINK, 1024, 0.0005, 50000)
    assert http == pytest.approx(600 * 34_000_000 / LINK + 600 * 59 / 50000)
    # dnsmasq's packet rate caps TFTP below the link
    assert tftp == pytest.approx(600 * -(-34_060_000 // 1024) / 50000)
    assert tftp > http


class _HeadShell:
    """The bench's ``lab``: its ``ssh`` runs the command in a local shell (sed on a file)."""

    def ssh(self, command):
        return subprocess.run(["bash", "-c", command], capture_output=True, text=True,
                              check=False)


def test_before_variant_undoes_http_blacklist_nocto_fastboot_and_fbdev(tmp_path, monkeypatch):
    # node01's GRUB file as the role's template renders it from the lab model
    from ansible_collections.junkyard.cluster.plugins.filter import netboot as nb
    from test_netboot_filters import lab_model
    from test_netboot_grub_files import TEMPLATE, run_playbook

    entry = nb.netboot_grub_entries(lab_model()["nodes"])[0]
    grub = tmp_path / "grub.cfg-01-node01"
    run_playbook(tmp_path, {"item": entry, "netboot_grub_timeout": 5}, [{
        "name": "Render node01's file", "ansible.builtin.template": {
            "src": str(TEMPLATE), "dest": str(grub), "mode": "0644"}}])
    text = grub.read_text()
    monkeypatch.setattr(lab_boot, "grub_file", lambda node: str(grub))
    root = _image_tree(tmp_path)
    monkeypatch.setattr(lab_boot, "image_root", lambda lab, node: str(root))
    node = type("Node", (), {"name": "node01"})()
    linux = [ln for ln in text.splitlines() if ln.strip().startswith("linux ")]
    assert len(linux) == 3 and all(",nocto " in ln and " fastboot " in ln
                                   and " drm_kms_helper.fbdev_emulation=0 " in ln
                                   and "modprobe.blacklist=" in ln for ln in linux), linux

    lab_boot.set_variant(_HeadShell(), node, "before")
    edited = grub.read_text()
    assert "set default=2\n" in edited and "set default=0\n" not in edited
    linux = [ln for ln in edited.splitlines() if ln.strip().startswith("linux ")]
    assert len(linux) == 3, edited
    # the first try of each load is GRUB's `if ! linux ...; then`: the edit keeps its `; then`
    tries = [ln for ln in edited.splitlines() if ln.strip().startswith("if ! linux ")]
    assert len(tries) == 3 and all(ln.endswith("; then") for ln in tries), tries
    linux += tries
    for line in linux:
        assert "nocto" not in line and "fastboot" not in line and "blacklist" not in line, line
        assert "fbdev_emulation" not in line and " console=ttyS0,115200" in line, line
        assert ",vers=3,tcp ip=" in line and " ro junkyard.node=node01 " in line, line

    assert _openrc(root) == 'rc_parallel="NO"'  # before includes serial

    lab_boot.set_variant(_HeadShell(), node, "now")
    assert grub.read_text() == text
    assert _openrc(root) == 'rc_parallel="YES"'


def _image_tree(tmp_path):
    """An image's rc.conf as node_image writes it."""
    root = tmp_path / "image"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "rc.conf").write_text('#rc_parallel="NO"\nrc_parallel="YES"\nrc_logger="NO"\n')
    return root


def _openrc(root) -> str:
    lines = (root / "etc" / "rc.conf").read_text().splitlines()
    return next(ln for ln in lines if ln.startswith("rc_parallel="))


def test_serial_variant_edits_the_image_and_puts_it_back(tmp_path, monkeypatch):
    # rc_parallel NO in the node's image; the GRUB file is left alone; "now" restores
    # rc.conf with its content and time
    grub = tmp_path / "grub.cfg-01-node01"
    grub.write_text("set default=0\n")
    monkeypatch.setattr(lab_boot, "grub_file", lambda node: str(grub))
    root = _image_tree(tmp_path)
    monkeypatch.setattr(lab_boot, "image_root", lambda lab, node: str(root))
    node = type("Node", (), {"name": "node01"})()
    rc_conf = root / "etc" / "rc.conf"
    mtime = rc_conf.stat().st_mtime_ns - 10**9
    os.utime(rc_conf, ns=(mtime, mtime))
    original = rc_conf.read_text()

    lab_boot.set_variant(_HeadShell(), node, "serial")
    assert _openrc(root) == 'rc_parallel="NO"'
    assert grub.read_text() == "set default=0\n"

    lab_boot.set_variant(_HeadShell(), node, "now")
    assert _openrc(root) == 'rc_parallel="YES"'
    assert rc_conf.read_text() == original and rc_conf.stat().st_mtime_ns == mtime
    assert not list(root.rglob("*.bench"))
