"""The cluster model follows the image state (docs/upgrades.md), through playbooks/model.yml.

The state is given as the variable cluster_image_state, or read from upgrade_state_file on
the storage head: here the head is played by this machine (connection local) and the file
is a temporary one.  The published model's boot entries (nfsroot= and junkyard.image= on
the kernel command line) must follow it; a missing file is no state; a malformed or
inconsistent file, or a head that cannot be reached, refuses the run before any model is
published.
"""

from __future__ import annotations

import json
import sys

import yaml

from tests.model.test_inventories import MODEL_PLAYBOOK, _head, _load_lab, _node, _run, _write

V12 = {"v1": {"origin": None}, "v2": {"origin": "v1"}}
PROMOTED = {"schema": 1, "nodes": {},
            "images": {"bookworm": {"current": "v2", "previous": "v1", "versions": V12}}}


def _dump_playbook(tmp_path):
    """model.yml, then the published model written to a file on the controller."""
    dump = tmp_path / "model.json"
    play = tmp_path / "dump.yml"
    play.write_text(yaml.safe_dump([
        {"name": "Validate the cluster model",
         "ansible.builtin.import_playbook": str(MODEL_PLAYBOOK)},
        {"name": "Dump the model", "hosts": "gpu_nodes", "gather_facts": False,
         "tasks": [{"name": "Write the model node02 got", "delegate_to": "localhost",
                    "when": "inventory_hostname == 'node02'",
                    "ansible.builtin.copy": {"content": "{{ cluster_model | to_json }}",
                                             "dest": str(dump), "mode": "0600"}}]}]))
    return play, dump


def _model(inv, tmp_path, extravars):
    play, dump = _dump_playbook(tmp_path)
    r, out = _run(_write(inv, tmp_path), tmp_path, extravars=extravars, playbook=play)
    assert r.rc == 0, out
    return json.loads(dump.read_text())


def _refused(inv, tmp_path, extravars=None):
    play, dump = _dump_playbook(tmp_path)
    r, out = _run(_write(inv, tmp_path), tmp_path, extravars=extravars or {}, playbook=play)
    assert r.rc != 0, out
    assert not dump.exists()  # no play after the model ran
    return " ".join(out.split())


def _cmdlines(model):
    return {n["name"]: n["boot"]["cmdline"].split() for n in model["nodes"]}


def _local_head(inv, state_file):
    """The head played by this machine; the state file where the test puts it."""
    head = _head(inv)
    for key in [k for k in head if k.startswith("ansible_")]:
        del head[key]
    head.update(ansible_connection="local", ansible_python_interpreter=sys.executable,
                upgrade_state_file=str(state_file))


def test_boot_entries_follow_the_state_given_as_variable(tmp_path):
    state = dict(PROMOTED, nodes={"node02": "v1"})
    model = _model(_load_lab(), tmp_path, {"cluster_image_state": state})
    cmd = _cmdlines(model)
    # node01 follows the state's current version (the inventory says v1) ...
    assert "nfsroot=10.77.0.1:/tank/images/bookworm/v2,vers=3,tcp,nocto" in cmd["node01"]
    assert "junkyard.image=bookworm/v2" in cmd["node01"]
    # ... node02 its override
    assert "nfsroot=10.77.0.1:/tank/images/bookworm/v1,vers=3,tcp,nocto" in cmd["node02"]
    assert "junkyard.image=bookworm/v1" in cmd["node02"]
    assert model["images"]["bookworm"]["current_version"] == "v2"
    assert {e["path"] for e in model["exports"] if "/images/" in e["path"]} == {
        "/tank/images/bookworm/v1", "/tank/images/bookworm/v2"}


def test_boot_entries_follow_the_state_file_read_on_the_head(tmp_path):
    state_file = tmp_path / "image-state.yml"
    state_file.write_text("# Managed by junkyard.cluster\n" + yaml.safe_dump(PROMOTED))
    inv = _load_lab()
    _local_head(inv, state_file)
    _node(inv, "node02")["node_image_version"] = "v1"  # a pin beats the state
    model = _model(inv, tmp_path, {})
    cmd = _cmdlines(model)
    assert "nfsroot=10.77.0.1:/tank/images/bookworm/v2,vers=3,tcp,nocto" in cmd["node01"]
    assert "junkyard.image=bookworm/v2" in cmd["node01"]
    assert "nfsroot=10.77.0.1:/tank/images/bookworm/v1,vers=3,tcp,nocto" in cmd["node02"]
    assert "junkyard.image=bookworm/v1" in cmd["node02"]
    assert [n["image_version_source"] for n in model["nodes"]] == ["state", "pin"]
    assert model["image_state"] == PROMOTED


def test_a_missing_state_file_is_no_state(tmp_path):
    inv = _load_lab()
    _local_head(inv, tmp_path / "absent" / "image-state.yml")
    model = _model(inv, tmp_path, {})
    assert "junkyard.image=bookworm/v1" in _cmdlines(model)["node01"]
    assert model["image_state"] == {"schema": 1, "images": {}, "nodes": {}}


def test_the_variable_wins_over_the_file(tmp_path):
    state_file = tmp_path / "image-state.yml"
    state_file.write_text(yaml.safe_dump(PROMOTED))
    inv = _load_lab()
    _local_head(inv, state_file)
    model = _model(inv, tmp_path, {"cluster_image_state": {}})
    assert "junkyard.image=bookworm/v1" in _cmdlines(model)["node01"]


def test_a_malformed_state_file_is_refused_naming_it(tmp_path):
    state_file = tmp_path / "image-state.yml"
    state_file.write_text("schema: 1\nnodes:\n  node01: v2\n node02: v1\n")
    inv = _load_lab()
    _local_head(inv, state_file)
    flat = _refused(inv, tmp_path)
    assert f"The inventory is refused (1 problem): - head:{state_file} is not valid YAML (" in flat


def test_an_inconsistent_state_file_is_refused_naming_file_field_and_value(tmp_path):
    state_file = tmp_path / "image-state.yml"
    state_file.write_text(yaml.safe_dump(dict(PROMOTED, nodes={"node02": "v7"})))
    inv = _load_lab()
    _local_head(inv, state_file)
    flat = _refused(inv, tmp_path)
    assert (f"head:{state_file}: nodes.node02 v7 is not a recorded version of bookworm, "
            "the image of node02 (v1, v2)") in flat


def test_an_unreachable_head_is_never_read_as_no_state(tmp_path):
    inv = _load_lab()
    head = _head(inv)
    for key in [k for k in head if k.startswith("ansible_")]:
        del head[key]
    head.update(ansible_host="127.0.0.1", ansible_port=1, ansible_user="root")
    flat = _refused(inv, tmp_path)
    assert "Look for the image state file on the storage head" in flat
    assert "UNREACHABLE" in flat
