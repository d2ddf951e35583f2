"""health_facts' mount probe: a mount that does not answer is reported as
such after the timeout, next to mounts that answer, and a missing one."""

from __future__ import annotations

import os

from ansible_collections.junkyard.cluster.plugins.modules import health_facts


def test_probe_answers_hangs_and_errors(tmp_path, monkeypatch):
    # A `stat` that hangs on paths under /hung (as on a dead NFS server) and
    # runs the real one otherwise.
    real = "/usr/bin/stat"
    fake = tmp_path / "bin" / "stat"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\ncase "$3" in /hung*) exec sleep 30;; esac\n'
                    f'exec {real} "$@"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    res = health_facts.probe(["/", "/hung/a", "/hung/b", str(tmp_path / "gone")], 1.0)
    assert res["/"][0] is True and res["/"][1] is None
    assert res["/hung/a"] == (False, "no answer within 1 s", 1.0)
    assert res["/hung/b"][1] == "no answer within 1 s"
    ok, err, _unused = res[str(tmp_path / "gone")]
    assert not ok
    assert "No such file or directory" in err
