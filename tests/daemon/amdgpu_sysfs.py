"""A sysfs tree laid out as the kernel lays it out for amdgpu GPUs, for tests.

Per GPU (see daemon/src/junkyard_fan/hwmon.py and docs/fan.md for the files
relied on, from the kernel's Documentation/gpu/amdgpu/thermal.rst)::

    devices/pci0000:00/0000:00:01.1/<pci>/            the PCI device
        driver -> ../../../../bus/pci/drivers/amdgpu
        drm/cardN/                                     the DRM card
        hwmon/hwmonM/{name, temp1_input, temp1_label, ..., power1_average, power1_cap}
    class/drm/cardN -> ../../devices/.../<pci>/drm/cardN
    class/drm/cardN/device -> ../../../<pci>        (inside the card directory)
    class/drm/renderD128 ..., class/drm/card1-DP-1  (not cards: ignored)
    class/hwmon/hwmonM -> ../../devices/.../<pci>/hwmon/hwmonM

plus a G292's ASPEED VGA as card0 (driver ast, no hwmon) and the CPU's k10temp
hwmon, which must not be taken for GPUs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# The MI100s of a G292-Z20 sit behind PCIe switches: addresses like these.
PCI = ["0000:03:00.0", "0000:07:00.0", "0000:23:00.0", "0000:27:00.0",
       "0000:43:00.0", "0000:47:00.0", "0000:63:00.0", "0000:67:00.0"]


@dataclass
class Gpu:
    pci: str
    card: str
    hwmon: Path  # the hwmonM directory

    def set_temp(self, label: str, celsius: float) -> None:
        n = {"edge": 1, "junction": 2, "mem": 3}[label]
        _write(self.hwmon / f"temp{n}_input", f"{round(celsius * 1000)}\n")

    def set_power(self, watts: float) -> None:
        _write(self.hwmon / "power1_average", f"{round(watts * 1_000_000)}\n")

    def remove(self, name: str) -> None:
        (self.hwmon / name).unlink()


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _link(link: Path, target: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(target, link.parent))


def build(root: Path, pci: list[str] | None = None, *, aspeed: bool = True,
          edge: float = 40.0, junction: float = 45.0, mem: float = 42.0,
          power: float = 35.0) -> list[Gpu]:
    """Build the tree under ``root``; returns the GPUs in card order."""
    pci = PCI if pci is None else pci
    drivers = root / "bus" / "pci" / "drivers"
    for drv in ("amdgpu", "ast", "k10temp"):
        (drivers / drv).mkdir(parents=True, exist_ok=True)
    bridge = root / "devices" / "pci0000:00" / "0000:00:01.1"
    hwmon_no = 0
    card_no = 0
    if aspeed:  # the BMC's VGA: a DRM card without hwmon
        dev = root / "devices" / "pci0000:00" / "0000:00:08.1" / "0000:c3:00.0"
        (dev / "drm" / "card0").mkdir(parents=True)
        _link(dev / "driver", drivers / "ast")
        _link(dev / "drm" / "card0" / "device", dev)
        _link(root / "class" / "drm" / "card0", dev / "drm" / "card0")
        card_no = 1
    # the CPU's temperature hwmon (k10temp) comes first, as on a real node
    cpu = root / "devices" / "pci0000:00" / "0000:00:18.3"
    (cpu / "hwmon" / "hwmon0").mkdir(parents=True)
    _write(cpu / "hwmon" / "hwmon0" / "name", "k10temp\n")
    _write(cpu / "hwmon" / "hwmon0" / "temp1_input", "45000\n")
    _write(cpu / "hwmon" / "hwmon0" / "temp1_label", "Tctl\n")
    _link(cpu / "driver", drivers / "k10temp")
    _link(root / "class" / "hwmon" / "hwmon0", cpu / "hwmon" / "hwmon0")
    hwmon_no = 1
    gpus = []
    for i, addr in enumerate(pci):
        dev = bridge / addr
        card = f"card{card_no + i}"
        (dev / "drm" / card).mkdir(parents=True)
        _link(dev / "driver", drivers / "amdgpu")
        _link(dev / "drm" / card / "device", dev)
        _link(root / "class" / "drm" / card, dev / "drm" / card)
        render = f"renderD{128 + i}"
        (dev / "drm" / render).mkdir()
        _link(root / "class" / "drm" / render, dev / "drm" / render)
        hw = dev / "hwmon" / f"hwmon{hwmon_no + i}"
        hw.mkdir(parents=True)
        _link(root / "class" / "hwmon" / hw.name, hw)
        _write(hw / "name", "amdgpu\n")
        for n, (label, value) in enumerate((("edge", edge), ("junction", junction),
                                            ("mem", mem)), start=1):
            _write(hw / f"temp{n}_label", f"{label}\n")
            _write(hw / f"temp{n}_input", f"{round(value * 1000)}\n")
            _write(hw / f"temp{n}_crit", f"{(100 + 5 * (n == 2)) * 1000}\n")
        _write(hw / "power1_average", f"{round(power * 1_000_000)}\n")
        _write(hw / "power1_cap", "290000000\n")
        _write(hw / "in0_input", "800\n")
        gpus.append(Gpu(pci=addr, card=card, hwmon=hw))
    return gpus
