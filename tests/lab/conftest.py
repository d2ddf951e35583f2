"""Fixtures that give integration tests the lab (a virtual cluster of qemu VMs).

The session-scoped ``lab`` fixture runs ``lab/lab up`` once (cold: builds the
head image, ~10 min; warm: ~2 min), yields a :class:`LabHandle`, and runs
``lab/lab down`` at the end of the session.  Tests using it are marked
``@pytest.mark.lab``.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from labtools import LabHandle, lab_cli, lab_prerequisites, run_site

# The lab tests share one lab, so their order matters: the lab's own tests
# (a scratch pool over the virtual disks) before site.yml puts the real pool on
# them, the diskless boot before the storage and health checks on the booted
# nodes, and `lab down` last.
# test_slurm.py before test_fan.py: the fan tests stop the fan daemon on node01 on
# purpose, and the Slurm health check rightly drains node01 for it.
# test_monitoring.py just before test_health.py: its last test powers node02 off
# and leaves it off for the health report's unreachable node.
LAB_FILE_ORDER = ["test_lab_units.py", "test_lab.py", "test_site.py", "test_storage.py",
                  "test_slurm.py", "test_fan.py", "test_monitoring.py", "test_health.py",
                  "test_upgrade.py", "test_pool_safety.py"]


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).resolve().parent
    lab = [i for i in items if here in Path(str(i.path)).parents]
    if not lab:
        return
    at = items.index(lab[0])
    rest = [i for i in items if i not in lab]

    def key(item):
        name = Path(str(item.path)).name
        last = item.name == "test_down_leaves_nothing_behind"
        rank = LAB_FILE_ORDER.index(name) if name in LAB_FILE_ORDER else len(LAB_FILE_ORDER)
        return (last, rank)

    items[:] = rest[:at] + sorted(lab, key=key) + rest[at:]


@pytest.fixture(scope="session")
def lab_log(tmp_path_factory) -> Path:
    return Path(os.environ.get("JUNKYARD_LAB_TEST_LOG")
                or tmp_path_factory.mktemp("lab") / "lab-cli.log")


@pytest.fixture(scope="session")
def lab(lab_log):
    why = lab_prerequisites()
    if why:
        pytest.skip(f"lab tests need the lab's host tools: {why}")
    if os.environ.get("JUNKYARD_LAB_REUSE"):
        # developing tests against a lab that runs already: no up, no down
        # (tests/lab/test_lab.py's up/down tests then fail, as they should)
        yield LabHandle(None, 0)
        return
    start = time.monotonic()
    res = lab_cli("up", log=lab_log)
    took = time.monotonic() - start
    sys.stderr.write(f"\n[lab up took {took:.0f}s; log {lab_log}]\n{res.stdout[-3000:]}\n")
    if res.returncode != 0:
        lab_cli("down", log=lab_log)
        pytest.fail(f"lab up failed (exit {res.returncode}):\n{res.stdout[-4000:]}\n"
                    f"{res.stderr[-4000:]}")
    handle = LabHandle(res, took)
    try:
        yield handle
    finally:
        lab_cli("down", log=lab_log)


@pytest.fixture(scope="session")
def site(lab, lab_log):
    """site.yml run once against the lab, nodes starting powered off (lab up powered
    them on to test the BMCs; their firmware would retry PXE all along).
    JUNKYARD_LAB_REUSE=site: the running lab has had site.yml already."""
    if os.environ.get("JUNKYARD_LAB_REUSE") == "site":
        return None
    for node in lab.nodes:
        assert lab.ipmitool(node, "chassis", "power", "off").returncode == 0
        lab.wait_qemu(node, running=False, timeout=60)
    res = run_site(lab_log)
    if res.returncode != 0:
        pytest.fail(f"site.yml failed (exit {res.returncode}):\n{res.stdout[-6000:]}\n"
                    f"{res.stderr[-2000:]}")
    return res
