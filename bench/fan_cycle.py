"""Control-cycle time (p50/p95) and CPU per cycle against ipmi_sim, per access method.

Runs the daemon's own cycle (read every sensor, decide, write every fan zone:
the worst case, as if every duty changed) against a simulated G292-Z20 BMC on 127.0.0.1, for each
access method the daemon supports, side by side with the naive method (one
``ipmitool raw`` process per sensor) for reference. CPU is this process plus its children
(the IPMI tools), per cycle.

Run: python bench/fan_cycle.py [--cycles N]   (needs openipmi, freeipmi-tools, ipmitool, gcc)
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "daemon" / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from junkyard_fan.config import parse_config
from junkyard_fan.daemon import Daemon
from junkyard_fan.ipmi import Bmc
from junkyard_fan.powerguard import PowerGuard

from bmc_sim.simctl import BmcSim

PROFILE = {
    "gpu": {"count": 8, "max_power_w": 300},
    "bmc": {"gpu_current_sensors": [f"GPU{i}_12V_I" for i in range(8)],
            "gpu_temp_sensors": [f"GPU{i}_TEMP" for i in range(8)],
            "cpu_temp_sensors": ["CPU0_TEMP"],
            "psu_status_sensors": ["PSU1_STATUS", "PSU2_STATUS"]},
    "psu": {"count": 2, "rating_w": 2200},
    "fan_zones": [{"name": "gpu-front", "fan_id": 1, "gpus": [0, 1, 2, 3]},
                  {"name": "gpu-rear", "fan_id": 2, "gpus": [4, 5, 6, 7]},
                  {"name": "cpu", "fan_id": 0, "gpus": []}],
    "fan_commands": {"set_duty": "0x2e 0x10 0x0a 0x3c 0x00 {fan_id} 0x01 {duty}"},
}


def cpu_now() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def bench_daemon(sim: BmcSim, tool: str, cycles: int, work: Path) -> tuple[list[float], float]:
    raw = {
        "profile": PROFILE,
        "bmc": {"access": "lan", "tool": tool, "host": sim.host, "port": sim.port,
                "username": sim.options.user, "password_file": str(sim.password_file),
                "workarounds": ["opensesspriv"], "cache_dir": str(work / tool)},
        # Rewrite every zone every cycle: the worst case, one read and one write session.
        "timings": {"rewrite_every": 1e-6},
        "power_guard": {"command": ["true", "{watts}"], "reset_command": ["true"]},
    }
    cfg = parse_config(raw, env={})
    daemon = Daemon(cfg, Bmc(cfg.bmc, cfg.timings), guard=PowerGuard(cfg))
    daemon.setup()
    daemon.cycle()  # warm: SDR cache, first write
    times: list[float] = []
    cpu0 = cpu_now()
    writes0 = daemon.bmc.tries["write"]
    for _round in range(cycles):
        t0 = time.perf_counter()
        daemon.cycle()
        times.append(time.perf_counter() - t0)
    cpu = (cpu_now() - cpu0) / cycles
    assert daemon.bmc.tries["write"] - writes0 == cycles, "every cycle must write"
    return times, cpu


def bench_naive(sim: BmcSim, cycles: int) -> tuple[list[float], float]:
    """One ipmitool process per sensor and per fan command (what scripts often do)."""
    base = ["ipmitool", *sim.ipmitool_args()]
    sensors = [*range(0x01, 0x09), *range(0x11, 0x19), 0x21, 0x41, 0x42]
    times: list[float] = []
    cpu0 = cpu_now()
    for _round in range(cycles):
        t0 = time.perf_counter()
        for n in sensors:
            subprocess.run([*base, "raw", "0x04", "0x2d", hex(n)], capture_output=True,
                           check=True)
        for fan in (1, 2, 0):
            subprocess.run([*base, "raw", "0x2e", "0x10", "0x0a", "0x3c", "0x00", str(fan),
                            "0x01", "0x30"], capture_output=True, check=True)
        times.append(time.perf_counter() - t0)
    return times, (cpu_now() - cpu0) / cycles


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cycles", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, BmcSim(Path(tmp) / "bmc") as sim:
        rows = []
        for tool in ("freeipmi", "ipmitool"):
            times, cpu = bench_daemon(sim, tool, args.cycles, Path(tmp))
            rows.append((f"daemon, {tool}", len(times), times, cpu))
        naive_cycles = max(3, args.cycles // 10)
        times, cpu = bench_naive(sim, naive_cycles)
        rows.append(("naive: ipmitool raw per sensor", naive_cycles, times, cpu))
        print("one control cycle against ipmi_sim on 127.0.0.1: 19 sensors read "
              "(one session), 3 fan zones written (one session)")
        print(f"{'access method':<32}{'cycles':>7}{'p50 ms':>9}{'p95 ms':>9}{'mean ms':>9}"
              f"{'CPU ms/cycle':>14}")
        for name, n, times, cpu in rows:
            print(f"{name:<32}{n:>7}{pct(times, 0.5) * 1e3:>9.1f}{pct(times, 0.95) * 1e3:>9.1f}"
                  f"{statistics.mean(times) * 1e3:>9.1f}{cpu * 1e3:>14.1f}")
        # The simulator's own CPU is not included: it stands in for the BMC.


if __name__ == "__main__":
    main()
