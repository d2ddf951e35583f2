#!/usr/bin/env python
"""An Ansible task on the lab's head, with and without the compiled-code cache, side by side.

The head VM's Python keeps Ansible's compiled module_utils between tasks (lab/jylab/zipcache.py,
a .pth hook installed by lab/build-head.sh).  This runs the same module task (``stat``, one
``ansible`` call each) alternately with the hook in place and with its .pth moved aside on
the head, ``--rounds`` times each, and prints the median and the spread of both and their
ratio.  The first round of each side is a warm-up (the cache fills, ssh connects) and is not
counted.  Needs a running lab (`lab/lab up`); puts the hook back in place at the end.
Prints figures; asserts nothing.

    .venv/bin/python bench/lab_head_modules.py [--rounds 6]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PTH = "/usr/lib/python3/dist-packages/jylab-zipcache.pth"
ASIDE = "/root/jylab-zipcache.pth.off"


def head(command: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(REPO / "lab" / "lab"), "ssh", command], capture_output=True,
                          text=True, timeout=120, check=False)


def task_seconds() -> float:
    start = time.monotonic()
    res = subprocess.run([str(REPO / "lab" / "lab"), "ansible", "head", "-m",
                          "ansible.builtin.stat", "-a", "path=/etc", "-o"],
                         capture_output=True, text=True, timeout=300, check=False)
    took = time.monotonic() - start
    if res.returncode != 0:
        sys.exit(f"the task failed:\n{res.stdout[-2000:]}{res.stderr[-2000:]}")
    return took


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    ap.add_argument("--rounds", type=int, default=6)
    args = ap.parse_args()
    if head(f"test -e {PTH} || test -e {ASIDE}").returncode != 0:
        sys.exit("the head has no jylab-zipcache hook (a head image from before it?)")
    times: dict[str, list[float]] = {"cache": [], "no cache": []}
    try:
        for rnd in range(args.rounds + 1):
            for side in times:
                move = (f"test -e {PTH} || mv {ASIDE} {PTH}" if side == "cache"
                        else f"test -e {ASIDE} || mv {PTH} {ASIDE}")
                if head(move).returncode != 0:
                    sys.exit(f"could not switch the hook ({move})")
                took = task_seconds()
                if rnd:
                    times[side].append(took)
    finally:
        head(f"test -e {PTH} || mv {ASIDE} {PTH}")
    print(f"one `ansible head -m stat` call, {args.rounds} rounds each, alternating "
          "(controller start included):")
    for side, values in times.items():
        print(f"  {side:9s} median {statistics.median(values):5.2f} s  "
              f"min {min(values):5.2f}  max {max(values):5.2f}")
    ratio = statistics.median(times["cache"]) / statistics.median(times["no cache"])
    print(f"  cache / no cache: {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
