# Copyright (c) 2026, junkyard.cluster developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the Slurm roles: the files slurmctld serves, rendered from the
model's ``slurm`` section (``cluster_model.slurm``).

- ``slurm_conf(slurm, state_save_location, slurmctld_log_file)``: slurm.conf.
- ``slurm_gres_conf(slurm)``: gres.conf, the GPUs of each hardware profile.

The nodes run slurmd configless: they fetch both files (and cgroup.conf) from
slurmctld, so the shared node image carries none of them.
"""

from __future__ import annotations

import posixpath

from ansible.errors import AnsibleFilterError

# Why these plugins (written into slurm.conf above them).
_PLUGIN_NOTE = """\
# proctrack/cgroup: a job's processes are found through its cgroup (the freezer
# controller), so a job that double-forks is still signalled and cleaned up;
# OpenRC has no systemd scopes, and Debian's OpenRC mounts the cgroup v1
# controllers (rc_cgroup_mode="hybrid"), which slurmd's cgroup/v1 plugin uses
# (cgroup.conf; Slurm 22.05's cgroup/v2 asks systemd for a scope over D-Bus).
# task/cgroup confines each job to its cores, memory and GPUs (the devices
# controller: a job sees only the render nodes of the GPUs it was given);
# task/affinity binds its tasks to those cores."""


def _section(slurm):
    if not isinstance(slurm, dict) or \
            not {"controller", "nodes", "partitions", "health"} <= set(slurm):
        raise AnsibleFilterError("the input must be the model's Slurm section "
                                 "(cluster_model.slurm)")
    return slurm


def _absolute(name, path):
    if not isinstance(path, str) or not path.startswith("/") or any(c.isspace() for c in path):
        raise AnsibleFilterError(f"{name} {path!r} is not an absolute path without white space")
    return posixpath.normpath(path)


_FIELDS = (("sockets", "cpu_sockets"), ("cores_per_socket", "cpu_cores_per_socket"),
           ("threads_per_core", "cpu_threads_per_core"), ("real_memory", "memory.size_mib"))


def _node_line(node):
    missing = [field for key, field in _FIELDS if node.get(key) is None]
    if missing:
        raise AnsibleFilterError(
            f"{node['name']}: cluster_hardware_profiles.{node['profile']} does not state "
            f"{', '.join(missing)}: Slurm would take the node for 1 CPU and 1 MiB (write them "
            "as slurmd -C reports them on the node)")
    words = [f"NodeName={node['name']}", f"NodeAddr={node['address']}", f"CPUs={node['cpus']}",
             f"Sockets={node['sockets']}", f"CoresPerSocket={node['cores_per_socket']}",
             f"ThreadsPerCore={node['threads_per_core']}", f"RealMemory={node['real_memory']}"]
    if node["gres"]:
        words.append("Gres=" + ",".join(f"{g['name']}:{g['type']}:{g['count']}"
                                        for g in node["gres"]))
    return " ".join([*words, "State=UNKNOWN"])


def _partition_line(part):
    words = [f"PartitionName={part['name']}", f"Nodes={','.join(part['nodes'])}",
             f"Default={'YES' if part['default'] else 'NO'}", f"MaxTime={part['max_time']}"]
    if part.get("def_mem_per_cpu"):
        words.append(f"DefMemPerCPU={part['def_mem_per_cpu']}")
    return " ".join([*words, "State=UP"])


def slurm_conf(slurm, state_save_location="/var/lib/slurm/slurmctld",
               slurmctld_log_file="/var/log/slurm/slurmctld.log"):
    """slurm.conf of the cluster (without a header: the template adds it)."""
    slurm = _section(slurm)
    state = _absolute("state_save_location", state_save_location)
    log = _absolute("slurmctld_log_file", slurmctld_log_file)
    ctl = slurm["controller"]
    health = slurm["health"]
    lines = [
        f"ClusterName={slurm['cluster_name']}",
        f"SlurmctldHost={ctl['name']}({ctl['address']})",
        "# The nodes fetch this file, gres.conf and cgroup.conf from slurmctld",
        "# (slurmd --conf-server): the node image carries none of them.",
        "SlurmctldParameters=enable_configless",
        "AuthType=auth/munge",
        "SlurmUser=slurm",
        f"StateSaveLocation={state}",
        f"SlurmctldLogFile={log}",
        "SlurmctldPidFile=/run/slurmctld.pid",
        "# On a node: /run is a tmpfs (the root is read-only); without SlurmdLogFile",
        "# slurmd logs to syslog.",
        f"SlurmdSpoolDir={slurm['slurmd_spool_dir']}",
        "SlurmdPidFile=/run/slurmd.pid",
        _PLUGIN_NOTE,
        "ProctrackType=proctrack/cgroup",
        "TaskPlugin=task/cgroup,task/affinity",
        "SchedulerType=sched/backfill",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory",
        "GresTypes=gpu",
        "# A node that went down (a reboot, also one quicker than SlurmdTimeout, which",
        "# 1 would keep down as \"unexpectedly rebooted\") is back in service when it",
        "# registers with its definition; a drained node (by an operator or the",
        "# health check) stays drained.",
        "ReturnToService=2",
        "# The health check of the node image drains a node that lost a GPU, has",
        "# memory errors, whose fans are not regulated, whose writable path fell back",
        "# to tmpfs or whose root is not served over the management network; it never",
        "# resumes a node (an operator does).  ANY: busy nodes too, so that no new job",
        "# lands on a node that went bad under a running one.",
        f"HealthCheckProgram={_absolute('health.program', health['program'])}",
        f"HealthCheckInterval={health['interval']}",
        "HealthCheckNodeState=ANY",
        "# Memory is scheduled (CR_Core_Memory): a job that asks for none gets",
        "# DefMemPerCPU of its partition (the smallest share of its nodes), not a",
        "# whole node.",
        "",
        *(_node_line(n) for n in slurm["nodes"]),
        "",
        *(_partition_line(p) for p in slurm["partitions"]),
    ]
    return "\n".join(lines) + "\n"


def slurm_gres_conf(slurm):
    """gres.conf: one line per GPU of each hardware profile, for the nodes of that
    profile, with its render node (GPU i: /dev/dri/renderD<128+i>)."""
    slurm = _section(slurm)
    groups = {}
    for node in slurm["nodes"]:
        for gres in node["gres"]:
            key = (node["profile"], gres["name"], gres["type"], tuple(gres["files"]))
            groups.setdefault(key, []).append(node["name"])
    if not groups:
        return "# No node has a GPU.\n"
    lines = []
    for (profile, name, gtype, files), nodes in groups.items():
        lines.append(f"# hardware profile {profile}: its GPUs in GPU order")
        # amd_gpu_env: Slurm sets ROCR_VISIBLE_DEVICES for the GPUs of the job
        lines += [f"NodeName={','.join(nodes)} Name={name} Type={gtype} File={f} "
                  "Flags=amd_gpu_env" for f in files]
    return "\n".join(lines) + "\n"


class FilterModule:
    """The Slurm configuration, rendered from the model."""

    def filters(self):
        return {"slurm_conf": slurm_conf, "slurm_gres_conf": slurm_gres_conf}
