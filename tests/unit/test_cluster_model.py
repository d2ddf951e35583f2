"""The model's derivation and the BMC secret check, without running Ansible."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from ansible.parsing.vault import EncryptedString, VaultLib, VaultSecret
from ansible_collections.junkyard.cluster.plugins.action.cluster_model import secret_verdict
from ansible_collections.junkyard.cluster.plugins.module_utils.cluster_model import build_model

LAB = Path(__file__).resolve().parents[2] / "inventories" / "lab"


def lab_data(nodes=None):
    cluster = yaml.safe_load((LAB / "group_vars" / "all" / "cluster.yml").read_text())
    hosts = yaml.safe_load((LAB / "hosts.yml").read_text())["all"]["children"]
    group = yaml.safe_load((LAB / "group_vars" / "gpu_nodes.yml").read_text())
    head = hosts["storage_head"]["hosts"]["head"]
    node_vars = {}
    for name, hv in (nodes or hosts["gpu_nodes"]["hosts"]).items():
        node_vars[name] = {"node_profile": group["node_profile"],
                           "node_image": group["node_image"], **copy.deepcopy(hv)}
    return {
        "cluster": {k[len("cluster_"):]: v for k, v in cluster.items()},
        "head": {"name": "head", "vars": {"head_interfaces": head["head_interfaces"]}},
        "nodes": node_vars,
        "secrets": {n: "env" for n in node_vars},
    }


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
    exports = {e["path"]: e["clients"] for e in model["exports"]}
    assert exports["/tank/images/bookworm/v1"] == [
        {"host": "10.77.0.0/24", "options": "ro,no_root_squash,no_subtree_check"}]
    assert exports["/tank/nodes/node02/var-log"] == [
        {"host": "10.77.0.12", "options": "rw,no_root_squash,no_subtree_check"}]
    assert exports["/tank/data/scratch"] == [
        {"host": "10.78.0.0/24", "options": "rw,root_squash,no_subtree_check"}]
    names = {d["name"]: d["properties"] for d in model["datasets"]}
    assert names["tank/images"]["acltype"] == "off"
    assert "tank/images/bookworm/v1" in names
    assert names["tank/data/scratch"] == {"recordsize": "1M"}


def test_adding_a_node_adds_only_its_own_data():
    data = lab_data()
    before, _ = build_model(data)
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
                   "tank/nodes/node03/var-lib-rasdaemon"}
    assert after["nodes"][:2] == before["nodes"]


def test_errors_are_all_reported_at_once():
    data = lab_data()
    data["nodes"]["node01"]["node_profile"] = "nope"
    data["nodes"]["node02"]["node_interfaces"]["mgmt"]["ip"] = "10.1.1.1"
    _, errors = build_model(data)
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
