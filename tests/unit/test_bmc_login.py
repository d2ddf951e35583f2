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
        inv = tmp_path / "inventory"
        (inv / "group_vars" / "all").mkdir(parents=True)
        # the example's gpu_nodes group_vars, unchanged
        shutil.copy(EXAMPLE / "group_vars" / "gpu_nodes.yml", inv / "group_vars")
        cluster = group_vars(EXAMPLE, "all")
        cluster["cluster_networks"]["bmc"]["subnet"] = "127.0.0.0/8"
        (inv / "group_vars" / "all" / "cluster.yml").write_text(yaml.safe_dump(cluster))
        hosts = yaml.safe_load((EXAMPLE / "hosts.yml").read_text())
        gpu = hosts["all"]["children"]["gpu_nodes"]["hosts"]
        for name in list(gpu):
            if name not in names:
                del gpu[name]
            else:  # only the BMC's address moves to the simulator
                gpu[name]["node_bmc"] = {"address": "127.0.0.1", "port": sims[name].port}
        (inv / "hosts.yml").write_text(yaml.safe_dump(hosts))
        argv = ["ansible-playbook", "-i", str(inv / "hosts.yml"),
                str(REPO / "playbooks" / "nodes.yml"),
                "-e", "ansible_connection=local", "-e",
                f"ansible_python_interpreter={sys.executable}",
                "-e", '{"cluster_image_state": {}}', "-e", "nodes_boot_timeout=5"]
        env = dict(os.environ, JUNKYARD_BMC_PASSWORD=SimOptions().password,
                   ANSIBLE_NOCOLOR="1", ANSIBLE_CONFIG=str(REPO / "ansible.cfg"))
        proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=300, check=False)
        out = proc.stdout + proc.stderr
        for name in names:
            assert markers[name].exists(), f"{name} was not powered on:\n{out}"
            assert markers[name].read_text().split() == ["on"]
        # every node passed the power step; they stop at the boot check (this machine's
        # /proc/cmdline is not a node's)
        assert "Check that the node booted its own entry" in out
        assert SimOptions().password not in out
    finally:
        for sim in sims.values():
            sim.stop()
