# Copyright: junkyard.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Plan the creation and property changes of many ZFS datasets at once.

Pure functions: parse what ``zfs list``/``zfs get`` printed, compare it with
the wanted datasets, and return the commands to run.  Nothing here destroys a
dataset; datasets present under a managed parent but absent from the wanted
list are only reported.
"""

from __future__ import annotations

import re

# Properties whose value is a size; ``zfs get -p`` prints them in bytes.
SIZE_PROPERTIES = frozenset((
    "recordsize", "volsize", "volblocksize", "quota", "refquota", "reservation",
    "refreservation", "special_small_blocks", "userquota", "groupquota",
))
# Properties that can only be given when the dataset is created.
CREATE_ONLY = frozenset((
    "casesensitivity", "normalization", "utf8only", "encryption", "keyformat",
    "volblocksize",
))
# Spellings that ``zfs get`` prints differently from how they were set.
ALIASES = {
    "acltype": {"noacl": "off", "posixacl": "posix"},
}
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40,
          "p": 1 << 50, "e": 1 << 60}
_SIZE_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*([bkmgtpe]?)(?:i?b)?$", re.IGNORECASE)


class DatasetError(ValueError):
    """A wanted dataset or property that cannot be planned."""


def normalise(prop, value):
    """Return the form ``zfs get -H -p`` prints for ``value`` of ``prop``."""
    text = str(value).strip()
    if isinstance(value, bool):
        text = "on" if value else "off"
    low = text.lower()
    if prop in SIZE_PROPERTIES:
        if low in ("none", "-", "auto"):
            return "0" if low == "none" else low
        m = _SIZE_RE.match(low)
        if not m:
            raise DatasetError(f"property {prop} value {text!r} is not a size")
        number, unit = m.group(1), m.group(2).lower()
        if "." in number:
            whole, frac = number.split(".")
            scaled = int(whole) * _UNITS[unit] + int(frac) * _UNITS[unit] // (10 ** len(frac))
        else:
            scaled = int(number) * _UNITS[unit]
        return str(scaled)
    return ALIASES.get(prop, {}).get(low, low if low in ("on", "off") else text)


def parse_list(stdout):
    """``zfs list -H -o name -t filesystem,volume`` -> set of names."""
    return {line.strip() for line in stdout.splitlines() if line.strip()}


def parse_get(stdout):
    """``zfs get -H -p -o name,property,value,source`` -> {name: {prop: value}}."""
    out = {}
    for line in stdout.splitlines():
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) < 3:
            raise DatasetError(f"unexpected line from zfs get: {line!r}")
        name, prop, value = parts[0], parts[1], parts[2]
        out.setdefault(name, {})[prop] = value
    return out


def validate(wanted):
    seen = set()
    for i, ds in enumerate(wanted):
        name = ds.get("name")
        if not isinstance(name, str) or "/" not in name or name.endswith("/") or \
                "@" in name or "//" in name:
            raise DatasetError(f"datasets[{i}].name {name!r} is not a child dataset name "
                               "(pool/path)")
        if name in seen:
            raise DatasetError(f"datasets[{i}].name {name} is listed twice")
        seen.add(name)
        for prop, value in (ds.get("properties") or {}).items():
            normalise(prop, value)


def plan(wanted, existing, current):
    """Return (to_create, to_set, create_only_drift).

    ``wanted``: [{"name", "properties"}]; ``existing``: set of names;
    ``current``: {name: {prop: value}} for the wanted properties of existing
    datasets.  ``to_create``: [(name, {prop: value})] parents first;
    ``to_set``: [(name, {prop: value})]; drift: [(name, prop, have, want)].
    """
    validate(wanted)
    to_create, to_set, drift = [], [], []
    for ds in sorted(wanted, key=lambda d: (d["name"].count("/"), d["name"])):
        name, props = ds["name"], dict(ds.get("properties") or {})
        if name not in existing:
            to_create.append((name, props))
            continue
        have = current.get(name, {})
        changes = {}
        for prop, value in props.items():
            want = normalise(prop, value)
            got = have.get(prop)
            if got is not None and normalise(prop, got) == want:
                continue
            if prop in CREATE_ONLY:
                drift.append((name, prop, got, str(value)))
            else:
                changes[prop] = value
        if changes:
            to_set.append((name, changes))
    return to_create, to_set, drift


def unlisted(wanted, existing):
    """Existing datasets below a wanted dataset that are not wanted themselves.

    Such datasets (a node removed from the inventory, say) are never touched;
    they are reported so the operator can archive or destroy them by name.
    """
    names = {d["name"] for d in wanted}
    out = []
    for name in sorted(existing):
        if name in names:
            continue
        parent = name.rsplit("/", 1)[0]
        if parent in names:
            out.append(name)
    return out


def create_argv(zfs, name, props):
    argv = [zfs, "create", "-p"]
    for prop in sorted(props):
        argv += ["-o", f"{prop}={_zfs_value(props[prop])}"]
    return [*argv, name]


def set_argv(zfs, name, props):
    return [zfs, "set", *[f"{p}={_zfs_value(props[p])}" for p in sorted(props)], name]


def _zfs_value(value):
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)
