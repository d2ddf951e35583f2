# Copyright (c) 2026, junkyard.cluster developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which firmware files the in-tree amdgpu driver needs for a gfx target, and which
of them an image (or an initramfs) lacks.

The driver declares every file it may request (``MODULE_FIRMWARE``, listed by
``modinfo -F firmware amdgpu``); the files of one ASIC share its code name as a
prefix (``amdgpu/arcturus_sos.bin``).  Pure functions: the module
``amdgpu_firmware`` runs modinfo and lsinitramfs and hands their output here.
"""

from __future__ import annotations

# gfx target -> the ASIC code name the driver's firmware files start with (the
# data-centre and workstation parts of the ASICs that predate IP discovery).
CODE_NAMES = {
    "gfx900": "vega10",
    "gfx904": "raven",
    "gfx906": "vega20",
    "gfx908": "arcturus",
    "gfx90a": "aldebaran",
    "gfx1010": "navi10",
    "gfx1011": "navi12",
    "gfx1012": "navi14",
    "gfx1030": "sienna_cichlid",
    "gfx1031": "navy_flounder",
    "gfx1032": "dimgrey_cavefish",
}

# Where a file may live and the suffixes the kernel's firmware loader tries.
SUFFIXES = ("", ".xz", ".zst")

# Declared files the driver requests only in a mode a bare-metal node never runs
# in: ``<asic>_cap.bin`` is the SR-IOV capability firmware of a virtual function.
# (Debian 12's firmware-amd-graphics 20230210-5 carries every file the 6.1
# kernel's amdgpu declares for arcturus and vega20; of aldebaran's it lacks
# only aldebaran_cap.bin.)
OPTIONAL_ENDINGS = ("_cap.bin",)


class FirmwareError(Exception):
    """A gfx target this table does not know, or a driver that declares nothing for it."""


def code_name(gfx_target: str) -> str:
    try:
        return CODE_NAMES[gfx_target]
    except KeyError:
        raise FirmwareError(
            f"gfx_target {gfx_target}: no firmware table for it (known: "
            f"{', '.join(sorted(CODE_NAMES))}); the image check cannot tell which files "
            "amdgpu needs") from None


def required(declared: list[str], gfx_targets: list[str]) -> dict[str, list[str]]:
    """gfx target -> the files amdgpu declares for it (relative to /lib/firmware)."""
    out = {}
    for target in sorted(set(gfx_targets)):
        prefix = f"amdgpu/{code_name(target)}_"
        files = sorted(f for f in declared
                       if f.startswith(prefix) and not f.endswith(OPTIONAL_ENDINGS))
        if not files:
            raise FirmwareError(f"gfx_target {target}: amdgpu declares no firmware file "
                                f"starting with {prefix} (modinfo -F firmware amdgpu)")
        out[target] = files
    return out


def missing(needed: dict[str, list[str]], present) -> list[str]:
    """The needed files that are in ``present`` (paths relative to the firmware
    directory) under none of the loader's suffixes, in order."""
    have = set(present)
    return [f for target in sorted(needed) for f in needed[target]
            if not any(f + s in have for s in SUFFIXES)]


def initramfs_firmware(listing: str) -> tuple[bool, set[str]]:
    """(amdgpu.ko is in it, firmware files in it relative to the firmware
    directory) from ``lsinitramfs`` output."""
    has_driver, files = False, set()
    for line in listing.splitlines():
        path = line.strip().lstrip("./")
        name = path.rsplit("/", 1)[-1]
        if name.startswith("amdgpu.ko"):
            has_driver = True
        for root in ("usr/lib/firmware/", "lib/firmware/"):
            if path.startswith(root):
                files.add(path[len(root):])
    return has_driver, files
