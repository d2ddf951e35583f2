#!/usr/bin/python
# Copyright (c) 2026, junkyard.cluster developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
module: draid_plan
short_description: Compare dRAID layouts for a set of disks and recommend one
version_added: 0.1.0
description:
  - Lists every valid C(draid<P>:<D>d:<C>c:<S>s) layout for the given disks, parity levels,
    spare counts and group widths, with exact padding efficiency per recordsize, parity
    efficiency, the capacity C(zfs list) reports for a new pool (used + available), minimum
    allocation size and failure tolerance, and recommends one.
  - Pure computation; it runs anywhere (typically C(localhost)), reads nothing and changes
    nothing.
  - The capacity follows the OpenZFS code paths of a fresh pool (whole-disk GPT partitioning,
    vdev labels, dRAID row and group rounding with the 32 MiB reflow reserve, metaslab sizing
    and dRAID metaslab alignment, the embedded log metaslab, the 128 KiB deflate ratio and the
    slop reservation). It reproduces the published C(zfs list -p) figure of 24 x 1 TB disks as
    C(draid2:6d:24c:0s) (15835678638080 bytes) exactly.
  - "Padding efficiency of a recordsize R: the data sectors of an R block divided by the data
    sectors it occupies, because dRAID writes whole rows: a block takes
    ceil(R / (D * 2^ashift)) * (D + P) * 2^ashift bytes. Storage efficiency is padding
    efficiency times parity efficiency D/(D+P)."
  - "Ranking: highest mean padding efficiency over O(recordsizes) (padding is pure waste), then
    most usable space, then the narrower group. The recommendation is the best-ranked candidate
    with at least O(min_parity) parity and O(min_spares) distributed spares."
attributes:
  check_mode:
    support: full
    description: The module never changes anything, so check mode returns the same result.
  diff_mode:
    support: none
    description: Nothing changes, so there is nothing to diff.
author:
  - junkyard.cluster developers (!UNKNOWN)
options:
  disk_count:
    description: Number of disks available for dRAID.
    type: int
    required: true
  disk_size:
    description:
      - Size of each disk in bytes, as C(lsblk -b -d -o SIZE) shows it (or a file vdev's size).
      - Mixed sizes are not modelled; give the smallest.
    type: int
    required: true
  whole_disk:
    description:
      - V(true) when C(zpool create) is given whole disks (it writes a GPT with an 8 MiB
        reserved partition).
      - V(false) for partitions or files used as they are.
    type: bool
    default: true
  logical_sector_size:
    description: Logical sector size of the disks, for the GPT arithmetic of whole disks.
    type: int
    choices: [512, 4096]
    default: 512
  ashift:
    description: Pool ashift (sector size 2^ashift).
    type: int
    default: 12
  recordsizes:
    description:
      - Record sizes in bytes the datasets will use (uncompressed block sizes).
      - Powers of two, 512 to 16M.
    type: list
    elements: int
    default: [131072, 1048576]
  parity:
    description: Parity levels to consider (1 to 3).
    type: list
    elements: int
    default: [1, 2, 3]
  spares:
    description: Distributed spare counts to consider.
    type: list
    elements: int
    default: [0, 1, 2]
  min_data:
    description: Smallest number of data disks per redundancy group to consider.
    type: int
    default: 2
  max_data:
    description:
      - Largest number of data disks per redundancy group to consider.
      - Wider groups gain parity efficiency but lose small-block efficiency and take longer to
        rebuild.
    type: int
    default: 12
  children:
    description:
      - Children per dRAID vdev to consider. Default is one dRAID vdev over all disks.
      - With fewer children than disks the pool gets C(disk_count // children) identical dRAID
        vdevs and the remainder is reported as unused.
    type: list
    elements: int
  min_parity:
    description: The recommendation must survive this many concurrent disk failures per vdev.
    type: int
    default: 2
  min_spares:
    description: The recommendation must have at least this many distributed spares.
    type: int
    default: 1
notes:
  - Padding and efficiency figures are exact fractions (strings such as V(32/33)) with a
    rounded percentage beside them for display.
  - Compressed blocks have arbitrary sizes; the padding figures describe uncompressed records.
"""

EXAMPLES = r"""
- name: Compare layouts for the storage head's 45 disks
  junkyard.cluster.draid_plan:
    disk_count: 45
    disk_size: 18000207937536
    recordsizes: [131072, 1048576]
  register: storage_draid_plan

- name: Show the table
  ansible.builtin.debug:
    msg: "{{ storage_draid_plan.table.split('\n') }}"
"""

RETURN = r"""
candidates:
  description:
    - Every valid layout, best first.
    - C(padding[].allocated_bytes) is what one uncompressed record takes on disk,
      C(padding_efficiency) its data sectors over the data slots used (exact fraction),
      C(storage_efficiency) data over everything allocated, C(charged_bytes) what C(zfs list)
      counts as used for that block (allocation deflated by the 128 KiB ratio), and
      C(fits_bytes) how much data in records of that size fits in C(usable_bytes).
    - C(usable_bytes) is C(zfs list -p) used + available of the new pool's root dataset;
      C(space) holds the intermediate figures (child and vdev asize, metaslabs, deflate ratio,
      deflated space, embedded log space, slop).
    - C(min_alloc_bytes) is the smallest allocation in data terms (D sectors); every block
      takes at least C(min_alloc_on_disk_bytes) (D+P sectors).
    - C(failure_tolerance.concurrent_per_vdev) is P; C(sequential_per_vdev) is P+S, when each
      failure is rebuilt onto a distributed spare before the next.
  returned: always
  type: list
  elements: dict
  sample:
    - layout: draid2:8d:45c:1s
      vdevs: 1
      unused_disks: 0
      parity: 2
      data: 8
      children: 45
      spares: 1
      group_width: 10
      groups_per_slice: 22
      parity_efficiency: 4/5
      parity_efficiency_pct: 80.0
      mean_padding_efficiency: "1"
      mean_padding_efficiency_pct: 100.0
      padding:
        - recordsize: 131072
          allocated_bytes: 163840
          padding_sectors: 0
          padding_efficiency: "1"
          padding_efficiency_pct: 100.0
          storage_efficiency: 4/5
          storage_efficiency_pct: 80.0
          charged_bytes: 130880
          fits_bytes: 633454726348800
      usable_bytes: 632526814249728
      usable_tib: 575.28
      min_alloc_bytes: 32768
      min_alloc_on_disk_bytes: 40960
      failure_tolerance: {concurrent_per_vdev: 2, sequential_per_vdev: 3}
      space: {child_asize: 18000192733184, vdev_asize: 792006901104640, metaslab_count: 46100,
              metaslab_size: 17179869184, deflate_ratio: 409, dspace: 632650529453600,
              embedded_log_dspace: 13723749600, slop: 123715203872}
recommended:
  description:
    - The recommended candidate (same keys as an element of RV(candidates)).
    - Null if no candidate qualifies.
  returned: always
  type: dict
reason:
  description: Why the recommended layout was chosen, naming the runner-up.
  returned: always
  type: str
table:
  description: The candidates as a text table, best first, the recommendation marked C(*).
  returned: always
  type: str
rejected:
  description: Layouts in the requested ranges that OpenZFS would refuse, with the reason.
  returned: always
  type: list
  elements: dict
"""


from ansible.module_utils.basic import AnsibleModule
from ansible_collections.junkyard.cluster.plugins.module_utils.draid import (
    PlanError,
    format_table,
    plan,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            disk_count=dict(type="int", required=True),
            disk_size=dict(type="int", required=True),
            whole_disk=dict(type="bool", default=True),
            logical_sector_size=dict(type="int", default=512, choices=[512, 4096]),
            ashift=dict(type="int", default=12),
            recordsizes=dict(type="list", elements="int", default=[131072, 1048576]),
            parity=dict(type="list", elements="int", default=[1, 2, 3]),
            spares=dict(type="list", elements="int", default=[0, 1, 2]),
            min_data=dict(type="int", default=2),
            max_data=dict(type="int", default=12),
            children=dict(type="list", elements="int"),
            min_parity=dict(type="int", default=2),
            min_spares=dict(type="int", default=1),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        result = plan(
            p["disk_count"], p["disk_size"], ashift=p["ashift"],
            recordsizes=p["recordsizes"], parity=p["parity"], spares=p["spares"],
            min_data=p["min_data"], max_data=p["max_data"], children=p["children"],
            whole_disk=p["whole_disk"], logical_sector=p["logical_sector_size"],
            min_parity=p["min_parity"], min_spares=p["min_spares"],
        )
    except PlanError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(
        changed=False,
        candidates=[c.as_dict() for c in result.candidates],
        recommended=result.recommended.as_dict() if result.recommended else None,
        reason=result.reason,
        table=format_table(result, p["recordsizes"]),
        rejected=result.rejected,
    )


if __name__ == "__main__":
    main()
