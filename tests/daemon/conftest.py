"""Fixtures of the fan daemon's tests: a simulated BMC, daemons run as processes."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from bmc_helpers import DaemonProc

from bmc_sim.simctl import BmcSim


@pytest.fixture
def sim(tmp_path):
    bmc = BmcSim(tmp_path / "bmc")
    bmc.start()
    bmc.set_faults(log_all=True)  # log every request: lets tests count cycles
    yield bmc
    bmc.stop()


@pytest.fixture
def run_daemon():
    procs: list[DaemonProc] = []

    def start(config: Path, *args: str) -> DaemonProc:
        p = DaemonProc(config, *args)
        procs.append(p)
        return p

    yield start
    for p in procs:
        if p.proc.poll() is None:
            p.stop(signal.SIGKILL)
        else:
            p.out.close()
