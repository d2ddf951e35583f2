#!/usr/bin/python
# Copyright (c) 2026, junkyard.cluster developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
module: amdgpu_firmware
short_description: Check that an image carries the firmware amdgpu needs for its GPUs
version_added: 0.1.0
description:
  - For every kernel under C(/lib/modules) that has the C(amdgpu) module, reads the firmware
    files the driver declares (C(modinfo -k <kernel> -F firmware amdgpu)) and keeps those of
    each O(gfx_targets) entry (the files of one ASIC share its code name, C(gfx908) is
    C(arcturus)), except the SR-IOV capability firmware (C(*_cap.bin)), which a bare-metal
    node never loads.  Each must be under O(firmware_dir), plain or compressed as the kernel's
    loader accepts (C(.xz), C(.zst)).
  - Where that kernel's initramfs (C(/boot/initrd.img-<kernel>)) carries amdgpu, the files
    must be in the initramfs too (C(lsinitramfs)), since the driver loads there, before the
    root file system with C(/lib/firmware) is mounted.
  - Fails naming the kernel, the gfx target and every missing file.  A kernel without amdgpu
    is reported in RV(kernels_without_amdgpu), not refused (the rocm role's verify refuses a
    node that boots one).
options:
  gfx_targets:
    description: The gfx targets of the GPUs of the nodes that boot the image; empty checks nothing.
    type: list
    elements: str
    required: true
  firmware_dir:
    description: Where the firmware files live.
    type: path
    default: /lib/firmware
  modules_dir:
    description: Where the kernels' module trees live (one directory per kernel).
    type: path
    default: /lib/modules
  boot_dir:
    description: Where the kernels' initramfs images live (C(initrd.img-<kernel>)).
    type: path
    default: /boot
  modinfo_root:
    description: >-
      The root C(modinfo -b) resolves O(modules_dir) under (tests; an image is checked from
      inside).
    type: path
    default: /
attributes:
  check_mode:
    support: full
    description: Runs modinfo and lsinitramfs and lists the firmware directory, in check mode too.
  diff_mode:
    support: none
    description: The image is only read; no file is written that a diff could show.
author:
  - junkyard.cluster developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Check the GPU firmware of the image
  junkyard.cluster.amdgpu_firmware:
    gfx_targets: [gfx908]
"""

RETURN = r"""
checked:
  description: Kernel -> gfx target -> the firmware files amdgpu declares for it.
  returned: always
  type: dict
  sample: {"6.1.0-28-amd64": {"gfx908": ["amdgpu/arcturus_asd.bin", "amdgpu/arcturus_sos.bin"]}}
kernels_without_amdgpu:
  description: Kernels that have no amdgpu module (their GPUs cannot work).
  returned: always
  type: list
  elements: str
initramfs_with_amdgpu:
  description: Kernels whose initramfs carries amdgpu (checked for the firmware too).
  returned: always
  type: list
  elements: str
missing:
  description: >-
    Kernel -> the files missing (C(<file>) from the image, C(initramfs:<file>) from its
    initramfs).
  returned: always
  type: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.junkyard.cluster.plugins.module_utils.amdgpu_firmware import (
    FirmwareError,
    initramfs_firmware,
    missing,
    required,
)


def _present(firmware_dir):
    out = set()
    for dirpath, _dirs, files in os.walk(firmware_dir):
        rel = os.path.relpath(dirpath, firmware_dir)
        for name in files:
            out.add(name if rel == "." else f"{rel}/{name}")
    return out


def main():
    module = AnsibleModule(
        argument_spec={
            "gfx_targets": {"type": "list", "elements": "str", "required": True},
            "firmware_dir": {"type": "path", "default": "/lib/firmware"},
            "modules_dir": {"type": "path", "default": "/lib/modules"},
            "boot_dir": {"type": "path", "default": "/boot"},
            "modinfo_root": {"type": "path", "default": "/"},
        },
        supports_check_mode=True,
    )
    p = module.params
    result = {"changed": False, "checked": {}, "kernels_without_amdgpu": [],
              "initramfs_with_amdgpu": [], "missing": {}}
    targets = [t for t in p["gfx_targets"] if t]
    if not targets:
        module.exit_json(**result)
    modinfo = module.get_bin_path("modinfo", required=True)
    kernels = sorted(k for k in os.listdir(p["modules_dir"])
                     if os.path.isdir(os.path.join(p["modules_dir"], k))) \
        if os.path.isdir(p["modules_dir"]) else []
    if not kernels:
        module.fail_json(msg=f"no kernel under {p['modules_dir']}: nothing to check the GPU "
                             "firmware against", **result)
    present = _present(p["firmware_dir"]) if os.path.isdir(p["firmware_dir"]) else set()
    problems = []
    for kernel in kernels:
        argv = [modinfo, "-b", p["modinfo_root"], "-k", kernel, "-F", "firmware", "amdgpu"]
        rc, out, _err = module.run_command(argv)
        if rc != 0:
            result["kernels_without_amdgpu"].append(kernel)
            continue
        try:
            needed = required(out.split(), targets)
        except FirmwareError as exc:
            module.fail_json(msg=f"kernel {kernel}: {exc}", **result)
        result["checked"][kernel] = needed
        lost = missing(needed, present)
        initrd = os.path.join(p["boot_dir"], f"initrd.img-{kernel}")
        if os.path.exists(initrd):
            lsinitramfs = module.get_bin_path("lsinitramfs", required=True)
            rc, listing, err = module.run_command([lsinitramfs, initrd])
            if rc != 0:
                module.fail_json(msg=f"kernel {kernel}: lsinitramfs {initrd} failed: {err}",
                                 **result)
            has_driver, inside = initramfs_firmware(listing)
            if has_driver:
                result["initramfs_with_amdgpu"].append(kernel)
                lost += [f"initramfs:{f}" for f in missing(needed, inside)]
        if lost:
            result["missing"][kernel] = lost
            where = {t: [f for f in lost if f.split(":")[-1] in files]
                     for t, files in needed.items()}
            problems += [f"kernel {kernel}, gfx_target {t}: amdgpu needs "
                         + ", ".join(fs) + f" (missing from {p['firmware_dir']}"
                         + (" or the initramfs" if any(":" in f for f in fs) else "") + ")"
                         for t, fs in where.items() if fs]
    if problems:
        module.fail_json(msg="; ".join(problems) + ": install the GPU firmware "
                             "(firmware-amd-graphics, non-free-firmware) in the image", **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
