# Copyright: junkyard.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The shape of the inventory: which variables of the collection's namespaces
(``cluster_*``, ``node_*``, ``head_*``) exist, which keys each structure may hold,
and which of them are lists, mappings, strings or numbers.

The layers check values and relations; this module checks names and shapes first,
so that a misspelt key is refused instead of silently dropped, and a string where a
list belongs is refused instead of read as an empty list.  Every problem is
reported, in the model's form (``host: field value problem``)."""

from __future__ import annotations

import difflib
import re

from .common import Errors, as_dict, fmt

NAMESPACES = ("cluster_", "node_", "head_")


class Map:
    """A mapping with fixed keys."""

    def __init__(self, **keys):
        self.keys = keys


class ByName:
    """A mapping from names the operator chooses to entries of one shape."""

    def __init__(self, entry):
        self.entry = entry


class List:
    """A list of entries of one shape."""

    def __init__(self, entry, what="entries"):
        self.entry = entry
        self.what = what


class Scalar:
    """A scalar of one of ``types`` (``str``, ``int``, ``number``, ``bool``)."""

    def __init__(self, *types):
        self.types = types


ANY = None
STR = Scalar("str")
INT = Scalar("int")
NUM = Scalar("number")
STR_OR_INT = Scalar("str", "int")
SCALAR = Scalar("str", "int", "number", "bool")

NETWORK = Map(subnet=STR, mtu=ANY, gateway=STR)
IFACE = Map(mac=STR, ip=STR, device=STR)
VDEV = Map(type=STR, disks=List(STR, "device paths"), parity=ANY, data=ANY, spares=ANY,
           children=ANY)
SENSORS = List(STR_OR_INT, "sensor names")
# Every key a hardware profile may carry: the model's, the ECC monitor's (memory)
# and the fan daemon's (daemon/src/junkyard_fan/config.py reads the profile verbatim).
PROFILE = Map(
    description=STR,
    cpu_sockets=INT,
    cpu_cores_per_socket=INT,
    cpu_threads_per_core=INT,
    gpu=Map(model=STR, count=ANY, gfx_target=ANY, max_power_w=NUM,
            pci_addresses=List(STR, "PCI addresses")),
    memory=Map(size_mib=INT, board=Map(vendor=STR, model=STR, product=STR),
               dimm_labels=List(ANY, "DIMM labels")),
    bmc=Map(supply_voltage=NUM, current_calibration=ANY, gpu_current_sensors=SENSORS,
            gpu_temp_sensors=SENSORS, cpu_temp_sensors=SENSORS, psu_status_sensors=SENSORS),
    psu=Map(count=INT, rating_w=ANY),
    fan_zones=List(Map(name=STR, fan_id=INT, gpus=List(ANY, "GPU numbers"), kind=STR,
                       tach_sensors=SENSORS), "fan zones"),
    fan_commands=Map(set_duty=STR, auto=STR, manual=STR, duty_scale=INT),
    kernel_cmdline=ANY,
    kernel_module_blacklist=ANY,
    initramfs_modules=ANY,
)
PROPERTIES = ByName(SCALAR)

# The model's variables, without their prefix, and their shapes.
CLUSTER = {
    "name": STR,
    "domain": STR,
    "timezone": STR,
    "apt_proxy": STR,
    "networks": Map(mgmt=NETWORK, data=NETWORK, bmc=NETWORK),
    "writable_paths": List(Map(path=STR, kind=STR, name=STR, size=STR_OR_INT), "paths"),
    "writable_failure_policy": STR,
    "hardware_profiles": ByName(PROFILE),
    "images": ByName(Map(suite=STR, current_version=STR)),
    "pool": Map(name=STR, ashift=ANY, mountpoint=STR, vdevs=List(VDEV, "vdevs"),
                special=List(VDEV, "vdevs"), log=List(VDEV, "vdevs"), properties=PROPERTIES,
                filesystem_properties=PROPERTIES),
    "data_datasets": List(Map(name=STR, properties=PROPERTIES, mount=STR), "datasets"),
    "tftp_root": STR,
    "nfs_version": ANY,
    "slurm": Map(controller=STR,
                 partitions=List(Map(name=STR, nodes=List(STR, "node names"),
                                     default=Scalar("bool"), max_time=STR_OR_INT),
                                 "partitions"),
                 slurmd_spool_dir=STR, memory_reserve_percent=NUM,
                 memory_reserve_min_mib=INT,
                 health=Map(interval=INT, ce_per_day_limit=NUM, fan_metrics_max_age_s=NUM)),
    "users": List(Map(name=STR, uid=INT, gid=INT, groups=List(STR, "group names"),
                      ssh_keys=List(STR, "SSH public keys"), shell=STR, comment=STR),
                  "users"),
}
BMC = Map(address=STR, port=INT, username=STR, password=ANY)
NODE = {
    "node_profile": STR,
    "node_image": STR,
    "node_image_version": STR,
    "node_interfaces": Map(mgmt=IFACE, data=IFACE),
    "node_bmc": BMC,
    "node_bmc_defaults": BMC,
}
HEAD = {"head_interfaces": Map(mgmt=IFACE, data=IFACE)}
# Variables of the namespaces that are not inventory keys of the model: the image
# state given on the command line (docs/model.md), the model itself once published.
OTHER = ("cluster_image_state", "cluster_model")
MODEL_VARIABLES = frozenset(
    [f"cluster_{k}" for k in CLUSTER] + list(NODE) + list(HEAD) + list(OTHER))


def _type_name(value):
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return "empty" if value is None else f"a {type(value).__name__}"


def _hint(name, candidates):
    close = difflib.get_close_matches(str(name), sorted(candidates), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def _scalar_ok(value, types):
    if isinstance(value, bool):
        return "bool" in types
    if isinstance(value, int):
        return "int" in types or "number" in types
    if isinstance(value, float):
        return "number" in types
    if isinstance(value, str):
        return "str" in types
    return False


def _scalar_problem(value, types):
    wanted = " or ".join({"str": "a string", "int": "an integer", "number": "a number",
                          "bool": "true or false"}[t] for t in types)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and "str" in types:
        return (f"must be {wanted}: YAML read the unquoted value as a number; "
                "write it in quotes")
    return f"must be {wanted}, not {_type_name(value)}"


def _key_problem(key):
    """A name (a key the operator chooses) that YAML did not read as a string."""
    if isinstance(key, (bool, int, float)):
        return (f"is not a name: YAML read the unquoted key as {_type_name(key)}; write it "
                "in quotes")
    return f"is not a name: it is {_type_name(key)}"


def _list_problem(value, what):
    if isinstance(value, str):
        return (f"must be a list of {what}, not a string: write it as a YAML list "
                "([a, b] or one '- ' line each)")
    return f"must be a list of {what}, not {_type_name(value)}"


def check_shape(where, field, value, spec, err):
    """Report every key ``value`` holds that ``spec`` does not know and every value
    of the wrong shape, down the whole structure.  None (absent) is left to the
    layers, which know what is required.  A value of the wrong shape closes its
    field (:meth:`Errors.close`): what the layers would say of it and of what it
    should have held is noise."""
    if spec is None or value is None:
        return
    if isinstance(spec, Scalar):
        if not _scalar_ok(value, spec.types):
            err.add(where, field, value, _scalar_problem(value, spec.types))
            err.close(where, field)
    elif isinstance(spec, List):
        if not isinstance(value, list):
            err.add(where, field, value, _list_problem(value, spec.what))
            err.close(where, field)
            return
        for i, item in enumerate(value):
            check_shape(where, f"{field}[{i}]", item, spec.entry, err)
    elif isinstance(spec, ByName):
        if not isinstance(value, dict):
            err.add(where, field, value, f"must be a mapping by name, not {_type_name(value)}")
            err.close(where, field)
            return
        for key, item in value.items():
            if not isinstance(key, str):
                err.add(where, field, key, _key_problem(key))
                continue
            check_shape(where, f"{field}.{key}", item, spec.entry, err)
    else:
        if not isinstance(value, dict):
            err.add(where, field, value, f"must be a mapping, not {_type_name(value)}")
            err.close(where, field)
            return
        for key, item in value.items():
            if key not in spec.keys:
                err.add(where, field, key,
                        f"is not a known key{_hint(key, spec.keys)}; known keys: "
                        f"{', '.join(spec.keys)}")
            else:
                check_shape(where, f"{field}.{key}", item, spec.keys[key], err)


def check_inputs(data, err):
    """The shapes of every model variable: the cluster's, the head's, each node's.

    A node's BMC settings are checked as written (``_bmc_sources``: node_bmc and
    node_bmc_defaults before the merge, without the password's value).  A problem
    every node has (a group variable) is reported once, for the group gpu_nodes."""
    for key, value in as_dict(data.get("cluster")).items():
        if key in CLUSTER:
            check_shape("cluster", f"cluster_{key}", value, CLUSTER[key], err)
    head = as_dict(data.get("head"))
    for key, value in as_dict(head.get("vars")).items():
        if key in HEAD and head.get("name"):
            check_shape(head["name"], key, value, HEAD[key], err)
    nodes = as_dict(data.get("nodes"))
    per_node, closed = {}, set()
    for name in sorted(nodes):
        node_err = Errors()
        node_vars = as_dict(nodes[name])
        sources = node_vars.get("_bmc_sources")
        if sources is not None:
            node_vars = {**{k: v for k, v in node_vars.items() if k != "node_bmc"},
                         **as_dict(sources)}
        for key, value in node_vars.items():
            if key in NODE:
                check_shape(name, key, value, NODE[key], node_err)
        per_node[name] = [entry[1:] for entry in node_err.entries]
        # node_bmc_defaults is merged under node_bmc: the layers name node_bmc
        closed |= {(host, f.replace("node_bmc_defaults", "node_bmc", 1))
                   for host, f in node_err.closed()}
    common = set.intersection(*map(set, per_node.values())) if len(per_node) > 1 else set()
    for name, entries in per_node.items():
        for field, value, problem in entries:
            if (field, value, problem) in common:
                err.seen(name, field, value)
            else:
                err.add(name, field, value, problem)
    for field, value, problem in sorted(common, key=str):
        err.add("gpu_nodes", field, value, problem)
    for host, field in closed:
        err.close(host, field)


def report_unrendered(unrendered, node_names, err):
    """The values the action could not template, ``[(host, field, value as written,
    problem)]``: each reported once (one every node has, a group variable, for
    gpu_nodes), and nothing more is said about those fields."""
    entries = [tuple(e) for e in unrendered or [] if isinstance(e, (list, tuple)) and len(e) == 4]
    nodes = set(node_names)
    per_node = {}
    for host, field, value, problem in entries:
        if host in nodes:
            per_node.setdefault(host, set()).add((field, fmt(value), problem))
    common = (set.intersection(*per_node.values())
              if len(nodes) > 1 and set(per_node) == nodes else set())
    for field, value, problem in sorted(common):
        err.add("gpu_nodes", field, value, problem)
        err.close("gpu_nodes", field)
    for host, field, value, problem in entries:
        if host not in nodes or (field, fmt(value), problem) not in common:
            err.add(host, field, value, problem)
        err.close(host, field)


# What Ansible's argument specification types of the collection's roles ask of a
# value the inventory sets (a role checks it again when it runs; here every problem
# is found before anything changes, at once, in the model's form).  Ansible's own
# conversions are kept: a boolean may be written yes/no, an integer as digits (with a
# sign: -e name=-5 is the string "-5", which Ansible converts).
# An integer as a command-line word: digits with at most one sign.
INT_WORD_RE = re.compile(r"[+-]?[0-9]+")
BOOLEAN_WORDS = frozenset(("yes", "no", "true", "false", "on", "off", "y", "n", "t", "f",
                           "1", "0"))


def _role_spec(spec):
    """The shape of a role option from its argument specification (None: any;
    "bool" and "dict" are checked by :func:`_role_value_problem`)."""
    spec = as_dict(spec)
    kind = spec.get("type", "str")
    if kind == "list":
        element = _role_spec({"type": spec.get("elements", "raw")})
        return List(element if isinstance(element, Scalar) else None,
                    "strings" if element is STR else "entries")
    return {"str": STR, "path": STR, "int": INT, "float": NUM, "bool": "bool",
            "dict": "dict"}.get(kind)


def _role_value_problem(value, spec):
    """The problem of a boolean or mapping option's value, or None."""
    if spec == "bool":
        if isinstance(value, bool) or value in (0, 1) or \
                (isinstance(value, str) and value.lower() in BOOLEAN_WORDS):
            return None
        return f"must be true or false, not {_type_name(value)}"
    return None if isinstance(value, dict) else f"must be a mapping, not {_type_name(value)}"


def check_role_values(values, role_variables, node_names, err):
    """The values the inventory gives the collection's roles' variables
    (``values``: {host: {name: value}}), against their declared types: a string
    where a list belongs, a number where a string belongs (with the hint to quote
    it), a mapping, a boolean or an integer that is none.  A problem every host has
    (``group_vars/all``) is reported once for ``cluster``, one every node has for
    ``gpu_nodes``."""
    specs = {}
    for role_vars in as_dict(role_variables).values():
        if isinstance(role_vars, dict):
            specs.update({k: _role_spec(v) for k, v in role_vars.items() if v})
    per_host = {}
    for host, host_values in sorted(as_dict(values).items()):
        host_err = Errors()
        for name, value in sorted(as_dict(host_values).items()):
            spec = specs.get(name)
            if spec is None or value is None:
                continue
            if spec in ("bool", "dict"):
                problem = _role_value_problem(value, spec)
                if problem:
                    host_err.add(host, name, value, problem)
            elif not (spec is INT and isinstance(value, str)
                      and INT_WORD_RE.fullmatch(value.strip())):
                check_shape(host, name, value, spec, host_err)
        per_host[host] = {entry[1:] for entry in host_err.entries}
    hosts, nodes = set(per_host), set(node_names) & set(per_host)
    everywhere = (set.intersection(*per_host.values()) if len(hosts) > 1 and hosts - nodes
                  else set())
    every_node = (set.intersection(*(per_host[n] for n in nodes)) if len(nodes) > 1
                  else set()) - everywhere
    for group, common in (("cluster", everywhere), ("gpu_nodes", every_node)):
        for field, value, problem in sorted(common):
            err.add(group, field, value, problem)
    for host, entries in per_host.items():
        for field, value, problem in sorted(entries):
            if (field, value, problem) not in everywhere and \
                    not (host in nodes and (field, value, problem) in every_node):
                err.add(host, field, value, problem)


def _role_of(name, role_variables):
    """The role whose prefix ``name`` carries (the longest), or None."""
    roles = [r for r in role_variables if name.startswith(r + "_")]
    return max(roles, key=len) if roles else None


def check_variables(variables, role_variables, node_names, err):
    """Refuse every variable of the collection's namespaces that is neither a model
    variable nor a declared variable of the role whose prefix it carries.

    ``variables``: {host: [variable names]}, ``role_variables``: {role: {name:
    its argument specification, or None}} (or {role: [names]}) of
    the collection's roles.  A name set for every host (``group_vars/all``) is
    reported once, as ``cluster``; one set for every node, as ``gpu_nodes``."""
    role_variables = {r: set(v) for r, v in as_dict(role_variables).items()}
    unknown = {}
    for host in sorted(as_dict(variables)):
        for name in variables[host]:
            if not isinstance(name, str) or not name.startswith(NAMESPACES):
                continue
            if name in MODEL_VARIABLES:
                continue
            role = _role_of(name, role_variables)
            if role is not None and name in role_variables[role]:
                continue
            unknown.setdefault(name, []).append(host)
    hosts = sorted(as_dict(variables))
    for name in sorted(unknown):
        role = _role_of(name, role_variables)
        known = set(MODEL_VARIABLES) | (role_variables[role] if role else set())
        problem = ("is not a variable of junkyard.cluster"
                   + (f" nor of its role {role}" if role else "") + _hint(name, known))
        where = unknown[name]
        if len(where) > 1 and where == hosts:
            where = ["cluster"]
        elif len(where) > 1 and where == sorted(node_names):
            where = ["gpu_nodes"]
        for host in where:
            err.add(host, None, name, problem)
