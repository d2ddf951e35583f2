#!/usr/bin/python
# Copyright (c) 2026, junkyard.cluster developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
module: nfs_exports
short_description: Write one /etc/exports.d file for many exports and apply it with exportfs -ra
version_added: 0.1.0
description:
  - Renders the whole list of exports (every path, every client with its options) into one
    file C(<exports_dir>/<name>.exports) in a single call, so per-node exports cost one task
    however many nodes there are.
  - Validates every path, host (address, network, hostname or wildcard, C(@netgroup)) and
    option (known exports(5) options, values, contradictions such as C(rw) with C(ro)) before
    writing anything.
  - When the content changes, the file is replaced atomically and C(exportfs -ra) re-exports
    everything; the NFS server is never restarted, so mounted clients (root file systems
    included) are not disturbed. If C(exportfs -ra) fails, the previous file is put back,
    C(exportfs -ra) is run again and the module fails with exportfs's message.
  - Why a module rather than the ZFS C(sharenfs) property. C(sharenfs) is one property per
    dataset, so N per-node datasets mean N tasks and N C(zfs set) calls; it is inherited, so a
    child dataset (for example C(tank/nodes/n01/log)) is exported with its parent's clients
    unless every child overrides it, which breaks the least-privilege rule (per-node datasets to
    one node only); it cannot export paths that are not dataset mountpoints; its options are
    applied by C(zfs share) with ordering tied to dataset mounting at boot; and it gives no
    single reviewable file, no check mode and no diff. One generated file under
    C(/etc/exports.d) has none of these problems and leaves C(/etc/exports) to the admin.
attributes:
  check_mode:
    support: full
    description: Validates and reports the diff; writes nothing and runs nothing.
  diff_mode:
    support: full
    description: Before and after content of the exports file.
author:
  - junkyard.cluster developers (!UNKNOWN)
options:
  name:
    description: File stem; the file is C(<exports_dir>/<name>.exports).
    type: str
    required: true
  exports:
    description: The exports, in file order. Required when O(state=present).
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: Absolute, normalised path to export.
        type: str
        required: true
      clients:
        description: Who may mount it, in order.
        type: list
        elements: dict
        required: true
        suboptions:
          host:
            description:
              - An IPv4/IPv6 address, a network (C(10.20.0.0/24), C(10.20.0.0/255.255.255.0)),
                a hostname or wildcard (C(*.mgmt.lab)), C(@netgroup) or C(*).
            type: str
            required: true
          options:
            description: Export options as a list or a comma-separated string.
            type: raw
            default: []
  state:
    description: V(absent) removes the file and re-exports.
    type: str
    choices: [present, absent]
    default: present
  exports_dir:
    description: Directory read by exportfs. Created (mode 0755) when missing.
    type: path
    default: /etc/exports.d
notes:
  - Requires C(exportfs) (package nfs-kernel-server) on the target only when something changes.
"""

EXAMPLES = r"""
- name: Export images read-only to the management network, node datasets to their node
  junkyard.cluster.nfs_exports:
    name: cluster
    exports: "{{ [nfs_exports_images] + nfs_exports_per_node }}"
  vars:
    nfs_exports_images:
      path: /tank/images
      clients:
        - host: 10.20.0.0/24
          options: [ro, sync, no_subtree_check, root_squash]
    nfs_exports_per_node: >-
      {{ cluster_nodes | map(attribute='persistent_export') | list }}

- name: Data datasets to the data network
  junkyard.cluster.nfs_exports:
    name: data
    exports:
      - path: /tank/data
        clients:
          - host: 10.30.0.0/24
            options: rw,sync,no_subtree_check,root_squash
"""

RETURN = r"""
path:
  description: The exports file.
  returned: always
  type: str
  sample: /etc/exports.d/cluster.exports
content:
  description: The rendered file content (what the file holds after the run).
  returned: when O(state=present)
  type: str
exports:
  description: The validated exports, options as lists.
  returned: when O(state=present)
  type: list
  elements: dict
exportfs_stderr:
  description: Warnings C(exportfs -ra) printed (it exits 0 with warnings).
  returned: when exportfs ran
  type: str
"""


import os
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.junkyard.cluster.plugins.module_utils.nfs_exports import (
    ExportError,
    check_name,
    normalise,
    render,
)


class NfsExports:
    def __init__(self, module):
        self.module = module
        self.p = module.params
        self.path = os.path.join(self.p["exports_dir"], f"{self.p['name']}.exports")

    def read(self):
        try:
            with open(self.path, encoding="utf-8") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def write(self, content):
        directory = self.p["exports_dir"]
        if not os.path.isdir(directory):
            os.makedirs(directory, mode=0o755)
        fd, tmp = tempfile.mkstemp(prefix=".ansible-", suffix=".exports.tmp", dir=directory)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(content)
        os.chmod(tmp, 0o644)
        self.module.atomic_move(tmp, self.path)

    def restore(self, old):
        if old is None:
            os.unlink(self.path)
        else:
            self.write(old)

    def exportfs(self):
        return self.module.run_command([self.exportfs_bin, "-ra"])

    def main(self):
        try:
            check_name(self.p["name"])
            exports = normalise(self.p["exports"]) if self.p["state"] == "present" else []
        except ExportError as exc:
            self.module.fail_json(msg=str(exc))
        if self.p["state"] == "present" and not exports:
            self.module.fail_json(msg="exports must list at least one path when state=present")
        old = self.read()
        new = render(exports) if self.p["state"] == "present" else None
        result = {"path": self.path}
        if self.p["state"] == "present":
            result.update(content=new, exports=exports)
        diff = {"before": old or "", "after": new or "",
                "before_header": self.path, "after_header": self.path}
        if old == new:
            self.module.exit_json(changed=False, **result)
        if self.module.check_mode:
            self.module.exit_json(changed=True, diff=diff, **result)
        # Find exportfs before touching the file, so a missing nfs-kernel-server
        # does not leave a written but unapplied file behind.
        self.exportfs_bin = self.module.get_bin_path("exportfs", required=True)
        if new is None:
            os.unlink(self.path)
        else:
            self.write(new)
        rc, _out, err = self.exportfs()
        if rc != 0:
            self.restore(old)
            rc2, _out2, err2 = self.exportfs()
            restored = "restored"
            if rc2 != 0:
                restored += f", but exportfs -ra failed again: {err2.strip()}"
            self.module.fail_json(
                msg=f"exportfs -ra rejected {self.path} (rc={rc}): {err.strip()}; the previous "
                    f"file was {restored}", diff=diff, **result)
        if err.strip():
            self.module.warn(f"exportfs -ra: {err.strip()}")
        self.module.exit_json(changed=True, diff=diff, exportfs_stderr=err, **result)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            exports=dict(type="list", elements="dict", default=[], options=dict(
                path=dict(type="str", required=True),
                clients=dict(type="list", elements="dict", required=True, options=dict(
                    host=dict(type="str", required=True),
                    options=dict(type="raw", default=[]),
                )),
            )),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            exports_dir=dict(type="path", default="/etc/exports.d"),
        ),
        supports_check_mode=True,
    )
    NfsExports(module).main()


if __name__ == "__main__":
    main()
