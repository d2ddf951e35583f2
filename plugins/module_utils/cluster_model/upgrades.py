# Copyright: junkyard.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Upgrade layer: the image state (docs/upgrades.md) checked against itself and the
inventory, which image version each node boots, and the planner context the
upgrade, rollback and prune plays plan from (upgrade_plan's rules, so the boot
entries and the plans always agree)."""

from __future__ import annotations

import copy

from ansible_collections.junkyard.cluster.plugins.module_utils import upgrade_plan


def check_image_state(data, images, nodes, err):
    """Check the image state against itself and the inventory and return the
    planner context the versions are taken from (None if the state is refused).

    Refusals name where the state came from: ``<head>:<path>`` of the file, or the
    variable ``cluster_image_state``."""
    source = data.get("image_state_file")
    where, prefix = (source, "") if source else ("cluster", "cluster_image_state")

    def field(path):
        return ".".join(p for p in (prefix, path) if p)

    try:
        ctx = upgrade_plan.make_context(
            images, {n["name"]: n["image"] for n in nodes if n["image"] in images},
            {n["name"]: n["image_version"] for n in nodes}, data.get("image_state"))
    except upgrade_plan.PlanError as exc:
        err.add(where, field(exc.field or ""), exc.value, exc.problem or str(exc))
        return None
    for path, value, problem in upgrade_plan.state_problems(ctx):
        err.add(where, field(path), value, problem)
    _check_pins(ctx, where if source else "cluster_image_state", err)
    return ctx


def _check_pins(ctx, source, err):
    """A pin must name a version the state records for the node's image (when the
    state records that image at all: before the first build, the versions nodes
    boot are built from the inventory)."""
    for node, pin in sorted(ctx["pins"].items()):
        image = ctx["nodes"].get(node)
        known = ctx["state"]["images"].get(image, {}).get("versions")
        if known and pin not in known:
            err.add(node, "node_image_version", pin,
                    f"is not a recorded version of {image} in the image state {source} "
                    f"({', '.join(sorted(known))}): a pin names a version that was built")


def settle_versions(ctx, images, nodes):
    """Set each node's ``image_version`` (the version it boots) and its source, its
    ``image_reverted`` (see :func:`reverted_record`), and each image's current and
    previous version, from the context."""
    effective = upgrade_plan.effective_versions(ctx)
    for n in nodes:
        n["image_version"] = effective[n["name"]]["version"]
        n["image_version_source"] = effective[n["name"]]["source"]
        n["image_reverted"] = reverted_record(ctx, n)
    for name, img in images.items():
        img["current_version"] = upgrade_plan.image_current(ctx, name)
        img["previous_version"] = ctx["state"]["images"].get(name, {}).get("previous")


def reverted_record(ctx, node):
    """The state's ``reverted`` record of ``node`` (``{image, version, to, reason, at}``:
    a rollout switched it back automatically from ``version`` to ``to``), or None.  Also
    None when the record is stale: the node no longer boots its ``image`` and ``to`` (an
    inventory pin or another image since)."""
    rec = ctx["state"].get("reverted", {}).get(node["name"])
    if rec is None or (rec["image"], rec["to"]) != (node["image"], node["image_version"]):
        return None
    return dict(rec)


def published_context(ctx):
    """The planner context as published (``cluster_model.upgrade_context``): the
    inventory's images, each node's image, the inventory pins and the state."""
    return copy.deepcopy(ctx)
