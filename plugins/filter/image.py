# Copyright (c) 2026, junkyard.cluster developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters that turn the cluster model into the node image's boot-time tables.

One image serves every node, so everything per node is rendered for all
nodes into one file and picked at boot by the node identity
(``junkyard.node=<name>`` on the kernel command line).
"""

from __future__ import annotations

import re

from ansible.errors import AnsibleFilterError

_FIELD_RE = re.compile(r"^\S+$")


def _field(value, what):
    value = str(value)
    if not _FIELD_RE.match(value) or value.startswith("#"):
        raise AnsibleFilterError(
            f"{what} {value!r} cannot be written into a boot-time table "
            "(empty, or contains white space, or starts with #)")
    return value


def image_builds(model, tree_prefix=""):
    """Every image version to build, sorted (``cluster_model.image_builds``: the
    versions nodes boot and each image's current one), with the host name of its
    build and the tree it is built in.

    ``tree_prefix`` puts the trees under another directory than their export
    path (a build machine that ships the finished tree as a seed)."""
    tree_prefix = str(tree_prefix or "").rstrip("/")
    if tree_prefix and not tree_prefix.startswith("/"):
        raise AnsibleFilterError(f"tree prefix {tree_prefix!r} must be an absolute path")
    return [{"image": b["image"], "version": b["version"], "suite": b["suite"],
             "dataset": b["dataset"], "root_path": f"{tree_prefix}{b['path']}",
             "host": f"image-{b['image']}-{b['version']}", "nodes": b["nodes"]}
            for b in model["image_builds"]]


# Persistent writable paths are the node's own NFS datasets, writable by root
# on the node: they are mounted nodev (device nodes there are never honoured)
# and nosuid, except where installed programs live, which may need their
# setuid bit (a persistent /opt or /usr/local).
_PROGRAM_DIRS = ("/usr", "/opt", "/bin", "/sbin", "/lib")


def _restrict_options(path):
    path = path.rstrip("/")
    if any(path == d or path.startswith(d + "/") for d in _PROGRAM_DIRS):
        return "nodev"
    return "nosuid,nodev"


def writable_table(model, attempts=3, timeout=60):
    """The writable-path table for the initramfs script (see
    roles/stateless_root/files/initramfs-tools/scripts/init-bottom/junkyard-writable.sh).

    Lines, white-space separated (# starts a comment):
      policy <stop|tmpfs>
      attempts <n>                         tries per persistent mount
      timeout <seconds>                    limit of one try
      node <name>                          one per node the table knows
      * <kind> <path> <name> <options|->   in mount order, for every node
      <node> persistent <path> <source> <nfs options>

    The options of a persistent line are the model's NFS options for klibc's
    nfsmount and the mount flags ``nosuid``/``nodev`` (see ``_restrict_options``),
    which the script sets with a remount once the NFS mount is made.  The model
    has checked the paths, names, sizes and the NFS version."""
    if not isinstance(attempts, int) or attempts < 1:
        raise AnsibleFilterError(f"attempts {attempts!r} must be an integer >= 1")
    if not isinstance(timeout, int) or timeout < 1:
        raise AnsibleFilterError(f"timeout {timeout!r} must be an integer >= 1 (seconds)")
    lines = [f"policy {model['writable_failure_policy']}", f"attempts {attempts}",
             f"timeout {timeout}"]
    lines += [f"node {_field(n['name'], 'node name')}" for n in model["nodes"]]
    for w in model["writable_paths"]:
        size = str(w.get("size") or "")
        opts = f"size={size}" if size and w["kind"] != "persistent" else "-"
        lines.append(" ".join(["*", w["kind"], _field(w["path"], "writable path"),
                               _field(w["name"], "writable path name"), opts]))
    for n in model["nodes"]:
        for m in n.get("writable", []):
            if m["kind"] == "persistent":
                lines.append(" ".join([n["name"], "persistent", _field(m["path"], "writable path"),
                                       _field(m["source"], "NFS source"),
                                       f"{model['writable_nfs_options']},"
                                       f"{_restrict_options(m['path'])}"]))
    return "\n".join(lines) + "\n"


def datanet_table(model):
    """<node> <mac> <address>/<prefix> <mtu>, one line per node."""
    lines = []
    for n in model["nodes"]:
        data = n["data"]
        if not data.get("mac") or not data.get("ip"):
            raise AnsibleFilterError(f"{n['name']}: the data interface needs a mac and an ip")
        lines.append(f"{n['name']} {data['mac']} {data['ip']}/{data['prefix']} {data['mtu']}")
    return "\n".join(lines) + ("\n" if lines else "")


def data_mounts(model):
    """Science-data mounts from the head's data address (``cluster_model.data_mounts``)."""
    return [{**m, "path": _field(m["path"], "data mount path")} for m in model["data_mounts"]]


def uncovered_paths(needed, writable):
    """The paths of ``needed`` that no writable path is, or contains."""
    roots = [w["path"].rstrip("/") for w in writable]
    return [p for p in needed
            if not any(p == r or p.startswith(r + "/") for r in roots)]


class FilterModule:
    def filters(self):
        return {
            "junkyard_image_builds": image_builds,
            "junkyard_writable_table": writable_table,
            "junkyard_datanet_table": datanet_table,
            "junkyard_data_mounts": data_mounts,
            "junkyard_uncovered_paths": uncovered_paths,
        }
