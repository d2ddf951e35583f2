# Copyright (c) 2026, junkyard.cluster developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""DIMM labels for rasdaemon (``ras-mc-ctl --register-labels``), from the hardware profiles.

Pure Python (stdlib only); used by the health filters on the controller.
"""

from __future__ import annotations

import re

from ansible_collections.junkyard.cluster.plugins.module_utils.health_parsers import HealthError


def dimm_label_entries(labels, default_locations="{index}.0.0,{index}.1.0", where="dimm_labels"):
    """Normalise a profile's ``memory.dimm_labels`` into ``[{label, locations}]``.

    An entry is a label string (its locations come from ``default_locations``
    with ``{index}`` = its position: one EDAC memory controller per channel and
    the DIMM's two chip selects, the EPYC one-DIMM-per-channel layout), or a
    mapping ``{label, location}`` with ``location`` a ``mc.top.mid[.low]``
    string or a list of them.
    """
    if labels is None:
        return []
    if not isinstance(labels, list):
        raise HealthError(f"{where} must be a list, got {labels!r}")
    out, seen = [], set()
    for i, entry in enumerate(labels):
        if isinstance(entry, str):
            label, locs = entry, default_locations.format(index=i).split(",")
        elif isinstance(entry, dict) and isinstance(entry.get("label"), str):
            label, locs = entry["label"], entry.get("location", entry.get("locations"))
            locs = [locs] if isinstance(locs, str) else locs
            if not isinstance(locs, list) or not locs:
                raise HealthError(f"{where}[{i}].location {locs!r} must be mc.top.mid or "
                                  "a list of them")
        else:
            raise HealthError(f"{where}[{i}] {entry!r} must be a label or "
                              "{label: ..., location: mc.top.mid}")
        label = label.strip()
        if not label or re.search(r"[:;,\s]", label):
            raise HealthError(f"{where}[{i}] label {label!r} must be non-empty, without "
                              "spaces, ':', ';' or ','")
        if label in seen:
            raise HealthError(f"{where}[{i}] label {label} is repeated")
        seen.add(label)
        clean = []
        for loc in locs:
            loc = str(loc).strip()
            if not re.fullmatch(r"[0-9]+(\.[0-9]+){1,3}", loc):
                raise HealthError(f"{where}[{i}] location {loc!r} is not mc.top[.mid[.low]]")
            clean.append(loc)
        out.append({"label": label, "locations": clean})
    return out


def label_files(profiles, boards=None, default_locations="{index}.0.0,{index}.1.0"):
    """One rasdaemon label file per hardware profile that has DIMM labels.

    ``[{profile, description, board, entries}]``; ``board`` is the profile's
    ``memory.board`` or ``boards[profile]`` (``{}`` when neither: the role
    refuses that with a message naming the profile).
    """
    if not isinstance(profiles, dict):
        raise HealthError(f"hardware profiles must be a mapping, got {profiles!r}")
    boards = boards or {}
    out = []
    for name in sorted(profiles):
        prof = profiles[name] if isinstance(profiles[name], dict) else {}
        memory = prof.get("memory") if isinstance(prof.get("memory"), dict) else {}
        entries = dimm_label_entries(memory.get("dimm_labels"), default_locations,
                                     f"cluster_hardware_profiles.{name}.memory.dimm_labels")
        if not entries:
            continue
        board = memory.get("board") or boards.get(name) or {}
        out.append({"profile": name,
                    "description": " ".join(str(prof.get("description", "")).split()),
                    "board": board if isinstance(board, dict) else {}, "entries": entries})
    return out
