"""ssh_chroot: command wrapping, path mapping, refusals, and the transfers
going through symlink resolution inside the chroot (no remote needed; the
real SSH path is exercised by molecule/stateless_root)."""

from __future__ import annotations

import os
import subprocess
from unittest import mock

import pytest
import yaml
from ansible.errors import AnsibleConnectionFailure, AnsibleError
from ansible.plugins.connection import ssh as builtin_ssh
from ansible_collections.junkyard.cluster.plugins.connection import ssh_chroot

ROOT = "/tank/images/bookworm/v1"


@pytest.mark.parametrize("cmd,expected", [
    ("echo hi",
     "env debian_chroot=junkyard-image JUNKYARD_CHROOT_ROOT=/tank/images/bookworm/v1 "
     "chroot /tank/images/bookworm/v1 /bin/sh -c 'echo hi'"),
    ("/bin/sh -c 'python3 && sleep 0'",
     "env debian_chroot=junkyard-image JUNKYARD_CHROOT_ROOT=/tank/images/bookworm/v1 "
     "chroot /tank/images/bookworm/v1 /bin/sh -c "
     "'/bin/sh -c '\"'\"'python3 && sleep 0'\"'\"''"),
])
def test_wrap_command_exact(cmd, expected):
    assert ssh_chroot.wrap_command(cmd, ROOT) == expected


def test_wrap_command_quotes_odd_roots_and_options():
    out = ssh_chroot.wrap_command("true", "/srv/my image", exe="/usr/sbin/chroot",
                                  shell="/bin/bash", label="x y")
    assert out == ("env 'debian_chroot=x y' 'JUNKYARD_CHROOT_ROOT=/srv/my image' "
                   "/usr/sbin/chroot '/srv/my image' /bin/bash -c true")


@pytest.mark.parametrize("cmd", [
    "printf '%s\\n' \"$debian_chroot\" \"$JUNKYARD_CHROOT_ROOT\" 'it'\"'\"'s' \"$1\"",
    "a='x y'; printf '%s\\n' \"$a\" $((1+2)) \"`echo back`\"\necho second line",
])
def test_wrapped_command_runs_unchanged(tmp_path, cmd):
    """Run the wrapped line through a real shell with a stand-in chroot that
    drops the root argument: the inner command must arrive byte for byte."""
    fake = tmp_path / "chroot"
    fake.write_text('#!/bin/sh\nshift\nexec "$@"\n')
    fake.chmod(0o755)
    wrapped = ssh_chroot.wrap_command(cmd, ROOT, exe=str(fake))
    got = subprocess.run(["/bin/sh", "-c", wrapped], capture_output=True, text=True,
                         check=True).stdout
    direct = subprocess.run(["/bin/sh", "-c", cmd], capture_output=True, text=True,
                            env=dict(os.environ, debian_chroot="junkyard-image",
                                     JUNKYARD_CHROOT_ROOT=ROOT), check=True).stdout
    assert got == direct
    assert got.startswith("junkyard-image\n/tank/images/bookworm/v1\n") or "x y" in got


@pytest.mark.parametrize("path,expected", [
    ("/etc/hosts", f"{ROOT}/etc/hosts"),
    ("/", ROOT),
    ("tmp/x", f"{ROOT}/tmp/x"),
    ("/../../etc/shadow", f"{ROOT}/etc/shadow"),
    ("/var/../etc/./passwd", f"{ROOT}/etc/passwd"),
    ("//etc//hosts", f"{ROOT}/etc/hosts"),
])
def test_host_path_never_leaves_the_root(path, expected):
    assert ssh_chroot.host_path(ROOT, path) == expected


@pytest.mark.parametrize("root,msg", [
    ("", "chroot_root (ansible_chroot_root) is not set"),
    (None, "chroot_root (ansible_chroot_root) is not set"),
    ("tank/images/x", "chroot_root tank/images/x is not an absolute path"),
    ("/", "chroot_root / is the host itself"),
    ("/tank/..", "chroot_root / is the host itself"),
])
def test_check_root_refuses(root, msg):
    with pytest.raises(AnsibleError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        ssh_chroot.check_root(root)


def test_check_root_normalises():
    assert ssh_chroot.check_root("/tank/images/b/v1/") == "/tank/images/b/v1"


def test_runtime_documentation_carries_every_ssh_option():
    runtime = yaml.safe_load(ssh_chroot.DOCUMENTATION)
    ssh = yaml.safe_load(builtin_ssh.DOCUMENTATION)
    assert set(ssh["options"]) <= set(runtime["options"])
    assert runtime["options"]["chroot_root"]["vars"] == [{"name": "ansible_chroot_root"}]
    assert runtime["name"] == "ssh_chroot"
    assert "connection_pipelining" in runtime["extends_documentation_fragment"]


class _Conn:
    """A Connection with options from a dict and the ssh transport recorded."""

    def __init__(self, responses=None, **options):
        self.options = {"chroot_root": ROOT, "chroot_exe": "chroot",
                        "chroot_shell": "/bin/sh", "chroot_label": "junkyard-image",
                        "host": "127.0.0.1", **options}
        self.responses = list(responses or [])
        self.calls = []
        self.conn = ssh_chroot.Connection.__new__(ssh_chroot.Connection)
        self.conn.get_option = self.options.__getitem__

    def _record(self, kind, *args):
        self.calls.append((kind, *args))
        if kind == "exec" and self.responses:
            return self.responses.pop(0)
        return (0, b"", b"")

    def __enter__(self):
        def exec_command(_conn, cmd, in_data=None, sudoable=True):
            return self._record("exec", cmd, sudoable)

        def put_file(_conn, in_path, out_path):
            return self._record("put", in_path, out_path)

        def fetch_file(_conn, in_path, out_path):
            return self._record("fetch", in_path, out_path)

        self.patches = [mock.patch.object(builtin_ssh.Connection, f.__name__, new=f)
                        for f in (exec_command, put_file, fetch_file)]
        for p in self.patches:
            p.start()
        return self

    def __exit__(self, *exc):
        for p in self.patches:
            p.stop()


def test_exec_command_wraps_and_keeps_in_data():
    with _Conn() as c:
        rc, _out, _err = c.conn.exec_command("python3", in_data=b"print(1)", sudoable=True)
    assert rc == 0
    assert c.calls == [("exec", ssh_chroot.wrap_command("python3", ROOT), True)]


def test_exec_command_refuses_host_root():
    with _Conn(chroot_root="/") as c, pytest.raises(AnsibleError, match="host itself"):
        c.conn.exec_command("true")
    assert c.calls == []


def test_put_file_resolves_inside_the_chroot_then_maps():
    # /etc/resolv.conf is an absolute symlink inside the image: the transfer
    # must follow it inside the image, not on the host.
    with _Conn(responses=[(0, b"/run/resolv.conf\n", b"")]) as c:
        c.conn.put_file("/local/file", "/etc/resolv.conf")
    assert c.calls == [
        ("exec", ssh_chroot.wrap_command("readlink -f -- /etc/resolv.conf", ROOT), False),
        ("put", "/local/file", f"{ROOT}/run/resolv.conf"),
    ]


def test_fetch_file_maps_the_source():
    with _Conn(responses=[(0, b"/var/log/x.log\n", b"")]) as c:
        c.conn.fetch_file("/var/log/../log/x.log", "/local/x.log")
    assert c.calls[0][1].endswith("-c 'readlink -f -- /var/log/x.log'")
    assert c.calls[1] == ("fetch", f"{ROOT}/var/log/x.log", "/local/x.log")


def test_unresolvable_path_fails_with_the_reason():
    with _Conn(responses=[(1, b"", b"readlink: /nope/x: No such file or directory\n")]) as c, \
            pytest.raises(AnsibleConnectionFailure, match=r"cannot resolve /nope/x inside "
                          r"/tank/images/bookworm/v1 \(rc=1\): readlink: /nope/x"):
        c.conn.put_file("/local/file", "/nope/x")
    assert [x[0] for x in c.calls] == ["exec"]
