"""bench/head_rerun.py's inventories: the lab's real nodes first, then generated ones
with unique names, MACs, addresses and BMC endpoints, accepted by the cluster model
(playbooks/model.yml through ansible-runner, as tests/model does) at 6 and 600 nodes;
the dry run writes them and runs nothing."""

from __future__ import annotations

import importlib.util
import ipaddress
import shutil

import ansible_runner
import pytest

from tests.conftest import REPO
from tests.inventory_files import LAB, hosts

SPEC = importlib.util.spec_from_file_location("head_rerun", REPO / "bench" / "head_rerun.py")
head_rerun = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(head_rerun)


def nodes_of(inventory):
    return hosts(inventory)[1]


def run_model(inventory, tmp_path):
    """playbooks/model.yml on ``inventory``; (runner, the derived model or None, output)."""
    pdd = tmp_path / "runner"
    pdd.mkdir(exist_ok=True)
    r = ansible_runner.run(
        private_data_dir=str(pdd), playbook=str(REPO / "playbooks" / "model.yml"),
        inventory=str(inventory / "hosts.yml"),
        envvars={"ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
                 # the 600-node model is larger than ansible-runner passes by default
                 "MAX_EVENT_RES": str(10**8)},
        # no head to read the image state from: the inventory's versions
        extravars={"cluster_image_state": {}}, quiet=True, json_mode=False)
    model = None
    for event in r.events:
        data = event.get("event_data", {})
        if event.get("event") == "runner_on_ok" and "model" in data.get("res", {}):
            model = data["res"]["model"]
    out = r.stdout.read()
    shutil.rmtree(pdd / "artifacts", ignore_errors=True)
    return r, model, out


@pytest.mark.parametrize("size", [6, 600])
def test_generated_inventory_is_accepted_by_the_model(tmp_path, size):
    inventory = tmp_path / f"nodes-{size}"
    generated = head_rerun.generate(size, inventory)
    nodes = nodes_of(inventory)
    lab_nodes = nodes_of(LAB)

    assert len(nodes) == size
    assert generated == [f"bench{i:03d}" for i in range(3, size + 1)]
    # the lab's real nodes come first, unchanged
    assert list(nodes)[:len(lab_nodes)] == list(lab_nodes)
    assert all(nodes[n] == lab_nodes[n] for n in lab_nodes)

    r, model, out = run_model(inventory, tmp_path)
    assert r.rc == 0, out
    assert {n["name"] for n in model["nodes"]} == set(nodes)
    assert len(model["dhcp_hosts"]) == size
    assert len({n["boot"]["grub_config"] for n in model["nodes"]}) == size
    # node datasets are exported to their node only: one export per node dataset
    node_exports = [e for e in model["exports"] if "/nodes/" in e["path"]]
    assert len({e["path"].split("/nodes/")[1].split("/")[0] for e in node_exports}) == size
    mgmt = ipaddress.ip_network(head_rerun.SUBNETS["mgmt"])
    assert all(ipaddress.ip_address(n["mgmt"]["ip"]) in mgmt for n in model["nodes"])


def test_600_nodes_need_the_widened_subnets(tmp_path):
    """Without the override file the lab's /24 cannot hold 600 nodes: the model refuses,
    so the override is what makes the 600-node inventory valid (and is loaded)."""
    inventory = tmp_path / "nodes-600"
    head_rerun.generate(600, inventory)
    (inventory / "group_vars" / "all" / head_rerun.OVERRIDE_FILE).unlink()
    r, _model, out = run_model(inventory, tmp_path)
    assert r.rc != 0
    assert "bench003: node_interfaces.mgmt.ip 10.77.1.1 is not in the management subnet " \
           "10.77.0.0/24" in out


def test_generated_values_are_unique_and_in_their_networks(tmp_path):
    inventory = tmp_path / "inv"
    head_rerun.generate(600, inventory)
    nodes = nodes_of(inventory)
    for key in ("mgmt", "data"):
        macs = [n["node_interfaces"][key]["mac"] for n in nodes.values()]
        ips = [n["node_interfaces"][key]["ip"] for n in nodes.values()]
        assert len(set(macs)) == len(set(ips)) == 600
        net = ipaddress.ip_network(head_rerun.SUBNETS[key])
        assert all(ipaddress.ip_address(ip) in net for ip in ips)
        # the head's address is never handed to a generated node
        assert ("10.77.0.1" if key == "mgmt" else "10.78.0.1") not in ips
    endpoints = {(n["node_bmc"]["address"], n["node_bmc"].get("port", 623))
                 for n in nodes.values()}
    assert len(endpoints) == 600
    # the copy finds the lab's SSH key without the lab inventory's relative path
    assert "inventory_dir" not in (inventory / "group_vars" / "gpu_nodes.yml").read_text()
    assert f"{REPO}/.lab/ssh/id_ed25519" in (inventory / "hosts.yml").read_text()


def test_fewer_nodes_than_the_lab_has_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="1 nodes is fewer than the lab's 2 real nodes"):
        head_rerun.generate(1, tmp_path / "inv")


def test_dry_run_writes_the_inventories_and_the_retire_script_and_runs_nothing(
        tmp_path, capsys, monkeypatch):
    def no_run(*_a, **_k):
        raise AssertionError("the dry run ran a command")

    monkeypatch.setattr(head_rerun.subprocess, "run", no_run)
    assert head_rerun.main(["--dry-run", "--workdir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert len(nodes_of(tmp_path / "nodes-6")) == 6
    assert len(nodes_of(tmp_path / "nodes-600")) == 600
    # converge and re-run, each size, two rounds, then the real lab inventory
    assert out.count(f"-i {tmp_path}/nodes-600/hosts.yml playbooks/storage.yml "
                     "playbooks/netboot.yml") == 4
    assert out.count(f"-i {tmp_path}/nodes-6/hosts.yml") == 4
    assert f"-i {LAB}/hosts.yml playbooks/storage.yml playbooks/netboot.yml" in out
    assert "WARNING: the 600-node runs create the datasets of 598 generated nodes" in out
    script = (tmp_path / "retire_bench_nodes.sh").read_text().splitlines()
    retire = [ln for ln in script if ln.startswith("lab/lab run")]
    assert len(retire) == 598
    assert retire[-1] == ("lab/lab run playbooks/retire_node_datasets.yml "
                          "-e retire_node_name=bench600 -e retire_node_action=destroy "
                          "-e retire_node_confirm=bench600")


def test_recap_sums_changed_failed_unreachable():
    out = ("PLAY RECAP ***\n"
           "head      : ok=56   changed=2    unreachable=0    failed=1    skipped=8\n"
           "localhost : ok=1    changed=0    unreachable=1    failed=0    skipped=0\n"
           "bench003  : ok=1    changed=3    unreachable=0    failed=0    skipped=0\n")
    assert head_rerun.recap(out) == {"changed": 5, "failed": 1, "unreachable": 1, "hosts": 3}
