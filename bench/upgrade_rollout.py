#!/usr/bin/env python
"""Time an image-version upgrade (canary + waves) and its rollback, and how they grow with
the node count.

Two measurements, printed side by side:

1. ``--lab`` (the running lab, after site.yml; reboots both nodes): upgrade_rocm.yml to a
   new version with ``upgrade_serial=1`` (the canary node01, then a wave with node02), then
   rollback.yml with both nodes in one wave, then prune_images.yml of that version.  Each
   run is split into phases from its per-task times (profile_tasks): plan (model, plan),
   build (clone, upgrade in the clone, initramfs, finish), and per wave: render (state,
   model, exports, netboot), power (BMC off/on), boot (power-on to SSH), verify.
2. Always (this machine only): the planning cost against inventories of N nodes
   (upgrade_rocm.yml --check with the storage head played by this machine and an empty
   image state): model validation and the plan for every N, measured in one run.

From both it prints the expected wall time of an upgrade with N nodes and a wave size s:
build + (1 + ceil((N - 1) / s)) waves, each wave = render + power + boot + s x verify
(power-on is one BMC call per node, the boots overlap as they do on real servers -- on
the lab two VMs booting at once share its two cores, which the rollback's figure shows --
and the verify runs node after node),
plus the planning cost measured at N.  That line is a projection from measured parts; the
lab has only two nodes.

    .venv/bin/python bench/upgrade_rollout.py                # planning cost only
    .venv/bin/python bench/upgrade_rollout.py --lab --yes    # plus the lab runs (~20 min)
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import head_rerun  # noqa: E402  (inventory generator and the lab's environment)

# profile_tasks prints, under each task header, the previous task's duration and the
# running total; after PLAY RECAP once more, for the last task
STAMP = re.compile(r"\(([0-9:.]+)\)\s+([0-9:.]+) \*+\s*$")
HEADER = re.compile(r"^(PLAY|TASK) \[(.*?)\] \*+\s*$")


def _seconds(text: str) -> float:
    hours, minutes, seconds = text.split(":")
    return int(hours) * 3600 + int(minutes) * 60 + float(seconds)


def task_times(output: str) -> list[tuple[str, str, float]]:
    """(play, task, seconds) for every task of a profile_tasks run, in order."""
    marks, play, pending = [], "", None
    for line in output.splitlines():
        header = HEADER.match(line)
        if header:
            if header.group(1) == "PLAY":
                play = header.group(2)
            else:
                pending = (play, header.group(2))
            continue
        if line.startswith("PLAY RECAP"):
            pending = ("", "")
            continue
        stamp = STAMP.search(line)
        if stamp and pending is not None:
            marks.append((*pending, _seconds(stamp.group(2))))
            pending = None
    return [(p, t, max(marks[i + 1][2] - at, 0.0))
            for i, (p, t, at) in enumerate(marks[:-1]) if t]


# the first task of each wave (image_rollout's main.yml; listed even when the drain is off)
WAVE_START = "Take the wave out of Slurm service"


def phases(tasks: list[tuple[str, str, float]]) -> dict:
    """Sum the task times into plan, build, waves (render/power/boot/verify) and promote."""
    result = {"plan": 0.0, "build": 0.0, "recheck": 0.0, "waves": [], "promote": 0.0}
    for play, task, secs in tasks:
        if play.startswith(("Clone the current", "Upgrade inside", "Finish the new")):
            result["build"] += secs
        elif play.startswith("Roll the version out"):
            if WAVE_START in task:
                result["waves"].append({"drain": 0.0, "render": 0.0, "power": 0.0,
                                        "boot": 0.0, "verify": 0.0})
            if not result["waves"]:
                result["recheck" if "rocm" in task or "Verify again" in task else "plan"] += secs
                continue
            wave = result["waves"][-1]
            if WAVE_START in task:
                wave["drain"] += secs
            elif "through their BMCs" in task or "Power the" in task:
                wave["power"] += secs
            elif "Watch the nodes boot" in task or "over Ansible's connection" in task:
                wave["boot"] += secs
            elif ("junkyard.cluster.rocm" in task or "health" in task or "Check the node" in task
                  or "takes Ansible's connection" in task or "Count the wave" in task):
                wave["verify"] += secs
            else:
                wave["render"] += secs
        elif play.startswith("Promote"):
            result["promote"] += secs
        else:
            result["plan"] += secs
    return result


def run(argv: list[str], env: dict, log: Path) -> tuple[float, int, str]:
    print("+ " + shlex.join(argv), flush=True)
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    took = time.monotonic() - start
    log.write_text(proc.stdout + proc.stderr)
    print(f"  {took:.1f} s, exit {proc.returncode} (log: {log})", flush=True)
    return took, proc.returncode, proc.stdout


def lab_runs(workdir: Path, version: str) -> list[dict]:
    env = head_rerun.lab_env()
    env["ANSIBLE_CALLBACKS_ENABLED"] = "ansible.posix.profile_tasks"
    tool = str(REPO / ".venv" / "bin" / "ansible-playbook")
    inv = ["-i", str(REPO / "inventories" / "lab" / "hosts.yml")]
    steps = [
        ("upgrade (canary + 1 wave)", "upgrade_rocm.yml",
         {"version": version, "upgrade_serial": 1}),
        ("rollback (1 wave of 2)", "rollback.yml", {"upgrade_serial": 2}),
        ("prune", "prune_images.yml", {"versions": [version]}),
    ]
    rows = []
    for label, playbook, extra in steps:
        took, rc, out = run([tool, *inv, str(REPO / "playbooks" / playbook), "-e",
                             json.dumps(extra)], env, workdir / f"{playbook}.log")
        if rc != 0:
            raise SystemExit(f"upgrade_rollout: {playbook} failed (exit {rc}); see "
                             f"{workdir / (playbook + '.log')}")
        rows.append({"label": label, "wall": took, **phases(task_times(out))})
    return rows


def plan_cost(sizes: list[int], workdir: Path) -> dict[int, float]:
    """Seconds of upgrade_rocm.yml --check against a lab inventory of each size, head
    played by this machine, empty state: the model and the plan only."""
    env = head_rerun.lab_env()
    tool = str(REPO / ".venv" / "bin" / "ansible-playbook")
    out = {}
    for size in sizes:
        inv = workdir / f"inventory-{size}"
        head_rerun.generate(size, inv)
        state = workdir / f"state-{size}.yml"
        state.unlink(missing_ok=True)
        took, rc, _out = run([tool, "-i", str(inv / "hosts.yml"),
                              str(REPO / "playbooks" / "upgrade_rocm.yml"), "--check",
                              "-e", "version=bench-plan", "-e", "upgrade_serial=8",
                              "-e", "ansible_connection=local",
                              "-e", f"ansible_python_interpreter={sys.executable}",
                              "-e", f"upgrade_state_file={state}"],
                             env, workdir / f"plan-{size}.log")
        if rc != 0:
            raise SystemExit(f"upgrade_rollout: the {size}-node plan failed (exit {rc})")
        out[size] = took
    return out


def projection(upgrade: dict, plans: dict[int, float], sizes: list[int],
               serials: list[int]) -> list[str]:
    waves = upgrade["waves"]
    render = sum(w["render"] for w in waves) / len(waves)
    power = sum(w["power"] for w in waves) / len(waves)
    boot = sum(w["boot"] for w in waves) / len(waves)
    verify = sum(w["verify"] for w in waves) / len(waves)  # one node per wave on the lab
    lines = [f"per wave (lab, mean of {len(waves)}): render {render:.0f} s, power {power:.0f} s, "
             f"boot {boot:.0f} s, verify {verify:.0f} s per node; build {upgrade['build']:.0f} s"]
    for s in serials:
        for n in sizes:
            count = 1 + math.ceil((n - 1) / s)
            # the planning cost measured at the smallest size that is at least n
            at = min((m for m in plans if m >= n), default=max(plans))
            plan = plans[at]
            total = upgrade["build"] + plan + count * (render + power + boot) \
                + verify * n
            lines.append(f"  N={n:4d} s={s:2d}: {count:3d} waves, ~{total / 60:6.1f} min "
                         f"(plan {plan:.0f} s, measured at N={at})")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--lab", action="store_true",
                        help="also run the upgrade, rollback and prune on the running lab")
    parser.add_argument("--yes", action="store_true",
                        help="with --lab: yes, reboot both lab nodes (twice each)")
    parser.add_argument("--version", default="",
                        help="version name for the lab upgrade (default bench-<time>)")
    parser.add_argument("--sizes", default="2,60,600", help="node counts for the plan cost")
    parser.add_argument("--workdir", type=Path,
                        default=REPO / ".cache" / "bench" / "upgrade_rollout")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    args.workdir.mkdir(parents=True, exist_ok=True)
    if args.lab and not args.yes:
        print("upgrade_rollout: --lab reboots both lab nodes twice and builds a version; "
              "add --yes", file=sys.stderr)
        return 2
    version = args.version or datetime.datetime.now().strftime("bench-%Y%m%d%H%M")
    rows = lab_runs(args.workdir, version) if args.lab else []
    plans = plan_cost(sizes, args.workdir)
    print("\nplanning cost (upgrade_rocm.yml --check, this machine):")
    for n, secs in plans.items():
        print(f"  N={n:4d}: {secs:6.1f} s  ({secs / plans[sizes[0]]:.2f}x N={sizes[0]})")
    if rows:
        print("\nlab runs:")
        for row in rows:
            waves = "; ".join(
                f"wave {i}: render {w['render']:.0f} power {w['power']:.0f} boot "
                f"{w['boot']:.0f} verify {w['verify']:.0f}" for i, w in enumerate(row["waves"]))
            print(f"  {row['label']}: {row['wall']:.0f} s wall; plan {row['plan']:.0f} s, "
                  f"build {row['build']:.0f} s, promote {row['promote']:.0f} s"
                  + (f"; {waves}" if waves else ""))
        print("\nprojection from the measured parts (not measured at these sizes):")
        for line in projection(rows[0], plans, [2, 8, 32, 128], [2, 8]):
            print(line)
    (args.workdir / "result.json").write_text(json.dumps(
        {"plans": plans, "lab": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
