"""The repository's inventories as plain YAML (no templating): one loader for
every test that reads inventories/lab or inventories/example directly."""

from __future__ import annotations

from pathlib import Path

import yaml

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


def hosts(inventory: Path) -> tuple[dict, dict]:
    """(the storage head's host variables, {node: host variables})."""
    groups = _yaml(inventory / "hosts.yml")["all"]["children"]
    [head] = groups["storage_head"]["hosts"].values()
    return head, groups["gpu_nodes"]["hosts"]
