"""The repository's inventories as plain YAML (no templating): one loader for
every test that reads inventories/lab or inventories/example directly."""

from __future__ import annotations

from pathlib import Path

import yaml
from ansible_collections.junkyard.cluster.plugins.action.cluster_model import (
    CLUSTER_KEYS,
    NODE_KEYS,
    secret_verdict,
)
from ansible_collections.junkyard.cluster.plugins.module_utils.cluster_model import merge_bmc

REPO = Path(__file__).resolve().parents[1]
LAB = REPO / "inventories" / "lab"
EXAMPLE = REPO / "inventories" / "example"


def _yaml(path: Path) -> dict:
    data = yaml.safe_load(path.read_text())
    return data if isinstance(data, dict) else {}


def group_vars(inventory: Path, group: str | None = None) -> dict:
    """The variables of the inventory's group_vars (every group, or ``group`` only: its
    ``<group>.yml`` and ``<group>/*.yml``); a variable set in two files is an error."""
    root = inventory / "group_vars"
    if group is None:
        files = sorted(root.rglob("*.yml"))
    else:
        files = [p for p in [root / f"{group}.yml", *sorted((root / group).glob("*.yml"))]
                 if p.is_file()]
    merged: dict = {}
    for path in files:
        for key, value in _yaml(path).items():
            assert key not in merged, f"{path}: {key} is also set in another group_vars file"
            merged[key] = value
    return merged


def unshared(value):
    """A copy of ``value`` that shares nothing, not even what a YAML alias shared (a test
    changing one profile's list must not change another's)."""
    if isinstance(value, dict):
        return {k: unshared(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unshared(v) for v in value]
    return value


def _groups(inventory: Path) -> dict:
    return _yaml(inventory / "hosts.yml")["all"]["children"]


def hosts(inventory: Path) -> tuple[dict, dict]:
    """(the storage head's host variables, {node: host variables})."""
    groups = _groups(inventory)
    [head] = groups["storage_head"]["hosts"].values()
    return head, groups["gpu_nodes"]["hosts"]


def model_data(inventory: Path) -> dict:
    """The inventory as the cluster_model action hands it to build_model, from the files
    as written (no templating: a value with a lookup stays the lookup's text).

    The model's ``cluster_*`` variables of group_vars/all; each node's model variables from
    group_vars/all, group_vars/gpu_nodes and its host variables, in Ansible's order;
    its BMC settings as node_bmc_defaults with node_bmc over them, without the
    password, whose supply (env, vault, ...) is the node's entry in ``secrets``."""
    common = group_vars(inventory, "all")
    node_group = group_vars(inventory, "gpu_nodes")
    groups = _groups(inventory)
    [(head_name, head)] = groups["storage_head"]["hosts"].items()
    nodes, secrets = {}, {}
    for name, host in groups["gpu_nodes"]["hosts"].items():
        raw = unshared({**common, **node_group, **host})
        node = {key: raw.get(key) for key in NODE_KEYS}
        bmc = merge_bmc(raw.get("node_bmc_defaults"), raw.get("node_bmc"))
        node["_bmc_sources"] = {
            key: {k: None if k == "password" else v for k, v in raw[key].items()}
            for key in ("node_bmc", "node_bmc_defaults") if isinstance(raw.get(key), dict)}
        node["node_bmc"] = {k: v for k, v in bmc.items() if k != "password"}
        secrets[name] = secret_verdict(bmc.get("password"), raw)
        nodes[name] = node
    return {
        "cluster": {key: unshared(common[f"cluster_{key}"])
                    for key in CLUSTER_KEYS if f"cluster_{key}" in common},
        "head": {"name": head_name,
                 "vars": {"head_interfaces": unshared(head["head_interfaces"])}},
        "nodes": nodes,
        "secrets": secrets,
    }


def keep_gpus(profile: dict, count: int) -> None:
    """Cut the hardware ``profile`` to its first ``count`` GPUs, in place: their current
    sensors and their places in the fan zones go with them (what the model checks
    against the count).  The GPU's model stays: a caller making a GPU-less profile sets
    ``gpu`` to ``{"count": 0}`` itself."""
    profile["gpu"]["count"] = count
    profile["bmc"]["gpu_current_sensors"] = profile["bmc"]["gpu_current_sensors"][:count]
    for zone in profile["fan_zones"]:
        zone["gpus"] = [gpu for gpu in zone["gpus"] if gpu < count]
