"""The model's names and shapes (plugins/module_utils/cluster_model/schema.py): unknown
variables and keys are refused with a hint, strings where lists belong are refused, and
every problem is reported at once in the model's form."""

from __future__ import annotations

import copy

import pytest
from ansible_collections.junkyard.cluster.plugins.action.cluster_model import role_variables
from ansible_collections.junkyard.cluster.plugins.module_utils.cluster_model import build_model

from tests.conftest import REPO
from tests.unit.test_cluster_model import lab_data

ROLE_VARS = role_variables()


def _errors(mutate):
    data = lab_data()
    data["role_variables"] = ROLE_VARS
    mutate(data)
    _model, errors = build_model(data)
    return errors


def test_role_variables_are_read_from_the_collections_roles():
    # the roles named in the collection's namespaces, with their declared inputs
    namespaced = sorted(p.name for p in (REPO / "roles").iterdir()
                        if p.name.startswith(("node_", "cluster_", "head_")))
    assert sorted(ROLE_VARS) == namespaced
    assert "node_image_seed" in ROLE_VARS["node_image"]
    assert "node_network_data_mount_options" in ROLE_VARS["node_network"]
    assert "node_image_version" not in ROLE_VARS["node_image"]


def _vars(data, host, *names):
    data.setdefault("variables", {}).setdefault(host, []).extend(names)


@pytest.mark.parametrize(("names", "expected"), [
    (["node_image_verison"], "node01: node_image_verison is not a variable of junkyard.cluster "
     "nor of its role node_image (did you mean node_image_version?)"),
    (["node_profle"], "node01: node_profle is not a variable of junkyard.cluster "
     "(did you mean node_profile?)"),
    (["node_network_tabel"], "node01: node_network_tabel is not a variable of junkyard.cluster "
     "nor of its role node_network (did you mean node_network_table?)"),
    (["head_ip"], "node01: head_ip is not a variable of junkyard.cluster"),
])
def test_unknown_variables_of_the_namespaces_are_refused(names, expected):
    errors = _errors(lambda d: _vars(d, "node01", *names))
    assert expected in errors


def test_known_variables_and_other_namespaces_pass():
    def mutate(data):
        for host in ("head", "node01", "node02"):
            _vars(data, host, "cluster_writable_paths", "cluster_image_state", "cluster_model",
                  "node_image_seed", "node_image_packages", "node_network_table",
                  "cluster_model_image_state", "ansible_host", "site_rack")
    assert _errors(mutate) == []


def test_a_variable_every_host_has_is_reported_once_for_the_cluster_or_the_nodes():
    def mutate(data):
        for host in ("head", "node01", "node02"):
            _vars(data, host, "cluster_writeable_paths")
        for host in ("node01", "node02"):
            _vars(data, host, "node_imag")
    errors = _errors(mutate)
    assert errors == [
        "cluster: cluster_writeable_paths is not a variable of junkyard.cluster "
        "(did you mean cluster_writable_paths?)",
        "gpu_nodes: node_imag is not a variable of junkyard.cluster (did you mean node_image?)"]


def _set(path, value):
    """A mutation setting ``data[path...] = value`` (a path of keys and indexes)."""
    def mutate(data):
        target = data
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = copy.deepcopy(value)
    return mutate


@pytest.mark.parametrize(("path", "value", "expected"), [
    (("cluster", "pool", "vdevs", 0, "spare"), 1,
     "cluster: cluster_pool.vdevs[0] spare is not a known key (did you mean spares?); "
     "known keys: type, disks, parity, data, spares, children"),
    (("cluster", "networks", "data", "mut"), 9000,
     "cluster: cluster_networks.data mut is not a known key (did you mean mtu?)"),
    (("cluster", "hardware_profiles", "g292-z20", "bmc", "cpu_temp_sensor"), ["CPU0_TEMP"],
     "cluster: cluster_hardware_profiles.g292-z20.bmc cpu_temp_sensor is not a known key "
     "(did you mean cpu_temp_sensors?)"),
    (("cluster", "writable_paths", 3, "sise"), "4g",
     "cluster: cluster_writable_paths[3] sise is not a known key (did you mean size?)"),
    (("nodes", "node01", "node_interfaces", "mgmt", "macaddr"), "52:54:00:00:00:01",
     "node01: node_interfaces.mgmt macaddr is not a known key (did you mean mac?)"),
    (("head", "vars", "head_interfaces", "mgmnt"), {},
     "head: head_interfaces mgmnt is not a known key (did you mean mgmt?)"),
    (("cluster", "hardware_profiles", "g292-z20", "bmc", "cpu_temp_sensors"), "CPU0_TEMP",
     "cluster: cluster_hardware_profiles.g292-z20.bmc.cpu_temp_sensors CPU0_TEMP must be a list "
     "of sensor names, not a string"),
    (("cluster", "hardware_profiles", "g292-z20", "fan_zones"), [{"name": "f", "fan_id": 1,
                                                                 "gpus": "0-3"}],
     "cluster: cluster_hardware_profiles.g292-z20.fan_zones[0].gpus 0-3 must be a list of GPU "
     "numbers, not a string"),
    (("cluster", "pool", "vdevs", 0, "disks"), "/dev/sda",
     "cluster: cluster_pool.vdevs[0].disks /dev/sda must be a list of device paths"),
    (("nodes", "node01", "node_interfaces", "mgmt", "mac"), 525400770011,
     "node01: node_interfaces.mgmt.mac 525400770011 must be a string: YAML read the unquoted "
     "value as a number; write it in quotes"),
    (("nodes", "node01", "node_image_version"), 2026.1,
     "node01: node_image_version 2026.1 must be a string: YAML read the unquoted value as a "
     "number; write it in quotes"),
])
def test_unknown_keys_and_wrong_shapes_are_refused(path, value, expected):
    errors = _errors(_set(path, value))
    assert any(e.startswith(expected) for e in errors), errors


def test_fan_daemon_profile_keys_are_accepted():
    def mutate(data):
        prof = data["cluster"]["hardware_profiles"]["g292-z20"]
        prof["gpu"] = {"model": "MI100", "count": 2, "gfx_target": "gfx908", "max_power_w": 300,
                       "pci_addresses": ["0000:03:00.0", "0000:43:00.0"]}
        prof["bmc"].update(gpu_current_sensors=["A", "B"], gpu_temp_sensors=["T0", "T1"])
        prof["fan_zones"] = [{"name": "gpu", "fan_id": 1, "gpus": [0, 1], "kind": "gpu",
                              "tach_sensors": ["FAN1"]}]
        prof["fan_commands"] = {"set_duty": "0x2e 0x10 {fan_id} {duty}", "auto": "0x2e 0x11",
                                "manual": "0x2e 0x12", "duty_scale": 255}
        prof["memory"] = {"board": {"vendor": "GIGABYTE", "product": "G292"},
                          "dimm_labels": [{"label": "DIMM_A0", "location": "0.0.0"}]}
    assert _errors(mutate) == []


def test_every_problem_is_reported_once_and_a_shape_refusal_hides_the_layers_repeat():
    def mutate(data):
        data["cluster"]["networks"] = "10.77.0.0/24"
        data["cluster"]["pool"]["vdevs"][0]["spare"] = 1
        data["nodes"]["node02"]["node_image_version"] = 2026.1
    errors = _errors(mutate)
    networks = [e for e in errors if e.startswith("cluster: cluster_networks ")]
    assert networks == ["cluster: cluster_networks 10.77.0.0/24 must be a mapping, not a string"]
    assert sum("node_image_version" in e for e in errors) == 1
    assert any("spare is not a known key" in e for e in errors)


def test_a_bmc_defaults_key_every_node_shares_is_reported_once_and_no_password_shown():
    def mutate(data):
        for name in data["nodes"]:
            data["nodes"][name]["_bmc_sources"] = {
                "node_bmc": data["nodes"][name]["node_bmc"],
                "node_bmc_defaults": {"usrname": "admin", "password": None}}
    errors = _errors(mutate)
    assert errors == ["gpu_nodes: node_bmc_defaults usrname is not a known key (did you mean "
                      "username?); known keys: address, port, username, password"]


def test_a_value_that_cannot_be_templated_is_named_once_and_its_field_says_nothing_more():
    # the action leaves the value out (None) and tells the model what it could not template
    def mutate(data):
        data["nodes"]["node02"]["node_interfaces"]["mgmt"]["ip"] = None
        data["cluster"]["networks"] = None
        data["unrendered"] = [
            ("node02", "node_interfaces.mgmt.ip", "{{ ip2 }}",
             "cannot be templated: 'ip2' is undefined"),
            ("cluster", "cluster_networks", "{{ nets }}",
             "cannot be templated: 'nets' is undefined")]
    errors = _errors(mutate)
    assert errors == [
        "node02: node_interfaces.mgmt.ip {{ ip2 }} cannot be templated: 'ip2' is undefined",
        "cluster: cluster_networks {{ nets }} cannot be templated: 'nets' is undefined"]


def test_a_value_every_node_cannot_template_is_named_once_for_gpu_nodes():
    def mutate(data):
        data["unrendered"] = [(n, "node_bmc_defaults.username", "{{ u }}", "cannot be templated")
                              for n in data["nodes"]]
    assert _errors(mutate) == ["gpu_nodes: node_bmc_defaults.username {{ u }} cannot be templated"]


def test_role_variables_carry_their_argument_specification():
    assert ROLE_VARS["node_image"]["node_image_packages"]["type"] == "list"
    assert ROLE_VARS["node_network"]["node_network_data_mount_options"]["type"] == "str"


@pytest.mark.parametrize(("value", "expected"), [
    (["htop"], None),
    ("htop", "node01: node_image_packages htop must be a list of strings, not a string"),
    (["htop", 7], "node01: node_image_packages[1] 7 must be a string: YAML read the unquoted "
     "value as a number"),
    ({"htop": 1}, "node01: node_image_packages {'htop': 1} must be a list of strings, not a "
     "mapping"),
])
def test_a_role_variable_the_inventory_sets_has_its_declared_type(value, expected):
    def mutate(data):
        data["role_values"] = {"head": {}, "node01": {"node_image_packages": value},
                               "node02": {}}
    errors = _errors(mutate)
    if expected is None:
        assert errors == []
    else:
        assert [e for e in errors if e.startswith(expected)], errors


@pytest.mark.parametrize(("value", "expected"), [
    (600, None), ("600", None), ("-5", None), (" +7 ", None),
    ("5m", "node01: node_boot_timeout 5m must be an integer, not a string"),
    ("--5", "node01: node_boot_timeout --5 must be an integer, not a string"),
    (1.5, "node01: node_boot_timeout 1.5 must be an integer, not a number"),
])
def test_a_role_integer_takes_what_ansible_converts(value, expected):
    """-e name=value gives a string: Ansible converts digits, with a sign, for type int (the
    role refuses a value out of its range itself)."""
    errors = _errors(lambda d: d.update(role_values={"node01": {"node_boot_timeout": value}}))
    if expected is None:
        assert errors == []
    else:
        assert [e for e in errors if e.startswith(expected)], errors


@pytest.mark.parametrize("value", [True, "no", "Yes", 1, 0])
def test_a_role_boolean_takes_what_ansible_takes(value):
    assert _errors(lambda d: d.update(role_values={"node01": {"node_image_snapshot": value}})) \
        == []


def test_a_role_variable_problem_of_every_host_is_reported_once():
    def mutate(data):
        data["role_values"] = {h: {"node_image_mirror": 5, "node_image_snapshot": "maybe"}
                               for h in ("head", "node01", "node02")}
        data["role_values"]["head"].pop("node_image_snapshot")
    errors = _errors(mutate)
    assert errors == [
        "cluster: node_image_mirror 5 must be a string: YAML read the unquoted value as a "
        "number; write it in quotes",
        "gpu_nodes: node_image_snapshot maybe must be true or false, not a string"]


def test_a_value_of_the_wrong_shape_is_the_one_problem_named_about_it():
    # not also what the layers would say of the entries it should have held
    def mutate(data):
        data["cluster"]["writable_paths"] = ["/var/log", "/tmp"]
        data["nodes"]["node01"]["node_interfaces"] = [{"mac": "52:54:00:77:00:11"}]
        for n in ("node01", "node02"):
            data["nodes"][n]["_bmc_sources"] = {"node_bmc_defaults": {"port": "623x"}}
            data["nodes"][n]["node_bmc"]["port"] = "623x"
    assert _errors(mutate) == [
        "cluster: cluster_writable_paths[0] /var/log must be a mapping, not a string",
        "cluster: cluster_writable_paths[1] /tmp must be a mapping, not a string",
        "node01: node_interfaces [{'mac': '52:54:00:77:00:11'}] must be a mapping, not a list",
        "gpu_nodes: node_bmc_defaults.port 623x must be an integer, not a string"]
