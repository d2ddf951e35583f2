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
      "variables": {<host>: [<names of its cluster_*, node_*, head_* variables>]},
      "role_variables": {<role>: {<variable it declares>: <its argument spec or None>}},
      "role_values": {<host>: {<role variable the inventory sets>: <value>}},
      "unrendered": [(<host>, <field>, <value as written>, <why it could not be
                      templated>), ...],
    }

``build_model`` returns ``(model, errors)``.  Every error names the host (or
``cluster``, or the image state file), the field path and the offending value,
so that an operator can find the line in the inventory.  The model is what
every role renders from: no role recomputes per-node data, and every derived
name (dataset, export path, boot file) is built in this package only.

One module per layer, each validating its part and deriving what it needs:
``networks``, ``storage``, ``images`` (with the writable paths), ``hardware``
(profiles), ``nodes`` (with the BMC endpoint), ``netboot``, ``upgrades`` and
``slurm`` (the scheduler's controller, partitions and node definitions) and
``users`` (the people whose jobs run, and their homes).

Which image version a node boots follows the image state by upgrade_plan's
rule (``effective_versions``): the inventory's ``node_image_version`` (a pin),
else the state's override for the node, else the state's current version of
the image, else the inventory's ``cluster_images.<image>.current_version``.
"""

from __future__ import annotations

from . import (
    hardware,
    images,
    netboot,
    networks,
    nodes,
    schema,
    settings,
    slurm,
    storage,
    upgrades,
    users,
)
from .common import DATASET_PART_RE, MAC_RE, NAME_RE, Errors, as_dict
from .images import FAILURE_POLICIES, VERSION_RE, WRITABLE_KINDS
from .networks import NETWORK_ROLES, NETWORK_TITLES
from .nodes import SECRET_VERDICTS, merge_bmc
from .storage import DEFAULT_DATASET_PROPERTIES, VDEV_TYPES, draid_spec

__all__ = [
    "DATASET_PART_RE", "DEFAULT_DATASET_PROPERTIES", "FAILURE_POLICIES", "MAC_RE", "NAME_RE",
    "NETWORK_ROLES", "NETWORK_TITLES", "SECRET_VERDICTS", "VDEV_TYPES", "VERSION_RE",
    "WRITABLE_KINDS", "bmc_login", "build_model", "draid_spec", "image_version",
    "merge_bmc", "node_storage",
]


def build_model(data):
    """Validate ``data`` and derive the cluster model.  Returns (model, errors)."""
    err = Errors()
    schema.report_unrendered(data.get("unrendered"), list(as_dict(data.get("nodes"))), err)
    schema.check_variables(data.get("variables"), data.get("role_variables"),
                           list(as_dict(data.get("nodes"))), err)
    schema.check_inputs(data, err)
    schema.check_role_values(data.get("role_values"), data.get("role_variables"),
                             list(as_dict(data.get("nodes"))), err)
    cluster = as_dict(data.get("cluster"))
    settings.check_settings(cluster, err)
    nets = networks.check_networks(cluster, err)
    writable = images.check_writable_paths(cluster, err)
    profiles = hardware.check_profiles(cluster, err)
    imgs = images.check_images(cluster, err)
    pool = storage.check_pool(cluster, err)
    data_sets = storage.check_data_datasets(cluster, writable, err)
    accounts = users.check_users(cluster, data_sets, err)
    policy = images.check_failure_policy(cluster, err)
    nfs_version = images.check_nfs_version(cluster, writable, err)

    head = nodes.check_head(as_dict(data.get("head")), nets, err)
    node_list = nodes.check_nodes(as_dict(data.get("nodes")), head["name"], profiles, imgs,
                                  nets, as_dict(data.get("secrets")), VERSION_RE, err)
    everyone = networks.check_host_duplicates(head, node_list, err)
    nodes.check_bmc_duplicates(node_list, err)
    networks.check_host_names(everyone, err)
    slurm_conf = slurm.check_slurm(cluster, head, node_list, writable, err)

    ctx = upgrades.check_image_state(data, imgs, node_list, err)
    if err.items:
        return None, err.items
    upgrades.settle_versions(ctx, imgs, node_list)
    return _derive({
        "cluster": cluster, "nets": nets, "writable": writable, "profiles": profiles,
        "images": imgs, "pool": pool, "data_sets": data_sets, "policy": policy,
        "nfs_version": nfs_version, "head": head, "nodes": node_list, "ctx": ctx,
        "slurm": slurm_conf, "users": accounts,
    }), []


def _layout(checked):
    """Where things are: the pool's name, where it is exported, the TFTP root."""
    pool = checked["pool"]
    return {"pool": pool["name"], "export_root": pool["mountpoint"].rstrip("/"),
            "tftp_root": checked["cluster"].get("tftp_root", "/srv/tftp")}


def _node(n, checked, layout, names, domain):
    """One node of the model with everything its layers derive; returns
    (node, datasets, exports)."""
    head_ip = checked["head"]["mgmt"]["ip"]
    prof = checked["profiles"][n["profile"]]
    version = names(n["image"], n["image_version"])
    ds_names, datasets, exports, mounts = nodes.node_layer(
        layout["pool"], layout["export_root"], head_ip, n, checked["writable"])
    data_net = checked["nets"]["data"]
    node = {
        **n,
        "fqdn": f"{n['name']}.{domain}",
        "gpu_count": prof["gpu_count"],
        "gfx_target": prof["gfx_target"],
        "dimm_labels": prof["dimm_labels"],
        "image_dataset": version["dataset"],
        "root_path": version["path"],
        "datasets": ds_names,
        "writable": mounts,
        "data": {**n["data"], "mtu": data_net["mtu"], "prefix": data_net["prefix"]},
        "boot": netboot.boot_entry(n, version, prof, checked["nets"]["mgmt"], head_ip,
                                   checked["nfs_version"]),
        "ssh_host_keys": nodes.ssh_host_keys(layout["export_root"], n, domain,
                                             checked["writable"]),
    }
    return node, datasets, exports


def _derive(checked):
    layout = _layout(checked)
    domain = checked["cluster"].get("domain", "cluster.internal")
    head, imgs, writable = checked["head"], checked["images"], checked["writable"]

    def names(image, version):
        return images.version_names(layout["pool"], layout["export_root"],
                                    layout["tftp_root"], image, version)

    datasets = storage.top_datasets(layout["pool"])
    img_datasets, exports, builds = images.image_layer(
        names, imgs, checked["nodes"], head["mgmt"]["ip"])
    datasets += img_datasets
    out_nodes = []
    for n in checked["nodes"]:
        node, node_datasets, node_exports = _node(n, checked, layout, names, domain)
        out_nodes.append(node)
        datasets += node_datasets
        exports += node_exports
    data_datasets, data_exports, data_mounts = storage.data_layer(
        layout["pool"], layout["export_root"], checked["data_sets"],
        [n["data"]["ip"] for n in checked["nodes"]], head["data"]["ip"])
    datasets += data_datasets
    exports += data_exports
    metrics_dataset, monitoring = storage.metrics_layer(layout["pool"])
    datasets.append(metrics_dataset)
    for name, img in imgs.items():
        img["dataset"] = images.image_dataset(layout["pool"], name)
        img["gfx_targets"] = images.gfx_targets(name, checked["nodes"], checked["profiles"])
    return {
        "name": checked["cluster"].get("name", "junkyard"),
        "domain": domain,
        "networks": networks.public(checked["nets"]),
        "head": head,
        "pool": checked["pool"],
        "export_root": layout["export_root"],
        "tftp_root": layout["tftp_root"],
        "nfs_version": checked["nfs_version"],
        "images": imgs,
        "image_state": checked["ctx"]["state"],
        "upgrade_context": upgrades.published_context(checked["ctx"]),
        "image_builds": builds,
        "writable_paths": writable,
        "ssh_host_keys_path": images.SSH_HOST_KEYS["path"],
        "writable_nfs_options": images.persistent_mount_options(checked["nfs_version"],
                                                                writable),
        "initramfs_modules": netboot.initramfs_modules(checked["profiles"], checked["nodes"]),
        # the validated profiles as the inventory gives them: the fan daemon and the
        # ECC monitor read their own parts (fan zones, sensors, memory boards and labels)
        "hardware_profiles": checked["cluster"]["hardware_profiles"],
        "writable_failure_policy": checked["policy"],
        "nodes": out_nodes,
        "node_names": [n["name"] for n in out_nodes],
        "dhcp_hosts": [{"mac": n["mgmt"]["mac"], "ip": n["mgmt"]["ip"], "name": n["name"]}
                       for n in out_nodes],
        "hosts_entries": networks.hosts_entries(head, out_nodes, domain),
        "datasets": datasets,
        "exports": exports,
        "data_datasets": checked["data_sets"],
        "data_mounts": data_mounts,
        "users": users.derive(checked["users"], data_mounts),
        "default_dataset_properties": dict(DEFAULT_DATASET_PROPERTIES),
        "monitoring": monitoring,
        "slurm": slurm.derive(checked["slurm"], checked["cluster"].get("name", "junkyard"), head,
                              out_nodes, {n["name"]: n["ssh_host_keys"]["dir"]
                                          for n in out_nodes}),
    }


# ---------------------------------------------------------------------------
# names that depend on something only known at run time


def image_version(model, image, version):
    """The names of image version ``image``/``version`` in ``model``'s layout (see
    :func:`images.version_names`); for a version the model does not know yet (the
    new version of an upgrade) as well as for a recorded one."""
    if image not in model["images"]:
        raise ValueError(f"cluster: image {image} is not in cluster_images "
                         f"({', '.join(sorted(model['images']))})")
    if not isinstance(version, str) or not VERSION_RE.fullmatch(version):
        raise ValueError(f"cluster: version {version!r} of {image} is not a version name "
                         "(letters, digits, . _ -)")
    return images.version_names(model["pool"]["name"], model["export_root"],
                                model["tftp_root"], image, version)


def node_storage(model, node):
    """Where the datasets of ``node`` live, also once it has left the inventory
    (see :func:`nodes.node_storage`)."""
    if not isinstance(node, str) or not NAME_RE.fullmatch(node):
        raise ValueError(f"{node}: node name {node!r} is not a valid host name")
    return nodes.node_storage(model["pool"]["name"], node)


def bmc_login(endpoint, node_bmc=None, defaults=None):
    """The BMC login of a node: its endpoint as the model publishes it
    (``cluster_model.nodes[].bmc``) with the password of ``node_bmc_defaults``
    merged with ``node_bmc`` (:func:`nodes.merge_bmc`).  The only place the
    password meets the endpoint; callers keep the result out of logs."""
    merged = as_dict(merge_bmc(defaults, node_bmc))
    password = merged.get("password")
    return {**endpoint, "password": "" if password is None else str(password)}
