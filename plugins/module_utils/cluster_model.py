# Copyright: junkyard.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cluster model: validate the whole inventory once, derive per-node data.

Pure Python (stdlib only) so that it runs in an action plugin on the
controller and in unit tests alike.  The input is a plain dict::

    {
      "cluster": {<every cluster_* variable, without the prefix>},
      "head": {"name": ..., "vars": {<head_* host variables>}},
      "nodes": {<name>: {<node_* host variables>}, ...},
      "secrets": {<host>: <verdict of the BMC password check>},
      "image_state": <the image state (docs/upgrades.md), parsed; None = no state>,
      "image_state_file": <"<head>:<path>" it was read from; None = cluster_image_state>,
    }

``build_model`` returns ``(model, errors)``.  Every error names the host (or
``cluster``, or the image state file), the field path and the offending value,
so that an operator can find the line in the inventory.  The model is what
every role renders from: no role recomputes per-node data.

Which image version a node boots follows the image state by upgrade_plan's
rule (``effective_versions``): the inventory's ``node_image_version`` (a pin),
else the state's override for the node, else the state's current version of
the image, else the inventory's ``cluster_images.<image>.current_version``.
"""

from __future__ import annotations

import ipaddress
import posixpath
import re

from ansible_collections.junkyard.cluster.plugins.module_utils import upgrade_plan

WRITABLE_KINDS = ("persistent", "tmpfs", "overlay")
FAILURE_POLICIES = ("stop", "tmpfs")
NETWORK_ROLES = ("mgmt", "data", "bmc")
NETWORK_TITLES = {"mgmt": "management", "data": "data", "bmc": "BMC"}
VDEV_TYPES = ("draid", "raidz", "mirror", "disk")
MAC_RE = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")
NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
DATASET_PART_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$")
MODULE_NAME_RE = re.compile(r"^[A-Za-z0-9_-]+$")
VERSION_RE = upgrade_plan.VERSION_RE

DEFAULT_DATASET_PROPERTIES = {"atime": "off", "compression": "lz4"}


def _fmt(value):
    if isinstance(value, str):
        return value if value else "''"
    return repr(value)


class _Errors:
    def __init__(self):
        self.items = []

    def add(self, where, field, value, problem):
        field = f"{field} " if field else ""
        self.items.append(f"{where}: {field}{_fmt(value)} {problem}")

    def plain(self, message):
        self.items.append(message)


def _as_dict(value):
    return value if isinstance(value, dict) else {}


def _as_list(value):
    return value if isinstance(value, list) else []


def _norm_mac(value):
    if not isinstance(value, str):
        return None
    mac = value.strip().lower().replace("-", ":")
    return mac if MAC_RE.match(mac) else None


def _ip(value):
    try:
        return ipaddress.ip_address(str(value))
    except ValueError:
        return None


def _network(value):
    try:
        return ipaddress.ip_network(str(value), strict=True)
    except ValueError:
        return None


# ---------------------------------------------------------------------------
# cluster-wide sections


def _check_networks(cluster, err):
    nets = {}
    raw = cluster.get("networks")
    if not isinstance(raw, dict):
        err.add("cluster", "cluster_networks", raw, "must be a mapping of mgmt, data and bmc")
        return nets
    for role in NETWORK_ROLES:
        if role not in raw:
            err.add("cluster", f"cluster_networks.{role}", None, "is missing")
            continue
        spec = _as_dict(raw[role])
        net = _network(spec.get("subnet"))
        if net is None:
            err.add("cluster", f"cluster_networks.{role}.subnet", spec.get("subnet"),
                    "is not a valid network address with prefix (e.g. 10.20.0.0/24)")
            continue
        mtu = spec.get("mtu", 1500)
        if not isinstance(mtu, int) or isinstance(mtu, bool) or not 576 <= mtu <= 9216:
            err.add("cluster", f"cluster_networks.{role}.mtu", mtu, "must be an integer 576..9216")
            mtu = 1500
        gateway = spec.get("gateway")
        if gateway is not None and (_ip(gateway) is None or _ip(gateway) not in net):
            err.add("cluster", f"cluster_networks.{role}.gateway", gateway,
                    f"is not an address in {net}")
            gateway = None
        nets[role] = {
            "subnet": str(net),
            "network": str(net.network_address),
            "prefix": net.prefixlen,
            "netmask": str(net.netmask),
            "mtu": mtu,
            "gateway": gateway,
            "_net": net,
        }
    for role in raw:
        if role not in NETWORK_ROLES:
            err.add("cluster", "cluster_networks", role,
                    f"is not a known network (expected {', '.join(NETWORK_ROLES)})")
    a, b = nets.get("mgmt"), nets.get("data")
    if a and b and a["_net"].overlaps(b["_net"]):
        err.add("cluster", "cluster_networks.data.subnet", b["subnet"],
                f"overlaps the management subnet {a['subnet']}: root NFS and science "
                "data must be on separate networks")
    return nets


def _check_writable_paths(cluster, err):
    out = []
    raw = cluster.get("writable_paths", [])
    if not isinstance(raw, list):
        err.add("cluster", "cluster_writable_paths", raw, "must be a list")
        return out
    seen = {}
    for i, entry in enumerate(raw):
        where = f"cluster_writable_paths[{i}]"
        entry = _as_dict(entry)
        path, kind = entry.get("path"), entry.get("kind")
        if not isinstance(path, str) or not path.startswith("/"):
            err.add("cluster", f"{where}.path", path, "is not an absolute path")
            continue
        norm = posixpath.normpath(path)
        if norm == "/" or norm != path.rstrip("/") or "//" in path:
            err.add("cluster", f"{where}.path", path,
                    "must be a normalised absolute path other than /")
            continue
        if kind not in WRITABLE_KINDS:
            err.add("cluster", f"{where}.kind", kind,
                    f"is not a writable path kind ({', '.join(WRITABLE_KINDS)})")
            continue
        if norm in seen:
            err.add("cluster", f"{where}.path", path,
                    f"repeats cluster_writable_paths[{seen[norm]}]")
            continue
        for other, j in seen.items():
            if norm.startswith(other + "/") or other.startswith(norm + "/"):
                outer, inner = (other, norm) if norm.startswith(other + "/") else (norm, other)
                err.add("cluster", f"{where}.path", path,
                        f"is nested with cluster_writable_paths[{j}] ({inner} inside {outer}); "
                        "writable paths must not contain each other")
                break
        else:
            name = entry.get("name") or norm.strip("/").replace("/", "-")
            if not DATASET_PART_RE.match(name):
                err.add("cluster", f"{where}.name", name, "is not a valid dataset name")
                continue
            seen[norm] = i
            out.append({"path": norm, "kind": kind, "name": name,
                        "size": entry.get("size", "")})
    names = [w["name"] for w in out if w["kind"] == "persistent"]
    for name in sorted({n for n in names if names.count(n) > 1}):
        err.add("cluster", "cluster_writable_paths[].name", name,
                "is used by two persistent paths (each needs its own dataset)")
    return out


def _module_list(prof, key, base, err):
    """A profile's list of kernel module names (bad entries reported and left out)."""
    raw = prof.get(key, [])
    if not isinstance(raw, list):
        err.add("cluster", f"{base}.{key}", raw, "must be a list of module names")
        return []
    for mod in raw:
        if not isinstance(mod, str) or not MODULE_NAME_RE.match(mod):
            err.add("cluster", f"{base}.{key}", mod,
                    "is not a kernel module name (letters, digits, _ and -)")
    return [m for m in raw if isinstance(m, str) and MODULE_NAME_RE.match(m)]


def _check_profiles(cluster, err):
    raw = cluster.get("hardware_profiles")
    if not isinstance(raw, dict) or not raw:
        err.add("cluster", "cluster_hardware_profiles", raw, "must be a non-empty mapping")
        return {}
    out = {}
    for pname, prof in raw.items():
        base = f"cluster_hardware_profiles.{pname}"
        prof = _as_dict(prof)
        gpu = _as_dict(prof.get("gpu"))
        count = gpu.get("count", 0)
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            err.add("cluster", f"{base}.gpu.count", count, "must be an integer >= 0")
            count = 0
        if count and not re.match(r"^gfx[0-9a-f]{3,4}$", str(gpu.get("gfx_target", ""))):
            err.add("cluster", f"{base}.gpu.gfx_target", gpu.get("gfx_target"),
                    "is not a gfx target (e.g. gfx908)")
        cal = _as_dict(prof.get("bmc")).get("current_calibration", 1.0)
        if not isinstance(cal, (int, float)) or isinstance(cal, bool) or cal <= 0:
            err.add("cluster", f"{base}.bmc.current_calibration", cal, "must be a number > 0")
        sensors = _as_list(_as_dict(prof.get("bmc")).get("gpu_current_sensors"))
        if sensors and len(sensors) != count:
            err.add("cluster", f"{base}.bmc.gpu_current_sensors", len(sensors),
                    f"sensors are listed for {count} GPUs (one per GPU, in GPU order)")
        cooled = {}
        for z, zone in enumerate(_as_list(prof.get("fan_zones"))):
            zone = _as_dict(zone)
            zname = zone.get("name", z)
            for g in _as_list(zone.get("gpus")):
                if not isinstance(g, int) or isinstance(g, bool) or not 0 <= g < count:
                    err.add("cluster", f"{base}.fan_zones[{z}].gpus", g,
                            f"names a GPU the profile does not have (it has {count}: "
                            f"0..{count - 1})" if count else
                            "names a GPU but the profile has none")
                elif g in cooled:
                    err.add("cluster", f"{base}.fan_zones[{z}].gpus", g,
                            f"is already cooled by zone {cooled[g]}")
                else:
                    cooled[g] = zname
        psu = _as_dict(prof.get("psu"))
        rating = psu.get("rating_w")
        if rating is not None and (not isinstance(rating, int) or rating <= 0):
            err.add("cluster", f"{base}.psu.rating_w", rating, "must be a positive integer")
        cmdline = prof.get("kernel_cmdline", [])
        if not isinstance(cmdline, list) or not all(isinstance(x, str) for x in cmdline):
            err.add("cluster", f"{base}.kernel_cmdline", cmdline, "must be a list of strings")
            cmdline = []
        # Modules a diskless node of this hardware never needs (a floppy or an
        # IDE controller it does not have, the PC speaker, virtualisation): on
        # the kernel command line, so that neither the initramfs nor udev's
        # coldplug loads them (kmod reads modprobe.blacklist= in both).
        blacklist = _module_list(prof, "kernel_module_blacklist", base, err)
        # The drivers of the NIC the node boots from: the initramfs carries
        # them (and NFS) only; a profile without the list gets every NIC driver.
        nic_modules = (_module_list(prof, "initramfs_modules", base, err)
                       if "initramfs_modules" in prof else None)
        if prof.get("initramfs_modules") == []:
            err.add("cluster", f"{base}.initramfs_modules", [],
                    "is empty: list the drivers of the management NIC (or leave it out "
                    "for every NIC driver)")
        if blacklist:
            cmdline = [*cmdline, "modprobe.blacklist=" + ",".join(blacklist)]
        out[pname] = {"name": pname, "gpu_count": count,
                      "gfx_target": gpu.get("gfx_target"), "kernel_cmdline": cmdline,
                      "kernel_module_blacklist": blacklist, "initramfs_modules": nic_modules}
    return out


def _check_images(cluster, err):
    raw = cluster.get("images")
    if not isinstance(raw, dict) or not raw:
        err.add("cluster", "cluster_images", raw, "must be a non-empty mapping")
        return {}
    out = {}
    for name, img in raw.items():
        img = _as_dict(img)
        if not DATASET_PART_RE.match(str(name)):
            err.add("cluster", "cluster_images", name, "is not a valid image (dataset) name")
            continue
        version = img.get("current_version")
        if not isinstance(version, str) or not VERSION_RE.match(version):
            err.add("cluster", f"cluster_images.{name}.current_version", version,
                    "must be a version name (letters, digits, . _ -)")
            continue
        out[name] = {"name": name, "suite": img.get("suite", "bookworm"),
                     "current_version": version}
    return out


def _check_pool(cluster, err):
    raw = cluster.get("pool")
    if not isinstance(raw, dict):
        err.add("cluster", "cluster_pool", raw, "must be a mapping")
        return None
    name = raw.get("name")
    if not isinstance(name, str) or not re.match(r"^[A-Za-z][A-Za-z0-9_.-]*$", name) or \
            name in ("mirror", "raidz", "draid", "spare", "log"):
        err.add("cluster", "cluster_pool.name", name, "is not a valid pool name")
    ashift = raw.get("ashift", 12)
    if not isinstance(ashift, int) or not 9 <= ashift <= 16:
        err.add("cluster", "cluster_pool.ashift", ashift, "must be an integer 9..16")
    seen = {}
    groups = [("vdevs", raw.get("vdevs"))] + [
        (k, raw.get(k)) for k in ("special", "log") if raw.get(k) is not None]
    if not _as_list(raw.get("vdevs")):
        err.add("cluster", "cluster_pool.vdevs", raw.get("vdevs"), "must list at least one vdev")
    for gname, vdevs in groups:
        if not isinstance(vdevs, list):
            err.add("cluster", f"cluster_pool.{gname}", vdevs, "must be a list of vdevs")
            continue
        for i, vdev in enumerate(vdevs):
            where = f"cluster_pool.{gname}[{i}]"
            vdev = _as_dict(vdev)
            vtype = vdev.get("type")
            disks = _as_list(vdev.get("disks"))
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
                continue
            if vtype == "draid":
                if gname != "vdevs":
                    err.add("cluster", f"{where}.type", vtype, "is only allowed in vdevs")
                    continue
                _check_draid(where, vdev, len(disks), err)
            elif vtype == "raidz":
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
    return {"name": name, "ashift": ashift,
            "properties": _as_dict(raw.get("properties")),
            "filesystem_properties": _as_dict(raw.get("filesystem_properties")),
            "mountpoint": raw.get("mountpoint", f"/{name}")}


def draid_spec(parity, data, children, spares):
    return f"draid{parity}:{data}d:{children}c:{spares}s"


def _check_draid(where, vdev, ndisks, err):
    parity, data, spares = vdev.get("parity"), vdev.get("data"), vdev.get("spares", 0)
    children = vdev.get("children", ndisks)
    ok = True
    if parity not in (1, 2, 3):
        err.add("cluster", f"{where}.parity", parity, "must be 1, 2 or 3")
        ok = False
    if not isinstance(data, int) or isinstance(data, bool) or data < 1:
        err.add("cluster", f"{where}.data", data, "must be an integer >= 1")
        ok = False
    if not isinstance(spares, int) or isinstance(spares, bool) or spares < 0:
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


def _check_data_datasets(cluster, err):
    out = []
    seen = set()
    for i, ds in enumerate(_as_list(cluster.get("data_datasets", []))):
        ds = _as_dict(ds)
        name = ds.get("name")
        if not isinstance(name, str) or not DATASET_PART_RE.match(name):
            err.add("cluster", f"cluster_data_datasets[{i}].name", name,
                    "is not a valid dataset name")
            continue
        if name in seen:
            err.add("cluster", f"cluster_data_datasets[{i}].name", name, "is repeated")
            continue
        seen.add(name)
        out.append({"name": name, "properties": _as_dict(ds.get("properties")),
                    "mount": ds.get("mount", f"/data/{name}")})
    return out


# ---------------------------------------------------------------------------
# hosts


def _check_iface(where, field, iface, role, nets, err, need_mac=True):
    iface = _as_dict(iface)
    out = {}
    mac = iface.get("mac")
    if mac is not None or need_mac:
        nmac = _norm_mac(mac)
        if nmac is None:
            err.add(where, f"{field}.mac", mac, "is not a MAC address (aa:bb:cc:dd:ee:ff)")
        out["mac"] = nmac
    ip = _ip(iface.get("ip"))
    if ip is None:
        err.add(where, f"{field}.ip", iface.get("ip"), "is not an IP address")
    elif role in nets:
        net = nets[role]["_net"]
        if ip not in net:
            err.add(where, f"{field}.ip", str(ip),
                    f"is not in the {NETWORK_TITLES[role]} subnet {net}")
        elif ip in (net.network_address, net.broadcast_address) and net.prefixlen < 31:
            err.add(where, f"{field}.ip", str(ip),
                    f"is the network or broadcast address of {net}")
    out["ip"] = str(ip) if ip is not None else None
    out["device"] = iface.get("device")
    return out


SECRET_VERDICTS = ("vault", "env", "absent")


def _check_bmc(name, bmc, nets, secret, err):
    bmc = _as_dict(bmc)
    addr = _ip(bmc.get("address"))
    if addr is None:
        err.add(name, "node_bmc.address", bmc.get("address"), "is not an IP address")
    elif "bmc" in nets and addr not in nets["bmc"]["_net"]:
        err.add(name, "node_bmc.address", str(addr),
                f"is not in the BMC subnet {nets['bmc']['subnet']}")
    port = bmc.get("port", 623)
    if not isinstance(port, int) or not 1 <= port <= 65535:
        err.add(name, "node_bmc.port", port, "is not a UDP port")
    if secret is not None and secret not in SECRET_VERDICTS:
        err.add(name, "node_bmc.password", "<hidden>",
                "is given in plain text: use an Ansible Vault value or "
                "\"{{ lookup('ansible.builtin.env', 'VAR') }}\"")
    return {"address": str(addr) if addr else None, "port": port,
            "username": bmc.get("username", "admin")}


def _dupes(err, network_field, entries):
    """entries: list of (host, field, value); report every value seen twice."""
    first = {}
    for host, field, value in entries:
        if value is None:
            continue
        if value in first:
            ohost, ofield = first[value]
            err.add(host, field, value, f"is already used by {ohost} ({ofield}) on {network_field}")
        else:
            first[value] = (host, field)


# ---------------------------------------------------------------------------
# derivation


def _kernel_ip_arg(ip, net, hostname):
    gw = net.get("gateway") or ""
    return f"ip={ip}::{gw}:{net['netmask']}:{hostname}::off"


def build_model(data):
    """Validate ``data`` and derive the cluster model.  Returns (model, errors)."""
    err = _Errors()
    cluster = _as_dict(data.get("cluster"))
    nets = _check_networks(cluster, err)
    writable = _check_writable_paths(cluster, err)
    profiles = _check_profiles(cluster, err)
    images = _check_images(cluster, err)
    pool = _check_pool(cluster, err)
    data_sets = _check_data_datasets(cluster, err)
    policy = cluster.get("writable_failure_policy", "stop")
    if policy not in FAILURE_POLICIES:
        err.add("cluster", "cluster_writable_failure_policy", policy,
                f"is not a policy ({', '.join(FAILURE_POLICIES)})")
    domain = cluster.get("domain", "cluster.internal")
    secrets = _as_dict(data.get("secrets"))

    head_in = _as_dict(data.get("head"))
    head_name = head_in.get("name")
    head = {"name": head_name}
    if not head_name:
        err.plain("cluster: the group storage_head must hold exactly one host")
    else:
        hv = _as_dict(head_in.get("vars"))
        ifaces = _as_dict(hv.get("head_interfaces"))
        for role in ("mgmt", "data"):
            if role not in ifaces:
                err.add(head_name, f"head_interfaces.{role}", None, "is missing")
                head[role] = {"ip": None, "mac": None, "device": None}
            else:
                head[role] = _check_iface(head_name, f"head_interfaces.{role}",
                                          ifaces[role], role, nets, err, need_mac=False)

    nodes_in = _as_dict(data.get("nodes"))
    nodes = []
    for name in sorted(nodes_in):
        nv = _as_dict(nodes_in[name])
        if not NAME_RE.match(name):
            err.add(name, "inventory_hostname", name,
                    "is not a valid host name (lower-case letters, digits, -)")
        if name == head_name:
            err.add(name, "inventory_hostname", name, "is both the storage head and a node")
        prof = nv.get("node_profile")
        if prof not in profiles:
            err.add(name, "node_profile", prof,
                    f"is not a hardware profile in cluster_hardware_profiles "
                    f"({', '.join(sorted(profiles)) or 'none defined'})")
        image = nv.get("node_image")
        if image not in images:
            err.add(name, "node_image", image,
                    f"is not an image in cluster_images ({', '.join(sorted(images)) or 'none'})")
        # The inventory's pin; the version the node boots is settled with the image state.
        version = nv.get("node_image_version")
        if version is not None and (not isinstance(version, str) or
                                    not VERSION_RE.match(version)):
            err.add(name, "node_image_version", version, "is not a version name")
        ifaces = _as_dict(nv.get("node_interfaces"))
        node = {"name": name, "profile": prof, "image": image, "image_version": version}
        for role in ("mgmt", "data"):
            if role not in ifaces:
                err.add(name, f"node_interfaces.{role}", None, "is missing")
                node[role] = {"ip": None, "mac": None, "device": None}
            else:
                node[role] = _check_iface(name, f"node_interfaces.{role}", ifaces[role],
                                          role, nets, err)
        node["bmc"] = _check_bmc(name, nv.get("node_bmc"), nets, secrets.get(name), err)
        nodes.append(node)

    everyone = ([(head_name, head)] if head_name else []) + [(n["name"], n) for n in nodes]
    for role in ("mgmt", "data"):
        title = f"the {NETWORK_TITLES[role]} network"
        prefix = {head_name: "head_interfaces"}
        _dupes(err, title, [(h, f"{prefix.get(h, 'node_interfaces')}.{role}.ip",
                             x[role]["ip"]) for h, x in everyone])
        _dupes(err, title, [(h, f"{prefix.get(h, 'node_interfaces')}.{role}.mac",
                             x[role].get("mac")) for h, x in everyone])
    _dupes(err, "the BMC network",
           [(n["name"], "node_bmc.address:port", f"{n['bmc']['address']}:{n['bmc']['port']}")
            for n in nodes if n["bmc"]["address"]])
    lower = {}
    for h, _node in everyone:
        key = str(h).lower()
        if key in lower:
            err.add(h, "inventory_hostname", h, f"duplicates host {lower[key]}")
        lower[key] = h

    ctx = _check_image_state(data, images, nodes, err)

    if err.items:
        return None, err.items
    effective = upgrade_plan.effective_versions(ctx)
    for n in nodes:
        n["image_version"] = effective[n["name"]]["version"]
        n["image_version_source"] = effective[n["name"]]["source"]
    for name, img in images.items():
        img["current_version"] = upgrade_plan.image_current(ctx, name)
        img["previous_version"] = ctx["state"]["images"].get(name, {}).get("previous")
    return _derive(cluster, nets, writable, profiles, images, pool, data_sets, policy,
                   domain, head, nodes, ctx["state"]), []


def _check_image_state(data, images, nodes, err):
    """Check the image state against itself and the inventory (upgrade_plan's rules) and
    return the planner context the versions are taken from (None if the state is refused).

    Refusals name where the state came from: ``<head>:<path>`` of the file, or the
    variable ``cluster_image_state``."""
    source = data.get("image_state_file")
    where, prefix = (source, "") if source else ("cluster", "cluster_image_state")

    def field(path):
        return ".".join(p for p in (prefix, path) if p)

    try:
        ctx = upgrade_plan.make_context(
            images, {n["name"]: n["image"] for n in nodes if n["image"] in images},
            {n["name"]: n["image_version"] for n in nodes}, data.get("image_state"))
    except upgrade_plan.PlanError as exc:
        err.add(where, field(exc.field or ""), exc.value, exc.problem or str(exc))
        return None
    for path, value, problem in upgrade_plan.state_problems(ctx):
        err.add(where, field(path), value, problem)
    return ctx


def _initramfs_modules(profiles, nodes):
    used = sorted({n["profile"] for n in nodes if n["profile"] in profiles})
    lists = [profiles[p]["initramfs_modules"] for p in used]
    if not lists or any(lst is None for lst in lists):
        return None
    return sorted({m for lst in lists for m in lst})


def _derive(cluster, nets, writable, profiles, images, pool, data_sets, policy, domain,
            head, nodes, image_state):
    pname = pool["name"]
    export_root = pool["mountpoint"].rstrip("/")
    tftp_root = cluster.get("tftp_root", "/srv/tftp")
    nfs_version = cluster.get("nfs_version", 3)
    mgmt, data = nets["mgmt"], nets["data"]
    head_ip = head["mgmt"]["ip"]

    def image_dataset(image, version):
        return f"{pname}/images/{image}/{version}"

    def image_path(image, version):
        return f"{export_root}/images/{image}/{version}"

    # Overlay mounts on the nodes sit on the NFS-exported image: its ACLs
    # must be off (inherited by every image version, clones included).
    datasets = [
        {"name": f"{pname}/images", "properties": {"canmount": "off", "acltype": "off"}},
        {"name": f"{pname}/nodes", "properties": {"canmount": "off"}},
        {"name": f"{pname}/data", "properties": {"canmount": "off"}},
    ]
    for image in sorted(images):
        datasets.append({"name": f"{pname}/images/{image}",
                         "properties": {"canmount": "off"}})
        # The current version (the image state's, else the inventory's) is where
        # a first build goes; later versions are clones made by the upgrade
        # playbook, never created empty here.
        datasets.append({"name": image_dataset(image, images[image]["current_version"]),
                         "properties": {}})
    exports = []
    persistent = [w for w in writable if w["kind"] == "persistent"]
    versions_booted = sorted({(n["image"], n["image_version"]) for n in nodes}
                             | {(i, images[i]["current_version"]) for i in images})
    for image, version in versions_booted:
        exports.append({"path": image_path(image, version),
                        "clients": [{"host": mgmt["subnet"],
                                     "options": "ro,no_root_squash,no_subtree_check"}]})
    out_nodes = []
    for n in nodes:
        prof = profiles[n["profile"]]
        node_ds = []
        mounts = []
        for w in persistent:
            ds = f"{pname}/nodes/{n['name']}/{w['name']}"
            node_ds.append(ds)
            path = f"{export_root}/nodes/{n['name']}/{w['name']}"
            exports.append({"path": path,
                            "clients": [{"host": n["mgmt"]["ip"],
                                         "options": "rw,no_root_squash,no_subtree_check"}]})
            mounts.append({"path": w["path"], "kind": "persistent",
                           "source": f"{head_ip}:{path}"})
        for w in writable:
            if w["kind"] != "persistent":
                mounts.append({"path": w["path"], "kind": w["kind"], "source": ""})
        datasets.append({"name": f"{pname}/nodes/{n['name']}",
                         "properties": {"canmount": "off"}})
        for ds in node_ds:
            datasets.append({"name": ds, "properties": {}})
        version_dir = f"images/{n['image']}/{n['image_version']}"
        root = image_path(n["image"], n["image_version"])
        cmdline = [
            "root=/dev/nfs",
            f"nfsroot={head_ip}:{root},vers={nfs_version},tcp",
            _kernel_ip_arg(n["mgmt"]["ip"], mgmt, n["name"]),
            "BOOTIF=01-" + n["mgmt"]["mac"].replace(":", "-"),
            "ro",
            f"junkyard.node={n['name']}",
            f"junkyard.image={n['image']}/{n['image_version']}",
            *prof["kernel_cmdline"],
        ]
        out_nodes.append({
            **n,
            "fqdn": f"{n['name']}.{domain}",
            "gpu_count": prof["gpu_count"],
            "gfx_target": prof["gfx_target"],
            "image_dataset": image_dataset(n["image"], n["image_version"]),
            "root_path": root,
            "datasets": node_ds,
            "writable": mounts,
            "data": {**n["data"], "mtu": data["mtu"], "prefix": data["prefix"]},
            "boot": {
                "dir": version_dir,
                "kernel": f"/{version_dir}/boot/vmlinuz",
                "initrd": f"/{version_dir}/boot/initrd.img",
                "kernel_old": f"/{version_dir}/boot/vmlinuz.old",
                "initrd_old": f"/{version_dir}/boot/initrd.img.old",
                "cmdline": " ".join(cmdline),
                "grub_config": "grub/grub.cfg-01-" + n["mgmt"]["mac"].replace(":", "-"),
                # the head serves the boot tree over HTTP on this address (the
                # kernel and initrd; TFTP only for GRUB itself and its files)
                "server": head_ip,
            },
        })
    for ds in data_sets:
        datasets.append({"name": f"{pname}/data/{ds['name']}",
                         "properties": {**ds["properties"]}})
        exports.append({"path": f"{export_root}/data/{ds['name']}",
                        "clients": [{"host": data["subnet"],
                                     "options": "rw,root_squash,no_subtree_check"}]})
    hosts_entries = []
    for h in [{"name": head["name"], **head}, *out_nodes]:
        hosts_entries.append({"ip": h["mgmt"]["ip"],
                              "names": [f"{h['name']}.{domain}", h["name"]]})
    for h in [{"name": head["name"], **head}, *out_nodes]:
        hosts_entries.append({"ip": h["data"]["ip"],
                              "names": [f"{h['name']}-data.{domain}", f"{h['name']}-data"]})
    public_nets = {k: {kk: vv for kk, vv in v.items() if not kk.startswith("_")}
                   for k, v in nets.items()}
    return {
        "name": cluster.get("name", "junkyard"),
        "domain": domain,
        "networks": public_nets,
        "head": head,
        "pool": pool,
        "export_root": export_root,
        "tftp_root": tftp_root,
        "nfs_version": nfs_version,
        "images": images,
        "image_state": image_state,
        "writable_paths": writable,
        # the initramfs's network drivers: every booting profile's, or None
        # (every NIC driver) when one of them does not name its own
        "initramfs_modules": _initramfs_modules(profiles, nodes),
        "writable_failure_policy": policy,
        "nodes": out_nodes,
        "node_names": [n["name"] for n in out_nodes],
        "dhcp_hosts": [{"mac": n["mgmt"]["mac"], "ip": n["mgmt"]["ip"], "name": n["name"]}
                       for n in out_nodes],
        "hosts_entries": hosts_entries,
        "datasets": datasets,
        "exports": exports,
        "data_datasets": data_sets,
        "default_dataset_properties": dict(DEFAULT_DATASET_PROPERTIES),
    }
