"""build_inputs: the digest that lets an image build skip a version whose inputs did not
change.  A wrong digest either rebuilds every time (slow) or, worse, skips a build whose
inputs changed: the tests check both directions, on files and on variables, and run the
action through ansible-playbook as the image build does."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.junkyard.cluster.plugins.action import build_inputs

REPO = Path(__file__).resolve().parents[2]


def ansible_playbook() -> str | None:
    """The project's ansible-playbook (its .venv), else the one on PATH."""
    venv = REPO / ".venv" / "bin" / "ansible-playbook"
    return str(venv) if venv.exists() else shutil.which("ansible-playbook")


def tree(root: Path) -> Path:
    for rel, text in {"roles/r/tasks/main.yml": "---\n- name: A task\n",
                      "roles/r/templates/etc/x.conf.j2": "x={{ x }}\n",
                      "plugins/filter/f.py": "X = 1\n"}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_same_files_elsewhere_give_the_same_digest(tmp_path):
    a, b = tree(tmp_path / "a"), tree(tmp_path / "b")
    assert build_inputs.files_digest(["roles", "plugins"], a) == \
        build_inputs.files_digest(["roles", "plugins"], b)
    assert build_inputs.files_digest(["roles", "plugins"], a)[1] == 3


@pytest.mark.parametrize("change", ["edit", "add", "rename"])
def test_a_changed_file_changes_the_digest(tmp_path, change):
    root = tree(tmp_path)
    before = build_inputs.files_digest(["roles", "plugins"], root)
    tpl = root / "roles/r/templates/etc/x.conf.j2"
    if change == "edit":
        tpl.write_text("x={{ y }}\n")
    elif change == "add":
        (root / "roles/r/files").mkdir()
        (root / "roles/r/files/new").write_text("")
    else:
        tpl.rename(tpl.with_name("y.conf.j2"))
    assert build_inputs.files_digest(["roles", "plugins"], root)[0] != before[0]


def test_byte_code_caches_do_not_count(tmp_path):
    root = tree(tmp_path)
    before = build_inputs.files_digest(["plugins"], root)
    (root / "plugins/filter/__pycache__").mkdir()
    (root / "plugins/filter/__pycache__/f.cpython-311.pyc").write_bytes(b"\0")
    assert build_inputs.files_digest(["plugins"], root) == before


def test_variables_that_feed_a_build_count_and_the_rest_do_not():
    base = {"cluster_name": "lab", "rocm_version": "6.0", "ansible_port": 22,
            "inventory_dir": "/a", "__node_image_marker": {"stat": {"atime": 1}}}
    digest = build_inputs.variables_digest(base)[0]
    assert build_inputs.variables_digest({**base, "rocm_version": "6.1"})[0] != digest
    assert build_inputs.variables_digest({**base, "site_extra": 1})[0] != digest
    same = {**base, "ansible_port": 2222, "inventory_dir": "/b",
            "__node_image_marker": {"stat": {"atime": 2}}}
    assert build_inputs.variables_digest(same)[0] == digest
    assert build_inputs.variables_digest(base)[1] == ["cluster_name", "rocm_version"]


VAULTED = """$ANSIBLE_VAULT;1.1;AES256
62313365396662343061393464336163383764373764613633653634306231386433626135623038
6439353235373864633431323530656634643130366636340a363038643963313938353330363432
39383830633939646434383763303535316638666461343963393462303734366164636163393531
3735653535393333330a336439356366623132373066373036633732323338613861363737363237
3133
"""


def run_action(tmp_path: Path, variables: dict, vaulted: str | None = None,
               options: str = "", env: dict | None = None) -> dict:
    inv = tmp_path / "inventory"
    (inv / "group_vars").mkdir(parents=True, exist_ok=True)
    (inv / "hosts.yml").write_text(
        "all:\n  hosts:\n    image-x:\n      ansible_connection: local\n"
        f"      ansible_python_interpreter: {sys.executable}\n")
    text = "".join(f"{k}: {json.dumps(v)}\n" for k, v in variables.items())
    if vaulted:
        text += "secret: !vault |\n" + "".join(f"  {ln}\n" for ln in vaulted.splitlines())
    (inv / "group_vars/all.yml").write_text(text)
    play = tmp_path / "play.yml"
    play.write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - junkyard.cluster.build_inputs:\n        paths: [roles/node_image, plugins]\n"
        f"{options}"
        "      register: r\n"
        "    - ansible.builtin.copy:\n        content: '{{ r | to_json }}'\n"
        f"        dest: {tmp_path}/out.json\n        mode: '0600'\n")
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), **(env or {})}
    res = subprocess.run([ansible_playbook(), "-i", str(inv / "hosts.yml"),
                          str(play)], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=120, check=False)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return json.loads((tmp_path / "out.json").read_text())


def test_through_ansible_a_variable_change_is_seen_and_a_vault_is_never_opened(tmp_path):
    if ansible_playbook() is None:
        pytest.skip("ansible-playbook is not installed")
    first = run_action(tmp_path, {"cluster_name": "lab"}, VAULTED)
    again = run_action(tmp_path, {"cluster_name": "lab", "ansible_port": 2200}, VAULTED)
    renamed = run_action(tmp_path, {"cluster_name": "other"}, VAULTED)
    # no vault password was given: a decrypt would have failed the play
    other_secret = run_action(tmp_path, {"cluster_name": "lab"},
                              VAULTED.replace("3133\n", "3134\n"))
    assert first["digest"] == again["digest"]
    assert first["files_digest"] == renamed["files_digest"]
    assert renamed["digest"] != first["digest"]
    assert other_secret["digest"] != first["digest"]
    assert first["file_count"] > 10 and first["variable_count"] >= 2


def test_build_mechanics_do_not_count_and_the_rest_still_does():
    base = {"rocm_version": "6.0", "node_image_tree_prefix": "",
            "node_image_build": {"image": "bookworm", "version": "v1",
                                 "root_path": "/tank/images/bookworm/v1"}}
    exclude = ["node_image_tree_prefix", "node_image_build.root_path"]
    digest, names = build_inputs.variables_digest(base, exclude)
    elsewhere = {**base, "node_image_tree_prefix": "/var/cache/seed.tree",
                 "node_image_build": {**base["node_image_build"],
                                      "root_path": "/var/cache/seed.tree/tank/images/bookworm/v1"}}
    assert build_inputs.variables_digest(elsewhere, exclude)[0] == digest
    assert names == ["node_image_build", "rocm_version"]
    other_version = {**base, "node_image_build": {**base["node_image_build"], "version": "v2"}}
    assert build_inputs.variables_digest(other_version, exclude)[0] != digest
    # without the exclusions the location counts, as before
    assert build_inputs.variables_digest(elsewhere)[0] != build_inputs.variables_digest(base)[0]


def test_a_resolved_variable_counts_by_what_its_lookup_reads(tmp_path):
    if ansible_playbook() is None:
        pytest.skip("ansible-playbook is not installed")
    keys = {"node_image_authorized_keys":
            "{{ [lookup('ansible.builtin.file', lookup('ansible.builtin.env', 'JY_KEY'))] }}",
            "node_image_tree_prefix": "{{ lookup('ansible.builtin.env', 'JY_PREFIX') }}"}
    options = ("        exclude: [node_image_tree_prefix]\n"
               "        resolve: [node_image_authorized_keys]\n")
    key = tmp_path / "id.pub"
    key.write_text("ssh-ed25519 AAAAone lab\n")
    env = {"JY_KEY": str(key), "JY_PREFIX": "/a"}
    first = run_action(tmp_path, keys, options=options, env=env)
    moved = run_action(tmp_path, keys, options=options, env={**env, "JY_PREFIX": "/b"})
    key.write_text("ssh-ed25519 AAAAtwo lab\n")
    new_key = run_action(tmp_path, keys, options=options, env=env)
    unresolved = run_action(tmp_path, keys, env=env)
    key.write_text("ssh-ed25519 AAAAone lab\n")
    unresolved_before = run_action(tmp_path, keys, env=env)
    assert first["digest"] == moved["digest"]
    assert new_key["digest"] != first["digest"]
    # the text alone does not see the key change: why the role resolves it
    assert unresolved["digest"] == unresolved_before["digest"]


@pytest.mark.parametrize("options", ["        exclude: node_image_seed\n",
                                     "        resolve: [__node_image_inputs]\n"])
def test_exclude_and_resolve_must_be_lists_of_names(tmp_path, options):
    if ansible_playbook() is None:
        pytest.skip("ansible-playbook is not installed")
    with pytest.raises(AssertionError, match="must be a list of variable names"):
        run_action(tmp_path, {"cluster_name": "lab"}, options=options)
