# Copyright: junkyard.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Hosts layer: the storage head, the nodes (profile, image, interfaces), each
node's BMC endpoint, and each node's own storage (``<pool>/nodes/<node>/...``).

The BMC endpoint is published without its password.  ``node_bmc_defaults`` is
merged under a node's ``node_bmc`` by :func:`merge_bmc`, the only place that
merge is done: the action plugin takes the endpoint from it, and the filter
``junkyard.cluster.bmc_login`` the password."""

from __future__ import annotations

from . import images, storage
from .common import NAME_RE, as_dict
from .networks import check_address, check_iface, dupes

SECRET_VERDICTS = ("vault", "env", "absent")
BMC_PORT = 623
BMC_USER = "admin"
# community.general.ipmi_power / ipmi_boot talk IPMI v2.0 over LAN (RMCP+).
BMC_INTERFACE = "lanplus"


def merge_bmc(defaults, node_bmc):
    """A node's BMC settings: ``node_bmc_defaults`` with the node's ``node_bmc`` over
    them, key by key (None when ``node_bmc`` is not a mapping at all)."""
    if node_bmc is None and isinstance(defaults, dict):
        return dict(defaults)
    if not isinstance(node_bmc, dict):
        return node_bmc
    return {**(defaults if isinstance(defaults, dict) else {}), **node_bmc}


def check_head(head_in, nets, err):
    head_name = head_in.get("name")
    head = {"name": head_name}
    if not head_name:
        err.plain("cluster: the group storage_head must hold exactly one host")
        return head
    if not NAME_RE.fullmatch(str(head_name)):
        err.add(head_name, "inventory_hostname", head_name,
                "is not a valid host name (lower-case letters, digits, -)")
    ifaces = as_dict(as_dict(head_in.get("vars")).get("head_interfaces"))
    for role in ("mgmt", "data"):
        if role not in ifaces:
            err.add(head_name, f"head_interfaces.{role}", None, "is missing")
            head[role] = {"ip": None, "mac": None, "device": None}
        else:
            head[role] = check_iface(head_name, f"head_interfaces.{role}",
                                     ifaces[role], role, nets, err, need_mac=False)
    return head


def check_bmc(name, bmc, nets, secret, err):
    """The node's BMC endpoint (never the password: only the verdict on how it is
    given, ``secret``, is checked)."""
    bmc = as_dict(bmc)
    addr = check_address(name, "node_bmc.address", bmc.get("address"), "bmc", nets, err)
    port = bmc.get("port", BMC_PORT)
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        err.add(name, "node_bmc.port", port, "is not a UDP port")
        port = None
    if secret == "env-default":
        err.add(name, "node_bmc.password", "<hidden>",
                "has a plain-text default= in its environment lookup: that default is the "
                "password whenever the variable is unset; leave it out or make it ''")
    elif secret is not None and secret not in SECRET_VERDICTS:
        err.add(name, "node_bmc.password", "<hidden>",
                "is given in plain text: use an Ansible Vault value or "
                "\"{{ lookup('ansible.builtin.env', 'VAR') }}\"")
    return {"address": str(addr) if addr else None, "port": port,
            "username": bmc.get("username", BMC_USER), "interface": BMC_INTERFACE}


def check_node(name, nv, head_name, profiles, images, nets, secret, version_re, err):
    if not NAME_RE.fullmatch(name):
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
    if version is not None and (not isinstance(version, str) or not version_re.fullmatch(version)):
        err.add(name, "node_image_version", version, "is not a version name")
    ifaces = as_dict(nv.get("node_interfaces"))
    node = {"name": name, "profile": prof, "image": image, "image_version": version}
    for role in ("mgmt", "data"):
        if role not in ifaces:
            err.add(name, f"node_interfaces.{role}", None, "is missing")
            node[role] = {"ip": None, "mac": None, "device": None}
        else:
            node[role] = check_iface(name, f"node_interfaces.{role}", ifaces[role],
                                     role, nets, err)
    node["bmc"] = check_bmc(name, nv.get("node_bmc"), nets, secret, err)
    return node


def check_nodes(nodes_in, head_name, profiles, images, nets, secrets, version_re, err):
    return [check_node(name, as_dict(nodes_in[name]), head_name, profiles, images, nets,
                       secrets.get(name), version_re, err)
            for name in sorted(nodes_in)]


def check_bmc_duplicates(nodes, err):
    dupes(err, "the BMC network",
          [(n["name"], "node_bmc.address:port", f"{n['bmc']['address']}:{n['bmc']['port']}")
           for n in nodes if n["bmc"]["address"] and n["bmc"]["port"] is not None])


def node_storage(pool, node):
    """Where a node's own datasets live (also for a node that has left the
    inventory): ``<pool>/nodes/<node>``, and the prefix of its archived copy."""
    return {"dataset": storage.dataset(pool, storage.NODES, node),
            "archive_prefix": storage.dataset(pool, storage.ARCHIVE, node) + "-"}


def ssh_host_keys(export_root, node, domain, writable):
    """A node's own SSH host keys, as the ``ssh_host_keys`` module takes them: its
    name, ``dir`` on the head (the export of its host key dataset, where the head
    makes them; the node mounts it at ``ssh_host_keys_path``) and the names its key
    is known by (``known_hosts``)."""
    entry = next(w for w in writable if w["path"] == images.SSH_HOST_KEYS["path"])
    return {"name": node["name"],
            "dir": storage.export_path(export_root, storage.NODES, node["name"], entry["name"]),
            "names": [node["name"], f"{node['name']}.{domain}", node["mgmt"]["ip"]]}


def node_layer(pool, export_root, head_ip, node, writable):
    """(dataset names, datasets, exports, mounts) of ``node``'s writable paths: one
    dataset per persistent path, read-write to that node's management address only
    (``mp``: never the directory beneath an unmounted dataset);
    tmpfs and overlay paths after them, in their order."""
    names, exports, mounts = [], [], []
    for w in writable:
        if w["kind"] != "persistent":
            continue
        names.append(storage.dataset(pool, storage.NODES, node["name"], w["name"]))
        path = storage.export_path(export_root, storage.NODES, node["name"], w["name"])
        exports.append({"path": path,
                        "clients": [{"host": node["mgmt"]["ip"],
                                     "options": "rw,no_root_squash,no_subtree_check,mp"}]})
        mounts.append({"path": w["path"], "kind": "persistent", "source": f"{head_ip}:{path}"})
    mounts += [{"path": w["path"], "kind": w["kind"], "source": ""}
               for w in writable if w["kind"] != "persistent"]
    datasets = [{"name": node_storage(pool, node["name"])["dataset"],
                 "properties": {"canmount": "off"}}]
    datasets += [{"name": ds, "properties": {}} for ds in names]
    return names, datasets, exports, mounts
