# Copyright: junkyard.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Documentation of the build_inputs action; the work happens in plugins/action."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: build_inputs
short_description: Digest of the collection files and host variables a build reads
description:
  - Runs on the controller only.  Hashes the files under O(paths) (relative to the
    collection root; C(__pycache__) and C(.pyc) left out) by relative name and
    content, and the host's variables as written (untemplated), leaving out
    magic and connection variables (C(ansible_*), C(hostvars), C(groups),
    inventory and playbook paths) and internal C(__*) ones (registered results).
  - A vaulted value counts by its ciphertext; it is never decrypted.
  - The node image build records the digest in the image and skips a version
    whose recorded digest equals this run's (docs/image.md).
options:
  paths:
    description: Files or directories relative to the collection root.
    type: list
    elements: str
    required: true
  exclude:
    description:
      - Variables that say only how or where the build runs, not what it builds (the
        tree's location, the connection, a seed to start from); C(name) leaves the
        variable out, C(name.key) leaves one key of a mapping variable out.
    type: list
    elements: str
    default: []
  resolve:
    description:
      - Variables that count by their templated value instead of their text, those
        that read a file or the environment through a lookup (their text does not
        change when what they read does).  Name only variables without secrets.
    type: list
    elements: str
    default: []
attributes:
  check_mode:
    support: full
    description: Reads files on the controller only; the same in check mode.
  diff_mode:
    support: none
    description: Nothing changes, so there is nothing to diff.
author: junkyard.cluster developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Compute the digest of what an image build reads
  junkyard.cluster.build_inputs:
    paths: [roles, plugins, playbooks, daemon/src]
    exclude: [node_image_tree_prefix, node_image_build.root_path]
    resolve: [node_image_authorized_keys]
  register: __node_image_inputs
"""

RETURN = r"""
digest:
  description: SHA-256 over the files' digest and the variables' digest.
  returned: success
  type: str
files_digest:
  description: SHA-256 over the files (relative name and content).
  returned: success
  type: str
file_count:
  description: How many files were hashed.
  returned: success
  type: int
variables_digest:
  description: SHA-256 over the variables that feed a build.
  returned: success
  type: str
variable_count:
  description: How many variables were hashed.
  returned: success
  type: int
"""
