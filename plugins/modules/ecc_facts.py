#!/usr/bin/python
# Copyright (c) 2026, junkyard.cluster developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
module: ecc_facts
short_description: Corrected and uncorrected memory errors per DIMM label on a node
version_added: 0.1.0
description:
  - Reads rasdaemon's sqlite database (tables C(mc_event) and C(mce_record)) and the kernel's
    EDAC counters in sysfs, and returns per DIMM label the corrected (CE) and uncorrected (UE)
    error counts over the last 24 hours, the last 7 days and in total.
  - The database lives on a persistent writable path, so its windows and totals survive
    reboots; the EDAC counters start at zero at boot and give the C(ce_boot)/C(ue_boot) counts.
  - On AMD EPYC, corrected DRAM errors may arrive as machine-check records (C(mce_record),
    bank "Unified Memory Controller") rather than EDAC memory events. Both are counted, each
    under its own source; the headline counts per label take the larger of the two sources,
    because one error can be recorded by both. A machine-check record has no DIMM label,
    so it is counted under C(cpu<socket>-umc<channel>).
  - Reads only; changes nothing.
attributes:
  check_mode:
    support: full
    description: Reads only, in check mode too.
  diff_mode:
    support: none
    description: Nothing on the node changes, so there is nothing to diff.
author:
  - junkyard.cluster developers (!UNKNOWN)
options:
  db_path:
    description: rasdaemon's database. A missing file means no recorded events.
    type: path
    default: /var/lib/rasdaemon/ras-mc_event.db
  edac_root:
    description: EDAC's memory-controller directory in sysfs.
    type: path
    default: /sys/devices/system/edac/mc
  expected_labels:
    description: DIMM labels of the node's hardware profile; each appears in the result, with
      zeros when it has no errors.
    type: list
    elements: str
    default: []
  memory_mce_pattern:
    description: Regular expression (case-insensitive) on a machine check's bank name and
      message that makes it a memory error.
    type: str
    default: memory controller|\bumc\b|dram|memory read|memory write
  now:
    description: Time (seconds since the epoch) the windows end at; default the node's clock.
      For tests.
    type: float
"""

EXAMPLES = r"""
- name: Count memory errors per DIMM
  junkyard.cluster.ecc_facts:
    expected_labels: >-
      {{ (cluster_model.nodes | selectattr('name', 'eq', inventory_hostname) | first).dimm_labels }}
  register: ecc
"""

RETURN = r"""
ecc:
  description: The summary.
  returned: success
  type: dict
  contains:
    dimms:
      description: One entry per DIMM label, inventory order first. Keys C(label),
        C(locations), C(ce_24h), C(ce_7d), C(ce_total), C(ue_24h), C(ue_7d), C(ue_total), and
        per source C(mc_event), C(mce) (the same keys) and C(edac) (C(ce_boot), C(ue_boot)).
      type: list
      elements: dict
    edac_present:
      description: Whether EDAC's sysfs tree exists (an EDAC driver is loaded).
      type: bool
    db_present:
      description: Whether rasdaemon's database exists.
      type: bool
    controllers_ce:
      description: Corrected errors since boot over all memory controllers.
      type: int
    controllers_ue:
      description: Uncorrected errors since boot over all memory controllers.
      type: int
"""


import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.junkyard.cluster.plugins.module_utils.health_parsers import (
    DEFAULT_MEMORY_MC_PATTERN,
    HealthError,
    ecc_summary,
    read_edac,
    read_rasdaemon_db,
)


def main():
    module = AnsibleModule(
        argument_spec={
            "db_path": {"type": "path", "default": "/var/lib/rasdaemon/ras-mc_event.db"},
            "edac_root": {"type": "path", "default": "/sys/devices/system/edac/mc"},
            "expected_labels": {"type": "list", "elements": "str", "default": []},
            "memory_mce_pattern": {"type": "str", "default": DEFAULT_MEMORY_MC_PATTERN},
            "now": {"type": "float"},
        },
        supports_check_mode=True,
    )
    p = module.params
    now = p["now"] if p["now"] is not None else time.time()
    try:
        edac = read_edac(p["edac_root"])
        db = read_rasdaemon_db(p["db_path"], p["memory_mce_pattern"])
        summary = ecc_summary(edac, db, now=now, expected_labels=p["expected_labels"])
    except HealthError as err:
        module.fail_json(msg=str(err))
    module.exit_json(changed=False, ecc=summary)


if __name__ == "__main__":
    main()
