# Copyright: junkyard.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Plan image-version moves: upgrade (canary, then waves), rollback, prune.

Pure Python (stdlib only), used by the filters in plugins/filter/upgrade.py
and by the cluster model (plugins/module_utils/cluster_model/upgrades.py: every node's
boot entry follows ``effective_versions``), unit-tested in
tests/unit/test_upgrade_plan.py.  Nothing here touches a host: the cluster
model reads the state, the playbooks call these functions, show the plan
(check mode stops there) and carry it out.

The image state (``/etc/junkyard/image-state.yml`` on the head, written only
by the upgrade, rollback and prune playbooks)::

    schema: 1
    images:
      bookworm-rocm:
        current: "2026.12.1"        # what a node without an override boots
        previous: "2026.11.1"       # the version current was promoted over
        versions:                   # every version dataset, with its origin
          "2026.11.1": {origin: null}
          "2026.12.1": {origin: "2026.11.1"}
          "2026.12.2": {origin: "2026.12.1"}
    nodes:                          # per-node overrides (a rollout in progress,
      gpu01: "2026.12.2"            # a partial rollback); node -> version
    reverted:                       # nodes a rollout switched back automatically
      gpu02:                        # (state_reverted): the node's last outcome
        image: bookworm-rocm
        version: "2026.12.2"        # the version it failed on
        to: "2026.12.1"             # the version it boots again (current: no override)
        reason: "did not come up within 900 s"   # at most 500 characters
        at: "2026-12-07T01:02:03Z"  # when (UTC)

``reverted`` is optional and ``load_state`` returns it only when it holds a record (a
missing, null or empty ``reverted`` is left out), so a state without reverts reads and
writes exactly as before; read it as ``state.get("reverted", {})``.  A record describes the
node's last outcome: ``state_moved`` (any later move of the node by a rollout or rollback)
drops it, and ``state_pruned`` drops the records that name a pruned version.

Which version a node boots (``effective_versions``), first match wins:
1. the inventory's ``node_image_version`` (an operator's pin; never moved here),
2. ``nodes.<node>`` of the state,
3. ``images.<image>.current`` of the state,
4. the inventory's ``cluster_images.<image>.current_version``.
"""

from __future__ import annotations

import copy
import datetime
import re

SCHEMA = 1
VERSION_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
AT_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
AT_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
REASON_MAX = 500


class PlanError(ValueError):
    """An input that cannot be planned; the message names the field and value.

    An error in the image state also carries ``field`` (its path in the state, empty for the
    whole document), ``value`` and ``problem``, so that the cluster model can word it like
    its other refusals."""

    def __init__(self, message, field=None, value=None, problem=None):
        super().__init__(message)
        self.field, self.value, self.problem = field, value, problem


def _state_error(field, value, problem):
    where = f"{field} " if field else ""
    return PlanError(f"image state: {where}{value!r} {problem}", field, value, problem)


# --------------------------------------------------------------------------- state

STATE_KEYS = ("schema", "images", "nodes", "reverted")
IMAGE_KEYS = ("current", "previous", "versions")
VERSION_KEYS = ("origin",)
REVERT_KEYS = ("image", "version", "to", "reason", "at")


def _mapping(field, value, problem):
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _state_error(field, value, problem)
    return value


def _known_keys(field, mapping, keys, what):
    for key in mapping:
        if key not in keys:
            raise _state_error(field, key, f"is not a key of {what} ({', '.join(keys)})")


def load_state(data):
    """Validate and normalise the state read from the head (None or {} = no state yet)."""
    if data in (None, "", {}):
        return {"schema": SCHEMA, "images": {}, "nodes": {}}
    data = _mapping("", data, "must be a mapping of schema, images and nodes")
    _known_keys("", data, STATE_KEYS, "the image state")
    schema = data.get("schema", SCHEMA)
    if schema != SCHEMA or isinstance(schema, bool):
        raise _state_error("schema", schema, f"is not {SCHEMA}")
    images = {}
    raw_images = _mapping("images", data.get("images"),
                          "must be a mapping of image name to its record")
    for name, img in raw_images.items():
        img = _mapping(f"images.{name}", img, f"must be a mapping ({', '.join(IMAGE_KEYS)})")
        _known_keys(f"images.{name}", img, IMAGE_KEYS, "an image record")
        versions = {}
        raw_versions = _mapping(f"images.{name}.versions", img.get("versions"),
                                "must be a mapping of version name to {origin: ...}")
        for ver, meta in raw_versions.items():
            _version(f"images.{name}.versions", ver)
            meta = _mapping(f"images.{name}.versions.{ver}", meta,
                            "must be a mapping {origin: <version or null>}")
            _known_keys(f"images.{name}.versions.{ver}", meta, VERSION_KEYS, "a version record")
            origin = meta.get("origin")
            if origin is not None:
                _version(f"images.{name}.versions.{ver}.origin", origin)
            versions[str(ver)] = {"origin": origin}
        out = {"versions": versions}
        for key in ("current", "previous"):
            if img.get(key) is not None:
                out[key] = _version(f"images.{name}.{key}", img[key])
        images[str(name)] = out
    nodes = {}
    raw_nodes = _mapping("nodes", data.get("nodes"), "must be a mapping of node to version")
    for node, ver in raw_nodes.items():
        nodes[str(node)] = _version(f"nodes.{node}", ver)
    out = {"schema": SCHEMA, "images": images, "nodes": nodes}
    reverted = _reverted(data.get("reverted"))
    if reverted:
        # only when there is one: a state without reverts stays as it was
        out["reverted"] = reverted
    return out


def _reverted(value):
    """The ``reverted`` records, validated (node -> {image, version, to, reason, at})."""
    out = {}
    raw = _mapping("reverted", value,
                   f"must be a mapping of node to its revert record ({', '.join(REVERT_KEYS)})")
    for node, rec in raw.items():
        field = f"reverted.{node}"
        rec = _mapping(field, rec, f"must be a mapping ({', '.join(REVERT_KEYS)})")
        _known_keys(field, rec, REVERT_KEYS, "a revert record")
        for key in REVERT_KEYS:
            if rec.get(key) is None:
                raise _state_error(field, key, "is missing: a revert record has "
                                   f"{', '.join(REVERT_KEYS[:-1])} and {REVERT_KEYS[-1]}")
        image = rec["image"]
        if not isinstance(image, str) or not image.strip():
            raise _state_error(f"{field}.image", image, "is not an image name")
        out[str(node)] = {"image": image,
                          "version": _version(f"{field}.version", rec["version"]),
                          "to": _version(f"{field}.to", rec["to"]),
                          "reason": _reason(f"{field}.reason", rec["reason"]),
                          "at": _at(f"{field}.at", rec["at"])}
    return out


def _version(field, value):
    if not isinstance(value, str) or not VERSION_RE.fullmatch(value):
        raise _state_error(field, value, "is not a version name (letters, digits, . _ -)")
    return value


def _reason(field, value):
    if not isinstance(value, str) or not value.strip() or len(value) > REASON_MAX:
        raise _state_error(field, value,
                           f"is not a reason (a non-empty string of at most {REASON_MAX} "
                           "characters)")
    return value


def _at(field, value):
    """A UTC time as written (2026-12-07T01:02:03Z).  A YAML reader that made a datetime
    of an unquoted one (yaml.safe_load does) gets it back as that string."""
    if isinstance(value, datetime.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(datetime.UTC)
        return value.strftime(AT_FORMAT)
    try:
        if isinstance(value, str) and AT_RE.fullmatch(value):
            datetime.datetime.strptime(value, AT_FORMAT)
            return value
    except ValueError:
        pass
    raise _state_error(field, value, "is not a UTC time like 2026-12-07T01:02:03Z")


def state_problems(ctx):
    """What in the (well-formed) state contradicts itself or the inventory, as
    (field, value, problem): an image not in cluster_images; a current or previous version,
    an origin, or a node's override that is not a recorded version of its image; a revert
    record whose version or ``to`` is not a recorded version of its image.  Overrides and
    revert records of hosts that are not nodes (a retired node) are not looked at: nothing
    boots them; nor is a revert record of an image the node no longer boots (it is stale: the
    cluster model does not publish it)."""
    problems = []
    state = ctx["state"]
    for name, img in sorted(state["images"].items()):
        if name not in ctx["images"]:
            problems.append(("images", name,
                             f"is not an image in cluster_images "
                             f"({', '.join(sorted(ctx['images'])) or 'none'})"))
            continue
        known = img["versions"]
        recorded = f"({', '.join(sorted(known)) or 'none recorded'})"
        for key in ("current", "previous"):
            if key in img and img[key] not in known:
                problems.append((f"images.{name}.{key}", img[key],
                                 f"is not a recorded version of {name} {recorded}"))
        for ver, meta in sorted(known.items()):
            if meta["origin"] is not None and meta["origin"] not in known:
                problems.append((f"images.{name}.versions.{ver}.origin", meta["origin"],
                                 f"is not a recorded version of {name} {recorded}"))
    for node, ver in sorted(state["nodes"].items()):
        image = ctx["nodes"].get(node)
        if image is None or image not in ctx["images"]:
            continue
        known = state["images"].get(image, {}).get("versions", {})
        if ver not in known:
            problems.append((f"nodes.{node}", ver,
                             f"is not a recorded version of {image}, the image of {node} "
                             f"({', '.join(sorted(known)) or 'none recorded'})"))
    for node, rec in sorted(state.get("reverted", {}).items()):
        image = ctx["nodes"].get(node)
        if image is None or image not in ctx["images"] or rec["image"] != image:
            continue
        known = state["images"].get(image, {}).get("versions", {})
        for key in ("version", "to"):
            if rec[key] not in known:
                problems.append((f"reverted.{node}.{key}", rec[key],
                                 f"is not a recorded version of {image}, the image of {node} "
                                 f"({', '.join(sorted(known)) or 'none recorded'})"))
    return problems


def image_current(ctx, image):
    img = ctx["state"]["images"].get(image, {})
    if img.get("current"):
        return img["current"]
    try:
        return ctx["images"][image]["current_version"]
    except KeyError:
        raise PlanError(f"upgrade_image {image!r} is not an image in cluster_images "
                        f"({', '.join(sorted(ctx['images'])) or 'none'})") from None


def effective_versions(ctx):
    """node -> {'image', 'version', 'source'} (source: pin, override, state, inventory)."""
    out = {}
    state = ctx["state"]
    for node in sorted(ctx["nodes"]):
        image = ctx["nodes"][node]
        if ctx["pins"].get(node):
            version, source = ctx["pins"][node], "pin"
        elif node in state["nodes"]:
            version, source = state["nodes"][node], "override"
        elif state["images"].get(image, {}).get("current"):
            version, source = state["images"][image]["current"], "state"
        else:
            version, source = ctx["images"].get(image, {}).get("current_version"), "inventory"
        out[node] = {"image": image, "version": version, "source": source}
    return out


def make_context(images, nodes, pins, state):
    """images: cluster_images; nodes: node -> image; pins: node -> inventory version or None."""
    return {"images": {k: dict(v or {}) for k, v in (images or {}).items()},
            "nodes": dict(nodes or {}),
            "pins": {k: v for k, v in (pins or {}).items() if v},
            "state": load_state(state)}


def origin_of(ctx, image, version):
    return ctx["state"]["images"].get(image, {}).get("versions", {}).get(version, {}).get("origin")


# --------------------------------------------------------------------------- waves

def waves(first, rest, size):
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise PlanError(f"upgrade_serial {size!r} must be an integer >= 1 (nodes per wave)")
    out = [[first]] if first else []
    out += [rest[i:i + size] for i in range(0, len(rest), size)]
    return out


def _selected(ctx, image, only):
    members = [n for n in sorted(ctx["nodes"]) if ctx["nodes"][n] == image]
    if only is None:
        return members
    unknown = [n for n in only if n not in ctx["nodes"]]
    if unknown:
        raise PlanError(f"nodes {', '.join(unknown)} are not in the gpu_nodes group")
    other = [n for n in only if ctx["nodes"][n] != image]
    if other:
        raise PlanError(f"nodes {', '.join(other)} do not boot image {image}")
    return [n for n in members if n in only]


# --------------------------------------------------------------------------- upgrade

def plan_upgrade(ctx, image, version, canary=None, wave_size=1):
    """Canary first (a wave of one), then the other nodes of the image in waves."""
    if not isinstance(version, str) or not VERSION_RE.fullmatch(version):
        raise PlanError(f"upgrade_version {version!r} is not a version name "
                        "(letters, digits, . _ -)")
    current = image_current(ctx, image)
    if version == current:
        raise PlanError(f"upgrade_version {version} is already the current version of {image}")
    eff = effective_versions(ctx)
    members = _selected(ctx, image, None)
    pinned = [n for n in members if eff[n]["source"] == "pin"]
    already = [n for n in members if n not in pinned and eff[n]["version"] == version]
    movable = [n for n in members if n not in pinned and n not in already]
    if canary:
        if canary not in members:
            raise PlanError(f"canary {canary} is not a node of image {image} "
                            f"({', '.join(members) or 'none'})")
        if canary in pinned:
            raise PlanError(f"canary {canary} is pinned to {eff[canary]['version']} by "
                            "node_image_version in the inventory")
    if canary and canary in already:
        canary = None  # it already runs the new version and was verified then
    elif not canary and movable and not already:
        canary = movable[0]
    rest = [n for n in movable if n != canary]
    versions = ctx["state"]["images"].get(image, {}).get("versions", {})
    exists = version in versions
    if exists and versions[version].get("origin") not in (None, current):
        raise PlanError(f"upgrade_version {version} exists and was cloned from "
                        f"{versions[version]['origin']}, not from the current {current}")
    plan = {
        "action": "upgrade", "image": image, "from": current, "to": version,
        "build": not exists, "canary": canary,
        "waves": waves(canary, rest, wave_size),
        "moves": {n: {"from": eff[n]["version"], "to": version}
                  for n in ([canary] if canary else []) + rest},
        "pinned": {n: eff[n]["version"] for n in pinned},
        "unchanged": already,
        # a re-run after a failed verify: the nodes already on the version (moved, not
        # promoted) are verified again, without a reboot, before any other node moves
        "recheck": already,
    }
    plan["promote"] = version
    return plan


# --------------------------------------------------------------------------- rollback

def plan_rollback(ctx, image, only=None, wave_size=1):
    """Back one step.  A node off the current version (a rollout not promoted) goes back to
    the current version; a node on the current version goes to the previous one.  Without
    ``only``: if any node is off current, only those move (undo the rollout); else every node
    moves to the previous version and it becomes current again (demote)."""
    current = image_current(ctx, image)
    img = ctx["state"]["images"].get(image, {})
    previous = img.get("previous") or origin_of(ctx, image, current)
    eff = effective_versions(ctx)
    members = _selected(ctx, image, only)
    pinned = [n for n in members if eff[n]["source"] == "pin"]
    free = [n for n in members if n not in pinned]
    off = [n for n in free if eff[n]["version"] != current]
    chosen = off if only is None and off else free
    moves = {}
    for n in chosen:
        target = current if eff[n]["version"] != current else previous
        if not target:
            raise PlanError(f"{n} boots {current}, the current version of {image}, and no "
                            "previous version is recorded: nothing to roll back to")
        moves[n] = {"from": eff[n]["version"], "to": target}
    everyone = _selected(ctx, image, None)
    after = {n: moves[n]["to"] if n in moves else eff[n]["version"] for n in everyone}
    demote = bool(previous) and all(
        v == previous for n, v in after.items() if eff[n]["source"] != "pin")
    return {"action": "rollback", "image": image, "from": current,
            "to": previous if demote else current,
            "build": False, "canary": None,
            "waves": waves(None, list(moves), wave_size),
            "moves": moves, "pinned": {n: eff[n]["version"] for n in pinned},
            "unchanged": [n for n in members if n not in moves and n not in pinned],
            "recheck": [],
            "promote": previous if demote else None}


# --------------------------------------------------------------------------- state changes

def state_moved(ctx, image, moves):
    """The state after ``moves`` (node -> version, or a plan's node -> {from, to}) were
    carried out.  A node moved to the image's current version loses its override.  A moved
    node's ``reverted`` record is dropped: it told the node's last outcome, and the node has
    moved again since (``state_reverted`` records it after its move)."""
    state = copy.deepcopy(ctx["state"])
    current = image_current(ctx, image)
    for node, move in moves.items():
        version = move["to"] if isinstance(move, dict) else move
        if version == current:
            state["nodes"].pop(node, None)
        else:
            state["nodes"][node] = version
        state.get("reverted", {}).pop(node, None)
    if "reverted" in state and not state["reverted"]:
        del state["reverted"]  # as load_state gives it: no empty reverted
    return state


def state_reverted(ctx, image, reverts):
    """The state once a rollout switched nodes back automatically: ``reverts`` is node ->
    ``{from: <the version it failed on>, to: <the version it boots again>, reason, at}``
    (``at``: UTC, 2026-12-07T01:02:03Z).  Each node boots ``to`` again, recorded exactly as
    ``state_moved`` records a move (no override when ``to`` is the current version), and
    ``reverted.<node>`` holds ``{image, version: <from>, to, reason, at}``.  The reason is
    stripped and cut to 500 characters; the nodes must be nodes of ``image``, and ``from``
    and ``to`` recorded versions of it (a record the cluster model would refuse is never
    written)."""
    _selected(ctx, image, list(reverts))
    records = {}
    for node, rev in reverts.items():
        if not isinstance(rev, dict) or any(rev.get(k) is None for k in ("from", "to")):
            raise PlanError(f"revert of {node} {rev!r} must be a mapping "
                            "{from: <version>, to: <version>, reason, at}")
        reason = rev.get("reason")
        if isinstance(reason, str):
            reason = reason.strip()
            if len(reason) > REASON_MAX:
                reason = reason[:REASON_MAX - 3] + "..."
        records[node] = {"image": image, "version": rev["from"], "to": rev["to"],
                         "reason": reason, "at": rev.get("at")}
    state = state_moved(ctx, image, {node: rec["to"] for node, rec in records.items()})
    if records:
        state["reverted"] = {**state.get("reverted", {}), **records}
    state = load_state(state)  # refuses a bad version name, reason or time, naming it
    for field, value, problem in state_problems(dict(ctx, state=state)):
        if field.startswith("reverted."):
            raise _state_error(field, value, problem)
    return state


def state_recorded(ctx, image, version, origin):
    """The state once version (cloned from origin) exists; no node boots it yet."""
    state = copy.deepcopy(ctx["state"])
    img = state["images"].setdefault(image, {"versions": {}})
    cur = image_current(ctx, image)
    img.setdefault("current", cur)
    img["versions"].setdefault(cur, {"origin": None})
    img["versions"][version] = {"origin": origin}
    return state


def state_promoted(ctx, image, version):
    """The state once ``version`` is the image's current version (after upgrade or demote)."""
    state = copy.deepcopy(ctx["state"])
    img = state["images"].setdefault(image, {"versions": {}})
    old = image_current(ctx, image)
    if version == old:
        return state
    img["versions"].setdefault(old, {"origin": None})
    img["versions"].setdefault(version, {"origin": old})
    img["current"] = version
    if img["versions"][old].get("origin") == version:
        # demote (rollback of the whole image): the one before it becomes previous
        previous = img["versions"][version].get("origin")
    else:
        previous = old
    if previous and previous != version:
        img["previous"] = previous
    else:
        img.pop("previous", None)
    for node in [n for n, v in state["nodes"].items()
                 if ctx["nodes"].get(n) == image and v == version]:
        del state["nodes"][node]
    return state


# --------------------------------------------------------------------------- prune

def plan_prune(ctx, image, requested, allow_previous=False):
    """Which requested versions may be destroyed.  Refused: the current version, the previous
    one (the rollback target) unless ``allow_previous``, any version a node boots, a version
    not recorded in the state."""
    if not requested:
        raise PlanError("name the versions to prune: -e versions=<v1>,<v2> (nothing is "
                        "pruned by default)")
    current = image_current(ctx, image)
    img = ctx["state"]["images"].get(image, {})
    known = img.get("versions", {})
    eff = effective_versions(ctx)
    booted = {}
    for node, e in eff.items():
        if e["image"] == image:
            booted.setdefault(e["version"], []).append(node)
    prune, refused = [], {}
    for version in requested:
        if version == current:
            refused[version] = f"{version} is the current version of {image}"
        elif version in booted:
            refused[version] = (f"{version} is booted by {', '.join(sorted(booted[version]))}")
        elif version not in known:
            refused[version] = (f"{version} is not a recorded version of {image} "
                                f"({', '.join(sorted(known)) or 'none recorded'})")
        elif version == img.get("previous") and not allow_previous:
            refused[version] = (f"{version} is the previous version of {image}, the rollback "
                                "target; roll forward another version first, or give "
                                "prune_allow_previous=true")
        else:
            prune.append(version)
    return {"image": image, "current": current, "prune": prune, "refused": refused}


def state_pruned(ctx, image, versions):
    """The state once ``versions`` are destroyed: they leave the record, and a version cloned
    from one of them now descends from that one's origin.  A ``reverted`` record of the
    image that names one of them (as the version failed on or the one switched back to) is
    dropped: a record never names a version that does not exist."""
    state = copy.deepcopy(ctx["state"])
    known = state["images"].get(image, {}).get("versions", {})
    for version in versions:
        gone = known.pop(version, None)
        if gone is None:
            continue
        for meta in known.values():
            if meta.get("origin") == version:
                meta["origin"] = gone.get("origin")
    reverted = state.get("reverted", {})
    for node in [n for n, rec in reverted.items()
                 if rec["image"] == image and (rec["version"] in versions
                                               or rec["to"] in versions)]:
        del reverted[node]
    if "reverted" in state and not reverted:
        del state["reverted"]
    return state


def prune_steps(dataset, origins, createtxg):
    """ZFS steps to destroy version ``dataset`` without touching any other version.

    origins: dataset -> its origin snapshot ('-' or None when not a clone), from
    ``zfs list -H -o name,origin -r <pool>/images/<image>``; createtxg: snapshot -> txg.
    Clones whose origin is a snapshot of ``dataset`` are promoted first (oldest origin
    first), so the snapshots they depend on move to them; then the dataset is destroyed
    with its remaining snapshots, then its own origin snapshot if no clone uses it once the
    promotes are done (a promoted clone takes the origin of the dataset it was cloned from:
    pruning v2 and keeping its clone v3 leaves v1@v2 to v3).
    """
    return _prune(dataset, dict(origins), dict(createtxg))


def prune_steps_many(datasets, origins, createtxg):
    """ZFS steps to destroy several versions in one run: a version cloned from another
    pruned version goes first, and each version's steps are planned on the listing the
    steps before them leave (planned each on the first listing, pruning v2 with its clone
    v3 promoted v3 over v2 and then destroyed v3's new origin; seen on the lab)."""
    origins, txg = dict(origins), dict(createtxg)

    def depth(dataset):
        n, seen, origin = 0, {dataset}, origins.get(dataset)
        while origin and origin != "-":
            parent = origin.split("@", 1)[0]
            if parent in seen:
                break
            seen.add(parent)
            n, origin = n + 1, origins.get(parent)
        return n

    steps = []
    for dataset in sorted(set(datasets), key=lambda d: (-depth(d), d)):
        steps += _prune(dataset, origins, txg)
    return steps


def _prune(dataset, origins, txg):
    """prune_steps on ``origins`` and ``txg``, which it changes as the steps would."""
    if dataset not in origins:
        raise PlanError(f"{dataset} does not exist")
    own = origins.get(dataset)
    children = [d for d, o in origins.items() if o and o not in ("-",)
                and o.split("@", 1)[0] == dataset]
    children.sort(key=lambda d: (int(txg.get(origins[d], 0)), d))
    steps = []
    for child in children:
        steps.append(["promote", child])
        _promoted(child, origins, txg)
    steps.append(["destroy", dataset])
    del origins[dataset]
    for snap in [t for t in txg if t.split("@", 1)[0] == dataset]:
        del txg[snap]
    if own and own != "-" and own not in origins.values():
        steps.append(["destroy", own])
        txg.pop(own, None)
    return steps


def _promoted(clone, origins, txg):
    """The listing after ``zfs promote clone``: the clone takes its parent's origin and the
    parent's snapshots up to its own origin snapshot (clones of those follow them), and the
    parent becomes a clone of the promoted one."""
    origin = origins[clone]
    parent, snap_name = origin.split("@", 1)
    cut = int(txg.get(origin, 0))
    moved = {snap: f"{clone}@{snap.split('@', 1)[1]}" for snap in list(txg)
             if snap.split("@", 1)[0] == parent and int(txg[snap]) <= cut}
    moved.setdefault(origin, f"{clone}@{snap_name}")
    for old, new in moved.items():
        if old in txg:
            txg[new] = txg.pop(old)
    for name, snap in list(origins.items()):
        if name != clone and snap in moved:
            origins[name] = moved[snap]
    origins[clone] = origins.get(parent) or "-"
    origins[parent] = moved[origin]


# --------------------------------------------------------------------------- display

def describe(plan):
    """Lines an operator reads (check mode shows exactly these)."""
    lines = []
    if plan["action"] == "upgrade":
        lines.append(f"{plan['image']}: upgrade {plan['from']} -> {plan['to']}"
                     f" ({'build the new version' if plan['build'] else 'version exists'})")
    else:
        lines.append(f"{plan['image']}: rollback (current {plan['from']})")
    if plan.get("recheck"):
        lines.append(f"  verify again first (already on {plan['to']}, no reboot): "
                     f"{', '.join(plan['recheck'])}")
    for i, wave in enumerate(plan["waves"]):
        label = "canary" if plan["canary"] and i == 0 else f"wave {i if plan['canary'] else i + 1}"
        moves = ", ".join(f"{n} {plan['moves'][n]['from']} -> {plan['moves'][n]['to']}"
                          for n in wave)
        lines.append(f"  {label}: {moves}")
    if not plan["waves"]:
        lines.append("  no node moves")
    for node, ver in sorted(plan["pinned"].items()):
        lines.append(f"  pinned by the inventory, not moved: {node} ({ver})")
    for node in plan["unchanged"]:
        if node not in plan.get("recheck", []):
            lines.append(f"  unchanged: {node}")
    if plan.get("promote"):
        lines.append(f"  then {plan['promote']} becomes the current version of {plan['image']}")
    return lines


def progress(plan, verified):
    """How far a rollout got: waves whose every node is in ``verified`` count as done, in
    order; the first wave that is not done stops it (later waves never start).  Promote only
    when ``complete``."""
    verified = set(verified or [])
    done, stopped_at = [], None
    for i, wave in enumerate(plan["waves"]):
        if all(n in verified for n in wave):
            done.append(i)
        else:
            stopped_at = i
            break
    moved_ok = [n for i in done for n in plan["waves"][i]]
    pending = [n for wave in plan["waves"][len(done):] for n in wave]
    return {"complete": stopped_at is None, "waves_done": len(done),
            "stopped_at": stopped_at, "verified": moved_ok,
            "failed": [n for n in (plan["waves"][stopped_at] if stopped_at is not None else [])
                       if n not in verified],
            "not_started": [n for n in pending
                            if stopped_at is None or n not in plan["waves"][stopped_at]]}
