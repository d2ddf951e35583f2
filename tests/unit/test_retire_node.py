"""playbooks/retire_node_datasets.yml (the role retire_node) against the example
inventory, the storage head played by this machine (connection local) with a
fake zfs on the PATH that records every call: a request that is not plain is
refused before zfs is called, archive renames, destroy needs the node's name
twice, check mode lists and changes nothing, and the deprecated names work."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

INVENTORY = REPO / "inventories" / "example" / "hosts.yml"

FAKE_ZFS = """#!/bin/sh
# records its arguments; `zfs list` answers from the file $ZFS_DATASETS
echo "$*" >> "$ZFS_LOG"
if [ "$1" = list ]; then
  if [ ! -s "$ZFS_DATASETS" ]; then
    echo "cannot open 'tank/nodes/gpu09': dataset does not exist" >&2
    exit 1
  fi
  cat "$ZFS_DATASETS"
fi
"""

DATASETS = ("tank/nodes/gpu09", "tank/nodes/gpu09/var-log", "tank/nodes/gpu09/ssh-host-keys")


def run(tmp_path, *extra, datasets=DATASETS, check=False):
    """(returncode, output with its white space folded, the zfs calls)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "zfs").write_text(FAKE_ZFS)
    (bin_dir / "zfs").chmod(0o755)
    (tmp_path / "datasets").write_text("".join(f"{d}\n" for d in datasets))
    log = tmp_path / "zfs.log"
    argv = [f"{sys.prefix}/bin/ansible-playbook", "-i", str(INVENTORY),
            str(REPO / "playbooks" / "retire_node_datasets.yml"),
            "-e", "ansible_connection=local", "-e", f"ansible_python_interpreter={sys.executable}",
            "-e", '{"cluster_image_state": {}}', *extra]
    if check:
        argv.append("--check")
    env = dict(os.environ, PATH=f"{bin_dir}:{sys.prefix}/bin:{os.environ['PATH']}",
               ZFS_LOG=str(log), ZFS_DATASETS=str(tmp_path / "datasets"),
               JUNKYARD_BMC_PASSWORD="not-used", ANSIBLE_NOCOLOR="1",
               ANSIBLE_CONFIG=str(REPO / "ansible.cfg"))
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
                          check=False)
    calls = log.read_text().splitlines() if log.exists() else []
    return proc.returncode, " ".join((proc.stdout + proc.stderr).split()), calls


LIST = "list -H -o name -r tank/nodes/gpu09"


@pytest.mark.parametrize(("extra", "message"), [
    ([], "storage01: retire_node_name is not given: name the node whose datasets to retire"),
    (["-e", "retire_node_name=Gpu_09"],
     "Gpu_09: retire_node_name Gpu_09 is not a node name (lower-case letters, digits and -"),
    (["-e", "retire_node_name=gpu03"],
     "gpu03: retire_node_name gpu03 is still a node of the inventory (gpu_nodes: gpu01, gpu02,"),
    (["-e", "retire_node_name=gpu09", "-e", "retire_node_action=destroy"],
     "gpu09: retire_node_action destroy needs -e retire_node_confirm=gpu09 (got none); nothing "
     "is destroyed unless the node is named twice"),
    (["-e", "retire_node=gpu09", "-e", "retire_action=destroy", "-e", "retire_confirm=gpu9"],
     "gpu09: retire_node_action destroy needs -e retire_node_confirm=gpu09 (got gpu9)"),
    (["-e", "retire_node_name=gpu09", "-e", "retire_node_action=wipe"],
     "retire_node_action must be one of: archive, destroy, got: wipe"),
])
def test_a_request_that_is_not_plain_is_refused_before_zfs_is_called(tmp_path, extra, message):
    rc, out, calls = run(tmp_path, *extra)
    assert rc != 0
    assert message in out, out[-3000:]
    assert calls == []


def test_archive_renames_the_datasets_and_destroys_nothing(tmp_path):
    # the deprecated name, as bench scripts and older docs pass it
    rc, out, calls = run(tmp_path, "-e", "retire_node=gpu09")
    assert rc == 0, out[-3000:]
    assert calls[0] == LIST
    assert len(calls) == 2 and calls[1].startswith("rename -p tank/nodes/gpu09 tank/archive/gpu09-")
    stamp = calls[1].rsplit("-", 1)[1]
    assert len(stamp) == len("20261206T070500Z") and stamp.endswith("Z")
    assert ("archived (gpu09): tank/nodes/gpu09, tank/nodes/gpu09/var-log, "
            f"tank/nodes/gpu09/ssh-host-keys -> tank/archive/gpu09-{stamp}") in out
    assert "retire_node is deprecated: use retire_node_name" in out


def test_destroy_confirmed_by_name_destroys_the_node_dataset_recursively(tmp_path):
    rc, out, calls = run(tmp_path, "-e", "retire_node_name=gpu09",
                         "-e", "retire_node_action=destroy", "-e", "retire_node_confirm=gpu09")
    assert rc == 0, out[-3000:]
    assert calls == [LIST, "destroy -r tank/nodes/gpu09"]
    assert "destroyed (gpu09): tank/nodes/gpu09, tank/nodes/gpu09/var-log" in out
    assert "is deprecated: use" not in out


@pytest.mark.parametrize("action", ["archive", "destroy"])
def test_check_mode_lists_and_changes_nothing(tmp_path, action):
    rc, out, calls = run(tmp_path, "-e", "retire_node_name=gpu09", "-e",
                         f"retire_node_action={action}", "-e", "retire_node_confirm=gpu09",
                         check=True)
    assert rc == 0, out[-3000:]
    assert calls == [LIST]
    done = {"archive": "archived", "destroy": "destroyed"}[action]
    assert f"would be {done} (gpu09): tank/nodes/gpu09, tank/nodes/gpu09/var-log" in out


def test_a_node_without_datasets_is_refused(tmp_path):
    rc, out, calls = run(tmp_path, "-e", "retire_node_name=gpu09", datasets=())
    assert rc != 0
    assert ("gpu09: no datasets to retire under tank/nodes/gpu09 on storage01 (zfs list: "
            "cannot open 'tank/nodes/gpu09': dataset does not exist)") in out, out[-3000:]
    assert calls == [LIST]
