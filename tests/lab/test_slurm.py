"""Issue 15: jobs on the lab cluster, the way its users run them.

site.yml made the lab inventory's users on the head and in the image, the home
dataset at /home on the head and on both nodes (over the data network), the
Slurm controller on the head and slurmd (configless) on the nodes.  Each node VM
has its profile's CPUs and a virtio GPU per GPU of its profile: DRM render nodes
that gres.conf names and the jobs' device cgroups confine.  Runs after
test_storage.py (the nodes are up) and before test_fan.py, whose deliberate
stops of the fan daemon make the health check drain node01.
"""

from __future__ import annotations

import re
import secrets
import shlex
import time

import pytest
from ansible_collections.junkyard.cluster.plugins.module_utils.cluster_model import slurm

from tests.inventory_files import LAB, group_vars

pytestmark = pytest.mark.lab

LAB_VARS = group_vars(LAB, "all")
USER = LAB_VARS["cluster_users"][0]["name"]


def head(lab, command: str, timeout: float = 120) -> str:
    res = lab.ssh(command, timeout=timeout)
    assert res.returncode == 0, f"{command}: {res.stdout}{res.stderr}"
    return res.stdout


def as_user(lab, command: str, timeout: float = 120) -> str:
    """``command`` in a login shell of the inventory's first user on the head."""
    return head(lab, f"su - {USER} -c {shlex.quote(command)}", timeout=timeout)


def expected_nodes(lab) -> dict[str, str]:
    """node -> its sinfo line (name, CPUs, memory, GRES) from the lab's hardware profiles."""
    profiles = LAB_VARS["cluster_hardware_profiles"]
    out = {}
    for node in lab.nodes:
        prof = profiles[node.profile]
        cpus = prof["cpu_sockets"] * prof["cpu_cores_per_socket"] * prof["cpu_threads_per_core"]
        memory = slurm.real_memory(prof["memory"]["size_mib"], slurm.DEFAULT_RESERVE_PERCENT,
                                   slurm.DEFAULT_RESERVE_MIN_MIB)
        gres = f"gpu:{prof['gpu']['model'].lower()}:{prof['gpu']['count']}"
        out[node.name] = f"{node.name} {cpus} {memory} {gres}"
    return out


def wait_all_idle(lab, timeout: float = 300) -> str:
    """sinfo's node lines (name, CPUs, memory, GRES, state) once every node is idle, or
    when ``timeout`` seconds (SlurmdTimeout's default) have passed.  A node the
    controller has not heard from since its last ping shows idle*, not idle."""
    deadline = time.monotonic() + timeout
    while True:
        out = head(lab, "sinfo -N -h -o '%N %c %m %G %t'")
        states = {line.split()[0]: line.split()[-1] for line in out.splitlines() if line.split()}
        if all(states.get(n.name) == "idle" for n in lab.nodes) or time.monotonic() > deadline:
            return out
        time.sleep(5)


@pytest.fixture(scope="module")
def idle(lab, site):
    """Both nodes registered and idle (slurmd starts at boot and retries until the
    controller answers; the controller came up in the same site.yml run)."""
    return wait_all_idle(lab)


def test_nodes_register_with_the_models_cpus_memory_and_gpus(lab, idle):
    lines = {line.split()[0]: line.rsplit(" ", 1) for line in idle.splitlines() if line.strip()}
    for name, want in expected_nodes(lab).items():
        assert name in lines, (name, idle)
        assert lines[name] == [want, "idle"], (name, idle,
                                               head(lab, f"scontrol show node {name}"))


def test_a_user_runs_on_both_nodes_and_finds_the_same_home(lab, idle):
    token = secrets.token_hex(8)
    as_user(lab, f"echo {token} > ~/slurm-test-token")
    out = as_user(lab, "srun -N2 --ntasks-per-node=1 --time=2 "
                       "sh -c 'echo $(hostname) $(id -un) $(pwd) $(cat ~/slurm-test-token)'",
                  timeout=180)
    rows = sorted(line.split() for line in out.splitlines() if line.strip())
    home = f"/home/{USER}"
    assert rows == [[n.name, USER, home, token] for n in sorted(lab.nodes, key=lambda n: n.name)
                    ], out
    # the home the nodes mount is the head's /home: the data network's NFS
    for node in lab.nodes:
        res = lab.node_ssh(node, "findmnt -n -o SOURCE,FSTYPE /home")
        assert res.returncode == 0, res.stdout + res.stderr
        source, fstype = res.stdout.split()
        assert fstype.startswith("nfs") and source.endswith(":/tank/data/home"), res.stdout


def test_gpu_jobs_each_see_only_their_render_node(lab, idle):
    """Two concurrent jobs on node01 with --gres=gpu:1 each: each may open exactly one
    render node (the devices cgroup), a different one, named in ROCR_VISIBLE_DEVICES."""
    probe = ("echo visible=$ROCR_VISIBLE_DEVICES; for d in /dev/dri/renderD*; do "
             "if (exec 3<$d) 2>/dev/null; then echo open=$d; fi; done; sleep 15")
    script = (f"for j in 1 2; do srun -w node01 --gres=gpu:1 --time=2 "
              f"sh -c {shlex.quote(probe)} > ~/gpu-job-$j.out 2>&1 & done; wait; "
              "cat ~/gpu-job-1.out; echo ---; cat ~/gpu-job-2.out")
    out = as_user(lab, script, timeout=240)
    jobs = out.split("---")
    opened = [re.findall(r"^open=(\S+)$", j, re.M) for j in jobs]
    visible = [re.findall(r"^visible=(\S*)$", j, re.M) for j in jobs]
    assert [len(o) for o in opened] == [1, 1], out
    assert opened[0] != opened[1], out
    assert all(v and v[0] in [str(i) for i in range(8)] for v in visible), out
    # both ran at once: the node has room for two one-core jobs
    assert all(re.match(r"/dev/dri/renderD1(2[89]|3[0-5])$", o[0]) for o in opened), out


def test_the_munge_key_is_not_in_the_image_export(lab, site):
    """The image export is readable by root on every management host: no munge key in
    it.  Each node's key is in its own host key dataset (exported to that node only)."""
    images = head(lab, "zfs list -H -o mountpoint -r -t filesystem tank/images")
    for mountpoint in images.split():
        found = head(lab, f"find {mountpoint} -xdev -name 'munge.key' -print 2>/dev/null || true",
                     timeout=300)
        assert found.strip() == "", found
    key = head(lab, "sha256sum /etc/munge/munge.key").split()[0]
    for node in lab.nodes:
        res = lab.node_ssh(node, "sha256sum /run/munge/munge.key | cut -d' ' -f1; "
                           "stat -c %a:%U /run/munge/munge.key; "
                           "test ! -e /etc/munge/munge.key && echo no-image-key")
        assert res.returncode == 0, res.stdout + res.stderr
        digest, mode, no_image_key = res.stdout.split()
        assert (digest, mode, no_image_key) == (key, "400:munge", "no-image-key"), res.stdout


def node_state(lab, name: str) -> tuple[str, str]:
    """(state, reason) of node ``name`` as the controller has them."""
    out = head(lab, f"sinfo -h -N -n {name} -o '%T|%E'").strip()
    state, _sep, reason = out.partition("|")
    return state, reason


def test_a_stopped_fan_daemon_drains_its_node_and_only_an_operator_resumes_it(lab, idle):
    """The health check (slurm.conf's HealthCheckProgram, every HealthCheckInterval of the
    model's default) drains node01 once its fan daemon stops regulating; starting the daemon
    again leaves it drained; node02, drained by an operator, keeps the operator's reason."""
    interval = 60  # cluster_slurm.health.interval's default: what users run
    operator = "operator: reseat GPU 3"
    head(lab, f"scontrol update nodename=node02 state=drain reason={shlex.quote(operator)}")
    node01 = lab.cfg.node("node01")
    try:
        res = lab.node_ssh(node01, "rc-service junkyard-fan stop")
        assert res.returncode == 0, res.stdout + res.stderr
        stopped = time.monotonic()
        # one interval, plus the age at which the daemon's metrics count as stale
        deadline = stopped + interval + 30 + 60
        state, reason = node_state(lab, "node01")
        while not state.startswith("drain") and time.monotonic() < deadline:
            time.sleep(5)
            state, reason = node_state(lab, "node01")
        assert state.startswith("drain"), (state, reason, time.monotonic() - stopped)
        assert reason.startswith("junkyard-health:") and "fan" in reason, reason
    finally:
        res = lab.node_ssh(node01, "rc-service junkyard-fan start")
        assert res.returncode == 0, res.stdout + res.stderr
    try:
        time.sleep(interval + 15)  # a healthy run of the check on both nodes
        assert node_state(lab, "node01") == (state, reason)
        state2, reason2 = node_state(lab, "node02")
        assert state2.startswith("drain") and reason2 == operator, (state2, reason2)
    finally:
        head(lab, "scontrol update nodename=node01,node02 state=resume")
    # resumed: idle.  A trailing * (slurmctld has not heard from slurmd since) clears at
    # the controller's next ping of the node
    wait_all_idle(lab)
    assert [node_state(lab, n)[0] for n in ("node01", "node02")] == ["idle", "idle"]
