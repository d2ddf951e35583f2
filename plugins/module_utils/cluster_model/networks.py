# Copyright: junkyard.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Networks layer: the three subnets, each host's interfaces on them, addresses
used twice, and the ``/etc/hosts`` entries."""

from __future__ import annotations

import re

from .common import as_dict, ip, is_int, network, norm_mac

NETWORK_ROLES = ("mgmt", "data", "bmc")
# what the kernel takes as an interface name (no /, no white space, 15 bytes)
DEVICE_RE = re.compile(r"^[A-Za-z0-9_.-]{1,15}$")
NETWORK_TITLES = {"mgmt": "management", "data": "data", "bmc": "BMC"}


def check_networks(cluster, err):
    """``cluster_networks`` by role, each with its parsed network under ``_net``
    (not published: see :func:`public`)."""
    nets = {}
    raw = cluster.get("networks")
    if not isinstance(raw, dict):
        err.add("cluster", "cluster_networks", raw, "must be a mapping of mgmt, data and bmc")
        return nets
    for role in NETWORK_ROLES:
        if role not in raw:
            err.add("cluster", f"cluster_networks.{role}", None, "is missing")
            continue
        spec = as_dict(raw[role])
        net = network(spec.get("subnet"))
        if net is None:
            err.add("cluster", f"cluster_networks.{role}.subnet", spec.get("subnet"),
                    "is not a valid network address with prefix (e.g. 10.20.0.0/24)")
            continue
        if net.version != 4 and role != "bmc":
            err.add("cluster", f"cluster_networks.{role}.subnet", spec.get("subnet"),
                    "is not an IPv4 network: the nodes boot over DHCPv4 and PXE, the kernel's "
                    "ip= and nfsroot= and the NFS mounts are written for IPv4 addresses")
            continue
        mtu = spec.get("mtu", 1500)
        if not is_int(mtu) or not 576 <= mtu <= 9216:
            err.add("cluster", f"cluster_networks.{role}.mtu", mtu, "must be an integer 576..9216")
            mtu = 1500
        gateway = spec.get("gateway")
        if gateway is not None and (ip(gateway) is None or ip(gateway) not in net):
            err.add("cluster", f"cluster_networks.{role}.gateway", gateway,
                    f"is not an address in {net}")
            gateway = None
        elif gateway is not None and net.prefixlen < 31 and \
                ip(gateway) in (net.network_address, net.broadcast_address):
            err.add("cluster", f"cluster_networks.{role}.gateway", gateway,
                    f"is the network or broadcast address of {net}")
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
    bmc = nets.get("bmc")
    for role in ("mgmt", "data"):
        other = nets.get(role)
        if bmc and other and bmc["_net"].overlaps(other["_net"]):
            err.add("cluster", "cluster_networks.bmc.subnet", bmc["subnet"],
                    f"overlaps the {NETWORK_TITLES[role]} subnet {other['subnet']}: the "
                    "BMCs must be on their own network")
    return nets


def public(nets):
    """The networks as published in the model (without the parsed objects)."""
    return {k: {kk: vv for kk, vv in v.items() if not kk.startswith("_")}
            for k, v in nets.items()}


def check_address(where, field, value, role, nets, err):
    """The address ``value`` of network ``role``, or None (reported)."""
    addr = ip(value)
    if addr is None:
        err.add(where, field, value, "is not an IP address")
    elif role in nets:
        net = nets[role]["_net"]
        if addr not in net:
            err.add(where, field, str(addr),
                    f"is not in the {NETWORK_TITLES[role]} subnet {net}")
        elif addr in (net.network_address, net.broadcast_address) and net.prefixlen < 31 \
                and role != "bmc":
            err.add(where, field, str(addr), f"is the network or broadcast address of {net}")
    return addr


def check_iface(where, field, iface, role, nets, err, need_mac=True):
    iface = as_dict(iface)
    out = {}
    mac = iface.get("mac")
    if mac is not None or need_mac:
        nmac = norm_mac(mac)
        if nmac is None:
            err.add(where, f"{field}.mac", mac, "is not a MAC address (aa:bb:cc:dd:ee:ff)")
        elif nmac == "00:00:00:00:00:00":
            err.add(where, f"{field}.mac", mac, "is the all-zero MAC address, no NIC's")
            nmac = None
        elif int(nmac[:2], 16) & 1:
            err.add(where, f"{field}.mac", mac,
                    "is a multicast (group) MAC address, no NIC's (the first octet is odd)")
            nmac = None
        out["mac"] = nmac
    addr = check_address(where, f"{field}.ip", iface.get("ip"), role, nets, err)
    out["ip"] = str(addr) if addr is not None else None
    device = iface.get("device")
    if device is not None and (not isinstance(device, str) or not DEVICE_RE.fullmatch(device)):
        err.add(where, f"{field}.device", device,
                "is not a network interface name (up to 15 letters, digits, _ . -)")
        device = None
    out["device"] = device
    return out


def dupes(err, network_field, entries):
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


def check_host_duplicates(head, nodes, err):
    """Addresses and MACs used twice on the management and data networks (the head
    included), and host names that differ only in case."""
    head_name = head.get("name")
    everyone = ([(head_name, head)] if head_name else []) + [(n["name"], n) for n in nodes]
    for role in ("mgmt", "data"):
        title = f"the {NETWORK_TITLES[role]} network"
        prefix = {head_name: "head_interfaces"}
        dupes(err, title, [(h, f"{prefix.get(h, 'node_interfaces')}.{role}.ip",
                            x[role]["ip"]) for h, x in everyone])
        dupes(err, title, [(h, f"{prefix.get(h, 'node_interfaces')}.{role}.mac",
                            x[role].get("mac")) for h, x in everyone])
    return everyone


def check_host_names(everyone, err):
    lower = {}
    for h, _node in everyone:
        key = str(h).lower()
        if key in lower:
            err.add(h, "inventory_hostname", h, f"duplicates host {lower[key]}")
        lower[key] = h


def hosts_entries(head, nodes, domain):
    """``/etc/hosts``: every host's management name, then every host's data name."""
    hosts = [{"name": head["name"], **head}, *nodes]
    out = [{"ip": h["mgmt"]["ip"], "names": [f"{h['name']}.{domain}", h["name"]]}
           for h in hosts]
    out += [{"ip": h["data"]["ip"],
             "names": [f"{h['name']}-data.{domain}", f"{h['name']}-data"]} for h in hosts]
    return out
