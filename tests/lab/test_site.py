"""Issue 5, "diskless boot": site.yml against the lab, and each node booted from it.

One ``site.yml`` run (module fixture) builds the storage head, the image (from
the seed, see lab/jylab/seed.py), netboot, and powers the nodes on through
their BMCs; the tests then look at the nodes over SSH through the head.
They run in file order: the second, idempotent ``site.yml`` run comes after
the checks of the first boot.
"""

from __future__ import annotations

import re
import time

import pytest
from labtools import recap, run_site

from tests.inventory_files import LAB, group_vars

pytestmark = pytest.mark.lab

LAB_VARS = group_vars(LAB, "all")
WRITABLE = LAB_VARS["cluster_writable_paths"]
HEAD_MGMT = "10.77.0.1"


def findmnt(lab, node: str, path: str) -> dict[str, str]:
    res = lab.node_ssh(node, f"findmnt -n -P -o TARGET,SOURCE,FSTYPE,OPTIONS --target {path}")
    assert res.returncode == 0, f"{node}: findmnt {path}: {res.stdout}{res.stderr}"
    line = res.stdout.strip().splitlines()[-1]
    return dict(re.findall(r'(\w+)="([^"]*)"', line))


def test_site_yml_boots_every_node(site):
    hosts = recap(site.stdout)
    for node in ("node01", "node02"):
        assert hosts[node]["failed"] == 0 and hosts[node]["unreachable"] == 0, hosts
    assert hosts["head"]["failed"] == 0, hosts


def test_the_seed_counts_as_the_image_convergence(site):
    """The seed, converged on the lab machine by the same plays, recorded the digest of
    its inputs; the head's run reads the same inputs (where and how a tree is built
    does not count), so the version is up to date as soon as it is unpacked."""
    if site is None:
        pytest.skip("JUNKYARD_LAB_REUSE=site: the first site.yml ran earlier")
    assert "image-bookworm-v1: up to date with its inputs" in site.stdout, site.stdout[-8000:]
    assert recap(site.stdout)["image-bookworm-v1"]["ok"] < 10


@pytest.mark.parametrize("node", ["node01", "node02"])
def test_node_booted_its_own_entry(lab, site, node):
    res = lab.node_ssh(node, "cat /proc/cmdline; hostname")
    assert res.returncode == 0, res.stderr
    cmdline, hostname = res.stdout.strip().splitlines()
    assert f"junkyard.node={node}" in cmdline.split()
    assert "junkyard.image=bookworm/v1" in cmdline.split()
    assert hostname == node


@pytest.mark.parametrize("node", ["node01", "node02"])
def test_kernel_and_initrd_came_over_http_from_the_management_address(lab, site, node):
    mgmt = next(n.ip for n in lab.cfg.node(node).nics if n.net == "mgmt")
    cmdline = lab.node_ssh(node, "cat /proc/cmdline").stdout.split()
    # GRUB names the kernel it booted, with the device it read it from
    assert f"BOOT_IMAGE=(http,{HEAD_MGMT})/images/bookworm/v1/boot/vmlinuz" in cmdline, cmdline
    log = lab.ssh("cat /var/log/nginx/junkyard-netboot.access.log")
    assert log.returncode == 0, log.stderr
    fetched = {m.group(1): int(m.group(2)) for m in re.finditer(
        rf'^{re.escape(mgmt)} \S+ \S+ \[[^\]]*\] "GET (\S+) HTTP/1\.[01]" 200 (\d+)',
        log.stdout, re.M)}
    sizes = lab.ssh("stat -L -c %s /srv/tftp/images/bookworm/v1/boot/vmlinuz "
                    "/srv/tftp/images/bookworm/v1/boot/initrd.img").stdout.split()
    assert fetched.get("/images/bookworm/v1/boot/vmlinuz") == int(sizes[0]), log.stdout[-3000:]
    assert fetched.get("/images/bookworm/v1/boot/initrd.img") == int(sizes[1]), log.stdout[-3000:]


def test_the_data_network_gets_no_dhcp_tftp_or_http_answer(lab, site):
    data = next(n for n in lab.cfg.node("node01").nics if n.net == "data")
    links = lab.node_ssh("node01", "ip -o link").stdout
    ifname = next(ln for ln in links.splitlines() if data.mac in ln.lower()).split(":")[1].strip()
    # a DHCP request on the data interface (the script does nothing with a lease)
    dhcp = lab.node_ssh("node01", f"busybox udhcpc -i {ifname} -n -q -t 3 -T 2 -s /bin/true; "
                                  "echo rc=$?", timeout=60)
    assert "rc=1" in dhcp.stdout, dhcp.stdout + dhcp.stderr
    # each client fails because nothing answers, not by crashing: tftp retries
    # until the timeout ends it (124), wget is refused (1)
    tftp = lab.node_ssh("node01", "timeout 20 busybox tftp -g -r grub/grub.cfg -l /tmp/t "
                                  "10.78.0.1; echo rc=$?", timeout=60)
    assert re.search(r"\brc=(1|124)\b", tftp.stdout), tftp.stdout + tftp.stderr
    # (busybox 1.35's wget crashes with -T: timeout bounds it instead)
    http = lab.node_ssh("node01", "timeout 20 busybox wget -q -O /tmp/h "
                                  "http://10.78.0.1/grub/grub.cfg; echo rc=$?", timeout=60)
    assert "rc=1" in http.stdout and "can't connect" in http.stderr, http.stdout + http.stderr
    # the management address answers only the management subnet (a request
    # from the head's data address is refused)

    def status_from(source: str) -> str:
        get = ("import http.client as h; c = h.HTTPConnection("
               f"'{HEAD_MGMT}', 80, timeout=10, source_address=('{source}', 0)); "
               "c.request('GET', '/grub/grub.cfg'); print(c.getresponse().status)")
        res = lab.ssh(f'python3 -c "{get}"')
        return res.stdout.strip() + res.stderr.strip()[-300:]

    assert status_from("10.78.0.1") == "403"
    assert status_from(HEAD_MGMT) == "200"
    listeners = lab.ssh("ss -H -ltnp").stdout
    nginx = [ln for ln in listeners.splitlines() if "nginx" in ln]
    assert nginx and all(f" {HEAD_MGMT}:80 " in ln for ln in nginx), listeners


@pytest.mark.parametrize("node", ["node01", "node02"])
def test_root_is_the_image_over_nfs_and_read_only(lab, site, node):
    root = findmnt(lab, node, "/")
    assert root["FSTYPE"].startswith("nfs"), root
    assert root["SOURCE"] == f"{HEAD_MGMT}:/tank/images/bookworm/v1", root
    options = root["OPTIONS"].split(",")
    assert "ro" in options, root
    # the boot's lean NFS: no close-to-open revalidation of an image that does not change
    assert "nocto" in options, root
    res = lab.node_ssh(node, "touch /junkyard-probe")
    assert res.returncode != 0
    assert "Read-only file system" in res.stderr


@pytest.mark.parametrize("node", ["node01", "node02"])
def test_every_writable_path_has_its_kind_and_is_writable(lab, site, node):
    for w in WRITABLE:
        mnt = findmnt(lab, node, w["path"])
        assert mnt["TARGET"] == w["path"], (w, mnt)
        kind = {"persistent": "nfs", "tmpfs": "tmpfs", "overlay": "overlay"}[w["kind"]]
        assert mnt["FSTYPE"].startswith(kind), (w, mnt)
        if w["kind"] == "persistent":
            assert mnt["SOURCE"].startswith(f"{HEAD_MGMT}:/tank/nodes/{node}/"), (w, mnt)
            assert "rw" in mnt["OPTIONS"].split(","), (w, mnt)
        probe = f"{w['path']}/.junkyard-write-probe"
        res = lab.node_ssh(node, f"echo {node} > {probe} && cat {probe} && rm {probe}")
        assert res.returncode == 0 and res.stdout.strip() == node, (w, res.stderr)


def test_a_log_written_on_a_node_lands_in_its_own_dataset(lab, site):
    marker = f"junkyard-probe-{time.time_ns()}"
    res = lab.node_ssh("node01", f"echo {marker} > /var/log/{marker}.log && sync")
    assert res.returncode == 0, res.stderr
    sources = {n: findmnt(lab, n, "/var/log")["SOURCE"].split(":", 1)[1]
               for n in ("node01", "node02")}
    assert sources["node01"] != sources["node02"]
    on_head = lab.ssh(f"cat {sources['node01']}/{marker}.log; "
                      f"ls {sources['node02']}/{marker}.log")
    assert on_head.stdout.strip() == marker, on_head.stdout + on_head.stderr
    assert "No such file" in on_head.stderr
    # the node's own log files are there as well: the system logs went to it
    listing = lab.ssh(f"ls {sources['node01']}")
    assert "messages" in listing.stdout.split() or "syslog" in listing.stdout.split(), \
        listing.stdout


def test_boot_skipped_the_file_system_checks(lab, site):
    # fastboot on the command line: initscripts' checkfs.sh says it skips fsck
    # (a diskless node has nothing to check; without it the check costs seconds)
    for node in ("node01", "node02"):
        cmdline = lab.node_ssh(node, "cat /proc/cmdline").stdout.split()
        assert "fastboot" in cmdline, cmdline
        console = lab.console(node)
        assert "skipping file system check" in console, console[-3000:]
        assert "Checking file systems" not in console, console[-3000:]


def test_the_virtio_gpus_are_render_nodes_without_a_console(lab, site):
    # the lab profile's drm_kms_helper.fbdev_emulation=0: each of the node's
    # GPUs has its DRM render node (what Slurm's gres.conf names), none has a
    # frame buffer device, so the text console never takes one over
    counts = {p["gpu"]["count"] for p in LAB_VARS["cluster_hardware_profiles"].values()}
    assert len(counts) == 1, counts  # both lab profiles: eight GPUs
    gpus = counts.pop()
    for node in ("node01", "node02"):
        res = lab.node_ssh(node, "ls /dev/dri; ls /sys/class/graphics; cat /proc/fb")
        assert res.returncode == 0, res.stdout + res.stderr
        render = re.findall(r"(?m)^renderD\d+$", res.stdout)
        assert len(render) == gpus, res.stdout
        assert not re.search(r"(?m)^fb\d+$", res.stdout), res.stdout
        assert "frame buffer device" not in lab.console(node), node


@pytest.mark.parametrize("node", ["node01", "node02"])
def test_openrc_reached_default_with_nothing_failed(lab, site, node):
    res = lab.node_ssh(node, "rc-status --runlevel; rc-status --crashed; "
                             "rc-status default")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].strip() == "default", res.stdout
    services = [ln for ln in lines[1:] if "[" in ln]
    assert services, res.stdout
    bad = [ln for ln in services if "started" not in ln]
    assert bad == [], res.stdout
    names = {ln.split()[0] for ln in services}
    assert {"ssh", "rsyslog", "junkyard-writable", "junkyard-data-mounts"} <= names, names


@pytest.mark.parametrize("node", ["node01", "node02"])
def test_data_interface_has_its_address_and_mtu(lab, site, node):
    data = next(n for n in lab.cfg.node(node).nics if n.net == "data")
    res = lab.node_ssh(node, "ip -o link; ip -o -4 addr")
    assert res.returncode == 0, res.stderr
    link = next(ln for ln in res.stdout.splitlines() if data.mac in ln.lower())
    ifname = link.split(":")[1].strip()
    assert "mtu 1500" in link and "state UP" in link, link
    assert re.search(rf"\b{ifname}\s+inet {re.escape(data.ip)}/24\b", res.stdout), res.stdout


@pytest.mark.parametrize("node", ["node01", "node02"])
def test_science_data_is_mounted_over_the_data_network(lab, site, node):
    mnt = findmnt(lab, node, "/data/scratch")
    assert mnt["TARGET"] == "/data/scratch", mnt
    assert mnt["SOURCE"] == "10.78.0.1:/tank/data/scratch", mnt


def test_second_site_run_changes_nothing(lab, site, lab_log):
    res = run_site(lab_log)
    assert res.returncode == 0, res.stdout[-6000:]
    hosts = recap(res.stdout)
    changed = {h: v["changed"] for h, v in hosts.items() if v.get("changed")}
    assert changed == {}, res.stdout[-8000:]
    assert {"head", "node01", "node02"} <= set(hosts)
    # the image version's inputs did not change: it is reported up to date and
    # its image plays end after the digest check (a convergence runs ~200 tasks)
    assert "image-bookworm-v1: up to date with its inputs" in res.stdout, res.stdout[-8000:]
    assert hosts["image-bookworm-v1"]["ok"] < 10, hosts
    recorded = lab.ssh("cat /tank/images/bookworm/v1/etc/junkyard/image-inputs").stdout
    assert re.search(r"(?m)^digest: [0-9a-f]{64}$", recorded), recorded
