"""Prometheus textfile metrics (node_exporter's textfile collector)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

PREFIX = "junkyard_fan_"

HELP = {
    "sensor_reading": ("gauge", "Last valid sensor reading, in the sensor's unit"),
    "gpu_power_watts": ("gauge", "GPU power from the 12 V current, calibrated"),
    "gpu_power_mismatch": ("gauge", "1 if the BMC's GPU power disagrees with amdgpu's"),
    "hwmon_gpus": ("gauge", "GPUs whose amdgpu hwmon files the daemon reads"),
    "hwmon_problems": ("gauge", "Problems found matching amdgpu devices to the profile"),
    "zone_duty_percent": ("gauge", "Duty the daemon last decided for the zone"),
    "zone_state": ("gauge", "1 for the zone's current state (ok/hold/failsafe/override/"
                            "bmc_lost/bmc_control)"),
    "probe_failed": ("gauge", "1 if junkyard-fan --probe found the fan command does not "
                              "move the fans: the daemon leaves them to the BMC"),
    "zone_input_age_seconds": ("gauge", "Seconds since the zone last had valid input"),
    "bmc_reachable": ("gauge", "1 if the BMC answered in the last cycle"),
    "bmc_info": ("gauge", "always 1: how the daemon reaches its BMC (access, tool)"),
    "bmc_errors_total": ("counter", "BMC call failures by operation and kind"),
    "bmc_tries_total": ("counter", "BMC calls (tries, including retries) by operation"),
    "psu_failed": ("gauge", "1 if the PSU reports failure or AC loss"),
    "power_cap_active": ("gauge", "1 while the GPU power cap is applied"),
    "power_cap_watts": ("gauge", "Per-GPU power cap applied (0 when none)"),
    "power_cap_errors_total": ("counter", "Failed power cap or lift commands"),
    "cycles_total": ("counter", "Control cycles run"),
    "cycle_seconds": ("gauge", "Duration of the last control cycle"),
}


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    esc = {k: str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
           for k, v in labels.items()}
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(esc.items())) + "}"


def render(samples: Iterable[tuple[str, dict[str, str], float]]) -> str:
    by_name: dict[str, list[str]] = {}
    for name, labels, value in samples:
        by_name.setdefault(name, []).append(f"{PREFIX}{name}{_labels(labels)} {value:g}")
    lines: list[str] = []
    for name, rows in by_name.items():
        kind, text = HELP.get(name, ("gauge", name))
        lines += [f"# HELP {PREFIX}{name} {text}", f"# TYPE {PREFIX}{name} {kind}", *rows]
    return "\n".join(lines) + "\n"


def write_textfile(path: Path, text: str) -> None:
    """Atomic: node_exporter never sees a half-written file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
