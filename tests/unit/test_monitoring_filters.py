"""The monitoring filters: scrape targets and per-profile GPU limits from the model."""

from __future__ import annotations

import copy

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.junkyard.cluster.plugins.filter import monitoring
from ansible_collections.junkyard.cluster.plugins.module_utils.cluster_model import build_model

from tests.unit.test_cluster_model import lab_data


def lab_model():
    model, errors = build_model(copy.deepcopy(lab_data()))
    assert errors == []
    return model


def test_targets_are_management_addresses_with_node_and_profile_labels():
    model = lab_model()
    out = monitoring.prometheus_targets(model, 9100)
    assert out["head"] == [{"targets": [f"{model['head']['mgmt']['ip']}:9100"],
                            "labels": {"node": model["head"]["name"], "role": "head"}}]
    assert out["nodes"] == [
        {"targets": [f"{n['mgmt']['ip']}:9100"],
         "labels": {"node": n["name"], "profile": n["profile"]}}
        for n in sorted(model["nodes"], key=lambda n: n["name"])]
    # never the data network
    data_ips = {n["data"]["ip"] for n in model["nodes"]}
    assert not any(t.split(":")[0] in data_ips for g in out["nodes"] for t in g["targets"])


@pytest.mark.parametrize("port", [0, 65536, "9100", True])
def test_a_bad_port_is_refused(port):
    with pytest.raises(AnsibleFilterError, match=f"exporter port {port!r} is not a TCP port"):
        monitoring.prometheus_targets(lab_model(), port)


def test_a_node_without_management_address_is_named():
    model = lab_model()
    del model["nodes"][1]["mgmt"]["ip"]
    name = model["nodes"][1]["name"]
    with pytest.raises(AnsibleFilterError, match=f"^{name}: mgmt.ip missing"):
        monitoring.prometheus_targets(model)


MODEL = {"nodes": [{"name": "a", "profile": "g292-z20"}, {"name": "b", "profile": "g292-z45"},
                   {"name": "c", "profile": "g292-z20"}]}


def test_limits_one_per_profile_in_use_with_overrides():
    assert monitoring.gpu_temp_limits(MODEL, 85, {"g292-z45": 80}) == [
        {"profile": "g292-z20", "limit_c": 85}, {"profile": "g292-z45", "limit_c": 80}]


@pytest.mark.parametrize("default,per_profile,msg", [
    (85, {"g292-z99": 80}, "monitoring_gpu_temp_limits names g292-z99, which no node uses "
                           "(profiles in use: g292-z20, g292-z45)"),
    (85, {"g292-z45": "80"}, "monitoring_gpu_temp_limits.g292-z45: '80' is not a temperature"),
    (0, {}, "monitoring_gpu_temp_limit_c: 0 is not a temperature"),
    (85, {"g292-z20": 180}, "monitoring_gpu_temp_limits.g292-z20: 180 is not a temperature"),
])
def test_bad_limits_are_refused_by_name(default, per_profile, msg):
    with pytest.raises(AnsibleFilterError, match="^" + msg.replace("(", r"\(").replace(")", r"\)")):
        monitoring.gpu_temp_limits(MODEL, default, per_profile)
