"""The Slurm files rendered from the model: slurm.conf and gres.conf of the lab and
example inventories, exactly, and what the filters refuse."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.junkyard.cluster.plugins.filter.slurm import (
    slurm_conf,
    slurm_gres_conf,
)
from ansible_collections.junkyard.cluster.plugins.module_utils.cluster_model import build_model

from tests.inventory_files import keep_gpus
from tests.unit.test_cluster_model import lab_data
from tests.unit.test_slurm_model import example_data


def _slurm(data):
    model, errors = build_model(data)
    assert errors == []
    return model["slurm"]


LAB_SLURM_CONF = """\
ClusterName=jylab
SlurmctldHost=head(10.77.0.1)
# The nodes fetch this file, gres.conf and cgroup.conf from slurmctld
# (slurmd --conf-server): the node image carries none of them.
SlurmctldParameters=enable_configless
AuthType=auth/munge
SlurmUser=slurm
StateSaveLocation=/tank/slurm/state
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmctldPidFile=/run/slurmctld.pid
# On a node: /run is a tmpfs (the root is read-only); without SlurmdLogFile
# slurmd logs to syslog.
SlurmdSpoolDir=/run/slurmd
SlurmdPidFile=/run/slurmd.pid
# proctrack/cgroup: a job's processes are found through its cgroup (the freezer
# controller), so a job that double-forks is still signalled and cleaned up;
# OpenRC has no systemd scopes, and Debian's OpenRC mounts the cgroup v1
# controllers (rc_cgroup_mode="hybrid"), which slurmd's cgroup/v1 plugin uses
# (cgroup.conf; Slurm 22.05's cgroup/v2 asks systemd for a scope over D-Bus).
# task/cgroup confines each job to its cores, memory and GPUs (the devices
# controller: a job sees only the render nodes of the GPUs it was given);
# task/affinity binds its tasks to those cores.
ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup,task/affinity
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
GresTypes=gpu
# A node that went down (a reboot, also one quicker than SlurmdTimeout, which
# 1 would keep down as "unexpectedly rebooted") is back in service when it
# registers with its definition; a drained node (by an operator or the
# health check) stays drained.
ReturnToService=2
# The health check of the node image drains a node that lost a GPU, has
# memory errors, whose fans are not regulated, whose writable path fell back
# to tmpfs or whose root is not served over the management network; it never
# resumes a node (an operator does).  ANY: busy nodes too, so that no new job
# lands on a node that went bad under a running one.
HealthCheckProgram=/usr/local/sbin/junkyard-slurm-health
HealthCheckInterval=60
HealthCheckNodeState=ANY
# Memory is scheduled (CR_Core_Memory): a job that asks for none gets
# DefMemPerCPU of its partition (the smallest share of its nodes), not a
# whole node.

NodeName=node01 NodeAddr=10.77.0.11 CPUs=2 Sockets=1 CoresPerSocket=2 ThreadsPerCore=1 \
RealMemory=1024 Gres=gpu:mi100:8 State=UNKNOWN
NodeName=node02 NodeAddr=10.77.0.12 CPUs=2 Sockets=1 CoresPerSocket=2 ThreadsPerCore=1 \
RealMemory=1024 Gres=gpu:mi100:8 State=UNKNOWN

PartitionName=gpu Nodes=node01,node02 Default=YES MaxTime=UNLIMITED DefMemPerCPU=512 \
State=UP
"""


def test_the_labs_slurm_conf():
    assert slurm_conf(_slurm(lab_data()), "/tank/slurm/state") == LAB_SLURM_CONF


def test_the_labs_gres_conf_has_each_profiles_gpus():
    assert slurm_gres_conf(_slurm(lab_data())) == "".join(
        f"# hardware profile {profile}: its GPUs in GPU order\n"
        + "".join(f"NodeName={node} Name=gpu Type=mi100 File=/dev/dri/renderD{128 + i} "
                  "Flags=amd_gpu_env\n" for i in range(8))
        for profile, node in (("g292-z20", "node01"), ("g292-z45", "node02")))


def test_a_cluster_without_gpus_gets_a_gres_conf_without_gpus():
    data = lab_data()
    for prof in data["cluster"]["hardware_profiles"].values():
        keep_gpus(prof, 0)
        prof["gpu"] = {"count": 0}
    slurm = _slurm(data)
    assert "Gres=" not in slurm_conf(slurm)
    assert slurm_gres_conf(slurm) == "# No node has a GPU.\n"


def test_the_examples_nodes_partitions_and_gpus():
    slurm = _slurm(example_data())
    text = slurm_conf(slurm)
    assert "StateSaveLocation=/var/lib/slurm/slurmctld\n" in text
    assert "SlurmctldHost=storage01(10.20.0.1)\n" in text
    assert "HealthCheckProgram=/usr/local/sbin/junkyard-slurm-health\nHealthCheckInterval=60\n" \
        "HealthCheckNodeState=ANY\n" in text
    nodes = [line for line in text.splitlines() if line.startswith(("NodeName", "Partition"))]
    z20 = ("CPUs=128 Sockets=1 CoresPerSocket=64 ThreadsPerCore=2 RealMemory=498073 "
           "Gres=gpu:mi100:8 State=UNKNOWN")
    assert nodes == [
        *(f"NodeName=gpu0{i} NodeAddr=10.20.0.1{i} {z20}" for i in range(1, 7)),
        "NodeName=gpu07 NodeAddr=10.20.0.17 CPUs=256 Sockets=2 CoresPerSocket=64 "
        "ThreadsPerCore=2 RealMemory=498073 Gres=gpu:mi100:8 State=UNKNOWN",
        # gpu07 has twice the CPUs for the same memory: its share is the partition's
        "PartitionName=gpu Nodes=gpu01,gpu02,gpu03,gpu04,gpu05,gpu06,gpu07 Default=YES "
        "MaxTime=UNLIMITED DefMemPerCPU=1945 State=UP"]
    z20_nodes = "gpu01,gpu02,gpu03,gpu04,gpu05,gpu06"
    assert slurm_gres_conf(slurm) == (
        "# hardware profile g292-z20: its GPUs in GPU order\n"
        + "".join(f"NodeName={z20_nodes} Name=gpu Type=mi100 File=/dev/dri/renderD{128 + i} "
                  "Flags=amd_gpu_env\n" for i in range(8))
        + "# hardware profile g292-z45: its GPUs in GPU order\n"
        + "".join(f"NodeName=gpu07 Name=gpu Type=mi100 File=/dev/dri/renderD{128 + i} "
                  "Flags=amd_gpu_env\n" for i in range(8)))


def test_partitions_of_the_inventory_are_rendered_in_order():
    data = lab_data()
    data["cluster"]["slurm"] = {"partitions": [
        {"name": "short", "max_time": "1:00:00"},
        {"name": "one", "nodes": ["node02"], "default": True, "max_time": "2-00:00:00"}]}
    lines = slurm_conf(_slurm(data)).splitlines()
    assert lines[-2:] == [
        "PartitionName=short Nodes=node01,node02 Default=NO MaxTime=1:00:00 DefMemPerCPU=512 "
        "State=UP",
        "PartitionName=one Nodes=node02 Default=YES MaxTime=2-00:00:00 DefMemPerCPU=512 "
        "State=UP"]


def test_a_profile_of_a_few_gpus_gets_that_many_render_nodes():
    data = lab_data()
    prof = data["cluster"]["hardware_profiles"]["g292-z20"]
    keep_gpus(prof, 2)
    prof["gpu"].update(model="MI50", gfx_target="gfx906")
    data["nodes"]["node02"]["node_profile"] = "g292-z20"  # both nodes: one line a GPU
    slurm = _slurm(data)
    assert " Gres=gpu:mi50:2 State=UNKNOWN\n" in slurm_conf(slurm)
    assert slurm_gres_conf(slurm) == (
        "# hardware profile g292-z20: its GPUs in GPU order\n"
        "NodeName=node01,node02 Name=gpu Type=mi50 File=/dev/dri/renderD128 Flags=amd_gpu_env\n"
        "NodeName=node01,node02 Name=gpu Type=mi50 File=/dev/dri/renderD129 Flags=amd_gpu_env\n")


def test_the_default_memory_per_cpu_is_the_smallest_share_of_the_partitions_nodes():
    data = example_data()
    data["cluster"]["slurm"] = {"partitions": [
        {"name": "z20", "nodes": ["gpu01", "gpu02"]}, {"name": "all"}]}
    lines = slurm_conf(_slurm(data)).splitlines()
    assert lines[-2].endswith(" DefMemPerCPU=3891 State=UP")  # 498073 MiB / 128 CPUs
    assert lines[-1].endswith(" DefMemPerCPU=1945 State=UP")  # 498073 MiB / 256 CPUs


def test_the_health_check_interval_comes_from_the_model():
    data = lab_data()
    data["cluster"]["slurm"] = {"health": {"interval": 300}}
    assert "\nHealthCheckInterval=300\n" in slurm_conf(_slurm(data))


def test_a_node_whose_profile_does_not_state_its_cpus_is_refused():
    data = lab_data()
    del data["cluster"]["hardware_profiles"]["g292-z20"]["cpu_threads_per_core"]
    del data["cluster"]["hardware_profiles"]["g292-z20"]["memory"]["size_mib"]
    with pytest.raises(AnsibleFilterError, match=(
            r"^node01: cluster_hardware_profiles.g292-z20 does not state cpu_threads_per_core, "
            r"memory.size_mib: Slurm would take the node for 1 CPU and 1 MiB")):
        slurm_conf(_slurm(data))


@pytest.mark.parametrize("args,msg", [
    (({"nodes": []},), "the input must be the model's Slurm section"),
    (("slurm",), "the input must be the model's Slurm section"),
    ((None, "relative/state"), "state_save_location 'relative/state' is not an absolute path"),
    ((None, "/var/lib/slurm", "/var/log/slurm ctld.log"),
     "slurmctld_log_file '/var/log/slurm ctld.log' is not an absolute path"),
])
def test_bad_input_is_refused(args, msg):
    if args[0] is None:
        args = (_slurm(lab_data()), *args[1:])
    with pytest.raises(AnsibleFilterError, match=msg):
        slurm_conf(*args)
    if len(args) == 1:
        with pytest.raises(AnsibleFilterError, match=msg):
            slurm_gres_conf(*args)
