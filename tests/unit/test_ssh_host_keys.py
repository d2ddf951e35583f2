"""ssh_host_keys: every node's own host keys, made once with the real ssh-keygen and
never replaced."""

from __future__ import annotations

import io
import json
import shutil
from contextlib import redirect_stdout

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.junkyard.cluster.plugins.modules import ssh_host_keys

pytestmark = pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="needs ssh-keygen")


def run(hosts, check=False, **extra):
    out = io.StringIO()
    with patch_module_args({"hosts": hosts, "_ansible_check_mode": check, **extra}), \
            redirect_stdout(out), pytest.raises(SystemExit):
        ssh_host_keys.main()
    return json.loads(out.getvalue())


def hosts(tmp_path):
    out = []
    for i, name in enumerate(("node01", "node02"), start=1):
        (tmp_path / name).mkdir(mode=0o755)
        out.append({"name": name, "dir": str(tmp_path / name),
                    "names": [name, f"{name}.cluster.internal", f"10.77.0.1{i}"]})
    return out


def test_each_node_gets_its_own_keys_once(tmp_path):
    spec = hosts(tmp_path)
    first = run(spec)
    assert first["changed"] and sorted(first["created"]) == [
        f"{tmp_path}/node01/ssh_host_ed25519_key", f"{tmp_path}/node02/ssh_host_ed25519_key"]
    k1, k2 = first["public_keys"]["node01"], first["public_keys"]["node02"]
    assert k1 != k2 and k1[0].startswith("ssh-ed25519 ")
    assert first["known_hosts"] == [f"node01,node01.cluster.internal,10.77.0.11 {k1[0]}",
                                    f"node02,node02.cluster.internal,10.77.0.12 {k2[0]}"]
    key = tmp_path / "node01" / "ssh_host_ed25519_key"
    assert key.stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "node01").stat().st_mode & 0o777 == 0o700
    # a second run changes nothing and returns the same keys
    again = run(spec)
    assert not again["changed"] and again["created"] == []
    assert again["public_keys"] == first["public_keys"]


def test_a_lost_public_key_is_derived_again_and_the_private_key_kept(tmp_path):
    spec = hosts(tmp_path)
    first = run(spec)
    key = tmp_path / "node02" / "ssh_host_ed25519_key"
    private = key.read_bytes()
    (tmp_path / "node02" / "ssh_host_ed25519_key.pub").unlink()
    again = run(spec)
    assert again["changed"] and again["created"] == []
    assert again["public_keys"] == first["public_keys"]
    assert key.read_bytes() == private


def test_check_mode_makes_nothing(tmp_path):
    spec = hosts(tmp_path)
    res = run(spec, check=True, types=["ed25519", "rsa"])
    assert res["changed"] and len(res["created"]) == 4
    assert not any((tmp_path / "node01").iterdir())
    assert res["known_hosts"] == []


def test_a_missing_directory_is_named(tmp_path):
    res = run([{"name": "node03", "dir": str(tmp_path / "gone"), "names": ["node03"]}])
    assert res["failed"]
    assert res["msg"] == (f"node03: {tmp_path}/gone does not exist (its dataset is made by "
                          "the storage play)")
