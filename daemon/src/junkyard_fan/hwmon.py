"""In-band GPU sensors: the amdgpu driver's hwmon files in sysfs.

What is relied on (the kernel's Documentation/gpu/amdgpu/thermal.rst, "HWMON
Interfaces", and the sysfs layout of a PCI DRM device):

* ``<sysfs>/class/drm/cardN`` is a symlink to the DRM device; ``cardN/device``
  a symlink to its PCI device, whose directory name is the PCI address
  (``0000:03:00.0``); ``device/driver`` points at the bound driver (``amdgpu``).
  Connector entries (``card0-DP-1``) and render nodes (``renderD128``) are not
  cards. A G292's ASPEED VGA is a DRM card too (driver ``ast``, no hwmon).
* ``device/hwmon/hwmonM/name`` is ``amdgpu``.
* ``temp1_input``, ``temp2_input``, ``temp3_input``: millidegrees Celsius, with
  ``temp1_label`` ``edge``, ``temp2_label`` ``junction``, ``temp3_label``
  ``mem`` (channels 2 and 3 on SOC15 dGPUs only, which the MI100 is). Channels
  are picked by their label, never by their number.
* ``power1_average``: average power of the SoC in microwatts (newer kernels
  add ``power1_input``, the instantaneous power, on some ASICs; it is used only
  when ``power1_average`` is absent).

A read that fails (the GPU is in reset or gone: ENODEV, EIO) or that is not a
number is no reading: the daemon's zones hold, then go to 100 %.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from .config import normalise_pci

_CARD = re.compile(r"^card\d+$")


@dataclass(frozen=True)
class AmdGpu:
    """One amdgpu device and its hwmon files."""

    pci: str  # 0000:03:00.0
    card: str  # card1
    hwmon: Path
    temps: dict[str, Path] = field(default_factory=dict)  # label -> temp*_input
    power: Path | None = None  # power1_average (or power1_input)


def _text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def discover(sysfs_root: Path) -> list[AmdGpu]:
    """Every amdgpu device with a hwmon directory, in PCI address order."""
    drm = sysfs_root / "class" / "drm"
    try:
        entries = sorted(os.listdir(drm))
    except OSError:
        return []
    found: dict[str, AmdGpu] = {}
    for card in entries:
        if not _CARD.match(card):
            continue
        device = drm / card / "device"
        try:
            pci = normalise_pci(os.path.basename(os.path.realpath(device)))
        except OSError:
            continue
        if pci is None or pci in found:
            continue
        driver = device / "driver"
        if driver.exists() and os.path.basename(os.path.realpath(driver)) != "amdgpu":
            continue
        hwmon = _amdgpu_hwmon(device / "hwmon")
        if hwmon is None:
            continue
        temps: dict[str, Path] = {}
        for n in (1, 2, 3, 4, 5):
            label = _text(hwmon / f"temp{n}_label")
            if label and (hwmon / f"temp{n}_input").exists():
                temps.setdefault(label, hwmon / f"temp{n}_input")
        power = next((hwmon / f for f in ("power1_average", "power1_input")
                      if (hwmon / f).exists()), None)
        found[pci] = AmdGpu(pci=pci, card=card, hwmon=hwmon, temps=temps, power=power)
    return [found[k] for k in sorted(found)]


def _amdgpu_hwmon(directory: Path) -> Path | None:
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return None
    for name in names:
        if name.startswith("hwmon") and _text(directory / name / "name") == "amdgpu":
            return directory / name
    return None


def assign(gpus: list[AmdGpu], count: int, pci_addresses: tuple[str, ...]
           ) -> tuple[dict[int, AmdGpu], list[str]]:
    """Map the profile's GPU numbers to amdgpu devices.

    With ``pci_addresses`` (the profile's GPU order), GPU i is the device at
    address i; a missing one is reported and left out. Without, GPU i is the
    i-th device in PCI address order, and only if exactly ``count`` are found
    (one missing would shift every later GPU onto its neighbour's sensors).
    Returns the mapping and the problems found.
    """
    by_pci = {g.pci: g for g in gpus}
    problems: list[str] = []
    if pci_addresses:
        out = {}
        for i, addr in enumerate(pci_addresses):
            if addr in by_pci:
                out[i] = by_pci[addr]
            else:
                problems.append(f"GPU {i} ({addr}): no amdgpu device with hwmon at this "
                                "address")
        extra = sorted(set(by_pci) - set(pci_addresses))
        if extra:
            problems.append(f"amdgpu devices not in profile.gpu.pci_addresses: "
                            f"{', '.join(extra)}")
        return out, problems
    if len(gpus) != count:
        found = ", ".join(g.pci for g in gpus) or "none"
        problems.append(f"found {len(gpus)} amdgpu devices with hwmon ({found}) but "
                        f"profile.gpu.count is {count}: without profile.gpu.pci_addresses "
                        "the GPU order is not known, so no GPU uses them")
        return {}, problems
    return dict(enumerate(gpus)), problems


def _read_scaled(path: Path, per_unit: int) -> float | None:
    """An integer sysfs file divided by ``per_unit``; None when absent or not a number."""
    text = _text(path)
    try:
        return int(text) / per_unit if text is not None else None
    except ValueError:
        return None


def read_temp_c(path: Path) -> float | None:
    """A temp*_input file in degrees Celsius (it holds millidegrees)."""
    return _read_scaled(path, 1000)


def read_power_w(path: Path) -> float | None:
    """A power1_* file in watts (it holds microwatts)."""
    return _read_scaled(path, 1_000_000)
