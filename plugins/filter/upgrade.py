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
    """zfs_origins: `zfs list -H -o name,origin -r <image>` output;
    zfs_txg: `zfs list -H -p -t snapshot -o name,createtxg -r <image>` output."""
    origins = dict(_pairs(zfs_origins))
    txg = dict(_pairs(zfs_txg))
    return up.prune_steps(dataset, origins, txg)


def _pairs(text):
    for line in (text or "").splitlines():
        parts = line.split("\t") if "\t" in line else line.split()
        if len(parts) >= 2:
            yield parts[0], parts[1]


def upgrade_state_moved(ctx, image, moves):
    return up.state_moved(ctx, image, moves)


def upgrade_state_recorded(ctx, image, version, origin):
    return up.state_recorded(ctx, image, str(version), str(origin))


def upgrade_state_promoted(ctx, image, version):
    return up.state_promoted(ctx, image, str(version))


def upgrade_state_pruned(ctx, image, versions):
    return up.state_pruned(ctx, image, _names(versions) or [])


def upgrade_with_state(ctx, state):
    """The context with a newer state (after a step was written)."""
    return dict(ctx, state=up.load_state(state))


class FilterModule:
    def filters(self):
        return {name: _wrap(func) for name, func in {
            "upgrade_plan": upgrade_plan,
            "upgrade_rollback_plan": upgrade_rollback_plan,
            "upgrade_prune_plan": upgrade_prune_plan,
            "upgrade_prune_steps": upgrade_prune_steps,
            "upgrade_state_moved": upgrade_state_moved,
            "upgrade_state_recorded": upgrade_state_recorded,
            "upgrade_state_promoted": upgrade_state_promoted,
            "upgrade_state_pruned": upgrade_state_pruned,
            "upgrade_with_state": upgrade_with_state,
            "upgrade_describe": up.describe,
            "upgrade_progress": up.progress,
            "upgrade_effective_versions": up.effective_versions,
        }.items()}
