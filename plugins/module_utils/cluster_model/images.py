# Copyright: junkyard.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Image layer: the images and their versions, and the writable paths of the
read-only root.  Every name of an image version (its dataset, export path, boot
directory in the TFTP tree) is built by :func:`version_names`, here only."""

from __future__ import annotations

import posixpath
import re

from ansible_collections.junkyard.cluster.plugins.module_utils import upgrade_plan

from . import storage
from .common import DATASET_PART_RE, KERNEL_DIRS, SYSTEM_DIRS, TABLE_FIELD_RE, as_dict

WRITABLE_KINDS = ("persistent", "tmpfs", "overlay")
FAILURE_POLICIES = ("stop", "tmpfs")
NFS_VERSIONS = (3, 4)
# klibc's nfsmount (the initramfs mounts persistent paths with it) speaks v2/v3 only.
NFS_VERSIONS_PERSISTENT = (2, 3)
SIZE_RE = re.compile(r"^[0-9]+[kKmMgG%]?$")
VERSION_RE = upgrade_plan.VERSION_RE
# a Debian suite or code name (bookworm, stable, bookworm-backports)
SUITE_RE = re.compile(r"^[a-z0-9][a-z0-9.-]*$")


def version_names(pool, export_root, tftp_root, image, version):
    """Where image version ``image``/``version`` lives: its ZFS dataset, the path it
    is mounted and exported at, its directory relative to the TFTP root (the GRUB
    entries name its kernel there) and the bind mount of its /boot there."""
    boot_dir = "/".join([storage.IMAGES, image, version])
    return {
        "image": image,
        "version": version,
        "image_dataset": image_dataset(pool, image),
        "dataset": storage.dataset(pool, storage.IMAGES, image, version),
        "path": storage.export_path(export_root, storage.IMAGES, image, version),
        "boot_dir": boot_dir,
        "tftp_boot": posixpath.join(tftp_root, boot_dir, "boot"),
        "tag": f"{image}/{version}",
    }


def image_dataset(pool, image):
    """``<pool>/images/<image>``: the parent of every version of ``image``."""
    return storage.dataset(pool, storage.IMAGES, image)


def check_images(cluster, err):
    raw = cluster.get("images")
    if not isinstance(raw, dict) or not raw:
        err.add("cluster", "cluster_images", raw, "must be a non-empty mapping")
        return {}
    out = {}
    for name, img in raw.items():
        img = as_dict(img)
        if not isinstance(name, str) or not DATASET_PART_RE.fullmatch(name):
            err.add("cluster", "cluster_images", name, "is not a valid image (dataset) name")
            continue
        version = img.get("current_version")
        if not isinstance(version, str) or not VERSION_RE.fullmatch(version):
            err.add("cluster", f"cluster_images.{name}.current_version", version,
                    "must be a version name (letters, digits, . _ -)")
            continue
        suite = img.get("suite", "bookworm")
        if not isinstance(suite, str) or not SUITE_RE.fullmatch(suite):
            err.add("cluster", f"cluster_images.{name}.suite", suite,
                    "is not a Debian suite or code name (lower-case letters, digits, - and "
                    "., e.g. bookworm: it is written into the image's apt sources lines)")
        out[name] = {"name": name, "suite": suite, "current_version": version}
    return out


# Every node's own SSH host keys: a persistent path the model adds to the
# inventory's, so each node has a dataset of its own for them (made on the head,
# exported to that node only); the image carries no host key.
SSH_HOST_KEYS = {"path": "/var/lib/ssh-host-keys", "kind": "persistent",
                 "name": "ssh-host-keys", "size": ""}


def check_writable_paths(cluster, err):
    out = []
    raw = cluster.get("writable_paths", [])
    if not isinstance(raw, list):
        err.add("cluster", "cluster_writable_paths", raw, "must be a list")
        return out
    seen = {}
    for i, entry in enumerate(raw):
        entry = _check_writable_path(f"cluster_writable_paths[{i}]", as_dict(entry), seen, err)
        if entry is not None:
            seen[entry["path"]] = i
            out.append(entry)
    keys = SSH_HOST_KEYS["path"]
    listed = [w for w in out if w["path"] == keys]
    if listed and listed[0]["kind"] != "persistent":
        err.add("cluster", f"cluster_writable_paths[{seen[keys]}]", keys,
                "is where every node keeps its own SSH host keys: leave it out (the model "
                "adds it) or make it persistent")
    elif not listed:
        nested = [(p, j) for p, j in seen.items() if p.startswith(keys + "/")
                  or keys.startswith(p + "/")]
        for other, j in nested:
            err.add("cluster", f"cluster_writable_paths[{j}].path", other,
                    f"is nested with {keys}, where every node keeps its own SSH host keys "
                    "(a persistent path the model adds); writable paths must not contain "
                    "each other")
        out.append(dict(SSH_HOST_KEYS))
    names = [w["name"] for w in out if w["kind"] == "persistent"]
    for name in sorted({n for n in names if names.count(n) > 1}):
        err.add("cluster", "cluster_writable_paths[].name", name,
                "is used by two persistent paths (each needs its own dataset)")
    return out


def _check_writable_path(where, entry, seen, err):
    path, kind = entry.get("path"), entry.get("kind")
    if not isinstance(path, str) or not path.startswith("/"):
        err.add("cluster", f"{where}.path", path, "is not an absolute path")
        return None
    norm = posixpath.normpath(path)
    if norm == "/" or norm != path.rstrip("/") or "//" in path:
        err.add("cluster", f"{where}.path", path,
                "must be a normalised absolute path other than /")
        return None
    if not TABLE_FIELD_RE.fullmatch(path):
        err.add("cluster", f"{where}.path", path,
                "contains white space (the initramfs's table of writable paths cannot "
                "hold it)")
        return None
    if kind not in WRITABLE_KINDS:
        err.add("cluster", f"{where}.kind", kind,
                f"is not a writable path kind ({', '.join(WRITABLE_KINDS)})")
        return None
    if norm in SYSTEM_DIRS:
        err.add("cluster", f"{where}.path", path,
                f"is a directory the node needs from its image as a whole: a {kind} mount "
                "over it hides the system; make a subdirectory writable instead "
                "(e.g. /var/log, /etc/ssh)")
        return None
    if norm in KERNEL_DIRS:
        err.add("cluster", f"{where}.path", path,
                f"is where the kernel or the initramfs mounts a file system of its own: a "
                f"{kind} mount there hides it or is hidden by it; make a subdirectory "
                "writable instead (e.g. /run/junkyard)")
        return None
    if norm in seen:
        err.add("cluster", f"{where}.path", path,
                f"repeats cluster_writable_paths[{seen[norm]}]")
        return None
    for other, j in seen.items():
        if norm.startswith(other + "/") or other.startswith(norm + "/"):
            outer, inner = (other, norm) if norm.startswith(other + "/") else (norm, other)
            err.add("cluster", f"{where}.path", path,
                    f"is nested with cluster_writable_paths[{j}] ({inner} inside {outer}); "
                    "writable paths must not contain each other")
            return None
    if kind == "persistent" and entry.get("size") not in ("", None):
        err.add("cluster", f"{where}.size", entry.get("size"),
                "is the size of a tmpfs (of a tmpfs or overlay path): a persistent path is a "
                "dataset of the pool and takes none; leave it out")
        return None
    if kind != "persistent" and entry.get("name") not in ("", None):
        err.add("cluster", f"{where}.name", entry.get("name"),
                f"names the dataset of a persistent path: a {kind} path has none")
        return None
    name = entry.get("name") or norm.strip("/").replace("/", "-")
    if not DATASET_PART_RE.fullmatch(name):
        err.add("cluster", f"{where}.name", name, "is not a valid dataset name")
        return None
    size = entry.get("size", "")
    if size not in ("", None) and not SIZE_RE.fullmatch(str(size)):
        err.add("cluster", f"{where}.size", size,
                "is not a tmpfs size (a number with k, m, g or %, e.g. 4g, 512m, 10%)")
        return None
    return {"path": norm, "kind": kind, "name": name, "size": size}


def check_failure_policy(cluster, err):
    policy = cluster.get("writable_failure_policy", "stop")
    if policy not in FAILURE_POLICIES:
        err.add("cluster", "cluster_writable_failure_policy", policy,
                f"is not a policy ({', '.join(FAILURE_POLICIES)})")
    return policy


def check_nfs_version(cluster, writable, err):
    """The NFS version of the root mount; persistent writable paths need v3 or older."""
    version = cluster.get("nfs_version", 3)
    number = int(version) if str(version) in ("2", "3", "4") else None
    if number not in NFS_VERSIONS:
        err.add("cluster", "cluster_nfs_version", version,
                f"is not an NFS version of the root mount ({', '.join(map(str, NFS_VERSIONS))})")
        return version
    persistent = [w["path"] for w in writable if w["kind"] == "persistent"]
    if persistent and number not in NFS_VERSIONS_PERSISTENT:
        err.add("cluster", "cluster_nfs_version", version,
                f"cannot be used with persistent writable paths ({', '.join(persistent)}): "
                "the initramfs mounts them with klibc nfsmount, which speaks NFSv2/v3 only")
    return version


def persistent_mount_options(nfs_version, writable):
    """The NFS options of the persistent writable mounts ('' when there are none)."""
    if not any(w["kind"] == "persistent" for w in writable):
        return ""
    return f"vers={nfs_version},tcp"


def booted_versions(images, nodes):
    """(image, version) of every version a node boots and of each image's current one."""
    return sorted({(n["image"], n["image_version"]) for n in nodes}
                  | {(i, images[i]["current_version"]) for i in images})


# Image versions are read-only roots: root is not squashed (a root file system
# is root's), and `mp` exports nothing when the dataset is not mounted (never
# the empty directory beneath it).
IMAGE_EXPORT_OPTIONS = "ro,no_root_squash,no_subtree_check,mp"


def gfx_targets(image, nodes, profiles):
    """The gfx targets of the GPUs of the nodes that boot ``image`` (any version):
    the firmware its versions must carry."""
    return sorted({profiles[n["profile"]]["gfx_target"] for n in nodes
                   if n["image"] == image and profiles[n["profile"]]["gpu_count"]})


def image_layer(names, images, nodes, head_ip):
    """(datasets, exports, builds) of the images; ``names(image, version)`` is
    :func:`version_names` bound to the pool's layout.

    Only the current version's dataset is declared (where a first build goes);
    later versions are clones made by the upgrade, never created empty here.  Every
    version a node boots (and each current one) is exported read-only to the head's
    management address and to the management address of each node that boots it,
    nobody else: a node cannot mount another version, the data network no root."""
    datasets, exports, builds = [], [], []
    for image in sorted(images):
        current = names(image, images[image]["current_version"])
        datasets.append({"name": current["image_dataset"],
                         "properties": {"canmount": "off"}})
        datasets.append({"name": current["dataset"], "properties": {}})
    for image, version in booted_versions(images, nodes):
        v = names(image, version)
        booting = [n for n in nodes if (n["image"], n["image_version"]) == (image, version)]
        exports.append({"path": v["path"],
                        "clients": [{"host": ip, "options": IMAGE_EXPORT_OPTIONS}
                                    for ip in [head_ip] + [n["mgmt"]["ip"] for n in booting]]})
        builds.append({**v, "suite": images[image]["suite"],
                       "nodes": sorted(n["name"] for n in booting)})
    return datasets, exports, builds
