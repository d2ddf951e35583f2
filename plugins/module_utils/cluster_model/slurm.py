# Copyright: junkyard.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Slurm layer: the controller, the partitions and each node's Slurm definition,
derived from its hardware profile.

``cluster_slurm`` is optional; without it the cluster has one partition ``gpu``
(the default one) with every node, and the storage head is the controller.  A
node's definition comes from its profile: ``cpu_sockets``,
``cpu_cores_per_socket``, ``cpu_threads_per_core``, ``memory.size_mib`` (less a
reserve for the system, so that Slurm never hands out memory the node does not
have) and ``Gres=gpu:<type>:<count>`` with the type from ``gpu.model``.  A
profile that does not state its CPUs or memory gives a definition without them
(:func:`incomplete` names what is missing; the ``slurm_conf`` filter refuses
to render it).

The munge key never enters the node image: the head copies it into each node's
own host key dataset (a persistent path, exported to that node only) and the
node's munge service reads it from there (``munge_key``).

The health check (``health``): the program slurmd runs every ``interval``
seconds (HealthCheckProgram, from the node image), its settings file, the
corrected ECC error limit and the fan daemon's metrics age limit
(``cluster_slurm.health``), and the nodes whose hardware profile has fan
zones, where the fan daemon must be regulating."""

from __future__ import annotations

import math
import posixpath
import re

from . import images
from .common import as_dict, as_list, check_plain_path, is_int

DEFAULT_PARTITION = "gpu"
# slurmd's spool and configless cache: /run is a tmpfs on every node (the
# initramfs moves it to the real root), so it needs no writable path; a
# persistent spool is a writable path the inventory declares.
DEFAULT_SPOOL_DIR = "/run/slurmd"
DEFAULT_RESERVE_PERCENT = 5
DEFAULT_RESERVE_MIN_MIB = 512
PARTITION_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
GRES_TYPE_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")
# Slurm's time limits: minutes, min:sec, h:m:s, d-h, d-h:m, d-h:m:s, or none.
TIME_RE = re.compile(r"^(UNLIMITED|INFINITE|[0-9]+(:[0-9]{1,2}){0,2}"
                     r"|[0-9]+-[0-9]+(:[0-9]{1,2}){0,2})$")
# The render node of GPU i is /dev/dri/renderD<128+i> (DRM numbers render minors
# from 128, in the order the driver probes the GPUs: PCI order).
RENDER_MINOR_BASE = 128
MUNGE_KEY_FILE = "munge.key"
# The health check in the node image (roles/slurm_node) and its settings.
HEALTH_PROGRAM = "/usr/local/sbin/junkyard-slurm-health"
HEALTH_CONFIG = "/etc/junkyard/slurm-health.conf"
# Seconds between two runs; corrected ECC errors a DIMM may have in 24 h (the
# health report's ce_per_day_limit); seconds after which the fan daemon's
# metrics are stale (the health report's fan_metrics_max_age_s).
DEFAULT_HEALTH = {"interval": 60, "ce_per_day_limit": 10, "fan_metrics_max_age_s": 30}


def _check_controller(raw, head, node_names, err):
    controller = raw.get("controller", head.get("name"))
    known = [head.get("name"), *node_names]
    if not isinstance(controller, str) or controller not in known:
        err.add("cluster", "cluster_slurm.controller", controller,
                f"is not a host of the inventory (the storage head {head.get('name')} or a "
                "node of gpu_nodes)")
        return None
    return controller


def _check_partition(i, part, node_names, err):
    base = f"cluster_slurm.partitions[{i}]"
    part = as_dict(part)
    name = part.get("name")
    if not isinstance(name, str) or not PARTITION_RE.fullmatch(name):
        err.add("cluster", f"{base}.name", name,
                "is not a partition name (letters, digits, _ and -)")
        return None
    members = part.get("nodes", node_names)
    if isinstance(members, list) and not members:
        err.add("cluster", f"{base}.nodes", "[]",
                "lists no node (leave nodes out for every node)")
        return None
    members = [m for m in as_list(members) if isinstance(m, str)]
    for node in members:
        if node not in node_names:
            err.add("cluster", f"{base}.nodes", node, "is not a node of gpu_nodes")
    for node in sorted({m for m in members if members.count(m) > 1}):
        err.add("cluster", f"{base}.nodes", node, "is listed twice")
    default = part.get("default", False)
    if not isinstance(default, bool):
        err.add("cluster", f"{base}.default", default, "must be true or false")
    max_time = part.get("max_time", "UNLIMITED")
    if not TIME_RE.fullmatch(str(max_time)) or isinstance(max_time, bool):
        err.add("cluster", f"{base}.max_time", max_time,
                "is not a Slurm time limit (minutes, h:m:s, d-h:m:s or UNLIMITED)")
    return {"name": name, "nodes": list(dict.fromkeys(members)), "default": default is True,
            "max_time": str(max_time)}


def _check_partitions(raw, node_names, err):
    if "partitions" not in raw:
        return [{"name": DEFAULT_PARTITION, "nodes": list(node_names), "default": True,
                 "max_time": "UNLIMITED"}]
    parts = raw["partitions"]
    if isinstance(parts, list) and not parts:
        err.add("cluster", "cluster_slurm.partitions", "[]",
                f"lists no partition (leave it out for one partition {DEFAULT_PARTITION} "
                "with every node)")
    out, seen = [], {}
    for i, part in enumerate(as_list(parts)):
        checked = _check_partition(i, part, node_names, err)
        if checked is None:
            continue
        if checked["name"] in seen:
            err.add("cluster", f"cluster_slurm.partitions[{i}].name", checked["name"],
                    f"repeats cluster_slurm.partitions[{seen[checked['name']]}]")
            continue
        seen[checked["name"]] = i
        out.append(checked)
    defaults = [i for i, p in enumerate(out) if p["default"]]
    for i in defaults[1:]:
        err.add("cluster", f"cluster_slurm.partitions[{seen[out[i]['name']]}].default", True,
                f"but {out[defaults[0]]['name']} is the default partition already (one "
                "default partition)")
    if out and not defaults:
        out[0]["default"] = True
    if out:
        covered = {n for p in out for n in p["nodes"]}
        for node in node_names:
            if node not in covered:
                err.add(node, "cluster_slurm.partitions", node,
                        "is in no partition: no job could run on it")
    return out


def _check_spool_dir(raw, writable, err):
    """slurmd's spool (and configless cache): under /run or a writable path."""
    path = check_plain_path("cluster", "cluster_slurm.slurmd_spool_dir",
                            raw.get("slurmd_spool_dir", DEFAULT_SPOOL_DIR), err)
    if path is None:
        return None
    writable_paths = [w["path"] for w in writable]
    inside = [p for p in ["/run", *writable_paths]
              if path == p or path.startswith(p.rstrip("/") + "/")]
    if not inside:
        err.add("cluster", "cluster_slurm.slurmd_spool_dir", path,
                "is on the node's read-only root: put it under /run or make it a writable "
                f"path (cluster_writable_paths: {', '.join(writable_paths) or 'none'})")
        return None
    return posixpath.normpath(path)


def _check_reserve(raw, err):
    pct = raw.get("memory_reserve_percent", DEFAULT_RESERVE_PERCENT)
    if not isinstance(pct, (int, float)) or isinstance(pct, bool) or not 0 <= pct < 100:
        err.add("cluster", "cluster_slurm.memory_reserve_percent", pct,
                "must be a number from 0 to below 100")
        pct = DEFAULT_RESERVE_PERCENT
    low = raw.get("memory_reserve_min_mib", DEFAULT_RESERVE_MIN_MIB)
    if not is_int(low) or low < 0:
        err.add("cluster", "cluster_slurm.memory_reserve_min_mib", low,
                "must be an integer >= 0")
        low = DEFAULT_RESERVE_MIN_MIB
    return pct, low


def _check_health(raw, err):
    """``cluster_slurm.health``: the interval and the limits of the health check."""
    health = raw.get("health")
    out = dict(DEFAULT_HEALTH)
    if not isinstance(health, dict):  # absent; another shape is the schema's refusal
        return out
    interval = health.get("interval", out["interval"])
    if not is_int(interval) or interval < 1:
        err.add("cluster", "cluster_slurm.health.interval", interval,
                "must be an integer >= 1 (seconds between two runs of the health check)")
    else:
        out["interval"] = interval
    for key in ("ce_per_day_limit", "fan_metrics_max_age_s"):
        value = health.get(key, out[key])
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value) or value <= 0:
            err.add("cluster", f"cluster_slurm.health.{key}", value, "must be a number > 0")
        else:
            out[key] = value
    return out


def real_memory(size_mib, pct, low):
    """What Slurm may hand out of ``size_mib``: less ``pct`` percent, at least
    ``low`` MiB, for the kernel, the tmpfs paths and the node's daemons (a node
    reporting less memory than its definition is drained)."""
    return size_mib - max(math.ceil(size_mib * pct / 100), low)


def _profile_definition(pname, raw_prof, reserve, err):
    """The Slurm node definition of hardware profile ``pname`` (None for a value
    it cannot state; bad values reported)."""
    base = f"cluster_hardware_profiles.{pname}"
    prof = as_dict(raw_prof)
    out = {"profile": pname}
    for key, field in (("sockets", "cpu_sockets"), ("cores_per_socket", "cpu_cores_per_socket"),
                       ("threads_per_core", "cpu_threads_per_core")):
        value = prof.get(field)
        if value is not None and (not is_int(value) or value < 1):
            err.add("cluster", f"{base}.{field}", value, "must be an integer >= 1")
            value = None
        out[key] = value
    topology = [out["sockets"], out["cores_per_socket"], out["threads_per_core"]]
    out["cpus"] = math.prod(topology) if None not in topology else None
    size = as_dict(prof.get("memory")).get("size_mib")
    out["real_memory"] = None
    if size is not None:
        if not is_int(size) or size < 1:
            err.add("cluster", f"{base}.memory.size_mib", size, "must be an integer >= 1")
        elif real_memory(size, *reserve) < 1:
            err.add("cluster", f"{base}.memory.size_mib", size,
                    "leaves no memory for jobs after the system's reserve "
                    f"(cluster_slurm.memory_reserve_percent {reserve[0]}, "
                    f"memory_reserve_min_mib {reserve[1]})")
        else:
            out["real_memory"] = real_memory(size, *reserve)
    gpu = as_dict(prof.get("gpu"))
    count = gpu.get("count", 0)
    out["gres"] = []
    if is_int(count) and count > 0:
        model = gpu.get("model")
        gtype = model.lower() if isinstance(model, str) else model
        if not isinstance(gtype, str) or not GRES_TYPE_RE.fullmatch(gtype):
            err.add("cluster", f"{base}.gpu.model", model,
                    "is not a GPU model Slurm can take as the GRES type (letters, digits, "
                    "_ . -; e.g. MI100, written gpu:mi100)")
        else:
            out["gres"] = [{"name": "gpu", "type": gtype, "count": count,
                            "files": [f"/dev/dri/renderD{RENDER_MINOR_BASE + i}"
                                      for i in range(count)]}]
    return out


def incomplete(definition):
    """The profile fields a node definition lacks for Slurm to schedule on it."""
    missing = []
    for key, field in (("sockets", "cpu_sockets"), ("cores_per_socket", "cpu_cores_per_socket"),
                       ("threads_per_core", "cpu_threads_per_core"),
                       ("real_memory", "memory.size_mib")):
        if definition.get(key) is None:
            missing.append(field)
    return missing


def check_slurm(cluster, head, node_list, writable, err):
    """The checked ``cluster_slurm`` and the Slurm definition of every hardware
    profile in use."""
    raw = cluster.get("slurm", {})
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        return None
    node_names = [n["name"] for n in node_list]
    reserve = _check_reserve(raw, err)
    profiles = as_dict(cluster.get("hardware_profiles"))
    used = sorted({n["profile"] for n in node_list if n.get("profile") in profiles})
    return {
        "health": _check_health(raw, err),
        "fan_profiles": [p for p in used if as_list(as_dict(profiles[p]).get("fan_zones"))],
        "controller": _check_controller(raw, as_dict(head), node_names, err),
        "partitions": _check_partitions(raw, node_names, err),
        "slurmd_spool_dir": _check_spool_dir(raw, writable, err),
        "memory_reserve": reserve,
        "definitions": {p: _profile_definition(p, profiles[p], reserve, err) for p in used},
    }


def _def_mem_per_cpu(members):
    """A job's memory per CPU when it asks for none (with memory a consumable
    resource, Slurm would give it the whole node, and a second job could not
    share the node's GPUs): the smallest share of the partition's nodes, or None
    when a node's definition lacks its CPUs or memory."""
    shares = [n["real_memory"] // n["cpus"] for n in members
              if n["real_memory"] is not None and n["cpus"]]
    return min(shares) if shares and len(shares) == len(members) else None


def derive(checked, cluster_name, head, nodes, export_root_nodes):
    """The model's ``slurm`` section.  ``export_root_nodes``: node name -> the
    head's directory of the node's host key dataset (``ssh_host_keys.dir``)."""
    by_name = {n["name"]: n for n in nodes}
    controller = checked["controller"]
    address = (head["mgmt"]["ip"] if controller == head["name"]
               else by_name[controller]["mgmt"]["ip"])
    out_nodes = []
    for n in nodes:
        definition = checked["definitions"][n["profile"]]
        out_nodes.append({"name": n["name"], "address": n["mgmt"]["ip"],
                          **definition})
    defs = {n["name"]: n for n in out_nodes}
    partitions = [{**p, "def_mem_per_cpu": _def_mem_per_cpu([defs[m] for m in p["nodes"]])}
                  for p in checked["partitions"]]
    return {
        "cluster_name": cluster_name,
        "controller": {"name": controller, "address": address},
        "slurmd_spool_dir": checked["slurmd_spool_dir"],
        "nodes": out_nodes,
        "partitions": partitions,
        "health": {
            "program": HEALTH_PROGRAM,
            "config": HEALTH_CONFIG,
            **checked["health"],
            "fan_nodes": [n["name"] for n in nodes if n["profile"] in checked["fan_profiles"]],
        },
        "munge_key": {
            "node_path": posixpath.join(images.SSH_HOST_KEYS["path"], MUNGE_KEY_FILE),
            "head_paths": [{"node": name, "path": posixpath.join(d, MUNGE_KEY_FILE)}
                           for name, d in export_root_nodes.items()],
        },
    }
