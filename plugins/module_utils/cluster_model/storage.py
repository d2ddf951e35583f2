# Copyright: junkyard.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Storage layer: the pool and its vdevs, the science-data datasets, and the
layout of the pool (``<pool>/images``, ``<pool>/nodes``, ``<pool>/data``):
every dataset name and export path below the pool is built here."""

from __future__ import annotations

import re

from .common import (
    DATASET_PART_RE,
    KERNEL_DIRS,
    SYSTEM_DIRS,
    as_dict,
    as_list,
    check_plain_path,
    is_int,
)

VDEV_TYPES = ("draid", "raidz", "mirror", "disk")
# what each vdev type takes besides its type and disks
VDEV_KEYS = {"draid": ("parity", "data", "spares", "children"), "raidz": ("parity",),
             "mirror": (), "disk": ()}
POOL_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]*$")
DEFAULT_DATASET_PROPERTIES = {"atime": "off", "compression": "lz4"}

# The pool's top-level datasets, one per kind of data.
IMAGES, NODES, DATA, ARCHIVE = "images", "nodes", "data", "archive"


def dataset(pool, *parts):
    """``<pool>/<part>/...``: a dataset name below the pool."""
    return "/".join([pool, *parts])


def export_path(export_root, *parts):
    """``<export root>/<part>/...``: where that dataset is mounted and exported."""
    return "/".join([export_root, *parts])


def draid_spec(parity, data, children, spares):
    return f"draid{parity}:{data}d:{children}c:{spares}s"


def check_pool(cluster, err):
    raw = cluster.get("pool")
    if not isinstance(raw, dict):
        err.add("cluster", "cluster_pool", raw, "must be a mapping")
        return None
    name = raw.get("name")
    if not isinstance(name, str) or not POOL_NAME_RE.fullmatch(name) or \
            name in ("mirror", "raidz", "draid", "spare", "log"):
        err.add("cluster", "cluster_pool.name", name, "is not a valid pool name")
    ashift = raw.get("ashift", 12)
    if not isinstance(ashift, int) or not 9 <= ashift <= 16:
        err.add("cluster", "cluster_pool.ashift", ashift, "must be an integer 9..16")
    seen = {}
    groups = [("vdevs", raw.get("vdevs"))] + [
        (k, raw.get(k)) for k in ("special", "log") if raw.get(k) is not None]
    if not as_list(raw.get("vdevs")):
        err.add("cluster", "cluster_pool.vdevs", raw.get("vdevs"), "must list at least one vdev")
    for gname, vdevs in groups:
        if not isinstance(vdevs, list):
            err.add("cluster", f"cluster_pool.{gname}", vdevs, "must be a list of vdevs")
            continue
        for i, vdev in enumerate(vdevs):
            _check_vdev(f"cluster_pool.{gname}[{i}]", gname, as_dict(vdev), seen, err)
    mountpoint = raw.get("mountpoint", f"/{name}")
    if "mountpoint" in raw and \
            check_plain_path("cluster", "cluster_pool.mountpoint", mountpoint, err) == "/":
        err.add("cluster", "cluster_pool.mountpoint", mountpoint,
                "is / (the pool would be mounted over the head's root)")
    for group in ("properties", "filesystem_properties"):
        for prop in as_dict(raw.get(group)):
            if str(prop).startswith("share"):
                err.add("cluster", f"cluster_pool.{group}", prop,
                        "is refused: exports are written by the nfs_exports role from the "
                        "model (a share property would export beside them)")
    if "mountpoint" in as_dict(raw.get("filesystem_properties")):
        err.add("cluster", "cluster_pool.filesystem_properties", "mountpoint",
                "is refused: write cluster_pool.mountpoint (the model places every dataset "
                "and export under it; this property would be overridden)")
    return {"name": name, "ashift": ashift,
            "properties": as_dict(raw.get("properties")),
            "filesystem_properties": as_dict(raw.get("filesystem_properties")),
            "mountpoint": mountpoint}


def _check_vdev(where, gname, vdev, seen, err):
    vtype = vdev.get("type")
    disks = as_list(vdev.get("disks"))
    for d in disks:
        if not isinstance(d, str) or not d.startswith("/dev/"):
            err.add("cluster", f"{where}.disks", d, "is not a device path under /dev/")
        elif d in seen:
            err.add("cluster", f"{where}.disks", d, f"is already used in {seen[d]}")
        else:
            seen[d] = where
    if vtype not in VDEV_TYPES:
        err.add("cluster", f"{where}.type", vtype,
                f"is not a vdev type ({', '.join(VDEV_TYPES)})")
        return
    for key in sorted(set(vdev) - {"type", "disks", *VDEV_KEYS[vtype]}):
        err.add("cluster", f"{where}.{key}", vdev[key],
                f"is not a setting of a {vtype} vdev ("
                + (", ".join(VDEV_KEYS[vtype]) or "it takes type and disks only")
                + "): it would be ignored")
    if vtype == "draid":
        if gname != "vdevs":
            err.add("cluster", f"{where}.type", vtype, "is only allowed in vdevs")
            return
        _check_draid(where, vdev, len(disks), err)
    elif vtype == "raidz":
        if gname == "log":
            err.add("cluster", f"{where}.type", vtype,
                    "cannot be a log vdev (ZFS takes a mirror or a single disk as log)")
            return
        parity = vdev.get("parity", 1)
        if parity not in (1, 2, 3):
            err.add("cluster", f"{where}.parity", parity, "must be 1, 2 or 3")
        elif len(disks) < parity + 1:
            err.add("cluster", f"{where}.disks", len(disks),
                    f"disks cannot build raidz{parity} (needs at least {parity + 1})")
    elif vtype == "mirror" and len(disks) < 2:
        err.add("cluster", f"{where}.disks", len(disks),
                "disks cannot build a mirror (needs at least 2)")
    elif vtype == "disk" and len(disks) != 1:
        err.add("cluster", f"{where}.disks", len(disks),
                "disks listed for a single-disk vdev (needs exactly 1)")


def _check_draid(where, vdev, ndisks, err):
    parity, data, spares = vdev.get("parity"), vdev.get("data"), vdev.get("spares", 0)
    children = vdev.get("children", ndisks)
    ok = True
    if parity not in (1, 2, 3):
        err.add("cluster", f"{where}.parity", parity, "must be 1, 2 or 3")
        ok = False
    if not is_int(data) or data < 1:
        err.add("cluster", f"{where}.data", data, "must be an integer >= 1")
        ok = False
    if not is_int(spares) or spares < 0:
        err.add("cluster", f"{where}.spares", spares, "must be an integer >= 0")
        ok = False
    if not ok:
        return
    if children != ndisks:
        err.add("cluster", f"{where}.children", children,
                f"does not match the {ndisks} disks listed")
        return
    if ndisks > 255:
        err.add("cluster", f"{where}.disks", ndisks, "disks exceed dRAID's 255 children")
    elif data + parity + spares > ndisks:
        spec = draid_spec(parity, data, ndisks, spares)
        err.add("cluster", where, spec,
                f"cannot be built from {ndisks} disks: a redundancy group needs "
                f"{data} data + {parity} parity and {spares} distributed spares take "
                f"{spares} more ({data + parity + spares} > {ndisks})")


def check_data_datasets(cluster, writable, err):
    """The science-data datasets; ``writable``: the checked writable paths, whose
    mounts a data mount must neither hide nor sit in."""
    out = []
    seen = set()
    mounts = {}
    for i, ds in enumerate(as_list(cluster.get("data_datasets", []))):
        ds = as_dict(ds)
        where = f"cluster_data_datasets[{i}]"
        name = ds.get("name")
        if not isinstance(name, str) or not DATASET_PART_RE.fullmatch(name):
            err.add("cluster", f"{where}.name", name, "is not a valid dataset name")
            continue
        if name in seen:
            err.add("cluster", f"{where}.name", name, "is repeated")
            continue
        mount = ds.get("mount", f"/data/{name}")
        if check_plain_path("cluster", f"{where}.mount", mount, err) is None:
            continue
        mount = mount.rstrip("/") or "/"
        if mount in ("/", *SYSTEM_DIRS, *KERNEL_DIRS):
            err.add("cluster", f"{where}.mount", mount,
                    "would hide a directory the node needs from its image")
            continue
        if not _mount_fits(where, mount, mounts, writable, err):
            continue
        mounts[mount] = i
        properties = as_dict(ds.get("properties"))
        _check_data_properties(where, properties, err)
        seen.add(name)
        out.append({"name": name, "properties": properties, "mount": mount})
    return out


def _nested(inner, outer):
    return inner.startswith(outer + "/")


def _mount_fits(where, mount, mounts, writable, err):
    """A data mount is mounted by the booted node over a directory of the image
    (node_network makes it there): not where another data mount or a writable path
    is, not inside another data mount or inside a tmpfs or persistent writable path
    (their empty file system hides the directory; an overlay shows it), and with no
    writable path inside it (mounted at boot before it, then hidden by it)."""
    for other, j in mounts.items():
        if mount == other or _nested(mount, other) or _nested(other, mount):
            err.add("cluster", f"{where}.mount", mount,
                    f"{'is also' if mount == other else 'is nested with'} the mount of "
                    f"cluster_data_datasets[{j}] ({other}): the later mount would hide the "
                    "other or its mount point")
            return False
    for w in writable:
        path, kind = w["path"], w["kind"]
        hides = mount == path or _nested(path, mount)
        if hides or (_nested(mount, path) and kind != "overlay"):
            how = "is" if mount == path else "contains" if hides else "is inside"
            err.add("cluster", f"{where}.mount", mount,
                    f"{how} the {kind} writable path {path}: "
                    + ("the data mount would hide what the node writes there" if hides
                       else "its empty file system would hide the mount point the image has"))
            return False
    return True


def _check_data_properties(where, properties, err):
    for prop in properties:
        if str(prop).startswith("share"):
            err.add("cluster", f"{where}.properties", prop,
                    "is refused: exports are written by the nfs_exports role from the "
                    "model (a share property would export beside them)")
        elif prop in ("mountpoint", "canmount"):
            err.add("cluster", f"{where}.properties", prop,
                    "is refused: the model mounts every data dataset under the pool's "
                    "mountpoint, where it is exported (the nodes' mount point is mount)")


# Prometheus' time series on the head: a dataset of their own, mounted where
# Debian's prometheus package keeps them.
METRICS = "metrics"
METRICS_DATA_DIR = "/var/lib/prometheus/metrics2"


def metrics_layer(pool):
    """(dataset, published section) of the head's Prometheus data."""
    name = dataset(pool, METRICS)
    return ({"name": name, "properties": {"mountpoint": METRICS_DATA_DIR}},
            {"dataset": name, "data_dir": METRICS_DATA_DIR})


def top_datasets(pool):
    """The pool's top-level datasets (containers, never mounted).

    Overlay mounts on the nodes sit on the NFS-exported image: its ACLs must be
    off (inherited by every image version, clones included)."""
    return [
        {"name": dataset(pool, IMAGES), "properties": {"canmount": "off", "acltype": "off"}},
        {"name": dataset(pool, NODES), "properties": {"canmount": "off"}},
        {"name": dataset(pool, DATA), "properties": {"canmount": "off"}},
    ]


def data_layer(pool, export_root, data_sets, node_data_ips, head_data_ip):
    """(datasets, exports, mounts) of the science data: read-write with root
    squashed to each node's data address (nobody else on the data subnet), ``mp``
    (never the directory beneath an unmounted dataset), mounted on every node from
    the head's data address."""
    datasets, exports, mounts = [], [], []
    for ds in data_sets:
        path = export_path(export_root, DATA, ds["name"])
        datasets.append({"name": dataset(pool, DATA, ds["name"]),
                         "properties": {**ds["properties"]}})
        exports.append({"path": path,
                        "clients": [{"host": ip, "options": "rw,root_squash,no_subtree_check,mp"}
                                    for ip in node_data_ips]})
        mounts.append({"name": ds["name"], "path": ds["mount"],
                       "source": f"{head_data_ip}:{path}"})
    return datasets, exports, mounts
