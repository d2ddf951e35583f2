#!/usr/bin/python
# Copyright: junkyard.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: zfs_datasets
short_description: Create many ZFS datasets and set their properties in one call
version_added: 0.1.0
description:
  - Reads every dataset with one C(zfs list) and the wanted properties of the
    existing ones with one C(zfs get), then creates the missing datasets
    (parents first, with their properties) and sets properties that differ.
  - One call for the whole cluster, so the cost of a re-run does not grow with
    the number of nodes the way a loop over M(community.general.zfs) does (one
    module run per dataset).
  - Never destroys or renames a dataset.  Datasets found directly below a
    listed dataset but not listed themselves (a node removed from the
    inventory) are reported in RV(unlisted) and left alone.
  - Properties that ZFS only accepts at creation (C(casesensitivity),
    C(normalization), C(utf8only), C(encryption), ...) are reported in
    RV(create_only_drift) with a warning when an existing dataset differs.
attributes:
  check_mode:
    support: full
    description: Reads the state, reports the commands it would run in RV(commands).
  diff_mode:
    support: full
    description: Before/after list of datasets with their managed properties.
options:
  datasets:
    description: The wanted datasets.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: Full dataset name, C(pool/path).
        type: str
        required: true
      properties:
        description: ZFS properties; sizes may be given as C(1M), C(128K).
        type: dict
        default: {}
author: junkyard.cluster developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Create the cluster's datasets
  junkyard.cluster.zfs_datasets:
    datasets:
      - name: tank/nodes
        properties: {canmount: "off"}
      - name: tank/nodes/gpu01/var-log
      - name: tank/data/scratch
        properties: {recordsize: 1M}
"""

RETURN = r"""
created:
  description: Datasets created (or that would be, in check mode).
  returned: always
  type: list
  elements: str
updated:
  description: Datasets whose properties were set, with the properties.
  returned: always
  type: dict
unlisted:
  description: Existing datasets below a listed one that are not listed; never touched.
  returned: always
  type: list
  elements: str
create_only_drift:
  description: Create-only properties of existing datasets that differ (name, property, have, want).
  returned: always
  type: list
  elements: list
commands:
  description: The commands run, or that would run in check mode.
  returned: always
  type: list
  elements: list
"""


from ansible.module_utils.basic import AnsibleModule
from ansible_collections.junkyard.cluster.plugins.module_utils.zfs_datasets import (
    DatasetError,
    create_argv,
    parse_get,
    parse_list,
    plan,
    set_argv,
    unlisted,
    validate,
)


def _run(module, argv):
    rc, out, err = module.run_command(argv)
    if rc != 0:
        module.fail_json(msg=f"{' '.join(argv)} failed (rc {rc}): {err.strip() or out.strip()}",
                         rc=rc, stdout=out, stderr=err)
    return out


def main():
    module = AnsibleModule(
        argument_spec={
            "datasets": {"type": "list", "elements": "dict", "required": True,
                         "options": {"name": {"type": "str", "required": True},
                                     "properties": {"type": "dict", "default": {}}}},
        },
        supports_check_mode=True,
    )
    wanted = module.params["datasets"]
    try:
        validate(wanted)
    except DatasetError as exc:
        module.fail_json(msg=str(exc))
    zfs = module.get_bin_path("zfs", required=True)

    existing = parse_list(_run(module, [zfs, "list", "-H", "-o", "name", "-t",
                                        "filesystem,volume"]))
    props = sorted({p for d in wanted for p in (d.get("properties") or {})})
    present = sorted(d["name"] for d in wanted if d["name"] in existing)
    current = {}
    if props and present:
        current = parse_get(_run(module, [zfs, "get", "-H", "-p", "-o",
                                          "name,property,value,source", ",".join(props),
                                          *present]))
    try:
        to_create, to_set, drift = plan(wanted, existing, current)
    except DatasetError as exc:
        module.fail_json(msg=str(exc))

    commands = [create_argv(zfs, n, p) for n, p in to_create]
    commands += [set_argv(zfs, n, p) for n, p in to_set]
    for name, prop, have, want in drift:
        module.warn(f"{name}: {prop} is {have} but {want} is wanted; ZFS only sets it at "
                    "creation, so it is left as it is")
    changed = bool(commands)
    if changed and not module.check_mode:
        for argv in commands:
            _run(module, argv)

    def line(name, props):
        return name + "".join(f" {k}={v}" for k, v in sorted(props.items())) + "\n"

    names = sorted(d["name"] for d in wanted)
    wanted_props = {d["name"]: d.get("properties") or {} for d in wanted}
    before = "".join(line(n, {k: current.get(n, {}).get(k, "?") for k in wanted_props[n]})
                     for n in names if n in existing)
    after = "".join(line(n, {k: str(v) for k, v in wanted_props[n].items()}) for n in names)

    module.exit_json(
        changed=changed,
        created=[n for n, _props in to_create],
        updated=dict(to_set),
        unlisted=unlisted(wanted, existing),
        create_only_drift=[list(x) for x in drift],
        commands=commands,
        diff={"before": before, "after": after},
    )


if __name__ == "__main__":
    main()
