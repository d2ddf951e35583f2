"""upgrade_rocm.yml, rollback.yml and prune_images.yml in check mode against the example
inventory, with the storage head played by this machine (connection local) and the image
state in a temporary file: the plan is shown, nothing is changed, bad requests are refused.
Nothing but this machine is contacted (check mode ends before any node or BMC step)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml
from ansible_collections.junkyard.cluster.plugins.module_utils import rollout_lease

from tests.conftest import REPO

INVENTORY = REPO / "inventories" / "example" / "hosts.yml"


def run(playbook, tmp_path, *extra, state=None, check=True):
    state_file = tmp_path / "image-state.yml"
    if state is not None:
        state_file.write_text(yaml.safe_dump(state))
    argv = ["ansible-playbook", "-i", str(INVENTORY), str(REPO / "playbooks" / playbook),
            "-e", "ansible_connection=local", "-e", f"ansible_python_interpreter={sys.executable}",
            "-e", f"upgrade_state_file={state_file}",
            "-e", f"image_versions_lease_file={tmp_path / 'junkyard' / 'rollout.lease'}",
            *extra]
    if check:
        argv.append("--check")
    env = dict(os.environ, JUNKYARD_BMC_PASSWORD="not-used", ANSIBLE_NOCOLOR="1",
               ANSIBLE_CALLBACK_RESULT_FORMAT="json",
               ANSIBLE_CONFIG=str(REPO / "ansible.cfg"))
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    return proc, state_file


PROMOTED = {"schema": 1, "nodes": {}, "images": {"bookworm-rocm": {
    "current": "2026.12.1", "previous": "2026.11.1",
    "versions": {"2026.11.1": {"origin": None}, "2026.12.1": {"origin": "2026.11.1"}}}}}


def test_upgrade_check_mode_shows_canary_and_waves_and_changes_nothing(tmp_path):
    proc, state_file = run("upgrade_rocm.yml", tmp_path, "-e", "version=2026.12.1",
                           "-e", "upgrade_serial=3", "-e", "canary=gpu04")
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "bookworm-rocm: upgrade 2026.11.1 -> 2026.12.1 (build the new version)" in out
    assert "canary: gpu04 2026.11.1 -> 2026.12.1" in out
    assert "wave 1: gpu01 2026.11.1 -> 2026.12.1, gpu02 2026.11.1 -> 2026.12.1, gpu03" in out
    assert "wave 2: gpu05 2026.11.1 -> 2026.12.1, gpu06 2026.11.1 -> 2026.12.1, gpu07" in out
    assert "then 2026.12.1 becomes the current version of bookworm-rocm" in out
    # the drain policy (the defaults) and, this machine running no Slurm, busy nodes unknown
    assert ("drain: each wave is drained in Slurm before it powers off and its jobs are waited"
            " for up to 3600 s; then a node still busy is skipped") in " ".join(out.split())
    assert ("busy now: unknown (Slurm could not be asked: Failed to find required executable"
            ' \\"scontrol\\"') in " ".join(out.split())
    assert not state_file.exists()
    assert not (tmp_path / "junkyard").exists()  # the lease was not taken
    assert "changed=0" in out and "failed=0" in out


def test_upgrade_check_mode_resumes_a_stopped_rollout(tmp_path):
    state = {"schema": 1, "nodes": {"gpu01": "2026.12.1"}, "images": {"bookworm-rocm": {
        "current": "2026.11.1",
        "versions": {"2026.11.1": {"origin": None}, "2026.12.1": {"origin": "2026.11.1"}}}}}
    proc, state_file = run("upgrade_rocm.yml", tmp_path, "-e", "version=2026.12.1",
                           state=state)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "upgrade 2026.11.1 -> 2026.12.1 (version exists)" in proc.stdout
    assert "canary:" not in proc.stdout
    assert "verify again first (already on 2026.12.1, no reboot): gpu01" in proc.stdout
    assert yaml.safe_load(state_file.read_text()) == state


def test_upgrade_to_the_current_version_is_refused(tmp_path):
    proc, _unused = run("upgrade_rocm.yml", tmp_path, "-e", "version=2026.11.1")
    assert proc.returncode != 0
    assert "upgrade_version 2026.11.1 is already the current version of bookworm-rocm" in (
        proc.stdout + proc.stderr)


def test_rollback_check_mode_after_a_promotion(tmp_path):
    proc, _unused = run("rollback.yml", tmp_path, "-e", "upgrade_serial=4", state=PROMOTED)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "bookworm-rocm: rollback (current 2026.12.1)" in out
    assert ("wave 1: gpu01 2026.12.1 -> 2026.11.1, gpu02 2026.12.1 -> 2026.11.1, "
            "gpu03 2026.12.1 -> 2026.11.1, gpu04 2026.12.1 -> 2026.11.1") in out
    assert "then 2026.11.1 becomes the current version of bookworm-rocm" in out


def test_rollback_of_named_nodes(tmp_path):
    proc, _unused = run("rollback.yml", tmp_path, "-e", "nodes=gpu02,gpu05",
                        "-e", "upgrade_serial=1", state=PROMOTED)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "wave 1: gpu02 2026.12.1 -> 2026.11.1" in proc.stdout
    assert "wave 2: gpu05 2026.12.1 -> 2026.11.1" in proc.stdout
    assert "becomes the current version" not in proc.stdout


@pytest.mark.parametrize("versions, reason", [
    ("2026.12.1", "2026.12.1 is the current version of bookworm-rocm"),
    ("2026.11.1", "2026.11.1 is the previous version of bookworm-rocm, the rollback target"),
])
def test_prune_refuses_and_destroys_nothing(tmp_path, versions, reason):
    proc, state_file = run("prune_images.yml", tmp_path, "-e", f"versions={versions}",
                           state=PROMOTED, check=False)
    assert proc.returncode != 0
    assert f"nothing was pruned: {reason}" in proc.stdout + proc.stderr
    assert yaml.safe_load(state_file.read_text()) == PROMOTED


def test_prune_refuses_a_booted_version(tmp_path):
    state = dict(PROMOTED, nodes={"gpu03": "2026.10.1"})
    state["images"] = {"bookworm-rocm": dict(PROMOTED["images"]["bookworm-rocm"], versions={
        **PROMOTED["images"]["bookworm-rocm"]["versions"], "2026.10.1": {"origin": None}})}
    proc, _unused = run("prune_images.yml", tmp_path, "-e", "versions=2026.10.1", state=state,
                        check=False)
    assert proc.returncode != 0
    assert "nothing was pruned: 2026.10.1 is booted by gpu03" in proc.stdout + proc.stderr


def test_upgrade_refuses_a_render_role_the_collection_lacks(tmp_path):
    proc, _unused = run("upgrade_rocm.yml", tmp_path, "-e", "version=2026.12.1", "-e",
                        '{"image_rollout_render_roles": [{"name": "junkyard.cluster.nope"}]}')
    assert proc.returncode != 0
    assert "junkyard.cluster.nope (tasks_from main) is not in this collection" in proc.stdout


@pytest.mark.parametrize("playbook, extra", [
    ("upgrade_rocm.yml", ["-e", "version=2026.12.1"]),
    ("rollback.yml", []),
    ("prune_images.yml", ["-e", "versions=2026.11.1"]),
])
def test_a_state_given_as_variable_is_refused(tmp_path, playbook, extra):
    # The plan must come from the file these playbooks write back, not from a variable.
    proc, state_file = run(playbook, tmp_path, *extra, "-e", '{"cluster_image_state": {}}',
                           state=PROMOTED)
    assert proc.returncode != 0
    assert "cluster_image_state is given; it is for runs without a reachable storage head" in (
        proc.stdout + proc.stderr)
    assert yaml.safe_load(state_file.read_text()) == PROMOTED


def test_an_inconsistent_state_file_is_refused_by_the_model(tmp_path):
    state = dict(PROMOTED, nodes={"gpu03": "2026.13.1"})
    proc, state_file = run("rollback.yml", tmp_path, state=state)
    assert proc.returncode != 0
    assert (f"storage01:{state_file}: nodes.gpu03 2026.13.1 is not a recorded version of "
            "bookworm-rocm, the image of gpu03 (2026.11.1, 2026.12.1)") in " ".join(
                proc.stdout.split())


def test_prune_records_the_state_and_keeps_the_old_one_before_it_destroys_anything():
    """A prune that stops half-way must leave a state that no longer names the versions
    (and the state before it in <file>.prev): the record comes before every unmount and
    zfs command of the prune block, and record.yml copies .prev before it writes.  (The
    lab test runs it on real ZFS: tests/lab/test_upgrade.py.)"""
    tasks_dir = REPO / "roles" / "image_versions" / "tasks"
    prune = yaml.safe_load((tasks_dir / "prune.yml").read_text())
    block = next(t["block"] for t in prune if t.get("name") == "Prune")
    record = [i for i, t in enumerate(block)
              if t.get("ansible.builtin.include_tasks") == "record.yml"]
    destructive = [i for i, t in enumerate(block)
                   if "ansible.posix.mount" in t or "zfs" in str(t.get("ansible.builtin.command"))]
    assert len(record) == 1 and len(destructive) >= 2
    assert record[0] < min(destructive)
    steps = [t["name"] for t in yaml.safe_load((tasks_dir / "record.yml").read_text())]
    assert steps.index("Keep the state this write replaces next to it (.prev)") < \
        steps.index("Write the image state")


def test_check_mode_is_refused_while_another_rollout_holds_the_lease(tmp_path):
    lease = tmp_path / "junkyard" / "rollout.lease"
    rollout_lease.acquire(str(lease), "alice@ops1", "20261206T210000Z-0001", "bookworm-rocm",
                          "2026.12.1", 600)
    held = lease.read_text()
    proc, _unused = run("upgrade_rocm.yml", tmp_path, "-e", "version=2026.12.1")
    out = " ".join(proc.stdout.split())
    assert proc.returncode != 0
    assert "canary: gpu01 2026.11.1 -> 2026.12.1" in out  # the plan is shown first
    assert (f"another rollout holds {lease}: run 20261206T210000Z-0001 by alice@ops1 "
            "(bookworm-rocm -> 2026.12.1), started") in out
    assert lease.read_text() == held
