# Copyright: junkyard.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Documentation of the cluster_model action; the work happens in plugins/action."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cluster_model
short_description: Validate the cluster inventory and derive the per-node model
description:
  - Runs on the controller only.  Reads the C(cluster_*) variables, the single
    host of the C(storage_head) group and every host of the C(gpu_nodes) group,
    refuses a bad inventory with one message per problem (host, field, value),
    and returns the derived model that the other roles render from.
  - BMC passwords are checked in their raw, untemplated form; a password given
    in plain text is refused.  The password itself never enters the model.
options:
  head_group:
    description: Inventory group holding the storage head.
    type: str
    default: storage_head
  node_group:
    description: Inventory group holding the GPU nodes.
    type: str
    default: gpu_nodes
attributes:
  check_mode:
    support: full
    description: Validates and derives on the controller only; the same in check mode.
  diff_mode:
    support: none
    description: Nothing changes, so there is nothing to diff.
author: junkyard.cluster developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Validate the inventory and derive the cluster model
  junkyard.cluster.cluster_model:
  run_once: true
  register: __cluster_model_result
"""

RETURN = r"""
model:
  description: The derived cluster model (networks, head, nodes with boot entries,
    datasets, exports, DHCP host entries, /etc/hosts entries).
  returned: success
  type: dict
errors:
  description: One message per problem, naming host, field and value.
  returned: failure
  type: list
  elements: str
"""
