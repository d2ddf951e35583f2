"""The model's Slurm layer: the controller, the partitions and each node's
definition from its hardware profile, and the refusals of cluster_slurm."""

from __future__ import annotations

import pytest
from ansible_collections.junkyard.cluster.plugins.module_utils.cluster_model import build_model
from ansible_collections.junkyard.cluster.plugins.module_utils.cluster_model.slurm import (
    incomplete,
    real_memory,
)

from tests.inventory_files import EXAMPLE, keep_gpus, model_data
from tests.unit.test_cluster_model import lab_data


def example_data():
    """The example inventory as build_model reads it (the files as written)."""
    return model_data(EXAMPLE)


def _model(data):
    model, errors = build_model(data)
    assert errors == []
    return model["slurm"]


def _errors(data):
    model, errors = build_model(data)
    assert model is None
    return errors


def _with_slurm(slurm, data=None):
    data = data or lab_data()
    data["cluster"]["slurm"] = slurm
    return data


def test_the_lab_gets_one_default_partition_and_the_head_as_controller():
    slurm = _model(lab_data())
    assert slurm["cluster_name"] == "jylab"
    assert slurm["controller"] == {"name": "head", "address": "10.77.0.1"}
    assert slurm["partitions"] == [{"name": "gpu", "nodes": ["node01", "node02"],
                                    "default": True, "max_time": "UNLIMITED",
                                    "def_mem_per_cpu": 512}]
    assert slurm["slurmd_spool_dir"] == "/run/slurmd"
    # 2 cores; 1536 MiB less the minimum reserve of 512 MiB (5 % would be 77); the
    # profile's GPUs in GPU order
    assert slurm["nodes"][0] == {
        "name": "node01", "address": "10.77.0.11", "profile": "g292-z20", "sockets": 1,
        "cores_per_socket": 2, "threads_per_core": 1, "cpus": 2, "real_memory": 1024,
        "gres": [{"name": "gpu", "type": "mi100", "count": 8,
                  "files": [f"/dev/dri/renderD{128 + i}" for i in range(8)]}]}
    assert slurm["munge_key"] == {
        "node_path": "/var/lib/ssh-host-keys/munge.key",
        "head_paths": [{"node": "node01", "path": "/tank/nodes/node01/ssh-host-keys/munge.key"},
                       {"node": "node02", "path": "/tank/nodes/node02/ssh-host-keys/munge.key"}]}


def test_the_example_nodes_get_their_profiles_cpus_memory_and_gpus():
    slurm = _model(example_data())
    by_name = {n["name"]: n for n in slurm["nodes"]}
    assert sorted(by_name) == [f"gpu0{i}" for i in range(1, 8)]
    z20 = by_name["gpu01"]
    assert (z20["sockets"], z20["cores_per_socket"], z20["threads_per_core"], z20["cpus"]) \
        == (1, 64, 2, 128)
    # 512 GiB less 5 % (26215 MiB, rounded up)
    assert z20["real_memory"] == 524288 - 26215
    assert z20["gres"] == [{"name": "gpu", "type": "mi100", "count": 8,
                            "files": [f"/dev/dri/renderD{128 + i}" for i in range(8)]}]
    z45 = next(n for n in slurm["nodes"] if n["profile"] == "g292-z45")
    assert (z45["sockets"], z45["cpus"]) == (2, 256)
    assert slurm["controller"] == {"name": "storage01", "address": "10.20.0.1"}


def test_partitions_controller_and_options_from_the_inventory():
    slurm = _model(_with_slurm({
        "controller": "node02",
        "partitions": [{"name": "short", "nodes": ["node01", "node02"], "max_time": "1:00:00"},
                       {"name": "long", "nodes": ["node02"], "default": True, "max_time": 4320}],
        "slurmd_spool_dir": "/var/log/slurmd",
        "memory_reserve_percent": 10, "memory_reserve_min_mib": 0}))
    assert slurm["controller"] == {"name": "node02", "address": "10.77.0.12"}
    assert slurm["partitions"] == [
        {"name": "short", "nodes": ["node01", "node02"], "default": False, "max_time": "1:00:00",
         "def_mem_per_cpu": 691},
        {"name": "long", "nodes": ["node02"], "default": True, "max_time": "4320",
         "def_mem_per_cpu": 691}]
    assert slurm["slurmd_spool_dir"] == "/var/log/slurmd"
    assert slurm["nodes"][0]["real_memory"] == 1536 - 154


def test_the_health_check_defaults_and_the_nodes_the_fan_daemon_regulates():
    health = _model(lab_data())["health"]
    # both lab profiles have fan zones
    assert health == {"program": "/usr/local/sbin/junkyard-slurm-health",
                      "config": "/etc/junkyard/slurm-health.conf", "interval": 60,
                      "ce_per_day_limit": 10, "fan_metrics_max_age_s": 30,
                      "fan_nodes": ["node01", "node02"]}
    assert _model(example_data())["health"]["fan_nodes"] == [f"gpu0{i}" for i in range(1, 8)]


def test_the_health_check_settings_from_the_inventory():
    data = _with_slurm({"health": {"interval": 300, "ce_per_day_limit": 2.5,
                                   "fan_metrics_max_age_s": 10}})
    data["cluster"]["hardware_profiles"]["g292-z45"]["fan_zones"] = []  # node02's
    health = _model(data)["health"]
    assert (health["interval"], health["ce_per_day_limit"], health["fan_metrics_max_age_s"]) \
        == (300, 2.5, 10)
    assert health["fan_nodes"] == ["node01"]


def test_without_a_default_the_first_partition_is_the_default():
    slurm = _model(_with_slurm({"partitions": [{"name": "a"}, {"name": "b"}]}))
    assert [(p["name"], p["default"], p["nodes"]) for p in slurm["partitions"]] == [
        ("a", True, ["node01", "node02"]), ("b", False, ["node01", "node02"])]


def test_a_profile_without_cpus_or_memory_gives_an_incomplete_definition():
    data = lab_data()
    prof = data["cluster"]["hardware_profiles"]["g292-z20"]
    del prof["cpu_cores_per_socket"]
    del prof["memory"]["size_mib"]
    slurm = _model(data)
    node = slurm["nodes"][0]
    assert node["cpus"] is None and node["real_memory"] is None
    assert slurm["partitions"][0]["def_mem_per_cpu"] is None
    assert incomplete(node) == ["cpu_cores_per_socket", "memory.size_mib"]


def test_real_memory_keeps_the_larger_reserve():
    assert real_memory(1536, 5, 512) == 1024
    assert real_memory(524288, 5, 512) == 498073
    assert real_memory(1000, 0, 0) == 1000


@pytest.mark.parametrize("slurm,msg", [
    ({"controller": "storage99"},
     "cluster: cluster_slurm.controller storage99 is not a host of the inventory (the storage "
     "head head or a node of gpu_nodes)"),
    ({"partitions": [{"name": "gpu", "nodes": ["node01", "node09"]}]},
     "cluster: cluster_slurm.partitions[0].nodes node09 is not a node of gpu_nodes"),
    ({"partitions": [{"name": "gpu"}, {"name": "gpu", "nodes": ["node01"]}]},
     "cluster: cluster_slurm.partitions[1].name gpu repeats cluster_slurm.partitions[0]"),
    ({"partitions": [{"name": "gpu", "nodes": ["node01"]}]},
     "node02: cluster_slurm.partitions node02 is in no partition: no job could run on it"),
    ({"partitions": [{"name": "gpu", "default": True}, {"name": "cpu", "default": True}]},
     "cluster: cluster_slurm.partitions[1].default True but gpu is the default partition "
     "already (one default partition)"),
    ({"partitions": [{"name": "gpu", "gpus": 8}]},
     "cluster: cluster_slurm.partitions[0] gpus is not a known key; known keys: name, nodes, "
     "default, max_time"),
    ({"partition": []},
     "cluster: cluster_slurm partition is not a known key (did you mean partitions?); known "
     "keys: controller, partitions, slurmd_spool_dir, memory_reserve_percent, "
     "memory_reserve_min_mib, health"),
    ({"partitions": []},
     "cluster: cluster_slurm.partitions [] lists no partition (leave it out for one partition "
     "gpu with every node)"),
    ({"partitions": [{"name": "gpu", "nodes": []}]},
     "cluster: cluster_slurm.partitions[0].nodes [] lists no node (leave nodes out for every "
     "node)"),
    ({"partitions": [{"name": "gpu", "nodes": "node01"}]},
     "cluster: cluster_slurm.partitions[0].nodes node01 must be a list of node names, not a "
     "string: write it as a YAML list ([a, b] or one '- ' line each)"),
    ({"partitions": [{"name": "g p u"}]},
     "cluster: cluster_slurm.partitions[0].name g p u is not a partition name (letters, "
     "digits, _ and -)"),
    ({"partitions": [{"name": "gpu", "max_time": "two days"}]},
     "cluster: cluster_slurm.partitions[0].max_time two days is not a Slurm time limit "
     "(minutes, h:m:s, d-h:m:s or UNLIMITED)"),
    ({"slurmd_spool_dir": "/var/spool/slurmd"},
     "cluster: cluster_slurm.slurmd_spool_dir /var/spool/slurmd is on the node's read-only "
     "root: put it under /run or make it a writable path (cluster_writable_paths: /var/log, "
     "/var/lib/rasdaemon, /var/lib/prometheus/node-exporter, /tmp, /var/tmp, /var/lib/dhcp, "
     "/var/lib/nfs, /run/junkyard, /etc/ssh, /var/lib/sudo, /var/lib/ssh-host-keys)"),
    ({"slurmd_spool_dir": "spool"},
     "cluster: cluster_slurm.slurmd_spool_dir spool is not an absolute path"),
    ({"memory_reserve_percent": 100},
     "cluster: cluster_slurm.memory_reserve_percent 100 must be a number from 0 to below 100"),
    ({"memory_reserve_min_mib": 2000},
     "cluster: cluster_hardware_profiles.g292-z20.memory.size_mib 1536 leaves no memory for "
     "jobs after the system's reserve (cluster_slurm.memory_reserve_percent 5, "
     "memory_reserve_min_mib 2000)"),
    ("gpu",
     "cluster: cluster_slurm gpu must be a mapping, not a string"),
    ({"health": {"interval": 0}},
     "cluster: cluster_slurm.health.interval 0 must be an integer >= 1 (seconds between two "
     "runs of the health check)"),
    ({"health": {"interval": "60"}},
     "cluster: cluster_slurm.health.interval 60 must be an integer, not a string"),
    ({"health": {"interval": 1.5}},
     "cluster: cluster_slurm.health.interval 1.5 must be an integer, not a number"),
    ({"health": {"ce_per_day_limit": 0}},
     "cluster: cluster_slurm.health.ce_per_day_limit 0 must be a number > 0"),
    ({"health": {"ce_per_day_limit": True}},
     "cluster: cluster_slurm.health.ce_per_day_limit True must be a number, not a boolean"),
    ({"health": {"fan_metrics_max_age_s": -5}},
     "cluster: cluster_slurm.health.fan_metrics_max_age_s -5 must be a number > 0"),
    ({"health": {"fan_metrics_max_age_s": float("inf")}},
     "cluster: cluster_slurm.health.fan_metrics_max_age_s inf must be a number > 0"),
    ({"health": {"intervall": 30}},
     "cluster: cluster_slurm.health intervall is not a known key (did you mean interval?); "
     "known keys: interval, ce_per_day_limit, fan_metrics_max_age_s"),
    ({"health": 60},
     "cluster: cluster_slurm.health 60 must be a mapping, not a number"),
])
def test_cluster_slurm_refusals_name_the_field_and_value(slurm, msg):
    assert msg in _errors(_with_slurm(slurm))


@pytest.mark.parametrize("change,msg", [
    (("cpu_cores_per_socket", 0),
     "cluster: cluster_hardware_profiles.g292-z20.cpu_cores_per_socket 0 must be an integer "
     ">= 1"),
    (("cpu_threads_per_core", "2"),
     "cluster: cluster_hardware_profiles.g292-z20.cpu_threads_per_core 2 must be an integer, "
     "not "
     "a string"),
    (("gpu", {"model": "MI 100", "count": 8, "gfx_target": "gfx908", "max_power_w": 300}),
     "cluster: cluster_hardware_profiles.g292-z20.gpu.model MI 100 is not a GPU model Slurm "
     "can "
     "take as the GRES type (letters, digits, _ . -; e.g. MI100, written gpu:mi100)"),
    (("memory", {"size_mib": "1536"}),
     "cluster: cluster_hardware_profiles.g292-z20.memory.size_mib 1536 must be an integer, "
     "not "
     "a string"),
])
def test_profile_fields_of_the_node_definition_are_checked(change, msg):
    data = lab_data()
    key, value = change
    data["cluster"]["hardware_profiles"]["g292-z20"][key] = value
    errors = _errors(data)
    assert any(e.startswith(msg) for e in errors), errors


def test_a_gpu_less_profile_needs_no_model():
    data = lab_data()
    prof = data["cluster"]["hardware_profiles"]["g292-z45"]  # node02's
    keep_gpus(prof, 0)
    prof["gpu"] = {"count": 0}
    assert _model(data)["nodes"][1]["gres"] == []
