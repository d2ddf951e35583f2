"""Relations and values the model refuses (issue 21): each breaks one thing of the lab
inventory and asserts the exact refusal, in the model's ``host: field value problem``
form."""

from __future__ import annotations

import pytest
from ansible_collections.junkyard.cluster.plugins.action.cluster_model import secret_verdict
from ansible_collections.junkyard.cluster.plugins.module_utils.cluster_model import build_model

from tests.unit.test_cluster_model import lab_data


def _quad(data, zones):
    prof = data["cluster"]["hardware_profiles"]["g292-z20"]
    prof["gpu"] = {"model": "MI100", "count": 4, "gfx_target": "gfx908"}
    prof["bmc"]["gpu_current_sensors"] = ["A", "B", "C", "D"]
    prof["fan_zones"] = zones


def _cluster(**values):
    def mutate(data):
        data["cluster"].update(values)
    return mutate


def _node_mac(node, role, mac):
    def mutate(data):
        data["nodes"][node]["node_interfaces"][role]["mac"] = mac
    return mutate


def _writable(path, kind):
    def mutate(data):
        data["cluster"]["writable_paths"].append({"path": path, "kind": kind})
    return mutate


def _pool(**values):
    def mutate(data):
        data["cluster"]["pool"].update(values)
    return mutate


def _head_name(data):
    data["head"]["name"] = "Storage_01"


def _bmc_subnet(subnet):
    def mutate(data):
        data["cluster"]["networks"]["bmc"]["subnet"] = subnet
    return mutate


def _data_mount(mount):
    def mutate(data):
        data["cluster"]["data_datasets"][0]["mount"] = mount
    return mutate


def _cmdline(args):
    def mutate(data):
        data["cluster"]["hardware_profiles"]["g292-z20"]["kernel_cmdline"] = args
    return mutate


def _device(device):
    def mutate(data):
        data["head"]["vars"]["head_interfaces"]["mgmt"]["device"] = device
    return mutate


CASES = [
    (_bmc_subnet("10.77.0.0/16"), "cluster: cluster_networks.bmc.subnet 10.77.0.0/16 overlaps "
     "the management subnet 10.77.0.0/24: the BMCs must be on their own network"),
    (_bmc_subnet("10.78.0.128/25"), "cluster: cluster_networks.bmc.subnet 10.78.0.128/25 "
     "overlaps the data subnet 10.78.0.0/24"),
    (lambda d: _quad(d, [{"name": "front", "fan_id": 1, "gpus": [0, 1]},
                         {"name": "rear", "fan_id": 2, "gpus": [2]}]),
     "cluster: cluster_hardware_profiles.g292-z20.fan_zones 3 is a GPU in no fan zone"),
    (lambda d: _quad(d, [{"name": "front", "fan_id": 1, "gpus": [0, 1]},
                         {"name": "rear", "fan_id": 1, "gpus": [2, 3]}]),
     "cluster: cluster_hardware_profiles.g292-z20.fan_zones[1].fan_id 1 is already the fan of "
     "zone front"),
    (_head_name, "Storage_01: inventory_hostname Storage_01 is not a valid host name"),
    (_node_mac("node01", "mgmt", "00:00:00:00:00:00"), "node01: node_interfaces.mgmt.mac "
     "00:00:00:00:00:00 is the all-zero MAC address"),
    (_node_mac("node02", "data", "01:00:5e:00:00:01"), "node02: node_interfaces.data.mac "
     "01:00:5e:00:00:01 is a multicast (group) MAC address"),
    (_pool(log=[{"type": "raidz", "disks": ["/dev/sdx", "/dev/sdy"]}]),
     "cluster: cluster_pool.log[0].type raidz cannot be a log vdev"),
    (_pool(mountpoint="tank"), "cluster: cluster_pool.mountpoint tank is not an absolute path"),
    (_pool(mountpoint="/srv/my pool"), "cluster: cluster_pool.mountpoint /srv/my pool contains "
     "a character"),
    (_pool(filesystem_properties={"sharenfs": "on"}), "cluster: "
     "cluster_pool.filesystem_properties sharenfs is refused"),
    (_data_mount("data/scratch"), "cluster: cluster_data_datasets[0].mount data/scratch is not "
     "an absolute path"),
    (_data_mount("/data/a,b"), "cluster: cluster_data_datasets[0].mount /data/a,b contains a "
     "character"),
    (_data_mount("/usr"), "cluster: cluster_data_datasets[0].mount /usr would hide a directory"),
    (_writable("/etc", "overlay"), "cluster: cluster_writable_paths[10].path /etc is a directory "
     "the node needs from its image as a whole: a overlay mount"),
    (_writable("/usr", "tmpfs"), "cluster: cluster_writable_paths[10].path /usr is a directory "
     "the node needs"),
    (_cluster(domain="lab internal"), "cluster: cluster_domain lab internal is not a DNS domain"),
    (_cluster(domain="lab,internal"), "cluster: cluster_domain lab,internal is not a DNS domain"),
    (_cluster(name="jy lab"), "cluster: cluster_name jy lab is not a name"),
    (_cluster(timezone="Europe/Berln"), "cluster: cluster_timezone Europe/Berln is not a time "
     "zone"),
    (_cluster(apt_proxy="10.0.2.100:3142"), "cluster: cluster_apt_proxy 10.0.2.100:3142 is not "
     "an http:// or https:// URL"),
    (_cluster(apt_proxy="http://10.0.2.100:70000"), "cluster: cluster_apt_proxy "
     "http://10.0.2.100:70000 is not a URL with a valid port"),
    (_cluster(tftp_root="/srv/tftp\n"), "cluster: cluster_tftp_root '/srv/tftp\\n' contains a "
     "character"),
    (_cmdline(["console=ttyS0,115200 quiet"]), "cluster: "
     "cluster_hardware_profiles.g292-z20.kernel_cmdline console=ttyS0,115200 quiet is not one "
     "kernel argument"),
    (_device("eno 1"), "head: head_interfaces.mgmt.device eno 1 is not a network interface name"),
]


@pytest.mark.parametrize(("mutate", "expected"), CASES)
def test_relation_is_refused(mutate, expected):
    data = lab_data()
    mutate(data)
    model, errors = build_model(data)
    assert model is None
    assert any(e.startswith(expected) for e in errors), errors


@pytest.mark.parametrize("mutate", [
    lambda d: _quad(d, [{"name": "front", "fan_id": 1, "gpus": [0, 1]},
                        {"name": "rear", "fan_id": 2, "gpus": [2, 3]},
                        {"name": "cpu", "fan_id": 0, "gpus": []}]),
    _node_mac("node01", "mgmt", "52-54-00-77-00-11".upper()),
    _cluster(apt_proxy=""),
    _cluster(apt_proxy="http://proxy.lab.internal:3142/"),
    _cluster(timezone="America/Argentina/Buenos_Aires"),
    _writable("/etc/default", "overlay"),
    _pool(log=[{"type": "mirror", "disks": ["/dev/sdx", "/dev/sdy"]}]),
    _pool(mountpoint="/srv/tank"),
], ids=["zones-cover-every-gpu", "upper-dash-mac", "no-proxy", "proxy-name", "deep-tz",
        "etc-subdir", "mirror-log", "mountpoint"])
def test_unusual_but_valid_is_accepted(mutate):
    data = lab_data()
    mutate(data)
    model, errors = build_model(data)
    assert errors == []
    assert model["nodes"]


@pytest.mark.parametrize(("password", "verdict"), [
    ("{{ lookup('ansible.builtin.env', 'BMC_PW', default='hunter2') }}", "env-default"),
    ("{{ lookup('env', 'BMC_PW') | default('hunter2', true) }}", "env-default"),
    ("{{ lookup('ansible.builtin.env', 'BMC_PW', default='') }}", "env"),
    ("{{ lookup('ansible.builtin.env', 'BMC_PW') }}", "env"),
])
def test_an_env_lookup_with_a_plain_text_default_is_not_a_secret(password, verdict):
    assert secret_verdict(password, {}) == verdict
    data = lab_data()
    data["secrets"]["node01"] = verdict
    _model, errors = build_model(data)
    expected = ("node01: node_bmc.password <hidden> has a plain-text default= in its "
                "environment lookup")
    assert any(e.startswith(expected) for e in errors) == (verdict == "env-default")


STATE = {"schema": 1, "nodes": {}, "images": {"bookworm": {
    "current": "v2", "versions": {"v1": {"origin": None}, "v2": {"origin": "v1"}}}}}


@pytest.mark.parametrize(("pin", "refused"), [("v3", True), ("v1", False), ("v2", False)])
def test_a_pin_must_name_a_version_the_state_records(pin, refused):
    data = lab_data()
    data["nodes"]["node02"]["node_image_version"] = pin
    data["image_state"], data["image_state_file"] = STATE, "head:/etc/junkyard/image-state.yml"
    _model, errors = build_model(data)
    expected = ("node02: node_image_version v3 is not a recorded version of bookworm in the "
                "image state head:/etc/junkyard/image-state.yml (v1, v2)")
    assert errors == ([expected + ": a pin names a version that was built"] if refused else [])


def test_a_pin_is_free_while_the_state_records_nothing_of_its_image():
    data = lab_data()
    data["nodes"]["node02"]["node_image_version"] = "v7"
    data["image_state"] = {}
    model, errors = build_model(data)
    assert errors == []
    assert ("bookworm", "v7") in {(b["image"], b["version"]) for b in model["image_builds"]}
