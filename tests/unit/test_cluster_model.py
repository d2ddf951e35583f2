"""The model's derivation, the image state it follows, and the BMC secret check, without
running Ansible."""

from __future__ import annotations

import copy

import pytest
from ansible.parsing.vault import EncryptedString, VaultLib, VaultSecret
from ansible_collections.junkyard.cluster.plugins.action.cluster_model import (
    image_state,
    secret_verdict,
)
from ansible_collections.junkyard.cluster.plugins.filter.image import image_builds
from ansible_collections.junkyard.cluster.plugins.module_utils.cluster_model import build_model

from tests.inventory_files import LAB, model_data


def lab_data():
    """The lab inventory as build_model reads it (the files as written)."""
    data = model_data(LAB)
    # not templated: its one lookup (the proxy port) at its default
    data["cluster"]["apt_proxy"] = "http://127.0.0.1:3142"
    return data


def test_lab_model_derives_boot_entries_and_least_privilege_exports():
    model, errors = build_model(lab_data())
    assert errors == []
    n2 = model["nodes"][1]
    assert n2["boot"]["grub_config"] == "grub/grub.cfg-01-52-54-00-77-00-12"
    assert n2["boot"]["kernel"] == "/images/bookworm/v1/boot/vmlinuz"
    assert n2["boot"]["kernel_old"] == "/images/bookworm/v1/boot/vmlinuz.old"
    assert "ip=10.77.0.12:::255.255.255.0:node02::off" in n2["boot"]["cmdline"]
    assert " ro " in f" {n2['boot']['cmdline']} "
    assert n2["writable"][0] == {"path": "/var/log", "kind": "persistent",
                                 "source": "10.77.0.1:/tank/nodes/node02/var-log"}
    # each node's own SSH host keys: made on the head in its own dataset
    assert n2["ssh_host_keys"] == {"name": "node02", "dir": "/tank/nodes/node02/ssh-host-keys",
                                   "names": ["node02", n2["fqdn"], "10.77.0.12"]}
    assert model["ssh_host_keys_path"] == "/var/lib/ssh-host-keys"
    exports = {e["path"]: e["clients"] for e in model["exports"]}
    assert exports["/tank/images/bookworm/v1"] == [
        {"host": ip, "options": "ro,no_root_squash,no_subtree_check,mp"}
        for ip in ("10.77.0.1", "10.77.0.11", "10.77.0.12")]
    assert exports["/tank/nodes/node02/var-log"] == [
        {"host": "10.77.0.12", "options": "rw,no_root_squash,no_subtree_check,mp"}]
    assert exports["/tank/data/scratch"] == [
        {"host": ip, "options": "rw,root_squash,no_subtree_check,mp"}
        for ip in ("10.78.0.11", "10.78.0.12")]
    names = {d["name"]: d["properties"] for d in model["datasets"]}
    assert names["tank/images"]["acltype"] == "off"
    assert "tank/images/bookworm/v1" in names
    assert names["tank/data/projects"] == {"recordsize": "1M"}
    assert names["tank/data/scratch"] == {"recordsize": "1M", "sync": "disabled"}


def test_boot_server_and_module_blacklist_reach_the_boot_entry():
    data = lab_data()
    data["cluster"]["hardware_profiles"]["g292-z20"]["kernel_module_blacklist"] = [
        "floppy", "pcspkr"]
    model, errors = build_model(data)
    assert errors == []
    boot = model["nodes"][0]["boot"]
    assert boot["server"] == "10.77.0.1"
    words = boot["cmdline"].split()
    # the profile's own arguments, then the blacklist, once
    assert words[-1] == "modprobe.blacklist=floppy,pcspkr"
    assert sum(w.startswith("modprobe.blacklist=") for w in words) == 1
    del data["cluster"]["hardware_profiles"]["g292-z20"]["kernel_module_blacklist"]
    model, _unused = build_model(data)
    assert not any(w.startswith("modprobe.blacklist=")
                   for w in model["nodes"][0]["boot"]["cmdline"].split())


def test_each_node_carries_the_dimm_labels_of_its_profile():
    """What the health report expects on a node (ecc_facts' expected_labels) is the
    model's: the node's profile's labels, normalised, [] where the profile has none."""
    data = lab_data()
    data["cluster"]["hardware_profiles"]["g292-z20"]["memory"]["dimm_labels"] = [
        "DIMM_P0_A0", {"label": "DIMM_P0_B0 ", "location": ["1.0.0", "1.1.0"]}]
    model, errors = build_model(data)
    assert errors == []
    labels = {n["name"]: (n["profile"], n["dimm_labels"]) for n in model["nodes"]}
    assert labels == {"node01": ("g292-z20", ["DIMM_P0_A0", "DIMM_P0_B0"]),
                      "node02": ("g292-z45", [])}


def test_the_validated_hardware_profiles_are_published_for_the_roles_that_read_them():
    """The fan daemon and the ECC monitor take their profiles from the model (fan zones,
    sensors, memory boards): what the inventory gave, once it was accepted."""
    data = lab_data()
    model, errors = build_model(data)
    assert errors == []
    assert model["hardware_profiles"] == data["cluster"]["hardware_profiles"]
    assert model["hardware_profiles"]["g292-z20"]["fan_zones"], "the lab's G292 has fan zones"
    data["cluster"]["hardware_profiles"]["g292-z20"]["gpu"]["count"] = -1
    model, errors = build_model(data)
    assert model is None and errors


def test_a_repeated_dimm_label_refuses_the_inventory():
    data = lab_data()
    data["cluster"]["hardware_profiles"]["g292-z45"]["memory"]["dimm_labels"] = [
        "DIMM_P0_A0", "DIMM_P0_A0"]
    model, errors = build_model(data)
    assert model is None
    assert errors == ["cluster: cluster_hardware_profiles.g292-z45.memory.dimm_labels[1] label "
                      "DIMM_P0_A0 is repeated"]


def test_initramfs_modules_are_every_booting_profiles_or_none():
    data = lab_data()
    profiles = data["cluster"]["hardware_profiles"]
    model, errors = build_model(data)
    assert errors == [] and model["initramfs_modules"] == ["virtio_net", "virtio_pci"]
    # a second profile that some node boots with: the union, sorted
    profiles["other"] = {**copy.deepcopy(profiles["g292-z45"]), "initramfs_modules": ["igb"]}
    data["nodes"]["node02"]["node_profile"] = "other"
    model, errors = build_model(data)
    assert errors == [] and model["initramfs_modules"] == ["igb", "virtio_net", "virtio_pci"]
    # one booting profile that names no driver: every NIC driver (None)
    del profiles["other"]["initramfs_modules"]
    model, errors = build_model(data)
    assert errors == [] and model["initramfs_modules"] is None
    # a profile no node boots with does not count
    data["nodes"]["node02"]["node_profile"] = "g292-z45"
    model, _unused = build_model(data)
    assert model["initramfs_modules"] == ["virtio_net", "virtio_pci"]


def test_adding_a_node_adds_only_its_own_data():
    data = lab_data()
    before, _unused = build_model(data)
    more = copy.deepcopy(data)
    more["nodes"]["node03"] = copy.deepcopy(more["nodes"]["node02"])
    n3 = more["nodes"]["node03"]
    n3["node_interfaces"]["mgmt"].update(mac="52:54:00:77:00:13", ip="10.77.0.13")
    n3["node_interfaces"]["data"].update(mac="52:54:00:78:00:13", ip="10.78.0.13")
    n3["node_bmc"]["port"] = 6233
    more["secrets"]["node03"] = "env"
    after, errors = build_model(more)
    assert errors == []
    new = {d["name"] for d in after["datasets"]} - {d["name"] for d in before["datasets"]}
    assert new == {"tank/nodes/node03", "tank/nodes/node03/var-log",
                   "tank/nodes/node03/var-lib-rasdaemon", "tank/nodes/node03/metrics",
                   "tank/nodes/node03/ssh-host-keys"}
    assert after["nodes"][:2] == before["nodes"]


def test_errors_are_all_reported_at_once():
    data = lab_data()
    data["nodes"]["node01"]["node_profile"] = "nope"
    data["nodes"]["node02"]["node_interfaces"]["mgmt"]["ip"] = "10.1.1.1"
    _unused, errors = build_model(data)
    assert len(errors) == 2


VAULT = VaultLib([("default", VaultSecret(b"pw"))])


@pytest.mark.parametrize(("raw", "others", "verdict"), [
    ("{{ lookup('ansible.builtin.env', 'X') }}", {}, "env"),
    ('{{ lookup("env", "X") }}', {}, "env"),
    ("{{ query('env', 'X') | first }}", {}, "env"),
    ("hunter2", {}, "plain"),
    ("{{ vault_pw }}", {"vault_pw": "hunter2"}, "plain"),
    ("{{ indirect }}", {"indirect": "{{ lookup('env', 'X') }}"}, "env"),
    ("{{ missing_var }}", {}, "plain"),
    (None, {}, "absent"),
    ("", {}, "absent"),
    (12345, {}, "plain"),
])
def test_secret_verdict(raw, others, verdict):
    assert secret_verdict(raw, others) == verdict


def test_secret_verdict_vault_and_vault_reference():
    ciphertext = VAULT.encrypt("s3cret").decode()
    enc = EncryptedString(ciphertext=ciphertext)
    assert secret_verdict(enc, {}) == "vault"
    assert secret_verdict("{{ vault_bmc }}", {"vault_bmc": enc}) == "vault"


# --------------------------------------------------------------------------- the image state

STATE_FILE = "head:/etc/junkyard/image-state.yml"
V12 = {"v1": {"origin": None}, "v2": {"origin": "v1"}}


def with_state(state, pins=None, source=STATE_FILE):
    data = lab_data()
    for node, version in (pins or {}).items():
        data["nodes"][node]["node_image_version"] = version
    data["image_state"] = state
    data["image_state_file"] = source
    return data


def node(model, name):
    return next(n for n in model["nodes"] if n["name"] == name)


def promoted(nodes=None, versions=None, current="v2", previous="v1"):
    img = {"current": current, "versions": versions or V12}
    if previous:
        img["previous"] = previous
    return {"schema": 1, "images": {"bookworm": img}, "nodes": nodes or {}}


@pytest.mark.parametrize(("state", "pins", "version", "source"), [
    # 4. nothing in the state: the inventory's current_version
    (None, {}, "v1", "inventory"),
    ({}, {}, "v1", "inventory"),
    ({"schema": 1, "images": {}, "nodes": {}}, {}, "v1", "inventory"),
    # 3. the state's current version of the image wins over the inventory's
    (promoted(), {}, "v2", "state"),
    # 2. the node's override wins over the state's current version
    (promoted(nodes={"node01": "v1"}), {}, "v1", "override"),
    (promoted(current="v1", previous=None, nodes={"node01": "v2"}), {}, "v2", "override"),
    # 1. the inventory's pin wins over everything
    (promoted(nodes={"node01": "v2"}, current="v2"), {"node01": "v1"}, "v1", "pin"),
    (promoted(current="v1", previous=None, nodes={"node01": "v1"}), {"node01": "v2"}, "v2",
     "pin"),
], ids=["no-state", "empty", "empty-schema", "state-current", "override", "override-newer",
        "pin-over-override", "pin-newer"])
def test_boot_entry_follows_the_image_state(state, pins, version, source):
    model, errors = build_model(with_state(state, pins))
    assert errors == []
    n1 = node(model, "node01")
    assert n1["image_version"] == version
    assert n1["image_version_source"] == source
    cmdline = n1["boot"]["cmdline"].split()
    assert f"nfsroot=10.77.0.1:/tank/images/bookworm/{version},vers=3,tcp,nocto" in cmdline
    assert f"junkyard.image=bookworm/{version}" in cmdline
    assert n1["root_path"] == f"/tank/images/bookworm/{version}"
    assert n1["image_dataset"] == f"tank/images/bookworm/{version}"
    assert n1["boot"]["kernel"] == f"/images/bookworm/{version}/boot/vmlinuz"


def test_current_version_exports_datasets_and_builds_are_the_effective_ones():
    versions = {"v1": {"origin": None}, "v2": {"origin": "v1"}, "v3": {"origin": "v2"}}
    state = promoted(nodes={"node02": "v2"}, versions=versions, current="v3", previous="v2")
    model, errors = build_model(with_state(state))
    assert errors == []
    assert model["images"]["bookworm"]["current_version"] == "v3"
    assert model["images"]["bookworm"]["previous_version"] == "v2"
    assert model["image_state"] == state
    assert [(n["name"], n["image_version"]) for n in model["nodes"]] == [
        ("node01", "v3"), ("node02", "v2")]
    # the inventory's v1 is neither booted nor current any more: not exported, not created
    image_exports = [e["path"] for e in model["exports"] if "/images/" in e["path"]]
    assert image_exports == ["/tank/images/bookworm/v2", "/tank/images/bookworm/v3"]
    image_sets = [d["name"] for d in model["datasets"]
                  if d["name"].startswith("tank/images/bookworm/")]
    assert image_sets == ["tank/images/bookworm/v3"]
    # the image layer builds what the model says, without knowing about the state
    builds = image_builds(model)
    assert [(b["version"], b["nodes"]) for b in builds] == [("v2", ["node02"]),
                                                            ("v3", ["node01"])]


def test_no_state_keeps_the_inventory_model():
    before, _unused = build_model(lab_data())
    after, errors = build_model(with_state(None, source=None))
    assert errors == []
    assert after == before
    assert after["images"]["bookworm"]["previous_version"] is None
    assert after["image_state"] == {"schema": 1, "images": {}, "nodes": {}}


def test_an_override_of_a_host_that_is_not_a_node_is_ignored():
    model, errors = build_model(with_state(promoted(nodes={"node09": "v7"})))
    assert errors == []
    assert [n["image_version"] for n in model["nodes"]] == ["v2", "v2"]


REVERTED = {"image": "bookworm", "version": "v2", "to": "v1",
            "reason": "did not come up on v2 within 900 s", "at": "2026-12-07T01:02:03Z"}


def test_each_node_carries_its_revert_record_or_none():
    state = dict(promoted(current="v1", previous=None), reverted={"node01": REVERTED})
    model, errors = build_model(with_state(state))
    assert errors == []
    assert node(model, "node01")["image_reverted"] == REVERTED
    assert node(model, "node02")["image_reverted"] is None
    assert model["image_state"]["reverted"] == {"node01": REVERTED}
    # stale: pinned to another version since, the node does not boot the record's `to`
    model, errors = build_model(with_state(state, pins={"node01": "v2"}))
    assert errors == []
    assert node(model, "node01")["image_reverted"] is None
    # no reverts: None everywhere, and the published state has no reverted
    model, errors = build_model(with_state(promoted()))
    assert [n["image_reverted"] for n in model["nodes"]] == [None, None]
    assert "reverted" not in model["image_state"]


@pytest.mark.parametrize(("reverted", "message"), [
    ({"node01": {**REVERTED, "version": "v7"}},
     f"{STATE_FILE}: reverted.node01.version v7 is not a recorded version of bookworm, the "
     "image of node01 (v1, v2)"),
    ({"node01": {**REVERTED, "at": "yesterday"}},
     f"{STATE_FILE}: reverted.node01.at yesterday is not a UTC time like "
     "2026-12-07T01:02:03Z"),
])
def test_a_bad_revert_record_is_refused_naming_file_field_and_value(reverted, message):
    model, errors = build_model(with_state(dict(promoted(), reverted=reverted)))
    assert model is None
    assert errors == [message]


@pytest.mark.parametrize(("state", "message"), [
    ([], f"{STATE_FILE}: [] must be a mapping of schema, images and nodes"),
    ({"schema": 2, "images": {}}, f"{STATE_FILE}: schema 2 is not 1"),
    ({"node": {"node01": "v2"}},
     f"{STATE_FILE}: node is not a key of the image state (schema, images, nodes, "
     "reverted)"),
    ({"images": ["bookworm"]},
     f"{STATE_FILE}: images ['bookworm'] must be a mapping of image name to its record"),
    ({"images": {"bookworm": {"current": "v1", "versions": V12, "latest": "v2"}}},
     f"{STATE_FILE}: images.bookworm latest is not a key of an image record "
     "(current, previous, versions)"),
    ({"images": {"bookworm": {"current": "v1", "versions": {"v1": "none"}}}},
     f"{STATE_FILE}: images.bookworm.versions.v1 none must be a mapping"),
    ({"images": {"bookworm": {"current": "v1/../..", "versions": V12}}},
     f"{STATE_FILE}: images.bookworm.current v1/../.. is not a version name"),
    (promoted(nodes={"node01": 3}), f"{STATE_FILE}: nodes.node01 3 is not a version name"),
    ({"images": {"trixie": {"current": "t1", "versions": {"t1": {"origin": None}}}}},
     f"{STATE_FILE}: images trixie is not an image in cluster_images (bookworm)"),
    (promoted(current="v3"),
     f"{STATE_FILE}: images.bookworm.current v3 is not a recorded version of bookworm (v1, v2)"),
    (promoted(previous="v0"),
     f"{STATE_FILE}: images.bookworm.previous v0 is not a recorded version of bookworm "
     "(v1, v2)"),
    (promoted(versions={"v1": {"origin": "v0"}, "v2": {"origin": "v1"}}),
     f"{STATE_FILE}: images.bookworm.versions.v1.origin v0 is not a recorded version of "
     "bookworm (v1, v2)"),
    (promoted(nodes={"node02": "v7"}),
     f"{STATE_FILE}: nodes.node02 v7 is not a recorded version of bookworm, the image of "
     "node02 (v1, v2)"),
    ({"nodes": {"node02": "v2"}},
     f"{STATE_FILE}: nodes.node02 v2 is not a recorded version of bookworm, the image of "
     "node02 (none recorded)"),
], ids=["not-a-mapping", "schema", "unknown-key", "images-list", "unknown-image-key",
        "version-record", "current-name", "node-version-name", "unknown-image",
        "current-unrecorded", "previous-unrecorded", "origin-unrecorded",
        "override-unrecorded", "override-without-record"])
def test_inconsistent_state_is_refused_naming_file_field_and_value(state, message):
    model, errors = build_model(with_state(state))
    assert model is None
    assert any(e.startswith(message) for e in errors), errors


def test_state_given_as_variable_is_named_so():
    _unused, errors = build_model(with_state(promoted(nodes={"node02": "v7"}), source=None))
    assert errors == ["cluster: cluster_image_state.nodes.node02 v7 is not a recorded version "
                      "of bookworm, the image of node02 (v1, v2)"]
    _unused, errors = build_model(with_state([], source=None))
    assert errors == ["cluster: cluster_image_state [] must be a mapping of schema, images "
                      "and nodes"]


def test_state_errors_come_with_the_inventory_errors():
    data = with_state(promoted(current="v3"))
    data["nodes"]["node01"]["node_profile"] = "nope"
    _unused, errors = build_model(data)
    assert len(errors) == 2


@pytest.mark.parametrize(("args", "state", "where", "error"), [
    ({}, None, None, None),
    ({"image_state": {"schema": 1}}, {"schema": 1}, None, None),
    ({"image_state": "{schema: 1, nodes: {node01: v2}}"},
     {"schema": 1, "nodes": {"node01": "v2"}}, None, None),
    ({"image_state": "{schema: 1", "image_state_content": "schema: 1"}, None, None,
     "cluster: cluster_image_state is not valid YAML ("),
    # the variable wins over the file
    ({"image_state": {}, "image_state_content": "schema: 2",
      "image_state_file": "/etc/junkyard/image-state.yml"}, {}, None, None),
    ({"image_state_content": "schema: 1\nnodes:\n  node01: v2\n",
      "image_state_file": "/etc/junkyard/image-state.yml"},
     {"schema": 1, "nodes": {"node01": "v2"}}, STATE_FILE, None),
    ({"image_state_content": "", "image_state_file": "/etc/junkyard/image-state.yml"},
     None, STATE_FILE, None),
    ({"image_state_content": "schema: 1\nnodes:\n  node01: v2\n node02: v1\n",
      "image_state_file": "/etc/junkyard/image-state.yml"}, None, STATE_FILE,
     f"{STATE_FILE} is not valid YAML ("),
])
def test_action_reads_the_state_argument_or_the_file(args, state, where, error):
    got_state, got_where, errors = image_state(args, "head")
    assert got_state == state
    assert got_where == where
    if error is None:
        assert errors == []
    else:
        assert len(errors) == 1 and errors[0].startswith(error), errors
        assert "line " in errors[0]
