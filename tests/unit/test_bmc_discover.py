"""BMC discovery against ipmi_sim: the module reads a BMC of another board than the
lab's (bmc_sim/sm8gpu.*, Supermicro-like names and numbers) and of the G292-Z20, and
its proposal passes the cluster model's validation and the fan daemon's unchanged."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import ansible_runner
import pytest
import yaml
from ansible_collections.junkyard.cluster.plugins.module_utils.bmc_discover import (
    DiscoverError,
    parse_fru,
    parse_mc_info,
    parse_sdr_verbose,
    propose,
)
from ansible_collections.junkyard.cluster.plugins.module_utils.cluster_model import build_model

from bmc_sim.simctl import HERE as SIM_DIR
from bmc_sim.simctl import BmcSim, SimOptions
from tests.conftest import REPO
from tests.inventory_files import EXAMPLE, LAB, group_vars, model_data

pytestmark = [
    pytest.mark.bmc,
    pytest.mark.skipif(shutil.which("ipmi_sim") is None or shutil.which("ipmitool") is None,
                       reason="needs ipmi_sim (openipmi) and ipmitool"),
]

# The Supermicro-like board: FAN1-FAN6 on zone 1 (sensors 0x41-0x46), FANA and FANB
# on zone 0 (0x47, 0x48), as its proposal zones them.
SM8GPU = SimOptions(name="sm8gpu", emu_file=SIM_DIR / "sm8gpu.emu",
                    sdr_source=SIM_DIR / "sm8gpu.sdrs", ianas=(),
                    fans={1: (0x41, 0x42, 0x43, 0x44, 0x45, 0x46), 0: (0x47, 0x48)},
                    tach_tau_ms=150)


@pytest.fixture(scope="module")
def sm8gpu(tmp_path_factory):
    with BmcSim(tmp_path_factory.mktemp("sm8gpu"), SM8GPU) as sim:
        yield sim


def discover(sim: BmcSim, tmp_path, **options) -> dict:
    out = tmp_path / "result.json"
    play = tmp_path / "discover.yml"
    play.write_text(yaml.safe_dump([{
        "name": "Discover", "hosts": "localhost", "gather_facts": False,
        "tasks": [
            {"name": "Read the BMC", "register": "found",
             "junkyard.cluster.bmc_discover": {
                 "host": sim.host, "port": sim.port, "username": sim.options.user,
                 "password": sim.options.password, **options}},
            {"name": "Keep the result", "ansible.builtin.copy": {
                "content": "{{ found | to_json }}", "dest": str(out), "mode": "0600"}}]}]))
    proc = subprocess.run(["ansible-playbook", "-i", "localhost,", "-c", "local", str(play)],
                          capture_output=True, text=True, timeout=300, check=False,
                          env={"PATH": f"{sys.prefix}/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                               "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
                               "HOME": str(tmp_path)})
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert sim.options.password not in proc.stdout
    return json.loads(out.read_text())


def example_data(profile_name: str, profile: dict) -> dict:
    """The example inventory as build_model reads it, with ``profile`` substituted for
    every node's profile."""
    data = model_data(EXAMPLE)
    data["cluster"]["hardware_profiles"] = {profile_name: profile}
    for node in data["nodes"].values():
        node["node_profile"] = profile_name
    return data


def run_discover(tmp_path, inventory, password, **extravars):
    """playbooks/discover.yml for node01 of ``inventory`` through ansible-runner, the BMC
    password from the environment as the lab inventory reads it; proposals to tmp/out."""
    pdd = tmp_path / "runner"
    pdd.mkdir()
    return ansible_runner.run(
        private_data_dir=str(pdd), playbook=str(REPO / "playbooks" / "discover.yml"),
        inventory=str(inventory), limit="node01",
        envvars={"ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
                 "JUNKYARD_LAB_BMC_PASSWORD": password},
        extravars={"cluster_image_state": {}, "discover_dir": str(tmp_path / "out"),
                   **extravars},
        quiet=True)


def test_another_boards_bmc_gives_a_profile_the_model_and_the_daemon_accept(
        sm8gpu, tmp_path):
    found = discover(sm8gpu, tmp_path)
    assert found["changed"] is False
    assert found["manufacturer_id"] == 10876
    assert found["board"]["product"] == "H12DSG-O-CPU"
    assert found["profile_name"] == "h12dsg-o-cpu"
    assert len(found["sensors"]) == 34
    assert {"name": "GPU3 12V Curr", "number": 0x32, "type": "Current", "type_code": 3,
            "discrete": False, "reading": 4.0, "unit": "Amps", "entity": "11.3"} in found["sensors"]
    # the YAML printed for the operator is the profile itself
    pasted = yaml.safe_load(found["profile_yaml"])["cluster_hardware_profiles"]
    profile = pasted["h12dsg-o-cpu"]
    assert profile == found["profile"]
    assert profile["bmc"]["gpu_current_sensors"] == [f"GPU{i} 12V Curr" for i in range(1, 9)]
    assert profile["bmc"]["cpu_temp_sensors"] == ["CPU1 Temp", "CPU2 Temp"]  # not the VRs
    assert profile["bmc"]["psu_status_sensors"] == ["PS1 Status", "PS2 Status"]
    assert profile["gpu"]["count"] == 8 and profile["cpu_sockets"] == 2
    assert profile["fan_zones"] == [
        {"name": "gpu", "fan_id": 1, "gpus": list(range(8)),
         "tach_sensors": ["FAN1", "FAN2", "FAN3", "FAN4", "FAN5", "FAN6"]},
        {"name": "cpu", "fan_id": 0, "gpus": [], "tach_sensors": ["FANA", "FANB"]}]
    assert profile["fan_commands"]["set_duty"] == "0x30 0x70 0x66 0x01 {fan_id} {duty}"
    assert any("gpu.pci_addresses" in n for n in found["notes"])

    # the cluster model accepts the example inventory with it, unchanged
    model, errors = build_model(example_data("h12dsg-o-cpu", profile))
    assert errors == [], errors
    assert {n["profile"] for n in model["nodes"]} == {"h12dsg-o-cpu"}

    # the fan daemon accepts it as its profile, finds every sensor in this BMC's SDR,
    # and its probe finds that the proposed zones' fans follow the proposed command
    config = tmp_path / "fan.yml"
    config.write_text(yaml.safe_dump({
        "profile": profile,
        "bmc": {"access": "lan", "host": sm8gpu.host, "port": sm8gpu.port,
                "username": sm8gpu.options.user, "password_file": str(sm8gpu.password_file),
                "workarounds": ["opensesspriv"], "cache_dir": str(tmp_path / "cache")},
        "power_guard": {"enabled": True},
        "probe": {"result_file": str(tmp_path / "probe.json"), "settle": 1.0}}))
    env = {"PYTHONPATH": str(REPO / "daemon" / "src"), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    for mode in ("--check", "--probe"):
        proc = subprocess.run([sys.executable, "-m", "junkyard_fan", "-c", str(config), mode],
                              capture_output=True, text=True, timeout=120, env=env,
                              check=False)
        assert proc.returncode == 0, (mode, proc.stdout, proc.stderr)
    assert "zone gpu (fan_id 1): passed" in proc.stdout


def test_the_g292_z20_bmc_gives_the_examples_sensors_zoned_by_side(tmp_path):
    with BmcSim(tmp_path / "bmc") as sim:
        found = discover(sim, tmp_path, profile_name="g292-z20")
    profile = found["profile"]
    example = group_vars(EXAMPLE, "all")["cluster_hardware_profiles"]["g292-z20"]
    assert profile["bmc"] == example["bmc"]  # CPU0_VR_TEMP is not a CPU temperature
    assert profile["fan_commands"] == example["fan_commands"]
    assert profile["fan_zones"] == [
        {"name": "gpu-left", "fan_id": 1, "gpus": [0, 1, 2, 3],
         "tach_sensors": ["FAN1", "FAN2", "FAN3"]},
        {"name": "gpu-right", "fan_id": 2, "gpus": [4, 5, 6, 7],
         "tach_sensors": ["FAN4", "FAN5", "FAN6"]},
        {"name": "cpu", "fan_id": 0, "gpus": [], "tach_sensors": ["FAN7", "FAN8"]}]
    assert any("GPU0_TEMP" in n for n in found["notes"])  # left out, and said so
    _model, errors = build_model(example_data("g292-z20", profile))
    assert errors == [], errors


def test_an_unknown_vendor_needs_its_fan_command(sm8gpu):
    base = ["ipmitool", *sm8gpu.ipmitool_args()]
    sdr = subprocess.run([*base, "sdr", "list", "-v", "all"], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    fru = parse_fru(subprocess.run([*base, "fru", "print", "0"], capture_output=True,
                                   text=True, timeout=60, check=True).stdout)
    mc = subprocess.run([*base, "mc", "info"], capture_output=True, text=True, timeout=60,
                        check=True).stdout
    assert parse_mc_info(mc) == 10876
    with pytest.raises(DiscoverError, match="manufacturer 4242 has no known fan command"):
        propose(parse_sdr_verbose(sdr), fru, 4242, {})
    given = {"set_duty": "0x30 0x91 0x5a 0x03 {fan_id} {duty}"}
    profile, _notes = propose(parse_sdr_verbose(sdr), fru, 4242, {"fan_commands": given})
    assert profile["fan_commands"] == given
    with pytest.raises(DiscoverError, match="tach sensor 'FAN9' is not in the BMC's SDR"):
        propose(parse_sdr_verbose(sdr), fru, 10876, {"fan_zones": [
            {"name": "gpu", "fan_id": 1, "gpus": list(range(8)), "tach_sensors": ["FAN9"]}]})


def test_discover_playbook_writes_the_proposal_for_the_node(sm8gpu, tmp_path):
    inv = tmp_path / "inventory"
    shutil.copytree(LAB, inv, ignore=shutil.ignore_patterns("discovered"))
    hosts = yaml.safe_load((inv / "hosts.yml").read_text())
    node = hosts["all"]["children"]["gpu_nodes"]["hosts"]["node01"]
    # the example's shape: the password only in node_bmc_defaults (group_vars), from
    # JUNKYARD_LAB_BMC_PASSWORD
    assert "password" not in node["node_bmc"]
    assert "password" in group_vars(inv, "gpu_nodes")["node_bmc_defaults"]
    node["node_bmc"]["port"] = sm8gpu.port
    (inv / "hosts.yml").write_text(yaml.safe_dump(hosts, sort_keys=False))
    r = run_discover(tmp_path, inv / "hosts.yml", sm8gpu.options.password)
    out = r.stdout.read()
    assert r.rc == 0, out[-4000:]
    assert sm8gpu.options.password not in out
    written = yaml.safe_load((tmp_path / "out" / "node01.yml").read_text())
    profile = written["cluster_hardware_profiles"]["h12dsg-o-cpu"]
    assert profile["bmc"]["gpu_current_sensors"][0] == "GPU1 12V Curr"
    assert "junkyard-fan --probe" in " ".join(out.split())


def test_discover_refuses_an_option_of_the_wrong_type_before_the_bmc_is_read(tmp_path):
    r = run_discover(tmp_path, LAB / "hosts.yml", "not-used", discover_psu_rating_w="lots")
    out = " ".join(r.stdout.read().split())
    assert r.rc != 0
    assert ("argument 'discover_psu_rating_w' is of type str and we were unable to convert "
            "to int") in out, out[-3000:]
    assert "Read the BMC's sensors" not in out
    assert not (tmp_path / "out").exists()
