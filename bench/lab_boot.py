#!/usr/bin/env python3
"""Node boot time and the image layer's re-run time, on the running lab.

Needs a lab on which site.yml has run (`make lab`).  For each node, in turn:
power it off and on through its BMC and time, from power-on, the phases its
serial console shows (iPXE's DHCP, GRUB, the kernel, the initramfs's writable
mounts, OpenRC's default runlevel) and the first SSH login.  Then time a
re-run of playbooks/image.yml (every image play through the chroot
connection) and report its changed count.  Prints figures; asserts nothing.

    .venv/bin/python bench/lab_boot.py [--rounds N] [--skip-image]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "lab"), str(REPO / "tests" / "lab")]

from jylab import bmc, config, vm  # noqa: E402
from labtools import LabHandle  # noqa: E402

# serial-console markers, in boot order (the first match after power-on counts)
PHASES = [
    ("iPXE DHCP", re.compile(r"iPXE|net0: .*\(http://ipxe.org")),
    ("GRUB", re.compile(r"GRUB|Booting `")),
    ("kernel", re.compile(r"Linux version \d")),
    ("writable paths", re.compile(r"junkyard-writable")),
    ("OpenRC default", re.compile(r"OpenRC .* is starting up|Entering runlevel: default|"
                                  r"\* Starting .*sshd")),
]


def boot_once(lab: LabHandle, cfg: config.Lab, node: config.Node, timeout: float) -> dict:
    log = vm.console_log(cfg, node.name)
    bmc.power(cfg, node, "off")
    lab.wait_qemu(node, running=False, timeout=60)
    offset = log.stat().st_size if log.exists() else 0
    t0 = time.monotonic()
    bmc.power(cfg, node, "on")
    seen: dict[str, float] = {}
    done = None
    while time.monotonic() - t0 < timeout and done is None:
        text = log.read_bytes()[offset:].decode(errors="replace") if log.exists() else ""
        for name, rx in PHASES:
            if name not in seen and rx.search(text):
                seen[name] = time.monotonic() - t0
        if "OpenRC default" in seen or time.monotonic() - t0 > 60:
            try:
                if lab.node_ssh(node.name, "true", timeout=40).returncode == 0:
                    done = time.monotonic() - t0
            except subprocess.TimeoutExpired:
                pass
        time.sleep(1)
    return {"phases": seen, "login": done}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--skip-image", action="store_true")
    args = ap.parse_args()
    cfg = config.load()
    lab = LabHandle(None, 0)
    print(f"lab: {len(cfg.nodes)} nodes, {cfg.node_mem_mib} MiB, TCG")
    rows = []
    for r in range(args.rounds):
        for node in cfg.nodes:
            res = boot_once(lab, cfg, node, args.timeout)
            rows.append((r + 1, node.name, res))
            marks = ", ".join(f"{k} {v:.0f}s" for k, v in res["phases"].items())
            login = f"{res['login']:.0f}s" if res["login"] else "no login"
            print(f"round {r + 1} {node.name}: power-on to login {login} ({marks})", flush=True)
    logins = [row[2]["login"] for row in rows if row[2]["login"]]
    if logins:
        print(f"power-on to login: min {min(logins):.0f}s, max {max(logins):.0f}s "
              f"over {len(logins)} boots")
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
