#!/usr/bin/env python
"""Node boot time per phase on the running lab, and a boot-storm projection.

Needs a lab on which site.yml has run (`make lab`).  For each node and each
variant, in turn: power it off and on through its BMC and time, from
power-on, the phases its serial console shows and the first SSH login:

  firmware, DHCP, GRUB   power-on -> GRUB starts loading the kernel
  kernel + initrd fetch  -> the kernel prints "Linux version"
  kernel to init         -> init starts (sysvinit's banner, OpenRC's)
  init to SSH            -> the first SSH login through the head

Variants, measured side by side in one run:

  now     the node's boot entry as site.yml wrote it (kernel and initrd over
          HTTP, the profile's module blacklist on the command line)
  before  the node's GRUB file with its TFTP entry as the default, no module
          blacklist, the root mounted with close-to-open consistency (no
          nocto), fsck not skipped (no fastboot) and the lab profile's text
          console on the first virtio GPU (no drm_kms_helper.fbdev_emulation=0)
          (the bench edits it on the head and puts it back; the image's
          smaller initramfs and the services kept out of its runlevels are
          not undone), and OpenRC as in `serial`
  serial  the node's boot entry as site.yml wrote it, with OpenRC starting
          one service after the other (rc_parallel="NO"): the bench edits the
          node's image version on the head and puts it back

From what each boot fetched (nginx's access log and dnsmasq's TFTP log on the
head) it takes the bytes per node, and projects how long N nodes booting at
once take to fetch their boot files from one head over a 1 GbE link: over
HTTP the link is the limit; over TFTP each transfer is lock-step (one block,
then wait for its acknowledgement), so each node's rate is block size /
turnaround, and the link and the single dnsmasq process share out the rest.
The turnaround and block size are assumptions (options), printed with the
table; the lab's own network is emulated and says nothing about a real one.
Then (unless --skip-image) it times a re-run of playbooks/image.yml.
Prints figures; asserts nothing.

    .venv/bin/python bench/lab_boot.py [--variants now,serial,before] [--rounds N] [--skip-image]
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "lab"), str(REPO / "tests" / "lab")]

# serial-console markers that end each phase, in boot order (the first match
# after power-on counts); the last phase ends with the first SSH login
PHASES = [
    ("firmware, DHCP, GRUB", re.compile(r"Loading \(http,|Loading /images/")),
    ("kernel + initrd fetch", re.compile(r"Linux version \d")),
    ("kernel to init", re.compile(r"INIT: version|OpenRC \S+ is starting up")),
]
LOGIN = "init to SSH"
NGINX_LOG = "/var/log/nginx/junkyard-netboot.access.log"
# nginx's combined format: address - user [time] "request" status bytes ...
NGINX_LINE = re.compile(r'^(\S+) \S+ \S+ \[[^\]]*\] "(?:GET|HEAD) (\S+)[^"]*" (\d{3}) (\d+)')
TFTP_SENT = re.compile(r"\bsent (\S+) to (\S+)$")


def phase_times(marks: dict[str, float], login: float | None) -> dict[str, float | None]:
    """Durations of the phases from the time (after power-on) each marker was first seen;
    a phase whose end or start was not seen is None."""
    out: dict[str, float | None] = {}
    start: float | None = 0.0
    for name, _pattern in PHASES:
        end = marks.get(name)
        out[name] = end - start if end is not None and start is not None else None
        start = end
    out[LOGIN] = login - start if login is not None and start is not None else None
    return out


def http_bytes(log_text: str, client: str) -> tuple[int, list[str]]:
    """Bytes nginx sent to ``client`` (status 200/206) and the paths, from access-log lines."""
    total, paths = 0, []
    for line in log_text.splitlines():
        m = NGINX_LINE.match(line)
        if m and m.group(1) == client and m.group(3) in ("200", "206"):
            total += int(m.group(4))
            paths.append(m.group(2))
    return total, paths


def tftp_paths(journal_text: str, client: str) -> list[str]:
    """Files dnsmasq's TFTP server sent to ``client``, from its log lines."""
    out = []
    for line in journal_text.splitlines():
        m = TFTP_SENT.search(line.strip())
        if m and m.group(2) == client:
            out.append(m.group(1))
    return out


def storm_seconds(nodes: int, http_bytes_per_node: int, tftp_bytes_per_node: int,
                  link_bytes_s: float, blksize: int, turnaround_s: float,
                  server_packets_s: float) -> float:
    """Seconds until ``nodes`` nodes booting at once have fetched their boot files.

    HTTP shares the link (TCP is not the limit on a LAN).  TFTP moves one block per
    turnaround per transfer; all transfers together are limited by the link and by
    the packets one dnsmasq process answers per second.  The two parts run one after
    the other on each node (GRUB over TFTP, then the kernel over HTTP)."""
    tftp = 0.0
    if tftp_bytes_per_node:
        blocks = -(-tftp_bytes_per_node // blksize)
        lockstep = blocks * turnaround_s
        link = nodes * tftp_bytes_per_node / link_bytes_s
        server = nodes * blocks / server_packets_s
        tftp = max(lockstep, link, server)
    http = nodes * http_bytes_per_node / link_bytes_s
    return tftp + http


def boot_once(lab, cfg, node, timeout: float) -> dict:
    from jylab import bmc, vm

    log = vm.console_log(cfg, node.name)
    mgmt = next(n.ip for n in node.nics if n.net == "mgmt")
    bmc.power(cfg, node, "off")
    lab.wait_qemu(node, running=False, timeout=60)
    offset = log.stat().st_size if log.exists() else 0
    before = lab.ssh(f"stat -c %s {NGINX_LOG} 2>/dev/null || echo 0; "
                     "journalctl -u dnsmasq -n 0 --show-cursor -q | sed -n 's/^-- cursor: //p'")
    nginx_offset, cursor = [*before.stdout.split("\n"), "0", ""][:2]
    t0 = time.monotonic()
    bmc.power(cfg, node, "on")
    seen: dict[str, float] = {}
    login = None
    while time.monotonic() - t0 < timeout and login is None:
        text = log.read_bytes()[offset:].decode(errors="replace") if log.exists() else ""
        for name, rx in PHASES:
            if name not in seen and rx.search(text):
                seen[name] = time.monotonic() - t0
        if PHASES[-1][0] in seen:
            try:
                if lab.node_ssh(node.name, "true", timeout=40).returncode == 0:
                    login = time.monotonic() - t0
            except subprocess.TimeoutExpired:
                pass
        time.sleep(0.5)
    after = lab.ssh(f"tail -c +{int(nginx_offset or 0) + 1} {NGINX_LOG} 2>/dev/null")
    got_http, http_files = http_bytes(after.stdout, mgmt)
    jr = lab.ssh(f"journalctl -u dnsmasq -o cat --after-cursor={shlex.quote(cursor)}"
                 if cursor else "journalctl -u dnsmasq -o cat -n 200")
    sent = tftp_paths(jr.stdout, mgmt)
    sizes = lab.ssh("stat -L -c %s " + " ".join(shlex.quote(p) for p in sent)) if sent else None
    got_tftp = sum(int(x) for x in sizes.stdout.split()) if sizes else 0
    return {"marks": seen, "login": login, "phases": phase_times(seen, login),
            "http_bytes": got_http, "http_files": http_files,
            "tftp_bytes": got_tftp, "tftp_files": sent}


def grub_file(node) -> str:
    mac = next(n.mac for n in node.nics if n.net == "mgmt")
    return "/srv/tftp/grub/grub.cfg-01-" + mac.lower().replace(":", "-")


def image_root(lab, node) -> str:
    """The image tree on the head that the node's default GRUB entry boots."""
    res = lab.ssh(f"sed -n 's/.*nfsroot=[^:]*:\\([^ ,]*\\).*/\\1/p' {grub_file(node)} | head -n 1")
    root = res.stdout.strip()
    if res.returncode != 0 or not root.startswith("/"):
        raise SystemExit(f"lab_boot: no nfsroot= in {node.name}'s GRUB file: {res.stderr.strip()}")
    return root


# OpenRC as it was before rc_parallel: the image's rc.conf is kept beside it (time
# kept) and put back after; a read-only image dataset is made writable for the edit only.
OPENRC_EDIT = """set -e; root={root}; ds=$(findmnt -n -o SOURCE --target "$root")
ro=$(zfs get -H -o value readonly "$ds" 2>/dev/null || echo off)
[ "$ro" = off ] || zfs set readonly=off "$ds"
{body}
[ "$ro" = off ] || zfs set readonly="$ro" "$ds"
"""
OPENRC_SERIAL = """cp -p "$root/etc/rc.conf" "$root/etc/rc.conf.bench"
sed -i 's/^rc_parallel=.*/rc_parallel="NO"/' "$root/etc/rc.conf"
"""
OPENRC_NOW = """e="$root/etc"
if [ -e "$e/rc.conf.bench" ]; then mv "$e/rc.conf.bench" "$e/rc.conf"; fi"""


def set_variant(lab, node, variant: str) -> None:
    """before: the node's GRUB file boots its TFTP entry with no module blacklist, no
    nocto, no fastboot and no fbdev_emulation=0 (a copy of the file as site.yml wrote
    it is kept beside it), and OpenRC as in serial; serial: the node's image starts its
    services one after the other; now: the copies are put back."""
    path = grub_file(node)
    cmds = []
    if variant == "before":
        cmds.append(f"cp -p {path} {path}.bench && sed -i -e 's/^set default=0$/set default=2/' "
                    f"-e 's/ modprobe\\.blacklist=[^ ;]*//g' -e 's/,nocto / /' "
                    f"-e 's/ fastboot / /' -e 's/ drm_kms_helper\\.fbdev_emulation=0//g' {path}")
    if variant in ("before", "serial"):
        cmds.append(OPENRC_EDIT.format(root=shlex.quote(image_root(lab, node)),
                                       body=OPENRC_SERIAL))
    if variant == "now":
        cmds.append(OPENRC_EDIT.format(root=shlex.quote(image_root(lab, node)), body=OPENRC_NOW))
        cmds.append(f"if [ -e {path}.bench ]; then mv {path}.bench {path}; fi")
    for cmd in cmds:
        res = lab.ssh(cmd)
        if res.returncode != 0:
            raise SystemExit(f"lab_boot: cannot set {node.name}'s boot to {variant}: "
                             f"{res.stderr.strip()}")


def fmt(v: float | None) -> str:
    return f"{v:6.1f}" if v is not None else "     -"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--variants", default="now,serial,before",
                    help="comma-separated: now (as deployed), serial (OpenRC serial), before "
                         "(serial and TFTP, no blacklist, no nocto, no fastboot)")
    ap.add_argument("--nodes", default="", help="comma-separated node names (default: all)")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--skip-image", action="store_true")
    ap.add_argument("--link-gbps", type=float, default=1.0)
    ap.add_argument("--tftp-blksize", type=int, default=1024,
                    help="TFTP block size the client asks for (GRUB: 1024)")
    ap.add_argument("--tftp-turnaround-ms", type=float, default=0.5,
                    help="per-block turnaround of a TFTP transfer on a real LAN (assumed)")
    ap.add_argument("--tftp-server-pps", type=float, default=50000,
                    help="packets per second one dnsmasq process answers (assumed)")
    args = ap.parse_args()

    from jylab import config
    from labtools import LabHandle

    cfg = config.load()
    lab = LabHandle(None, 0)
    wanted = [n for n in args.nodes.split(",") if n]
    nodes = [n for n in cfg.nodes if not wanted or n.name in wanted]
    variants = [v for v in args.variants.split(",") if v]
    print(f"lab: {len(nodes)} nodes, {cfg.node_mem_mib} MiB each, TCG; variants {variants}")
    names = [p[0] for p in PHASES] + [LOGIN]
    print(f"{'variant':8} {'round':5} {'node':8} " + " ".join(f"{n[:14]:>14}" for n in names)
          + f" {'power-on->SSH':>14} {'HTTP MB':>8} {'TFTP MB':>8}")
    rows = []
    for r in range(args.rounds):
        for node in nodes:
            for variant in variants:
                if variant != "now":
                    set_variant(lab, node, variant)
                try:
                    res = boot_once(lab, cfg, node, args.timeout)
                finally:
                    if variant != "now":
                        set_variant(lab, node, "now")
                rows.append((variant, res))
                print(f"{variant:8} {r + 1:5} {node.name:8} "
                      + " ".join(f"{fmt(res['phases'][n]):>14}" for n in names)
                      + f" {fmt(res['login']):>14} {res['http_bytes'] / 1e6:8.1f}"
                      f" {res['tftp_bytes'] / 1e6:8.1f}", flush=True)
    for variant in variants:
        mine = [res for v, res in rows if v == variant and res["login"]]
        if not mine:
            continue
        logins = sorted(res["login"] for res in mine)
        print(f"{variant}: power-on to SSH median {logins[len(logins) // 2]:.1f}s "
              f"(min {logins[0]:.1f}, max {logins[-1]:.1f}) over {len(logins)} boots")

    link = args.link_gbps * 1e9 / 8 * 0.94  # Ethernet + IP + TCP/UDP overhead
    turnaround = args.tftp_turnaround_ms / 1000
    measured = {v: res for v, res in rows if res["login"]}
    if "now" in measured:
        res = measured["now"]
        total = res["http_bytes"] + res["tftp_bytes"]
        print(f"\nbytes per node (measured): {total / 1e6:.1f} MB, of which "
              f"{res['http_bytes'] / 1e6:.1f} MB over HTTP ({', '.join(res['http_files'])}) "
              f"and {res['tftp_bytes'] / 1e6:.2f} MB over TFTP ({len(res['tftp_files'])} files)")
        print(f"boot storm, one head, {args.link_gbps:g} GbE ({link / 1e6:.0f} MB/s of payload), "
              f"TFTP block {args.tftp_blksize} B, turnaround {args.tftp_turnaround_ms:g} ms, "
              f"dnsmasq {args.tftp_server_pps:.0f} packets/s (assumptions):")
        print(f"{'nodes':>6} {'all over TFTP':>14} {'kernels over HTTP':>18} {'ratio':>6}")
        for n in (1, 32, 600):
            t_tftp = storm_seconds(n, 0, total, link, args.tftp_blksize, turnaround,
                                   args.tftp_server_pps)
            t_http = storm_seconds(n, res["http_bytes"], res["tftp_bytes"], link,
                                   args.tftp_blksize, turnaround, args.tftp_server_pps)
            print(f"{n:6d} {t_tftp:13.1f}s {t_http:17.1f}s {t_tftp / t_http:5.1f}x")

    if not args.skip_image:
        cmd = [str(REPO / "lab" / "lab"), "run", "playbooks/image.yml"]
        start = time.monotonic()
        res = subprocess.run(cmd, capture_output=True, text=True, check=False)
        took = time.monotonic() - start
        changed = re.findall(r"^(\S+)\s+:.*changed=(\d+)", res.stdout, re.M)
        tasks = len(re.findall(r"^TASK \[", res.stdout, re.M))
        print(f"image layer re-run (playbooks/image.yml): {took:.0f}s, exit {res.returncode}, "
              f"{tasks} tasks, changed: " + ", ".join(f"{h}={c}" for h, c in changed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
