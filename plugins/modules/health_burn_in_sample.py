#!/usr/bin/python
# Copyright (c) 2026, junkyard.cluster developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
module: health_burn_in_sample
short_description: One sample of a burn-in run; stops the load when a limit is crossed
version_added: 0.1.0
description:
  - Reads the fan daemon's metrics (GPU temperatures, fan duties, zone states, PSU state) and
    the memory error counters (EDAC and rasdaemon's database), and compares them with the
    limits of the burn-in.
  - When a GPU is at or over O(gpu_temp_limit_c), a fan zone is in fail-safe or has lost its
    BMC, a PSU reports failure, or the error count rose above O(baseline_errors), it stops the
    load at once by sending SIGTERM to the processes named in O(stop_processes) (C(pkill -x)),
    and says why. The burn-in verdict is made from all samples afterwards.
attributes:
  check_mode:
    support: full
    description: Samples, and reports what it would stop, but sends no signal.
  diff_mode:
    support: none
    description: Nothing on the node changes, so there is nothing to diff.
author:
  - junkyard.cluster developers (!UNKNOWN)
options:
  fan_metrics_path:
    description: The fan daemon's Prometheus textfile.
    type: path
    default: /run/junkyard/metrics/junkyard_fan.prom
  fan_metrics_max_age:
    description: Seconds after which the metrics count as stale.
    type: float
    default: 30
  db_path:
    description: rasdaemon's database.
    type: path
    default: /var/lib/rasdaemon/ras-mc_event.db
  edac_root:
    description: EDAC's memory controllers in sysfs.
    type: path
    default: /sys/devices/system/edac/mc
  gpu_temp_limit_c:
    description: GPU temperature at which the load stops.
    type: float
    default: 95
  baseline_errors:
    description: Corrected plus uncorrected errors counted before the run (C(errors_total) of
      a first sample); any more stops the load.
    type: int
  stop_processes:
    description: Process names to stop (C(pkill -x -TERM)) when a limit is crossed.
    type: list
    elements: str
    default: []
"""

EXAMPLES = r"""
- name: Sample the node every 30 s during the burn-in
  junkyard.cluster.health_burn_in_sample:
    baseline_errors: "{{ before.sample.errors_total }}"
    stop_processes: [stress-ng]
  loop: "{{ range(20) | list }}"
  loop_control:
    pause: 30
  register: samples
"""

RETURN = r"""
sample:
  description: C(time), C(fan) (see health_facts), C(ecc) (see ecc_facts), C(errors_total).
  returned: success
  type: dict
stop_reasons:
  description: Why the load was (or, in check mode, would be) stopped; empty when all is well.
  returned: success
  type: list
  elements: str
stopped:
  description: Process names that were signalled.
  returned: success
  type: list
  elements: str
"""


import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.junkyard.cluster.plugins.module_utils.health_assess import (
    burn_in_stop_reasons,
    error_count,
)
from ansible_collections.junkyard.cluster.plugins.module_utils.health_parsers import (
    FAN_TEXTFILE,
    HealthError,
    ecc_summary,
    read_edac,
    read_fan_metrics,
    read_rasdaemon_db,
)


def main():
    module = AnsibleModule(
        argument_spec={
            "fan_metrics_path": {"type": "path", "default": FAN_TEXTFILE},
            "fan_metrics_max_age": {"type": "float", "default": 30.0},
            "db_path": {"type": "path", "default": "/var/lib/rasdaemon/ras-mc_event.db"},
            "edac_root": {"type": "path", "default": "/sys/devices/system/edac/mc"},
            "gpu_temp_limit_c": {"type": "float", "default": 95.0},
            "baseline_errors": {"type": "int"},
            "stop_processes": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    p = module.params
    now = time.time()
    try:
        ecc = ecc_summary(read_edac(p["edac_root"]), read_rasdaemon_db(p["db_path"]), now=now)
    except HealthError as err:
        module.fail_json(msg=str(err))
    fan = read_fan_metrics(p["fan_metrics_path"], now=now, stale_after=p["fan_metrics_max_age"])
    sample = {"time": now, "fan": fan, "ecc": ecc, "errors_total": error_count(ecc)}
    reasons = burn_in_stop_reasons(sample, p["gpu_temp_limit_c"], p["baseline_errors"])
    stopped = []
    if reasons and not module.check_mode:
        pkill = module.get_bin_path("pkill", required=True)
        for name in p["stop_processes"]:
            rc, _out, _err = module.run_command([pkill, "-TERM", "-x", name])
            if rc == 0:
                stopped.append(name)
    module.exit_json(changed=bool(stopped), sample=sample, stop_reasons=reasons, stopped=stopped)


if __name__ == "__main__":
    main()
