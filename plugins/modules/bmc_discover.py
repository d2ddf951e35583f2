#!/usr/bin/python
# Copyright (c) 2026, junkyard.cluster developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
module: bmc_discover
short_description: Read a node's BMC and propose a hardware profile for the inventory
version_added: 0.1.0
description:
  - Reads the BMC with C(ipmitool) over LAN (RMCP+) or in-band (C(/dev/ipmi0)) -
    C(ipmitool mc info) (the manufacturer), C(ipmitool fru print 0) (the board) and
    C(ipmitool sdr list -v all) (every sensor's name, number, type, reading and unit) -
    and proposes a hardware profile in the shape of C(cluster_hardware_profiles) entries
    (inventories/example/group_vars/all/hardware.yml) - GPU current sensors in GPU order,
    CPU temperatures, PSU status sensors, and fan zones with their tachometer sensors and
    the vendor's OEM fan command.
  - The proposal is a starting point, not a verified profile; RV(notes) lists what to
    check on the node (docs/hardware.md), first of all with C(junkyard-fan --probe).
  - The password goes to ipmitool through its environment (C(-E)), never its command line.
attributes:
  check_mode:
    support: full
    description: Only reads from the BMC; check mode runs the same reads.
  diff_mode:
    support: none
    description: Nothing changes, so there is nothing to diff.
author:
  - junkyard.cluster developers (!UNKNOWN)
options:
  host:
    description: BMC address (LAN). Omit to read the BMC of the host the module runs on
      in-band (C(ipmitool -I open)).
    type: str
  port:
    description: BMC RMCP+ port.
    type: int
    default: 623
  username:
    description: BMC user (LAN).
    type: str
  password:
    description: BMC password (LAN); from Vault or the environment, never the repository.
    type: str
  cipher_suite:
    description: RMCP+ cipher suite (ipmitool's default 17 makes some BMCs wait 10 s per call).
    type: int
    default: 3
  profile_name:
    description: Name of the proposed profile; default from the FRU board product
      (lower case, words joined by C(-)).
    type: str
  gpu_model:
    description: GPU model written into the profile (the BMC does not know it).
    type: str
    default: MI100
  gfx_target:
    description: gfx target written into the profile (the BMC does not know it).
    type: str
    default: gfx908
  gpu_max_power_w:
    description: Rated power of one GPU in W.
    type: int
    default: 300
  psu_rating_w:
    description: Rating of one PSU in W (the SDR does not say).
    type: int
    default: 2200
  cpu_fans:
    description: How many tachometers (the last ones in SDR order) the CPU zone gets.
    type: int
    default: 2
  fan_commands:
    description: The OEM fan commands (C(set_duty) with C({fan_id}) and C({duty}), optional
      C(auto), C(manual)). Default - the BMC vendor's known commands; required for a vendor
      that has none.
    type: dict
  fan_zones:
    description: Fan zones to use instead of the proposal (C(name), C(fan_id), C(gpus),
      C(tach_sensors)); every tachometer named must be in the SDR.
    type: list
    elements: dict
notes:
  - Needs C(ipmitool) where the module runs.
"""

EXAMPLES = r"""
- name: Propose a profile from the BMC of gpu01
  junkyard.cluster.bmc_discover:
    host: 10.40.0.11
    username: admin
    password: "{{ lookup('ansible.builtin.env', 'JUNKYARD_BMC_PASSWORD') }}"
  delegate_to: localhost
  register: gpu01_bmc

- name: Read the BMC of the node itself, in-band
  junkyard.cluster.bmc_discover:
    profile_name: g292-z20
"""

RETURN = r"""
profile_name:
  description: Name of the proposed profile.
  returned: success
  type: str
  sample: h12dsg-o-cpu
profile:
  description: The proposed profile, in the inventory's shape.
  returned: success
  type: dict
profile_yaml:
  description: The proposal as YAML under C(cluster_hardware_profiles), to paste into the
    inventory's group_vars.
  returned: success
  type: str
notes:
  description: What the operator must check before using the profile.
  returned: success
  type: list
  elements: str
manufacturer_id:
  description: The BMC's IANA manufacturer number (C(ipmitool mc info)).
  returned: success
  type: int
  sample: 15370
board:
  description: The FRU's board C(manufacturer), C(product), C(serial), C(part_number).
  returned: success
  type: dict
sensors:
  description: Every sensor of the SDR - C(name), C(number), C(type), C(type_code),
    C(discrete), C(reading), C(unit), C(entity).
  returned: success
  type: list
  elements: dict
"""

import json

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.junkyard.cluster.plugins.module_utils.bmc_discover import (
    DiscoverError,
    parse_fru,
    parse_mc_info,
    parse_sdr_verbose,
    propose,
    slug,
)


def _yaml(name, profile):
    """YAML of the proposal (JSON is YAML: flow style, exact, no PyYAML needed here)."""
    lines = ["cluster_hardware_profiles:", "  " + json.dumps(name) + ":"]
    for key, value in profile.items():
        if isinstance(value, list):
            lines.append("    " + key + ":")
            lines.extend("      - " + json.dumps(item) for item in value)
        else:
            lines.append("    " + key + ": " + json.dumps(value))
    return "\n".join(lines) + "\n"


def main():
    module = AnsibleModule(
        argument_spec={
            "host": {"type": "str"},
            "port": {"type": "int", "default": 623},
            "username": {"type": "str"},
            "password": {"type": "str", "no_log": True},
            "cipher_suite": {"type": "int", "default": 3},
            "profile_name": {"type": "str"},
            "gpu_model": {"type": "str", "default": "MI100"},
            "gfx_target": {"type": "str", "default": "gfx908"},
            "gpu_max_power_w": {"type": "int", "default": 300},
            "psu_rating_w": {"type": "int", "default": 2200},
            "cpu_fans": {"type": "int", "default": 2},
            "fan_commands": {"type": "dict"},
            "fan_zones": {"type": "list", "elements": "dict"},
        },
        required_together=[["host", "username", "password"]],
        supports_check_mode=True,
    )
    p = module.params
    ipmitool = module.get_bin_path("ipmitool", required=True)
    env = {}
    if p["host"]:
        base = [ipmitool, "-I", "lanplus", "-C", str(p["cipher_suite"]), "-H", p["host"],
                "-p", str(p["port"]), "-U", p["username"], "-E"]
        env["IPMI_PASSWORD"] = p["password"]
    else:
        base = [ipmitool, "-I", "open"]

    where = p["host"] or "in-band BMC"

    def run(*args):
        rc, out, err = module.run_command([*base, *args], environ_update=env)
        if rc != 0:
            module.fail_json(msg=f"{where}: ipmitool {' '.join(args)} failed (rc {rc}): "
                                 f"{(err or out).strip()}")
        return out

    manufacturer = parse_mc_info(run("mc", "info"))
    rc, fru_text, _err = module.run_command([*base, "fru", "print", "0"], environ_update=env)
    board = parse_fru(fru_text if rc == 0 else "")
    sensors = parse_sdr_verbose(run("sdr", "list", "-v", "all"))
    if not sensors:
        module.fail_json(msg=f"{where}: the BMC's SDR lists no sensors")
    options = {k: p[k] for k in ("gpu_model", "gfx_target", "gpu_max_power_w", "psu_rating_w",
                                 "cpu_fans", "fan_commands", "fan_zones") if p[k] is not None}
    try:
        profile, notes = propose(sensors, board, manufacturer, options)
    except DiscoverError as err:
        module.fail_json(msg=f"{where}: {err}", sensors=sensors)
    name = p["profile_name"] or slug(board.get("product"))
    module.exit_json(changed=False, profile_name=name, profile=profile,
                     profile_yaml=_yaml(name, profile), notes=notes,
                     manufacturer_id=manufacturer, board=board, sensors=sensors)


if __name__ == "__main__":
    main()
