# Copyright (c) 2026, junkyard.cluster developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pool layouts for the zfs_pool module: parse, normalise, compare, build argv.

A layout maps a vdev class (``data``, ``special``, ``dedup``, ``log``,
``cache``, ``spare``) to a list of vdevs; a vdev is ``(kind, disks)`` where
kind is ``disk``, ``mirror``, ``raidz1``..``raidz3`` or a full dRAID name
``draid<P>:<D>d:<C>c:<S>s``.  The same structure comes from the module's
arguments (:func:`desired_layout`) and from ``zpool status -P``
(:func:`parse_status`), so the two compare directly.
"""

from __future__ import annotations

import json
import re

from ansible_collections.junkyard.cluster.plugins.module_utils.draid import (
    check_draid,
    draid_name,
)

CLASSES = ("data", "special", "dedup", "log", "cache", "spare")
# zpool status heading of each class (the data class has none).
STATUS_HEADINGS = {"special": "special", "dedup": "dedup", "logs": "log",
                   "cache": "cache", "spares": "spare"}
# zpool create keyword of each class.
CREATE_KEYWORDS = {"special": "special", "dedup": "dedup", "log": "log",
                   "cache": "cache", "spare": "spare"}

DRAID_RE = re.compile(r"^draid(?P<p>[1-3])?(?::(?P<d>\d+)d)?(?::(?P<c>\d+)c)?(?::(?P<s>\d+)s)?$")
DRAID_STATUS_RE = re.compile(r"^(draid[1-3]:\d+d:\d+c:\d+s)-\d+$")
DRAID_SPARE_RE = re.compile(r"^draid[1-3]-\d+-\d+$")
INTERIOR_RE = re.compile(r"^(mirror|raidz[1-3]|spare|replacing)-\d+$")
MIN_DISKS = {"mirror": 2, "raidz1": 2, "raidz2": 3, "raidz3": 4}


class LayoutError(ValueError):
    """A layout the module cannot or must not use; the message says why."""


def normalise_kind(kind: str, ndisks: int, where: str) -> str:
    """Canonical vdev kind; dRAID short forms get zpool's defaults."""
    if kind in ("disk", "stripe"):
        return "disk"
    if kind == "raidz":
        kind = "raidz1"
    if kind in MIN_DISKS:
        if ndisks < MIN_DISKS[kind]:
            raise LayoutError(f"{where}: {kind} needs at least {MIN_DISKS[kind]} disks, "
                              f"got {ndisks}")
        return kind
    m = DRAID_RE.match(kind)
    if not m:
        raise LayoutError(f"{where}: unknown vdev type {kind!r} (use disk, mirror, "
                          f"raidz1-3 or draid<P>[:<D>d][:<C>c][:<S>s])")
    p = int(m["p"] or 1)
    c = int(m["c"] or ndisks)
    s = int(m["s"] or 0)
    d = int(m["d"]) if m["d"] else min(8, c - s - p)
    if c != ndisks:
        raise LayoutError(f"{where}: {kind} names {c} children but {ndisks} disks are listed")
    why = check_draid(p, d, c, s)
    if why:
        raise LayoutError(f"{where}: {kind}: {why}")
    return draid_name(p, d, c, s)


def vdev_kind(vdev: dict, where: str) -> str:
    """The vdev type string, folding the separate parity/data/spares/children
    fields (the inventory's form) into it: draid + parity 2, data 8, spares 1
    -> draid2:8d:1s; raidz + parity 2 -> raidz2."""
    kind = vdev.get("type") or "disk"
    fields = {k: vdev.get(k) for k in ("parity", "data", "spares", "children")}
    given = {k: v for k, v in fields.items() if v is not None}
    if not given:
        return kind
    if kind == "raidz" and set(given) == {"parity"}:
        return f"raidz{given['parity']}"
    if kind == "draid":
        return ("draid" + str(given.get("parity", ""))
                + (f":{given['data']}d" if "data" in given else "")
                + (f":{given['children']}c" if "children" in given else "")
                + (f":{given['spares']}s" if "spares" in given else ""))
    raise LayoutError(f"{where}: {', '.join(sorted(given))} only combine with type draid "
                      f"(or parity with type raidz), not with {kind}")


def desired_layout(params: dict) -> dict:
    """Layout from the module's vdevs/special/dedup/log/cache/spares options."""
    layout = {cls: [] for cls in CLASSES}
    seen: dict[str, str] = {}

    def add(cls, index, kind, disks):
        where = f"{'vdevs' if cls == 'data' else cls}[{index}]"
        if not disks:
            raise LayoutError(f"{where}: no disks listed")
        for disk in disks:
            if disk in seen:
                raise LayoutError(f"{where}: {disk} is already used in {seen[disk]}")
            seen[disk] = where
        if kind in ("disk", "stripe"):
            for disk in disks:
                layout[cls].append(("disk", (disk,)))
        else:
            layout[cls].append((normalise_kind(kind, len(disks), where), tuple(disks)))

    for cls, key in (("data", "vdevs"), ("special", "special"), ("dedup", "dedup"),
                     ("log", "log")):
        for i, vdev in enumerate(params.get(key) or []):
            where = f"{'vdevs' if cls == 'data' else cls}[{i}]"
            add(cls, i, vdev_kind(vdev, where), list(vdev.get("disks") or []))
    for cls, key in (("cache", "cache"), ("spare", "spares")):
        if params.get(key):
            add(cls, 0, "disk", list(params[key]))
    if not layout["data"]:
        raise LayoutError("vdevs: at least one data vdev is required")
    for cls in ("special", "dedup", "log", "cache", "spare"):
        for kind, _disks in layout[cls]:
            if kind.startswith("draid") or (cls in ("cache", "spare") and kind != "disk"):
                raise LayoutError(f"{cls}: {kind} vdevs are not allowed in this class")
    return layout


def create_argv(zpool: str, name: str, layout: dict, ashift: int | None,
                pool_props: dict, fs_props: dict) -> list[str]:
    argv = [zpool, "create"]
    if ashift is not None:
        argv += ["-o", f"ashift={ashift}"]
    for key, value in sorted(pool_props.items()):
        argv += ["-o", f"{key}={prop_value(value)}"]
    for key, value in sorted(fs_props.items()):
        argv += ["-O", f"{key}={prop_value(value)}"]
    argv.append(name)
    for cls in CLASSES:
        vdevs = layout.get(cls) or []
        if not vdevs:
            continue
        if cls != "data":
            argv.append(CREATE_KEYWORDS[cls])
        for kind, disks in vdevs:
            if kind != "disk":
                argv.append(kind)
            argv.extend(disks)
    return argv


def prop_value(value) -> str:
    if value is True:
        return "on"
    if value is False:
        return "off"
    return str(value)


def parse_status(text: str) -> dict:
    """Layout of the pool in ``zpool status -P <pool>`` output.

    Returns ``{"layout": ..., "substituted": [...]}``; a disk that is being
    replaced or stood in for by a spare (``replacing-N`` / ``spare-N``) is
    listed under its original path, and the pair is reported in
    ``substituted``.
    """
    lines = text.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == "config:")
    except StopIteration as exc:
        raise LayoutError("no 'config:' section in zpool status output") from exc
    entries = []
    for line in lines[start + 1:]:
        if line.strip().startswith("errors:"):
            break
        if not line.strip():
            continue
        body = line.lstrip("\t")
        fields = body.split()
        if fields[0] == "NAME" and "STATE" in fields:
            continue
        depth = (len(body) - len(body.lstrip(" "))) // 2
        name = fields[0]
        # A missing device shows as its GUID with "was <path>" at the end.
        if "was" in fields[1:-1] and fields[fields.index("was", 1) + 1].startswith("/"):
            name = fields[fields.index("was", 1) + 1]
        entries.append((depth, name))
    if not entries:
        raise LayoutError("empty config section in zpool status output")

    layout = {cls: [] for cls in CLASSES}
    substituted = []
    cls = "data"
    current = None  # [kind, disks] of the top-level vdev being read
    interior = None  # [first child or None, depth] of a spare-N/replacing-N
    for depth, name in entries[1:]:
        if depth == 0:
            cls = STATUS_HEADINGS.get(name)
            if cls is None:
                raise LayoutError(f"unknown vdev class heading {name!r} in zpool status")
            current = interior = None
            continue
        if depth == 1:
            interior = None
            m = DRAID_STATUS_RE.match(name)
            im = INTERIOR_RE.match(name)
            if m:
                current = [m.group(1), []]
            elif im and im.group(1) in ("mirror", "raidz1", "raidz2", "raidz3"):
                current = [im.group(1), []]
            elif im:  # a single-disk vdev being replaced / spared
                current = ["disk", []]
                interior = [None, depth]
            elif cls == "spare" and DRAID_SPARE_RE.match(name):
                current = None  # distributed spares come with their dRAID
                continue
            else:
                layout[cls].append(("disk", (name,)))
                current = None
                continue
            layout[cls].append(current)
            continue
        if current is None:
            raise LayoutError(f"device {name!r} at depth {depth} has no parent vdev")
        if interior is not None and depth > interior[1]:
            if interior[0] is None:
                interior[0] = name
                current[1].append(name)
            else:
                substituted.append({"device": interior[0], "by": name})
            continue
        interior = None
        if INTERIOR_RE.match(name) and INTERIOR_RE.match(name).group(1) in ("spare", "replacing"):
            interior = [None, depth]
            continue
        current[1].append(name)
    for c in CLASSES:
        layout[c] = [(k, tuple(d)) if isinstance(d, list) else (k, d) for k, d in layout[c]]
    return {"layout": layout, "substituted": substituted}


def same_device(wanted: str, actual: str) -> bool:
    """True if ``actual`` (from zpool status -P) is ``wanted`` or the
    partition 1 that ``zpool create`` made on the whole disk ``wanted``."""
    if actual == wanted:
        return True
    if wanted.startswith("/dev/disk/"):
        return actual == wanted + "-part1"
    if re.search(r"\d$", wanted):  # nvme0n1, mmcblk0, loop0: partition is p1
        return actual == wanted + "p1"
    return actual == wanted + "1"


def _vdev_matches(want, have) -> bool:
    wkind, wdisks = want
    hkind, hdisks = have
    if wkind != hkind or len(wdisks) != len(hdisks):
        return False
    left = list(hdisks)
    for disk in wdisks:
        hit = next((a for a in left if same_device(disk, a)), None)
        if hit is None:
            return False
        left.remove(hit)
    return True


def layout_differences(want: dict, have: dict) -> list[str]:
    """Human-readable differences; empty when the layouts are the same.
    Vdev order and disk order inside a vdev do not matter."""
    out = []
    for cls in CLASSES:
        wanted = list(want.get(cls) or [])
        actual = list(have.get(cls) or [])
        unmatched = []
        for vdev in wanted:
            hit = next((a for a in actual if _vdev_matches(vdev, a)), None)
            if hit is None:
                unmatched.append(vdev)
            else:
                actual.remove(hit)
        for kind, disks in unmatched:
            out.append(f"{cls}: wanted {kind} {' '.join(disks)} is not in the pool")
        for kind, disks in actual:
            out.append(f"{cls}: pool has {kind} {' '.join(disks)} that is not wanted")
    return out


def render_layout(layout: dict) -> str:
    """Text form used for diffs, one vdev per line."""
    out = []
    for cls in CLASSES:
        for kind, disks in layout.get(cls) or []:
            out.append(f"{cls}: {kind}: {' '.join(disks)}")
    return "\n".join(out) + "\n" if out else ""


def layout_as_list(layout: dict) -> list[dict]:
    return [{"class": cls, "type": kind, "disks": list(disks)}
            for cls in CLASSES for kind, disks in layout.get(cls) or []]


def parse_get(text: str) -> dict:
    """``zpool get -H -p -o property,value`` / ``zfs get -H -p -o property,value``."""
    props = {}
    for line in text.splitlines():
        if line.strip():
            key, _sep, value = line.partition("\t")
            props[key] = value
    return props


def parse_wipefs(text: str) -> list[str]:
    """Signature types in ``wipefs --no-act --json`` output (empty output: none)."""
    if not text.strip():
        return []
    data = json.loads(text)
    return [sig.get("type", "?") for sig in data.get("signatures", [])]


def parse_lsblk_partitions(text: str) -> list[str]:
    """Partition paths under the disk in ``lsblk --json --paths -o NAME,TYPE``."""
    data = json.loads(text)
    parts = []

    def walk(devices):
        for dev in devices or []:
            if dev.get("type") == "part":
                parts.append(dev["name"])
            walk(dev.get("children"))

    walk(data.get("blockdevices"))
    return parts


def zdb_has_label(rc: int, out: str) -> bool:
    """``zdb -l`` prints the label nvlist (with pool_guid) and exits 0 when a
    label is found; it prints 'failed to unpack label N' otherwise."""
    return rc == 0 and "pool_guid" in out


# pool_state_t of OpenZFS (sys/fs/zfs.h), as the label's "state" records it.
POOL_STATES = {0: "active", 1: "exported", 2: "destroyed", 3: "spare", 4: "l2cache",
               5: "uninitialized", 6: "unavail", 7: "potentially active"}
_LABEL_FIELD_RE = re.compile(r"^\s+(name|state|pool_guid|hostname|txg):\s+'?(.*?)'?\s*$")


def parse_zdb_label(rc: int, out: str) -> dict | None:
    """The pool a device's ZFS label names, from ``zdb -l <device>``.

    Returns None without a label, else ``{"name", "guid", "state",
    "hostname"}`` from the first label that unpacked; a hot spare's or a
    cache device's label names no pool (name and guid None)."""
    if not zdb_has_label(rc, out) and not (rc == 0 and re.search(r"^\s+guid:", out, re.M)):
        return None
    fields: dict[str, str] = {}
    for line in out.splitlines():
        if line.startswith("LABEL ") and fields:
            break  # the first label that unpacked is enough
        m = _LABEL_FIELD_RE.match(line)
        if m and m.group(1) not in fields:
            fields[m.group(1)] = m.group(2)
    state = fields.get("state", "")
    state = POOL_STATES.get(int(state), f"state {state}") if state.isdigit() else (
        state or "unknown state")
    return {"name": fields.get("name"), "guid": fields.get("pool_guid"), "state": state,
            "hostname": fields.get("hostname")}


def parse_wipefs_zfs(text: str) -> list[dict]:
    """Pools named by ``zfs_member`` signatures in ``wipefs --no-act --json``
    output (blkid reads the pool name and guid from the label): a label that
    ``zdb -l`` could not unpack is still a pool's."""
    if not text.strip():
        return []
    seen = []
    for sig in json.loads(text).get("signatures", []):
        if sig.get("type") == "zfs_member" and (sig.get("label") or sig.get("uuid")):
            pool = {"name": sig.get("label"), "guid": sig.get("uuid"),
                    "state": "unknown state", "hostname": None}
            if pool not in seen:
                seen.append(pool)
    return seen


def parse_pool_guids(text: str) -> dict:
    """guid -> name of the imported pools, from ``zpool list -H -p -o name,guid``."""
    out = {}
    for line in text.splitlines():
        name, _sep, guid = line.strip().partition("\t")
        if guid:
            out[guid.strip()] = name
    return out


def describe_pool(pool: dict, imported: dict) -> str:
    """'pool old (guid 657..., exported, last used by host oldhead)'."""
    bits = [f"guid {pool['guid']}", pool["state"]]
    if pool.get("hostname"):
        bits.append(f"last used by host {pool['hostname']}")
    if pool["guid"] in imported:
        bits.append(f"imported here as {imported[pool['guid']]}")
    return f"pool {pool['name']} ({', '.join(bits)})"
