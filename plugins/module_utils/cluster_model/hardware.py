# Copyright: junkyard.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Hardware profiles: GPUs, the BMC's sensors, fan zones, power supplies, the DIMM
labels of the memory, and what the profile adds to the kernel command line and the
initramfs."""

from __future__ import annotations

import re

from .common import as_dict, as_list, is_int

MODULE_NAME_RE = re.compile(r"^[A-Za-z0-9_-]+$")
GFX_TARGET_RE = re.compile(r"^gfx[0-9a-f]{3,4}$")
PROFILE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
# A DIMM label as rasdaemon's label files and the health report carry it, and the
# EDAC location of a DIMM (memory controller, then the layers below it).
DIMM_LABEL_BAD_RE = re.compile(r"[:;,\s]")
DIMM_LOCATION_RE = re.compile(r"^[0-9]+(\.[0-9]+){1,3}$")
# The locations of a label given without one, by its position: one EDAC memory
# controller per channel and the DIMM's two chip selects (EPYC, one DIMM per channel).
DIMM_DEFAULT_LOCATIONS = "{index}.0.0,{index}.1.0"


def _module_list(prof, key, base, err):
    """A profile's list of kernel module names (bad entries reported and left out)."""
    raw = prof.get(key, [])
    if not isinstance(raw, list):
        err.add("cluster", f"{base}.{key}", raw, "must be a list of module names")
        return []
    for mod in raw:
        if not isinstance(mod, str) or not MODULE_NAME_RE.fullmatch(mod):
            err.add("cluster", f"{base}.{key}", mod,
                    "is not a kernel module name (letters, digits, _ and -)")
    return [m for m in raw if isinstance(m, str) and MODULE_NAME_RE.fullmatch(m)]


def _check_gpus(base, prof, err):
    gpu = as_dict(prof.get("gpu"))
    count = gpu.get("count", 0)
    if not is_int(count) or count < 0:
        err.add("cluster", f"{base}.gpu.count", count, "must be an integer >= 0")
        count = 0
    if count and not GFX_TARGET_RE.fullmatch(str(gpu.get("gfx_target", ""))):
        err.add("cluster", f"{base}.gpu.gfx_target", gpu.get("gfx_target"),
                "is not a gfx target (e.g. gfx908)")
    return count, gpu.get("gfx_target")


def _check_bmc_sensors(base, prof, count, err):
    bmc = as_dict(prof.get("bmc"))
    cal = bmc.get("current_calibration", 1.0)
    if not isinstance(cal, (int, float)) or isinstance(cal, bool) or cal <= 0:
        err.add("cluster", f"{base}.bmc.current_calibration", cal, "must be a number > 0")
    sensors = as_list(bmc.get("gpu_current_sensors"))
    if sensors and len(sensors) != count:
        err.add("cluster", f"{base}.bmc.gpu_current_sensors", len(sensors),
                f"sensors are listed for {count} GPUs (one per GPU, in GPU order)")


def _check_fan_zones(base, prof, count, err):
    """Every GPU in one zone at most and, when the profile has fan zones, in one at
    least (an uncooled GPU would run on the BMC's own curve); one zone per fan."""
    cooled, fans = {}, {}
    zones = as_list(prof.get("fan_zones"))
    for z, zone in enumerate(zones):
        zone = as_dict(zone)
        zname = zone.get("name", z)
        fan_id = zone.get("fan_id")
        if fan_id is not None and fan_id in fans:
            err.add("cluster", f"{base}.fan_zones[{z}].fan_id", fan_id,
                    f"is already the fan of zone {fans[fan_id]}: two zones would fight "
                    "over one fan")
        elif fan_id is not None:
            fans[fan_id] = zname
        for g in as_list(zone.get("gpus")):
            if not is_int(g) or not 0 <= g < count:
                err.add("cluster", f"{base}.fan_zones[{z}].gpus", g,
                        f"names a GPU the profile does not have (it has {count}: "
                        f"0..{count - 1})" if count else
                        "names a GPU but the profile has none")
            elif g in cooled:
                err.add("cluster", f"{base}.fan_zones[{z}].gpus", g,
                        f"is already cooled by zone {cooled[g]}")
            else:
                cooled[g] = zname
    uncooled = [g for g in range(count) if g not in cooled]
    if zones and uncooled:
        err.add("cluster", f"{base}.fan_zones", ", ".join(map(str, uncooled)),
                f"{'is a GPU' if len(uncooled) == 1 else 'are GPUs'} in no fan zone: "
                "list every GPU of the profile in the zone whose fan cools it")


def _check_boot(base, prof, err):
    """(kernel command line, module blacklist, initramfs NIC modules or None)."""
    cmdline = prof.get("kernel_cmdline", [])
    if not isinstance(cmdline, list) or not all(isinstance(x, str) for x in cmdline):
        err.add("cluster", f"{base}.kernel_cmdline", cmdline, "must be a list of strings")
        cmdline = []
    for arg in cmdline:
        if not arg or re.search(r"[\s\"']", arg):
            err.add("cluster", f"{base}.kernel_cmdline", arg,
                    "is not one kernel argument (no white space or quotes: one list "
                    "entry per argument)")
    cmdline = [a for a in cmdline if a and not re.search(r"[\s\"']", a)]
    # Modules a diskless node of this hardware never needs (a floppy or an IDE
    # controller it does not have, the PC speaker, virtualisation): on the kernel
    # command line, so that neither the initramfs nor udev's coldplug loads them
    # (kmod reads modprobe.blacklist= in both).
    blacklist = _module_list(prof, "kernel_module_blacklist", base, err)
    # The drivers of the NIC the node boots from: the initramfs carries them (and
    # NFS) only; a profile without the list gets every NIC driver.
    nic_modules = (_module_list(prof, "initramfs_modules", base, err)
                   if "initramfs_modules" in prof else None)
    if prof.get("initramfs_modules") == []:
        err.add("cluster", f"{base}.initramfs_modules", [],
                "is empty: list the drivers of the management NIC (or leave it out "
                "for every NIC driver)")
    if blacklist:
        cmdline = [*cmdline, "modprobe.blacklist=" + ",".join(blacklist)]
    return cmdline, blacklist, nic_modules


def _dimm_locations(entry, i, default_locations, where, problems):
    """The EDAC locations of DIMM label entry ``i`` (a label or ``{label, location}``),
    or None (the problem added to ``problems``)."""
    if isinstance(entry, str):
        return default_locations.format(index=i).split(",")
    locs = entry.get("location", entry.get("locations"))
    locs = [locs] if isinstance(locs, str) else locs
    if not isinstance(locs, list) or not locs:
        problems.append((f"{where}[{i}].location", locs,
                         "must be mc.top.mid or a list of them"))
        return None
    clean = [str(loc).strip() for loc in locs]
    bad = [loc for loc in clean if not DIMM_LOCATION_RE.fullmatch(loc)]
    for loc in bad:
        problems.append((f"{where}[{i}] location", loc, "is not mc.top[.mid[.low]]"))
    return None if bad else clean


def dimm_label_entries(labels, where, default_locations=DIMM_DEFAULT_LOCATIONS):
    """A profile's ``memory.dimm_labels`` normalised: ``(entries, problems)``, the
    entries ``[{label, locations}]`` in their order (bad ones left out) and the
    problems ``[(field, value, problem)]`` in the model's form.

    An entry is a label (its locations from ``default_locations``, ``{index}`` its
    position) or a mapping ``{label, location}``, ``location`` a ``mc.top.mid[.low]``
    string or a list of them.  The one reader of DIMM labels: the model publishes
    each node's (``nodes[].dimm_labels``), the ECC monitor's label files
    (``health_labels``) take the entries with their locations."""
    if labels is None:
        return [], []
    if not isinstance(labels, list):
        return [], [(where, labels, "must be a list of DIMM labels")]
    entries, problems, seen = [], [], set()
    for i, entry in enumerate(labels):
        if not isinstance(entry, str) and not (isinstance(entry, dict)
                                               and isinstance(entry.get("label"), str)):
            problems.append((f"{where}[{i}]", entry,
                             "must be a label or {label: ..., location: mc.top.mid}"))
            continue
        label = (entry if isinstance(entry, str) else entry["label"]).strip()
        locs = _dimm_locations(entry, i, default_locations, where, problems)
        if not label or DIMM_LABEL_BAD_RE.search(label):
            problems.append((f"{where}[{i}] label", label,
                             "must be non-empty, without spaces, ':', ';' or ','"))
        elif label in seen:
            problems.append((f"{where}[{i}] label", label, "is repeated"))
        elif locs is not None:
            entries.append({"label": label, "locations": locs})
        seen.add(label)
    return entries, problems


def _check_dimm_labels(base, prof, err):
    """The labels of the profile's DIMMs (none when it lists none)."""
    labels = as_dict(prof.get("memory")).get("dimm_labels")
    # another shape than a list is the schema's refusal
    entries, problems = dimm_label_entries(labels if isinstance(labels, list) else None,
                                           f"{base}.memory.dimm_labels")
    for field, value, problem in problems:
        err.add("cluster", field, value, problem)
    return [e["label"] for e in entries]


def check_profiles(cluster, err):
    raw = cluster.get("hardware_profiles")
    if not isinstance(raw, dict) or not raw:
        err.add("cluster", "cluster_hardware_profiles", raw, "must be a non-empty mapping")
        return {}
    out = {}
    for pname, prof in raw.items():
        base = f"cluster_hardware_profiles.{pname}"
        if not isinstance(pname, str) or not PROFILE_NAME_RE.fullmatch(pname):
            err.add("cluster", "cluster_hardware_profiles", pname,
                    "is not a profile name (letters, digits, _ . -: it labels the nodes' "
                    "metrics and alert rules)")
        prof = as_dict(prof)
        count, gfx_target = _check_gpus(base, prof, err)
        _check_bmc_sensors(base, prof, count, err)
        _check_fan_zones(base, prof, count, err)
        rating = as_dict(prof.get("psu")).get("rating_w")
        if rating is not None and (not isinstance(rating, int) or rating <= 0):
            err.add("cluster", f"{base}.psu.rating_w", rating, "must be a positive integer")
        cmdline, blacklist, nic_modules = _check_boot(base, prof, err)
        out[pname] = {"name": pname, "gpu_count": count,
                      "gfx_target": gfx_target, "kernel_cmdline": cmdline,
                      "kernel_module_blacklist": blacklist, "initramfs_modules": nic_modules,
                      "dimm_labels": _check_dimm_labels(base, prof, err)}
    return out
