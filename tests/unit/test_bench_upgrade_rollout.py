"""bench/upgrade_rollout.py: the per-task times of a profile_tasks run are summed into the
phases the benchmark prints (a wrong split would print wrong figures)."""

from __future__ import annotations

import sys

from tests.conftest import REPO

sys.path.insert(0, str(REPO / "bench"))

import upgrade_rollout


def stamp(total: float, prev: float = 0.0) -> str:
    def fmt(s: float) -> str:
        return f"{int(s // 3600)}:{int(s % 3600 // 60):02d}:{s % 60:06.3f}"
    return f"Monday 30 November 2026  05:15:40 +0000 ({fmt(prev)})       {fmt(total)} *******"


def run_output(tasks: list[tuple[str | None, str, float]], end: float) -> str:
    """profile_tasks-shaped output: PLAY headers, TASK headers with their start times."""
    lines = []
    for play, task, at in tasks:
        if play:
            lines += [f"PLAY [{play}] ********", ""]
        lines += [f"TASK [{task}] ****", stamp(at), "ok: [head]", ""]
    lines += ["PLAY RECAP ****", "head : ok=3 changed=1", "", stamp(end),
              "=" * 40, "task one ---- 1.00s"]
    return "\n".join(lines)


def test_task_times_are_the_gaps_between_task_starts():
    out = run_output([("Plan the image-version moves", "Plan the upgrade", 1.0),
                      (None, "Show the plan", 1.5),
                      ("Clone the current version for the upgrade", "Snapshot", 4.0)], 10.0)
    assert upgrade_rollout.task_times(out) == [
        ("Plan the image-version moves", "Plan the upgrade", 0.5),
        ("Plan the image-version moves", "Show the plan", 2.5),
        ("Clone the current version for the upgrade", "Snapshot", 6.0)]


def test_phases_split_build_waves_and_promote():
    roll = "Roll the version out, canary first, one verified wave after the other"
    tasks = [("Plan the image-version moves", "Plan the upgrade", 0.0),
             ("Clone the current version for the upgrade", "Snapshot", 2.0),
             ("Upgrade inside the new version", "Install ROCm", 3.0),
             ("Finish the new version on the head", "Make it read-only", 50.0),
             (roll, "Start the rollout", 52.0),
             (None, "junkyard.cluster.rocm : Read the kernel command line", 53.0)]
    at = 55.0
    for _wave in range(2):
        for task, secs in (("Take the wave out of Slurm service and wait for its jobs", 1.0),
                           ("junkyard.cluster.netboot : Write the GRUB files", 20.0),
                           ("junkyard.cluster.image_rollout : Drive the wave's nodes through "
                            "their BMCs (waits for the state) to off", 3.0),
                           ("junkyard.cluster.image_rollout : Mark where the head's HTTP access "
                            "log stands before the power-on", 1.0),
                           ("junkyard.cluster.image_rollout : Drive the wave's nodes through "
                            "their BMCs (waits for the state) to on", 2.0),
                           ("junkyard.cluster.image_rollout : Watch the nodes boot (SSH on the "
                            "management address; kernel fetches in the access log)", 150.0),
                           ("junkyard.cluster.rocm : Refuse any installed DKMS package", 10.0),
                           ("junkyard.cluster.image_rollout : Run the health check without "
                            "draining (again while a check still waits)", 4.0)):
            tasks.append((None, f"junkyard.cluster.image_rollout : {task}"
                          if task.startswith("Take") else task, at))
            at += secs
    tasks.append(("Promote the version once every node passed", "Record", at))
    result = upgrade_rollout.phases(upgrade_rollout.task_times(run_output(tasks, at + 4.0)))
    assert result["plan"] == 2.0 + 1.0 and result["build"] == 50.0
    assert result["recheck"] == 2.0
    assert result["waves"] == [{"drain": 1.0, "render": 21.0, "power": 5.0, "boot": 150.0,
                                "verify": 14.0}] * 2
    assert result["promote"] == 4.0
