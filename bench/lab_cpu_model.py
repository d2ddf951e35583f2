#!/usr/bin/env python
"""The lab under each emulated CPU model (qemu ``-cpu``), side by side in one run.

Every lab VM runs under TCG, so the CPU model it is shown decides which code paths its
software takes: with ``max`` the guests' glibc picks its AVX2 string functions, which TCG
emulates slowly; an Intel model makes the node kernels isolate page tables against Meltdown.
For each model in ``--models``, in turn: ``lab/lab down``, ``lab/lab up`` with
``JUNKYARD_LAB_CPU`` set to it (the nodes powered off again), then on the head: Python's
start (``python3 -c pass``, ``--rounds`` times) and a playbook of 20 module runs on the head
(``stat`` 15 times, ``lineinfile`` 5 times, through ``lab/lab ansible-playbook``; ``--rounds``
times, the first a warm-up not counted).  With
``--deploy`` it runs ``lab/lab deploy`` instead of ``up`` (site.yml from a fresh head, both
nodes booted; minutes per model) and also prints the deploy's time and site.yml's wait for
the nodes' SSH.  Prints medians and each model's ratio to the first; asserts nothing.

It takes the lab down and leaves it up under the last model: give ``--yes`` to run.

    .venv/bin/python bench/lab_cpu_model.py --yes [--models qemu64,max] [--rounds 6] [--deploy]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LAB = str(REPO / "lab" / "lab")
# the summary line of the node boot wait in site.yml's task profile
BOOT_WAIT = re.compile(r"node_boot : Wait until the node answers over SSH -+ ([\d.]+)s")
PLAYBOOK = """\
- name: Twenty module runs on the head
  hosts: storage_head
  gather_facts: false
  tasks:
    - name: Stat /etc
      ansible.builtin.stat:
        path: /etc
      loop: "{{ range(15) | list }}"
    - name: Write a line
      ansible.builtin.lineinfile:
        path: /tmp/jylab-cpu-bench.txt
        line: "line {{ item }}"
        create: true
        mode: "0644"
      loop: "{{ range(5) | list }}"
"""


def lab(*args: str, model: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([LAB, *args], capture_output=True, text=True, timeout=timeout,
                          check=False, env=dict(os.environ, JUNKYARD_LAB_CPU=model))


def timed(argv: list[str], model: str, timeout: float = 300) -> float:
    start = time.monotonic()
    res = lab(*argv, model=model, timeout=timeout)
    took = time.monotonic() - start
    if res.returncode != 0:
        sys.exit(f"lab {' '.join(argv)} under {model}: exit {res.returncode}\n"
                 f"{res.stdout[-2000:]}{res.stderr[-2000:]}")
    return took


def measure(model: str, rounds: int, deploy: bool) -> dict[str, float | None]:
    lab("down", model=model, timeout=600)
    lab("down", model=model, timeout=600)  # again: it finds nothing left
    figures: dict[str, float | None] = {"deploy": None, "boot wait": None}
    if deploy:
        start = time.monotonic()
        res = lab("deploy", model=model, timeout=5400)
        figures["deploy"] = time.monotonic() - start
        if res.returncode != 0:
            sys.exit(f"lab deploy under {model}: exit {res.returncode}\n{res.stdout[-3000:]}")
        found = BOOT_WAIT.search(res.stdout)
        figures["boot wait"] = float(found.group(1)) if found else None
    else:
        timed(["up"], model, timeout=1200)
    for node in ("node01", "node02"):
        lab("power", node, "off", model=model, timeout=120)
    time.sleep(5)
    figures["python3 -c pass"] = statistics.median(
        timed(["ssh", "python3 -c pass"], model) for round_no in range(rounds))
    with tempfile.NamedTemporaryFile("w", suffix=".yml", dir=REPO / ".lab") as book:
        book.write(PLAYBOOK)
        book.flush()
        runs = [timed(["ansible-playbook", book.name], model) for round_no in range(rounds + 1)]
    figures["20 head tasks"] = statistics.median(runs[1:])
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--models", default="qemu64,max")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--deploy", action="store_true",
                        help="time lab/lab deploy (site.yml, node boots) per model")
    parser.add_argument("--yes", action="store_true", help="take the lab down and run")
    args = parser.parse_args(argv)
    models = [m for m in args.models.split(",") if m]
    if not args.yes:
        print(f"would take the lab down and measure {models}: give --yes to run")
        return 0
    results = {m: measure(m, args.rounds, args.deploy) for m in models}
    first = results[models[0]]
    print(f"{'figure':18}" + "".join(f"{m:>14}" for m in models) + "   ratio to "
          + models[0])
    for key in first:
        row = [results[m][key] for m in models]
        cells = "".join(f"{v:13.2f}s" if v is not None else f"{'-':>14}" for v in row)
        ratios = ", ".join(f"{v / first[key]:.2f}" for v in row[1:]
                           if v is not None and first[key])
        print(f"{key:18}{cells}   {ratios}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
