# Copyright (c) 2026, junkyard.cluster developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the upgrade, rollback and prune playbooks (logic in
plugins/module_utils/upgrade_plan.py, tested by tests/unit/test_upgrade_plan.py)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.junkyard.cluster.plugins.module_utils import upgrade_plan as up


def _wrap(func):
    def inner(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except up.PlanError as exc:
            raise AnsibleFilterError(str(exc)) from exc
    inner.__name__ = func.__name__
    inner.__doc__ = func.__doc__
    return inner


def _names(value):
    if value in (None, "", []):
        return None
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return [str(v) for v in value]


def upgrade_plan(ctx, image, version, canary=None, serial=1):
    return up.plan_upgrade(ctx, image, str(version), canary or None, int(serial))


def upgrade_rollback_plan(ctx, image, nodes=None, serial=1):
    return up.plan_rollback(ctx, image, _names(nodes), int(serial))


def upgrade_prune_plan(ctx, image, versions, allow_previous=False):
    return up.plan_prune(ctx, image, _names(versions) or [], bool(allow_previous))


def upgrade_prune_steps(dataset, zfs_origins, zfs_txg=""):
    """dataset: one version's dataset, or a list of them (planned together: clones first);
    zfs_origins: `zfs list -H -o name,origin -r <image>` output;
    zfs_txg: `zfs list -H -p -t snapshot -o name,createtxg -r <image>` output."""
    origins = dict(_pairs(zfs_origins))
    txg = dict(_pairs(zfs_txg))
    if isinstance(dataset, (list, tuple)):
        return up.prune_steps_many(list(dataset), origins, txg)
    return up.prune_steps(dataset, origins, txg)


def _pairs(text):
    for line in (text or "").splitlines():
        parts = line.split("\t") if "\t" in line else line.split()
        if len(parts) >= 2:
            yield parts[0], parts[1]


def upgrade_state_moved(ctx, image, moves):
    return up.state_moved(ctx, image, moves)


def upgrade_state_reverted(ctx, image, reverts):
    """reverts: node -> {from, to, reason, at} (the nodes a rollout switched back)."""
    return up.state_reverted(ctx, image, reverts or {})


def upgrade_state_recorded(ctx, image, version, origin):
    return up.state_recorded(ctx, image, str(version), str(origin))


def upgrade_state_promoted(ctx, image, version):
    return up.state_promoted(ctx, image, str(version))


def upgrade_state_pruned(ctx, image, versions):
    return up.state_pruned(ctx, image, _names(versions) or [])


def upgrade_with_state(ctx, state):
    """The context with a newer state (after a step was written)."""
    return dict(ctx, state=up.load_state(state))


_POLICY = {
    "skip": "a node still busy is skipped: given back to Slurm, left on its version, "
            "reported at the end (nothing is promoted until it moved)",
    "wait": "the rollout keeps waiting for a node still busy",
    "kill": "the jobs still running are cancelled (scancel)",
}


def upgrade_drain_describe(plan, query=None, enabled=True, policy="skip", timeout=3600):
    """The drain part of the plan an operator reads (check mode shows it): the policy, and
    from ``query`` (rollout_drain state=query on the nodes that move) which of them run jobs
    now and which someone else drained."""
    moving = [n for wave in plan.get("waves", []) for n in wave]
    if not moving:
        return []
    if not enabled:
        return ["  Slurm: the nodes are not drained first (image_rollout_drain is false)"]
    lines = [f"  drain: each wave is drained in Slurm before it powers off and its jobs are "
             f"waited for up to {int(timeout)} s; then {_POLICY[policy]} "
             f"(image_rollout_busy_policy {policy}); a node resumes only after it booted "
             f"{plan['to']} and passed verification, and one that fails stays drained"]
    query = query or {}
    if query.get("failed") or "busy" not in query:
        why = (query.get("msg") or "no answer").split(" in paths:")[0]
        lines.append(f"  busy now: unknown (Slurm could not be asked: {why})")
        return lines
    busy = query.get("busy") or {}
    lines.append("  busy now: " + ("; ".join(f"{n} (jobs {', '.join(busy[n])})"
                                             for n in moving if n in busy)
                                   or "no job runs on the nodes that move"))
    for node, reason in sorted((query.get("left_drained") or {}).items()):
        lines.append(f"  drained by someone else (moves, stays drained): {node} ({reason})")
    return lines


class FilterModule:
    def filters(self):
        return {name: _wrap(func) for name, func in {
            "upgrade_plan": upgrade_plan,
            "upgrade_rollback_plan": upgrade_rollback_plan,
            "upgrade_prune_plan": upgrade_prune_plan,
            "upgrade_prune_steps": upgrade_prune_steps,
            "upgrade_state_moved": upgrade_state_moved,
            "upgrade_state_reverted": upgrade_state_reverted,
            "upgrade_state_recorded": upgrade_state_recorded,
            "upgrade_state_promoted": upgrade_state_promoted,
            "upgrade_state_pruned": upgrade_state_pruned,
            "upgrade_with_state": upgrade_with_state,
            "upgrade_describe": up.describe,
            "upgrade_drain_describe": upgrade_drain_describe,
            "upgrade_progress": up.progress,
            "upgrade_effective_versions": up.effective_versions,
        }.items()}
