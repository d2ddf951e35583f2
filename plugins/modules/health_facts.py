#!/usr/bin/python
# Copyright (c) 2026, junkyard.cluster developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
module: health_facts
short_description: What a live node says about its own health (image, uptime, mounts, fan daemon)
version_added: 0.1.0
description:
  - Reads the image version the node booted (C(junkyard.image=) on C(/proc/cmdline)), its
    uptime, the fan daemon's Prometheus textfile (GPU temperatures and power, fan duties, zone
    states, PSU state) and checks its mounts.
  - A mount is checked twice. It must be in C(/proc/mounts) with the expected file system type
    (NFS for the root, persistent and data paths; tmpfs; overlay). And it must answer
    C(stat -f) within O(timeout) seconds; every check runs at the same time in its own
    process, so a hung NFS server costs one timeout, not one per mount, and a process stuck
    in the kernel is left behind rather than waited for.
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
  mounts:
    description: Mounts the node must have (filter C(junkyard.cluster.health_expected_mounts)).
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: Mount point.
        type: str
        required: true
      kind:
        description: C(root), C(persistent), C(tmpfs), C(overlay) or C(data).
        type: str
        required: true
      source:
        description: Expected source, for the report.
        type: str
        default: ""
  fan_metrics_path:
    description: The fan daemon's Prometheus textfile.
    type: path
    default: /run/junkyard/metrics/junkyard_fan.prom
  fan_metrics_max_age:
    description: Seconds after which the metrics file counts as stale.
    type: float
    default: 30
  timeout:
    description: Seconds a mount has to answer C(stat -f).
    type: float
    default: 5
  proc_root:
    description: Where C(cmdline), C(uptime) and C(mounts) are read from. For tests.
    type: path
    default: /proc
"""

EXAMPLES = r"""
- name: Gather the node's health
  junkyard.cluster.health_facts:
    mounts: "{{ cluster_model | junkyard.cluster.health_expected_mounts(inventory_hostname) }}"
  register: health
"""

RETURN = r"""
health:
  description: What the node said.
  returned: success
  type: dict
  contains:
    cmdline:
      description: C(node), C(image) (C(<name>/<version>)), C(image_name), C(image_version)
        from the kernel command line, C(null) when absent.
      type: dict
    uptime_s:
      description: Seconds since boot.
      type: float
    mounts:
      description: Per expected mount C(path), C(kind), C(mounted), C(source), C(fstype),
        C(responsive), C(error), C(elapsed_s).
      type: list
      elements: dict
    fan:
      description: The fan daemon's metrics (C(present), C(age_s), C(stale), C(gpu_temp_c),
        C(gpu_power_w), C(fan_duty_percent), C(zone_state), C(psu_failed), C(alarms), ...).
      type: dict
"""


from ansible.module_utils.basic import AnsibleModule
from ansible_collections.junkyard.cluster.plugins.module_utils.health_assess import (
    check_mount_table,
)
from ansible_collections.junkyard.cluster.plugins.module_utils.health_parsers import (
    FAN_TEXTFILE,
    HealthError,
    parse_cmdline,
    parse_mounts,
    parse_uptime,
    probe,
    read_fan_metrics,
)


def _read(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def main():
    module = AnsibleModule(
        argument_spec={
            "mounts": {"type": "list", "elements": "dict", "default": [], "options": {
                "path": {"type": "str", "required": True},
                "kind": {"type": "str", "required": True},
                "source": {"type": "str", "default": ""},
            }},
            "fan_metrics_path": {"type": "path", "default": FAN_TEXTFILE},
            "fan_metrics_max_age": {"type": "float", "default": 30.0},
            "timeout": {"type": "float", "default": 5.0},
            "proc_root": {"type": "path", "default": "/proc"},
        },
        supports_check_mode=True,
    )
    p = module.params
    proc = p["proc_root"].rstrip("/")
    try:
        cmdline = parse_cmdline(_read(f"{proc}/cmdline"))
        uptime = parse_uptime(_read(f"{proc}/uptime"))
        mounts = check_mount_table(p["mounts"], parse_mounts(_read(f"{proc}/mounts")))
    except (OSError, HealthError) as err:
        module.fail_json(msg=str(err))
    answers = probe([m["path"] for m in mounts if m["mounted"]], p["timeout"])
    for m in mounts:
        if m["path"] in answers:
            ok, err, elapsed = answers[m["path"]]
            m.update(responsive=ok, elapsed_s=elapsed)
            if err:
                m["error"] = err
    fan = read_fan_metrics(p["fan_metrics_path"], stale_after=p["fan_metrics_max_age"])
    module.exit_json(changed=False, health={"cmdline": cmdline, "uptime_s": uptime,
                                            "mounts": mounts, "fan": fan})


if __name__ == "__main__":
    main()
