"""lab/jylab/host.py: what `lab up` treats as a leftover network namespace name."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

sys.path.insert(0, str(REPO / "lab"))

from jylab import host


def test_a_file_that_pins_no_namespace_is_stale(tmp_path):
    # what /run/netns/<name> is after the host went down with a lab running, when /run
    # is on disk: the file `ip netns add` created, without the namespace mounted on it
    (tmp_path / "jylab").touch()
    assert host.netns_stale("jylab", root=str(tmp_path))
    assert not host.netns_stale("other", root=str(tmp_path))


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("ip"),
                    reason="creating a network namespace needs root and iproute2")
def test_a_live_namespace_is_not_stale():
    name = f"jytest-stale-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        assert Path("/run/netns", name).exists()
        assert not host.netns_stale(name)
    finally:
        subprocess.run(["ip", "netns", "delete", name], check=False)
