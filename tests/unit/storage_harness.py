"""Run an Ansible module's main() in-process against a scripted command table.

Each expected command is an exact argument list with the rc/stdout/stderr it
gets; a command out of order, unexpected or missing fails the test.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import pytest
from ansible.module_utils import basic
from ansible.module_utils.common import warnings
from ansible.module_utils.testing import patch_module_args

FIXTURES = Path(__file__).parent / "fixtures"


def fixture(*parts: str) -> str:
    return FIXTURES.joinpath(*parts).read_text()


@dataclass
class Cmd:
    argv: list
    rc: int = 0
    out: str = ""
    err: str = ""


class _Done(Exception):
    pass


class CommandTable:
    def __init__(self, cmds):
        self.expected = list(cmds)
        self.ran = []

    def run_command(self, _module, args, **_kw):
        assert isinstance(args, list), f"run_command got a shell string: {args!r}"
        assert self.expected, f"unexpected command: {args}"
        cmd = self.expected.pop(0)
        assert args == cmd.argv, f"expected {cmd.argv}\n     got {args}"
        self.ran.append(args)
        return cmd.rc, cmd.out, cmd.err


def run_module(main, args, cmds, check_mode=False, diff=True, missing=()):
    """Return (result, table).  Every expected command must have run.
    Programs named in ``missing`` are not found by get_bin_path."""
    table = CommandTable(cmds)
    args = dict(args, _ansible_check_mode=check_mode, _ansible_diff=diff)

    captured = []

    def warn(self, warning):
        # Captured here rather than read back from module_utils' warning store:
        # once controller code is imported in the same process (other tests
        # do), module warnings no longer land in that store.
        captured.append(warning)

    def finish(kw, failed):
        messages = captured + list(warnings.get_warning_messages())
        if messages:
            kw["warnings"] = messages
        raise _Done(dict(kw, failed=failed))

    def exit_json(self, **kw):
        finish(kw, False)

    def fail_json(self, **kw):
        finish(kw, True)

    def get_bin_path(self, name, required=False, opt_dirs=None):
        if name in missing:
            if required:
                self.fail_json(msg=f"Failed to find required executable {name!r}")
            return None
        return f"/usr/sbin/{name}"

    def run_command(self, args, **kw):
        return table.run_command(self, args, **kw)

    with patch_module_args(args), \
            mock.patch.object(warnings, "_global_warnings", {}), \
            mock.patch.object(basic.AnsibleModule, "exit_json", exit_json), \
            mock.patch.object(basic.AnsibleModule, "fail_json", fail_json), \
            mock.patch.object(basic.AnsibleModule, "get_bin_path", get_bin_path), \
            mock.patch.object(basic.AnsibleModule, "run_command", run_command), \
            mock.patch.object(basic.AnsibleModule, "warn", warn), \
            pytest.raises(_Done) as done:
        main()
    result = done.value.args[0]
    if not result["failed"]:
        assert not table.expected, f"commands never run: {[c.argv for c in table.expected]}"
    return result, table
