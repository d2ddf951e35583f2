"""Helpers for the fan daemon's tests against ipmi_sim: configuration, the daemon
as a process, reading what the simulator received."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from fan_fixtures import G292_Z20

from bmc_sim.simctl import BmcSim, OemRecord

REPO = Path(__file__).resolve().parents[2]
FRONT, REAR, CPU = 1, 2, 0


def fake_smi(tmp_path: Path, rc: int = 0) -> tuple[dict, Path, Path]:
    """A stand-in for rocm-smi: ``cap W`` sets every GPU's cap (then exits
    ``rc``), ``reset`` restores 290 W, ``show`` prints them; cap and reset are
    logged to ``powercap.log``. Returns the power_guard section, the state
    file and the log."""
    smi = tmp_path / "powercap"
    state = tmp_path / "powercap.state"
    calls = tmp_path / "powercap.log"
    smi.write_text(f"""#!/bin/sh
case "$1" in
  cap) echo "cap $2" >> {calls}; echo "$2" > {state}; exit {rc} ;;
  reset) echo reset >> {calls}; echo 290 > {state} ;;
  show) v=$(cat {state} 2>/dev/null || echo 290)
        for g in 0 1 2 3 4 5 6 7; do echo "GPU[$g] : Max Graphics Package Power (W): $v"; done ;;
esac
""")
    smi.chmod(0o755)
    guard = {"command": [str(smi), "cap", "{watts}"], "reset_command": [str(smi), "reset"],
             "read_command": [str(smi), "show"], "lift_after": 3, "non_gpu_power_w": 500}
    return guard, state, calls


def write_config(tmp_path: Path, sim: BmcSim, *, tool: str = "freeipmi",
                 calibration: float = 1.0, defaults: bool = False, **sections) -> Path:
    """A LAN configuration for the simulator. Fast timings, unless ``defaults``:
    then the daemon's own timings and retransmission timeout."""
    guard = sections.get("power_guard") or fake_smi(tmp_path)[0]
    profile = yaml.safe_load(yaml.safe_dump(G292_Z20))
    profile["bmc"]["current_calibration"] = calibration
    cfg = {
        "profile": profile,
        "bmc": {"access": "lan", "tool": tool, "host": sim.host, "port": sim.port,
                "username": sim.options.user, "password_file": str(sim.password_file),
                "workarounds": ["opensesspriv"], "cache_dir": str(tmp_path / "cache"),
                "retransmit_timeout": 0.05},
        "timings": {"interval": 1, "bmc_timeout": 4, "stale_after": 3, "deadline": 4,
                    "rewrite_every": 60, "exit_budget": 10},
        "power_guard": {**guard, "lift_after": 0},
        "metrics": {"textfile": str(tmp_path / "fan.prom")},
        "log_level": "debug",
    }
    if defaults:
        del cfg["timings"], cfg["bmc"]["retransmit_timeout"]
    cfg.update(sections)
    path = tmp_path / "fan.yml"
    path.write_text(yaml.safe_dump(cfg))
    return path


class DaemonProc:
    def __init__(self, config: Path, *args: str) -> None:
        self.log = config.with_suffix(".log")
        env = dict(os.environ, PYTHONPATH=str(REPO / "daemon" / "src"))
        self.out = open(self.log, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen([sys.executable, "-m", "junkyard_fan", "-c", str(config),
                                      *args], env=env, stdout=self.out, stderr=subprocess.STDOUT)

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout=30)
        finally:
            self.out.close()
        return rc

    def text(self) -> str:
        return self.log.read_text()


def duty(rec: OemRecord) -> tuple[int, int]:
    """(fan_id, duty byte) of a Gigabyte set_duty command."""
    assert rec.netfn == 0x2E and rec.cmd == 0x10 and rec.data[:3] == (0x0A, 0x3C, 0x00)
    return rec.data[3], rec.data[5]


def wait_for(pred, timeout: float, what: str, daemon: DaemonProc | None = None):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = pred()
        if got:
            return got
        if daemon is not None and daemon.proc.poll() is not None:
            break
        time.sleep(0.1)
    log = daemon.text()[-4000:] if daemon else ""
    pytest.fail(f"timed out waiting for {what}\n--- daemon log ---\n{log}")


def settled(sim: BmcSim, since: float = 0.0) -> dict[int, int]:
    out: dict[int, int] = {}
    for rec in sim.fan_commands(since):
        fan, d = duty(rec)
        out[fan] = d
    return out if len(out) == 3 else {}


def sensor_reads(sim: BmcSim, number: int, since: float) -> list[OemRecord]:
    return [r for r in sim.oem_log(since) if r.kind == "req" and r.netfn == 0x04
            and r.cmd == 0x2D and r.data == (number,) and r.result == "ok"]
