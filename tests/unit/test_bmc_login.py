"""A node's BMC login: the model's endpoint (never the password) plus the password of
node_bmc over node_bmc_defaults, merged in one place (cluster_model.nodes.merge_bmc, used by
the action plugin for the endpoint and by the bmc_login filter for the password).

The example inventory keeps the password in node_bmc_defaults (group_vars/gpu_nodes.yml)
only; nodes.yml once read node_bmc.password and failed on it.  The last test runs nodes.yml's
power-on against OpenIPMI ipmi_sim BMCs on 127.0.0.1 with an inventory of the example's shape.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.junkyard.cluster.plugins.filter.model import bmc_login
from ansible_collections.junkyard.cluster.plugins.module_utils.cluster_model import (
    build_model,
    merge_bmc,
)

from tests.conftest import REPO
from tests.inventory_files import EXAMPLE, group_vars, hosts, model_data


def test_the_example_keeps_the_password_in_the_defaults_only():
    """The shape this file tests: if the example changes, these tests must follow."""
    assert "password" in group_vars(EXAMPLE, "gpu_nodes")["node_bmc_defaults"]
    for name, hv in hosts(EXAMPLE)[1].items():
        assert "password" not in hv["node_bmc"], name


def test_password_from_the_defaults_when_the_node_has_none():
    endpoint = {"address": "10.40.0.11", "port": 623, "username": "admin",
                "interface": "lanplus"}
    login = bmc_login(endpoint, {"address": "10.40.0.11"},
                      {"username": "admin", "password": "from-defaults"})
    assert login == {**endpoint, "password": "from-defaults"}


def test_the_nodes_password_wins_and_the_endpoint_is_the_models():
    endpoint = {"address": "10.40.0.12", "port": 6230, "username": "ops", "interface": "lanplus"}
    login = bmc_login(endpoint, {"address": "10.99.9.9", "password": "own"},
                      {"username": "admin", "password": "from-defaults"})
    # address, port and user come from the model (validated), never from the raw variables
    assert login == {**endpoint, "password": "own"}


def test_no_password_anywhere_is_an_empty_one():
    endpoint = {"address": "127.0.0.1", "port": 6231, "username": "admin"}
    assert bmc_login(endpoint, {}, {})["password"] == ""
    assert bmc_login(endpoint)["password"] == ""


def test_bmc_login_refuses_what_is_not_an_endpoint():
    with pytest.raises(AnsibleFilterError, match=r"cluster_model\.nodes"):
        bmc_login({"password": "x"}, {}, {})


@pytest.mark.parametrize("defaults,node,merged", [
    ({"username": "admin", "password": "p"}, {"address": "a"},
     {"username": "admin", "password": "p", "address": "a"}),
    ({"username": "admin"}, {"username": "ops", "port": 1},
     {"username": "ops", "port": 1}),
    ({"username": "admin"}, None, {"username": "admin"}),
    (None, {"address": "a"}, {"address": "a"}),
    ({"username": "admin"}, "not a mapping", "not a mapping"),
])
def test_merge_bmc(defaults, node, merged):
    assert merge_bmc(defaults, node) == merged


def test_the_example_model_publishes_each_endpoint_without_a_password():
    # node_bmc_defaults with each node's node_bmc over them (merge_bmc, as the action)
    data = model_data(EXAMPLE)
    assert data["secrets"] == dict.fromkeys(data["nodes"], "env")
    model, errors = build_model(data)
    assert errors == []
    gpu01 = next(n for n in model["nodes"] if n["name"] == "gpu01")
    assert gpu01["bmc"] == {"address": "10.40.0.11", "port": 623, "username": "admin",
                            "interface": "lanplus"}
    assert "password" not in str(model)


@pytest.mark.bmc
@pytest.mark.skipif(shutil.which("ipmi_sim") is None, reason="needs ipmi_sim (openipmi)")
def test_nodes_yml_powers_on_an_example_shaped_inventory(tmp_path):
    """nodes.yml with the example's group_vars/gpu_nodes.yml (password only in
    node_bmc_defaults) powers both nodes on through their BMCs.  This machine plays the
    nodes (connection local), so the play goes on to the boot check and fails there: the
    power-on is what is tested."""
    from bmc_sim.simctl import BmcSim, SimOptions  # pylint: disable=import-outside-toplevel

    sims, markers = {}, {}
    names = ("gpu01", "gpu02")
    try:
        for n, name in enumerate(names, start=1):
            markers[name] = tmp_path / f"{name}.powered"
            opts = SimOptions(fanmod=False, kill_wait=1, poweroff_wait=0,
                              startcmd=f"sh -c 'echo on >> {markers[name]}; exec sleep 600'")
            sims[name] = BmcSim(tmp_path / f"bmc{n}", opts).start()
        inv = example_shaped_inventory(tmp_path, {name: sims[name].port for name in names})
        argv = nodes_yml_argv(inv, "-e", "nodes_boot_timeout=5")
        proc = run_nodes_yml(argv, SimOptions().password)
        out = proc.stdout + proc.stderr
        for name in names:
            assert markers[name].exists(), f"{name} was not powered on:\n{out}"
            assert markers[name].read_text().split() == ["on"]
        # every node passed the power step; they stop at the boot check (this machine's
        # /proc/cmdline is not a node's)
        assert "Check that the node booted its own entry" in out
        for name in names:  # the check names what this machine's command line lacks
            assert f"missing: junkyard.node={name}, junkyard.image=" in out, out
        # the playbook era's name still sets the timeout, and is named as deprecated
        assert "nodes_boot_timeout is deprecated, use node_boot_timeout" in out
        assert SimOptions().password not in out
    finally:
        for sim in sims.values():
            sim.stop()


def example_shaped_inventory(tmp_path, bmc_ports: dict[str, int]):
    """The example's inventory with only the nodes in bmc_ports, each node's BMC moved to
    127.0.0.1:<port> and the BMC network to 127.0.0.0/8; the example's gpu_nodes group_vars
    unchanged (the password in node_bmc_defaults only)."""
    inv = tmp_path / "inventory"
    (inv / "group_vars" / "all").mkdir(parents=True)
    shutil.copy(EXAMPLE / "group_vars" / "gpu_nodes.yml", inv / "group_vars")
    cluster = group_vars(EXAMPLE, "all")
    cluster["cluster_networks"]["bmc"]["subnet"] = "127.0.0.0/8"
    (inv / "group_vars" / "all" / "cluster.yml").write_text(yaml.safe_dump(cluster))
    hosts_ = yaml.safe_load((EXAMPLE / "hosts.yml").read_text())
    gpu = hosts_["all"]["children"]["gpu_nodes"]["hosts"]
    for name in list(gpu):
        if name not in bmc_ports:
            del gpu[name]
        else:  # only the BMC's address moves to the simulator
            gpu[name]["node_bmc"] = {"address": "127.0.0.1", "port": bmc_ports[name]}
    (inv / "hosts.yml").write_text(yaml.safe_dump(hosts_))
    return inv


def nodes_yml_argv(inv, *extra: str) -> list[str]:
    """ansible-playbook nodes.yml on this machine (connection local) as every node."""
    return ["ansible-playbook", "-i", str(inv / "hosts.yml"), str(REPO / "playbooks" / "nodes.yml"),
            "-e", "ansible_connection=local", "-e", f"ansible_python_interpreter={sys.executable}",
            "-e", '{"cluster_image_state": {}}', *extra]


def run_nodes_yml(argv, password: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, JUNKYARD_BMC_PASSWORD=password, ANSIBLE_NOCOLOR="1",
               ANSIBLE_CONFIG=str(REPO / "ansible.cfg"))
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300, check=False)


@pytest.mark.parametrize(("value", "shown"), [("0", "0"), ("-5", "-5")])
def test_a_boot_timeout_not_above_zero_is_refused_before_any_bmc(tmp_path, value, shown):
    """No BMC listens on the ports given: a refusal that came after the power-on would
    fail there instead, with ipmi_power's error."""
    inv = example_shaped_inventory(tmp_path, {"gpu01": 9, "gpu02": 13})
    proc = run_nodes_yml(nodes_yml_argv(inv, "-e", f"node_boot_timeout={value}"), "x")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert f"gpu01: node_boot_timeout {shown} must be a whole number of seconds above 0" in out
    assert "Power the node on through its BMC" not in out
