# Copyright (c) 2026, junkyard.cluster developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""DIMM labels for rasdaemon (``ras-mc-ctl --register-labels``), from the hardware profiles.

Pure Python (stdlib only); used by the health filters on the controller.
"""

from __future__ import annotations

from ansible_collections.junkyard.cluster.plugins.module_utils.cluster_model import hardware
from ansible_collections.junkyard.cluster.plugins.module_utils.cluster_model.common import fmt
from ansible_collections.junkyard.cluster.plugins.module_utils.health_parsers import HealthError

DIMM_DEFAULT_LOCATIONS = hardware.DIMM_DEFAULT_LOCATIONS


def dimm_label_entries(labels, default_locations=DIMM_DEFAULT_LOCATIONS, where="dimm_labels"):
    """Normalise a profile's ``memory.dimm_labels`` into ``[{label, locations}]``.

    An entry is a label string (its locations come from ``default_locations``
    with ``{index}`` = its position: one EDAC memory controller per channel and
    the DIMM's two chip selects, the EPYC one-DIMM-per-channel layout), or a
    mapping ``{label, location}`` with ``location`` a ``mc.top.mid[.low]``
    string or a list of them.  The rules are the cluster model's
    (``cluster_model.hardware.dimm_label_entries``); the first problem is raised.
    """
    entries, problems = hardware.dimm_label_entries(labels, where, default_locations)
    if problems:
        field, value, problem = problems[0]
        raise HealthError(f"{field} {fmt(value)} {problem}")
    return entries


def label_files(profiles, boards=None, default_locations=DIMM_DEFAULT_LOCATIONS):
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
