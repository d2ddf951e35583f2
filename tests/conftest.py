"""Shared pytest setup: the repository root, and the virtualenv's tools on PATH."""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# ansible-runner and molecule call ansible-playbook by name: make sure the
# interpreter running the tests brings its own tools.
_bin = str(Path(sys.executable).parent)
if _bin not in os.environ.get("PATH", "").split(os.pathsep):
    os.environ["PATH"] = _bin + os.pathsep + os.environ.get("PATH", "")
os.environ.setdefault("ANSIBLE_CONFIG", str(REPO / "ansible.cfg"))
