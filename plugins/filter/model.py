# Copyright (c) 2026, junkyard.cluster developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Thin filters over the cluster model for names that depend on something only
known at run time (the new version of an upgrade, a node that has left the
inventory) and the one place a BMC password meets its endpoint.  The names are
built in plugins/module_utils/cluster_model/, nowhere else."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.junkyard.cluster.plugins.module_utils import cluster_model as cm


def image_version(model, image, version):
    """Dataset, export path and boot directory of ``image``/``version`` (a list of
    versions gives a list, in the same order)."""
    try:
        if isinstance(version, (list, tuple)):
            return [cm.image_version(model, str(image), str(v)) for v in version]
        return cm.image_version(model, str(image), str(version))
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def node_storage(model, node):
    """The dataset of a node's own storage and the prefix of its archived copy."""
    try:
        return cm.node_storage(model, str(node))
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def bmc_login(endpoint, node_bmc=None, node_bmc_defaults=None):
    """The model's BMC endpoint of a node with its password (node_bmc over
    node_bmc_defaults)."""
    if not isinstance(endpoint, dict) or "address" not in endpoint:
        raise AnsibleFilterError(
            f"bmc_login: the input must be a node's BMC endpoint from the cluster model "
            f"(cluster_model.nodes[].bmc), got {type(endpoint).__name__}")
    return cm.bmc_login(endpoint, node_bmc, node_bmc_defaults)


class FilterModule:
    def filters(self):
        return {
            "image_version": image_version,
            "node_storage": node_storage,
            "bmc_login": bmc_login,
        }
