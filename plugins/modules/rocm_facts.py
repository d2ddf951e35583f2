#!/usr/bin/python
# Copyright (c) 2026, junkyard.cluster developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
module: rocm_facts
short_description: Report a node's AMD GPUs as ROCm sees them and compare them with its profile
version_added: 0.1.0
description:
  - Runs C(rocminfo), C(amd-smi static --asic --json) (or, without amd-smi,
    C(rocm-smi --showid --showproductname --json)) and C(modinfo -F filename amdgpu), reads
    C(/sys/module/amdgpu/version) (present only for DKMS builds of amdgpu), and returns what
    they report.
  - With O(expected_gpu_count), lists in RV(problems) every way the node differs from its
    hardware profile (GPU count and gfx target from each tool, amdgpu not from the running
    kernel's own tree, a DKMS build loaded). The module does not fail on problems; the caller
    decides (the rocm role's verify entry point fails on any).
  - A machine without AMD GPUs is reported as such (no agents, KFD not loaded); nothing is
    pretended.
attributes:
  check_mode:
    support: full
    description: Only reads; runs the same read-only commands in check mode.
  diff_mode:
    support: none
    description: Nothing on the node changes, so there is nothing to diff.
author:
  - junkyard.cluster developers (!UNKNOWN)
options:
  expected_gpu_count:
    description: GPUs the hardware profile says the node has. Omit to only report.
    type: int
  expected_gfx_target:
    description: gfx target of those GPUs, for example V(gfx908).
    type: str
  hip_check:
    description:
      - Path of the compiled HIP check program (the rocm role's C(files/hip_check.cpp)); it is
        run once and must report every expected GPU as C(ok) with the expected gfx target.
    type: path
  sys_module_dir:
    description: Where the kernel lists loaded modules (for containers and tests).
    type: path
    default: /sys/module
notes:
  - C(rocminfo) exits non-zero on a machine without /dev/kfd; that is reported, not an error.
"""

EXAMPLES = r"""
- name: Compare the GPUs with the hardware profile
  junkyard.cluster.rocm_facts:
    expected_gpu_count: 8
    expected_gfx_target: gfx908
  register: rocm_gpus

- name: Fail on any difference
  ansible.builtin.assert:
    that: rocm_gpus.problems | length == 0
    fail_msg: "{{ rocm_gpus.problems }}"
"""

RETURN = r"""
rocminfo:
  description: Parsed rocminfo (C(kfd_loaded), C(agents), C(gpus) with C(gfx_target)), or null
    when rocminfo is missing.
  returned: always
  type: dict
smi:
  description: C(tool) (amd-smi or rocm-smi) and C(gpus) it lists, or null when neither exists.
  returned: always
  type: dict
driver:
  description: C(filename) of amdgpu for the running kernel, C(in_tree), C(dkms),
    C(dkms_version) (content of /sys/module/amdgpu/version), C(loaded), C(kernel_release).
  returned: always
  type: dict
gpu_count:
  description: GPU agents rocminfo reports.
  returned: always
  type: int
hip_check:
  description: Parsed HIP check output (C(device_count), C(devices)) and its C(rc), when
    O(hip_check) is given.
  returned: when O(hip_check) is given
  type: dict
problems:
  description: Differences from the profile, one sentence each; empty when it matches or when
    O(expected_gpu_count) is not given.
  returned: always
  type: list
  elements: str
"""


import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.junkyard.cluster.plugins.module_utils.rocm import (
    check_gpus,
    check_hip,
    parse_amd_smi_static,
    parse_hip_check,
    parse_modinfo_filename,
    parse_rocm_smi_json,
    parse_rocminfo,
)


def kernel_release():
    return os.uname().release


def _read(path):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return None


def collect(module):
    facts = {"rocminfo": None, "smi": None}
    errors = {}
    rocminfo = module.get_bin_path("rocminfo", opt_dirs=["/opt/rocm/bin"])
    if rocminfo:
        rc, out, err = module.run_command([rocminfo])
        facts["rocminfo"] = parse_rocminfo(out + "\n" + err)
        facts["rocminfo"]["rc"] = rc
        if rc != 0:
            errors["rocminfo"] = (err or out).strip()[-500:]
    amd_smi = module.get_bin_path("amd-smi", opt_dirs=["/opt/rocm/bin"])
    rocm_smi = None if amd_smi else module.get_bin_path("rocm-smi", opt_dirs=["/opt/rocm/bin"])
    try:
        if amd_smi:
            rc, out, err = module.run_command([amd_smi, "static", "--asic", "--json"])
            gpus = parse_amd_smi_static(out) if rc == 0 else []
            facts["smi"] = {"tool": "amd-smi", "rc": rc, "gpus": gpus}
        elif rocm_smi:
            rc, out, err = module.run_command([rocm_smi, "--showid", "--showproductname",
                                               "--json"])
            gpus = parse_rocm_smi_json(out) if rc == 0 and out.strip() else []
            facts["smi"] = {"tool": "rocm-smi", "rc": rc, "gpus": gpus}
        if facts["smi"] and facts["smi"]["rc"] != 0:
            errors[facts["smi"]["tool"]] = (err or out).strip()[-500:]
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    release = kernel_release()
    driver = {"kernel_release": release, "filename": "", "in_tree": False, "dkms": False}
    modinfo = module.get_bin_path("modinfo", opt_dirs=["/sbin", "/usr/sbin"])
    if modinfo:
        rc, out, err = module.run_command([modinfo, "-k", release, "-F", "filename", "amdgpu"])
        if rc == 0:
            driver.update(parse_modinfo_filename(out, release))
        else:
            errors["modinfo"] = (err or out).strip()[-300:]
    sysmod = module.params["sys_module_dir"]
    driver["loaded"] = os.path.isdir(os.path.join(sysmod, "amdgpu"))
    driver["dkms_version"] = _read(os.path.join(sysmod, "amdgpu", "version"))
    facts["driver"] = driver
    return facts, errors


def main():
    module = AnsibleModule(
        argument_spec={
            "expected_gpu_count": {"type": "int"},
            "expected_gfx_target": {"type": "str"},
            "hip_check": {"type": "path"},
            "sys_module_dir": {"type": "path", "default": "/sys/module"},
        },
        supports_check_mode=True,
    )
    facts, errors = collect(module)
    count = module.params["expected_gpu_count"]
    problems = []
    if count is not None:
        problems = check_gpus(facts, count, module.params["expected_gfx_target"] or "")
    if module.params["hip_check"]:
        rc, out, err = module.run_command([module.params["hip_check"]])
        facts["hip_check"] = dict(parse_hip_check(out), rc=rc, stderr=err.strip()[-500:])
        if count is not None:
            problems += check_hip(facts["hip_check"], count,
                                  module.params["expected_gfx_target"] or "")
    gpu_count = len(facts["rocminfo"]["gpus"]) if facts["rocminfo"] else 0
    module.exit_json(changed=False, gpu_count=gpu_count, problems=problems,
                     command_errors=errors, **facts)


if __name__ == "__main__":
    main()
