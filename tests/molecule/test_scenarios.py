"""Every molecule scenario converges, is idempotent and verifies, in podman.

The scenarios use the image that tools/build-test-image builds locally
(`make build-test-image`; `make test` does it first).
"""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.conftest import REPO

SCENARIOS = sorted(p.parent.name for p in (REPO / "molecule").glob("*/molecule.yml"))


@pytest.fixture(scope="session")
def test_image():
    subprocess.run([str(REPO / "tools" / "build-test-image")], check=True, cwd=REPO)


@pytest.mark.molecule
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario(scenario, test_image):
    env = dict(os.environ, CONTAINERS_CONF=str(REPO / "molecule" / "containers.conf"),
               ANSIBLE_NOCOLOR="1", NO_COLOR="1", PY_COLORS="0", ANSIBLE_FORCE_COLOR="0")
    proc = subprocess.run(["molecule", "test", "-s", scenario], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=1800, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    # The sequence ran the idempotence step and it passed (a scenario without
    # it would not prove that a second run changes nothing).
    assert "idempotence" in out, out[-3000:]
