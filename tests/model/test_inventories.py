"""The cluster model refuses bad inventories before anything changes.

Every case takes the lab inventory, breaks one thing, and runs
playbooks/model.yml through ansible-runner: the run must fail, and the error
must name the host, the field and the value.  The valid inventories of the
repository (and a vaulted BMC password) must be accepted.

The lab's head is not reachable here, so these runs give the image state as
the variable cluster_image_state (empty: the inventory's versions) instead of
reading it on the head; tests/model/test_image_state.py reads real files.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess

import ansible_runner
import pytest
import yaml

from tests.conftest import REPO
from tests.inventory_files import LAB, group_vars, unshared

MODEL_PLAYBOOK = REPO / "playbooks" / "model.yml"


def _load_lab():
    """The lab inventory as plain data (tests/inventory_files), copied so that no two
    places share one list (the lab's profiles share their blacklist through a YAML
    alias)."""
    data = {"hosts": yaml.safe_load((LAB / "hosts.yml").read_text()),
            "cluster": group_vars(LAB, "all"),
            "nodes_group": group_vars(LAB, "gpu_nodes")}
    return unshared(data)


def _node(inv, name):
    return inv["hosts"]["all"]["children"]["gpu_nodes"]["hosts"][name]


def _head(inv):
    return inv["hosts"]["all"]["children"]["storage_head"]["hosts"]["head"]


def _write(inv, tmp_path, extra_files=None):
    d = tmp_path / "inventory"
    (d / "group_vars" / "all").mkdir(parents=True)
    (d / "hosts.yml").write_text(yaml.safe_dump(inv["hosts"], sort_keys=False))
    (d / "group_vars" / "all" / "cluster.yml").write_text(
        yaml.safe_dump(inv["cluster"], sort_keys=False))
    (d / "group_vars" / "gpu_nodes.yml").write_text(
        yaml.safe_dump(inv["nodes_group"], sort_keys=False))
    for rel, text in (extra_files or {}).items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_text(text)
    return d


NO_STATE = {"cluster_image_state": {}}


def _run(inv_dir, tmp_path, extravars=None, cmdline="", playbook=MODEL_PLAYBOOK):
    """Run ``playbook`` (model.yml) against ``inv_dir``; extravars default to NO_STATE."""
    pdd = tmp_path / "runner"
    pdd.mkdir()
    r = ansible_runner.run(
        private_data_dir=str(pdd),
        playbook=str(playbook),
        inventory=str(inv_dir / "hosts.yml"),
        envvars={"ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
                 "JUNKYARD_LAB_BMC_PASSWORD": "from-env"},
        extravars=dict(NO_STATE) if extravars is None else extravars,
        cmdline=cmdline,
        quiet=True,
        json_mode=False,
    )
    out = r.stdout.read()
    shutil.rmtree(pdd / "artifacts", ignore_errors=True)
    return r, out


# --- the mutations ---------------------------------------------------------


def m_dup_mgmt_mac(inv):
    _node(inv, "node02")["node_interfaces"]["mgmt"]["mac"] = "52:54:00:77:00:11"


def m_dup_mgmt_ip(inv):
    _node(inv, "node02")["node_interfaces"]["mgmt"]["ip"] = "10.77.0.11"


def m_dup_data_ip_with_head(inv):
    _node(inv, "node01")["node_interfaces"]["data"]["ip"] = "10.78.0.1"


def m_dup_data_mac(inv):
    _node(inv, "node02")["node_interfaces"]["data"]["mac"] = "52:54:00:78:00:11"


def m_dup_bmc(inv):
    _node(inv, "node02")["node_bmc"]["port"] = 6231


def m_mgmt_ip_outside(inv):
    _node(inv, "node02")["node_interfaces"]["mgmt"]["ip"] = "10.78.0.14"


def m_data_ip_outside(inv):
    _node(inv, "node01")["node_interfaces"]["data"]["ip"] = "192.168.5.3"


def m_head_ip_outside(inv):
    _head(inv)["head_interfaces"]["mgmt"]["ip"] = "10.77.1.1"


def m_bmc_outside(inv):
    _node(inv, "node01")["node_bmc"]["address"] = "10.99.0.5"


def m_ip_is_network_address(inv):
    _node(inv, "node01")["node_interfaces"]["mgmt"]["ip"] = "10.77.0.0"


def m_bad_mac(inv):
    _node(inv, "node01")["node_interfaces"]["mgmt"]["mac"] = "52:54:00:77:00"


def m_unknown_profile(inv):
    _node(inv, "node02")["node_profile"] = "g292-z99"


def m_unknown_image(inv):
    _node(inv, "node01")["node_image"] = "trixie"


def _gpu_profile(inv):
    prof = copy.deepcopy(inv["cluster"]["cluster_hardware_profiles"]["g292-z20"])
    prof["gpu"] = {"model": "MI100", "count": 4, "gfx_target": "gfx908"}
    prof["bmc"]["gpu_current_sensors"] = prof["bmc"]["gpu_current_sensors"][:4]
    prof["fan_zones"] = [{"name": "front", "fan_id": 1, "gpus": [0, 1]},
                         {"name": "rear", "fan_id": 2, "gpus": [2, 3]}]
    inv["cluster"]["cluster_hardware_profiles"]["quad"] = prof
    return prof


def m_zone_names_missing_gpu(inv):
    _gpu_profile(inv)["fan_zones"][1]["gpus"] = [2, 3, 4]


def m_zone_gpu_twice(inv):
    _gpu_profile(inv)["fan_zones"][1]["gpus"] = [1, 2, 3]


def m_bad_gfx(inv):
    _gpu_profile(inv)["gpu"]["gfx_target"] = "mi100"


def m_blacklist_string(inv):
    inv["cluster"]["cluster_hardware_profiles"]["g292-z20"]["kernel_module_blacklist"] = \
        "floppy,pcspkr"


def m_blacklist_bad_name(inv):
    inv["cluster"]["cluster_hardware_profiles"]["g292-z20"]["kernel_module_blacklist"] = \
        ["floppy", "pcspkr ata_piix"]


def m_initramfs_modules_empty(inv):
    inv["cluster"]["cluster_hardware_profiles"]["g292-z20"]["initramfs_modules"] = []


def m_writable_relative(inv):
    inv["cluster"]["cluster_writable_paths"].append({"path": "var/cache", "kind": "tmpfs"})


def m_writable_repeated(inv):
    inv["cluster"]["cluster_writable_paths"].append({"path": "/var/log", "kind": "tmpfs"})


def m_writable_nested(inv):
    inv["cluster"]["cluster_writable_paths"].append({"path": "/var/log/journal",
                                                     "kind": "tmpfs"})


def m_writable_kind(inv):
    inv["cluster"]["cluster_writable_paths"][2]["kind"] = "ramdisk"


def m_draid_too_wide(inv):
    inv["cluster"]["cluster_pool"]["vdevs"][0]["data"] = 10


def m_draid_children(inv):
    inv["cluster"]["cluster_pool"]["vdevs"][0]["children"] = 14


def m_disk_twice(inv):
    inv["cluster"]["cluster_pool"]["special"][0]["disks"][1] = "/dev/disk/by-id/virtio-jydisk05"


def m_mirror_one_disk(inv):
    del inv["cluster"]["cluster_pool"]["special"][0]["disks"][1:]


def m_plain_password(inv):
    _node(inv, "node02")["node_bmc"]["password"] = "hunter2"


def m_plain_password_via_var(inv):
    _node(inv, "node01")["node_bmc"]["password"] = "{{ bmc_secret }}"
    _node(inv, "node01")["bmc_secret"] = "hunter2"


def m_two_heads(inv):
    inv["hosts"]["all"]["children"]["storage_head"]["hosts"]["head2"] = {
        "head_interfaces": {"mgmt": {"ip": "10.77.0.2"}, "data": {"ip": "10.78.0.2"}}}


def m_no_groups(inv):
    inv["hosts"] = {"all": {"hosts": {"head": _head(inv)}}}


def m_head_is_node(inv):
    inv["hosts"]["all"]["children"]["gpu_nodes"]["hosts"]["head"] = copy.deepcopy(
        _node(inv, "node01"))


def m_subnet_host_bits(inv):
    inv["cluster"]["cluster_networks"]["mgmt"]["subnet"] = "10.77.0.1/24"


def m_overlapping_networks(inv):
    inv["cluster"]["cluster_networks"]["data"]["subnet"] = "10.77.0.0/16"
    for n in ("node01", "node02"):
        _node(inv, n)["node_interfaces"]["data"]["ip"] = _node(
            inv, n)["node_interfaces"]["mgmt"]["ip"].replace("10.77.0", "10.77.9")
    _head(inv)["head_interfaces"]["data"]["ip"] = "10.77.9.1"


def m_missing_bmc_network(inv):
    del inv["cluster"]["cluster_networks"]["bmc"]


def m_failure_policy(inv):
    inv["cluster"]["cluster_writable_failure_policy"] = "ignore"


def m_bad_version(inv):
    _node(inv, "node02")["node_image_version"] = "v2/../../etc"


def m_bad_hostname(inv):
    hosts = inv["hosts"]["all"]["children"]["gpu_nodes"]["hosts"]
    hosts["Node_03"] = copy.deepcopy(hosts["node01"])
    hosts["Node_03"]["node_interfaces"]["mgmt"].update(mac="52:54:00:77:00:13", ip="10.77.0.13")
    hosts["Node_03"]["node_interfaces"]["data"].update(mac="52:54:00:78:00:13", ip="10.78.0.13")
    hosts["Node_03"]["node_bmc"]["port"] = 6233


def m_networks_wrong_type(inv):
    inv["cluster"]["cluster_networks"] = "10.77.0.0/24"


# --- names and shapes (issue 21): unknown keys, wrong shapes, YAML numbers ---


def m_unknown_cluster_variable(inv):
    inv["cluster"]["cluster_writeable_paths"] = inv["cluster"].pop("cluster_writable_paths")


def m_unknown_node_variable(inv):
    _node(inv, "node02")["node_image_verison"] = "v1"


def m_unknown_head_variable(inv):
    _head(inv)["head_interface"] = _head(inv)["head_interfaces"]


def m_unknown_group_variable(inv):
    inv["nodes_group"]["node_profle"] = "g292-z20"


def m_unknown_role_prefixed_variable(inv):
    inv["nodes_group"]["node_network_tabel"] = {}


def m_draid_spare(inv):
    inv["cluster"]["cluster_pool"]["vdevs"][0]["spare"] = 1


def m_network_key(inv):
    inv["cluster"]["cluster_networks"]["data"]["mut"] = 9000


def m_writable_key(inv):
    inv["cluster"]["cluster_writable_paths"][3]["sise"] = "4g"


def m_iface_key(inv):
    _node(inv, "node01")["node_interfaces"]["mgmt"]["macaddr"] = "52:54:00:77:00:11"


def m_bmc_key(inv):
    _node(inv, "node01")["node_bmc"]["usrname"] = "admin"


def m_bmc_defaults_key(inv):
    inv["nodes_group"]["node_bmc_defaults"] = {"usrname": "admin"}


def m_profile_key(inv):
    inv["cluster"]["cluster_hardware_profiles"]["g292-z20"]["kernel_cmdlin"] = ["quiet"]


def m_profile_bmc_key(inv):
    inv["cluster"]["cluster_hardware_profiles"]["g292-z20"]["bmc"]["cpu_temp_sensor"] = ["T"]


def m_fan_zone_key(inv):
    _gpu_profile(inv)["fan_zones"][0]["fanid"] = 1


def m_image_key(inv):
    inv["cluster"]["cluster_images"]["bookworm"]["current_verison"] = "v2"


def m_data_dataset_key(inv):
    inv["cluster"]["cluster_data_datasets"][0]["mountpoint"] = "/data/s"


def m_pool_key(inv):
    inv["cluster"]["cluster_pool"]["mount_point"] = "/tank"


def m_interfaces_role(inv):
    _node(inv, "node01")["node_interfaces"]["mgmnt"] = {}


def m_zone_gpus_string(inv):
    _gpu_profile(inv)["fan_zones"][0]["gpus"] = "0-1"


def m_sensors_string(inv):
    inv["cluster"]["cluster_hardware_profiles"]["g292-z20"]["bmc"]["psu_status_sensors"] = \
        "PSU1_STATUS PSU2_STATUS"


def m_disks_string(inv):
    inv["cluster"]["cluster_pool"]["special"][0]["disks"] = "/dev/disk/by-id/virtio-jydisk12"


def m_writable_paths_mapping(inv):
    inv["cluster"]["cluster_writable_paths"] = {"/var/log": "persistent"}


def m_data_datasets_string(inv):
    inv["cluster"]["cluster_data_datasets"] = "scratch"


def m_profile_not_mapping(inv):
    inv["cluster"]["cluster_hardware_profiles"]["g292-z20"]["gpu"] = "none"


def m_mac_as_number(inv):
    # 52:54:00:12:34:56 unquoted is a YAML 1.1 base-60 integer
    _node(inv, "node02")["node_interfaces"]["data"]["mac"] = 6797531046


def m_version_as_number(inv):
    inv["cluster"]["cluster_images"]["bookworm"]["current_version"] = 2026.1


def m_pin_as_number(inv):
    _node(inv, "node01")["node_image_version"] = 2026.1


def m_port_as_string(inv):
    _node(inv, "node01")["node_bmc"]["port"] = "623x"


def m_mtu_string_and_more(inv):
    inv["cluster"]["cluster_networks"]["data"]["mtu"] = "jumbo"
    inv["cluster"]["cluster_pool"]["ashift"] = "12k"


# --- relations (issue 21) -----------------------------------------------------


def m_bmc_overlaps_mgmt(inv):
    inv["cluster"]["cluster_networks"]["bmc"]["subnet"] = "10.77.0.0/16"
    for n in ("node01", "node02"):
        _node(inv, n)["node_bmc"]["address"] = "10.77.5.1" + n[-1]


def m_bmc_overlaps_data(inv):
    inv["cluster"]["cluster_networks"]["bmc"]["subnet"] = "10.78.0.128/25"
    for n in ("node01", "node02"):
        _node(inv, n)["node_bmc"]["address"] = "10.78.0.20" + n[-1]


def m_gpu_in_no_zone(inv):
    _gpu_profile(inv)["fan_zones"][1]["gpus"] = [2]


def m_two_zones_one_fan(inv):
    _gpu_profile(inv)["fan_zones"][1]["fan_id"] = 1


def m_head_name(inv):
    heads = inv["hosts"]["all"]["children"]["storage_head"]["hosts"]
    heads["Storage_01"] = heads.pop("head")


def m_zero_mac(inv):
    _node(inv, "node01")["node_interfaces"]["mgmt"]["mac"] = "00:00:00:00:00:00"


def m_multicast_mac(inv):
    _node(inv, "node02")["node_interfaces"]["data"]["mac"] = "01:00:5e:00:00:12"


def m_raidz_log(inv):
    inv["cluster"]["cluster_pool"]["log"] = [
        {"type": "raidz", "disks": ["/dev/disk/by-id/virtio-log1", "/dev/disk/by-id/virtio-log2"]}]


def m_relative_pool_mountpoint(inv):
    inv["cluster"]["cluster_pool"]["mountpoint"] = "tank"


def m_tmpfs_over_usr(inv):
    inv["cluster"]["cluster_writable_paths"].append({"path": "/usr", "kind": "tmpfs"})


def m_overlay_over_etc(inv):
    inv["cluster"]["cluster_writable_paths"][7] = {"path": "/etc", "kind": "overlay"}


def m_domain_with_space(inv):
    inv["cluster"]["cluster_domain"] = "lab internal"


def m_tftp_root_with_comma(inv):
    inv["cluster"]["cluster_tftp_root"] = "/srv/tftp,ro"


def m_cmdline_with_space(inv):
    inv["cluster"]["cluster_hardware_profiles"]["g292-z20"]["kernel_cmdline"] = [
        "console=ttyS0,115200 quiet"]


def m_sharenfs(inv):
    inv["cluster"]["cluster_pool"]["filesystem_properties"] = {"sharenfs": "on"}


def m_data_mount_with_comma(inv):
    inv["cluster"]["cluster_data_datasets"][0]["mount"] = "/data/scratch,rw"


def m_unknown_timezone(inv):
    inv["cluster"]["cluster_timezone"] = "Europe/Berln"


def m_apt_proxy_without_scheme(inv):
    inv["cluster"]["cluster_apt_proxy"] = "10.0.2.100:3142"


def m_device_with_space(inv):
    _head(inv)["head_interfaces"]["data"]["device"] = "enp65s0f0 "


def m_password_with_default(inv):
    _node(inv, "node02")["node_bmc"]["password"] = (
        "{{ lookup('ansible.builtin.env', 'JUNKYARD_LAB_BMC_PASSWORD', default='hunter2') }}")


def m_data_mount_relative(inv):
    inv["cluster"]["cluster_data_datasets"][0]["mount"] = "data/scratch"


def m_password_with_default_filter(inv):
    _node(inv, "node01")["node_bmc"]["password"] = (
        "{{ lookup('ansible.builtin.env', 'JUNKYARD_LAB_BMC_PASSWORD')"
        " | default('hunter2', true) }}")


def m_pool_property_sharenfs(inv):
    inv["cluster"]["cluster_pool"]["properties"] = {"sharenfs": "on"}


def m_data_property_sharesmb(inv):
    inv["cluster"]["cluster_data_datasets"][0]["properties"]["sharesmb"] = "on"


def m_head_zero_mac(inv):
    _head(inv)["head_interfaces"]["mgmt"]["mac"] = "00-00-00-00-00-00"


def m_two_data_mounts_on_one_path(inv):
    inv["cluster"]["cluster_data_datasets"].append({"name": "archive", "mount": "/data/scratch"})


def m_data_mount_inside_another(inv):
    inv["cluster"]["cluster_data_datasets"].append({"name": "archive",
                                                    "mount": "/data/scratch/archive"})


def m_data_mount_on_writable_path(inv):
    inv["cluster"]["cluster_data_datasets"][0]["mount"] = "/var/log"


def m_data_mount_inside_tmpfs(inv):
    inv["cluster"]["cluster_data_datasets"][0]["mount"] = "/tmp/scratch"


def m_data_mount_over_writable_path(inv):
    inv["cluster"]["cluster_data_datasets"][0]["mount"] = "/var/lib"


def m_data_mount_over_dev(inv):
    inv["cluster"]["cluster_data_datasets"][0]["mount"] = "/dev"


def m_tmpfs_over_run(inv):
    inv["cluster"]["cluster_writable_paths"].append({"path": "/run", "kind": "tmpfs"})


def m_data_mountpoint_property(inv):
    inv["cluster"]["cluster_data_datasets"][0]["properties"]["mountpoint"] = "/srv/scratch"


def m_pool_mountpoint_property(inv):
    inv["cluster"]["cluster_pool"]["filesystem_properties"]["mountpoint"] = "/srv/tank"


def m_suite_with_space(inv):
    inv["cluster"]["cluster_images"]["bookworm"]["suite"] = "bookworm main"


def m_profile_name_with_space(inv):
    profiles = inv["cluster"]["cluster_hardware_profiles"]
    profiles["g292 z20"] = profiles.pop("g292-z20")
    _node(inv, "node01")["node_profile"] = "g292 z20"


def m_gateway_is_network_address(inv):
    inv["cluster"]["cluster_networks"]["data"]["gateway"] = "10.78.0.0"


def m_image_name_as_number(inv):
    inv["cluster"]["cluster_images"][2027] = {"suite": "bookworm", "current_version": "v1"}


def m_property_name_as_number(inv):
    inv["cluster"]["cluster_pool"]["filesystem_properties"][1] = "x"


def m_bmc_default_port_as_string(inv):
    inv["nodes_group"]["node_bmc_defaults"] = {"port": "623x"}
    for n in ("node01", "node02"):
        del _node(inv, n)["node_bmc"]["port"]


def m_mgmt_ipv6(inv):
    inv["cluster"]["cluster_networks"]["mgmt"]["subnet"] = "fd00:77::/64"


def m_persistent_path_size(inv):
    inv["cluster"]["cluster_writable_paths"][0]["size"] = "4g"


def m_tmpfs_path_name(inv):
    inv["cluster"]["cluster_writable_paths"][3]["name"] = "tmp"


def m_mirror_parity(inv):
    inv["cluster"]["cluster_pool"]["special"][0]["parity"] = 2


def m_raidz_spares(inv):
    inv["cluster"]["cluster_pool"]["log"] = [
        {"type": "mirror", "disks": ["/dev/disk/by-id/virtio-log1", "/dev/disk/by-id/virtio-log2"]}]
    inv["cluster"]["cluster_pool"]["vdevs"].append({
        "type": "raidz", "parity": 1, "spares": 1,
        "disks": [f"/dev/disk/by-id/virtio-rz{i}" for i in range(3)]})


def m_version_with_newline(inv):
    # a block scalar (|) keeps the line's end: it would end up in the boot entry
    _node(inv, "node02")["node_image_version"] = "v1\n"


def m_size_with_newline(inv):
    inv["cluster"]["cluster_writable_paths"][3]["size"] = "4g\n"


# --- the roles' own variables, against their argument specifications ----------


def m_role_list_as_string(inv):
    inv["nodes_group"]["node_image_packages"] = "htop vim"


def m_role_list_as_string_for_everyone(inv):
    inv["cluster"]["node_image_components"] = "main non-free-firmware"


def m_role_bool_not_a_boolean(inv):
    _node(inv, "node01")["node_image_snapshot"] = "maybe"


def m_role_string_as_number(inv):
    inv["nodes_group"]["node_network_data_mount_options"] = 4


# --- values that cannot be templated: named in the model's form, all at once ---


def m_undefined_in_cluster_variable(inv):
    # (Ansible checked the role's options first and stopped at this one, without the others)
    inv["cluster"]["cluster_apt_proxy"] = "http://{{ proxy_host }}:3142"


def m_undefined_in_node_variable(inv):
    _node(inv, "node02")["node_interfaces"]["mgmt"]["ip"] = "{{ node02_mgmt_ip }}"


def m_bad_expression_in_head_variable(inv):
    _head(inv)["head_interfaces"]["data"]["ip"] = "{{ 10.78.0.1 }"


def m_undefined_in_group_variable(inv):
    inv["nodes_group"]["node_bmc_defaults"] = {"username": "{{ bmc_user }}"}


# --- the cluster's users: the same numbers on the head and every node ----------


def m_user_uid_repeated(inv):
    inv["cluster"]["cluster_users"][1]["uid"] = 2001


def m_user_gid_of_another_user(inv):
    inv["cluster"]["cluster_users"][1]["gid"] = 2001


def m_user_system_name(inv):
    inv["cluster"]["cluster_users"][0]["name"] = "slurm"


def m_user_uid_in_system_range(inv):
    inv["cluster"]["cluster_users"][0]["uid"] = 999


def m_user_unknown_group(inv):
    inv["cluster"]["cluster_users"][0]["groups"] = ["render", "physics"]


def m_user_private_key_as_public(inv):
    inv["cluster"]["cluster_users"][0]["ssh_keys"] = ["-----BEGIN OPENSSH PRIVATE KEY-----"]


def m_users_without_home_dataset(inv):
    inv["cluster"]["cluster_data_datasets"] = [
        d for d in inv["cluster"]["cluster_data_datasets"] if d["name"] != "home"]


CASES = [
    (m_user_uid_repeated, "cluster: cluster_users[1].uid 2001 is also cluster_users[0]'s uid"),
    (m_user_gid_of_another_user, "cluster: cluster_users[1].gid 2001 is also cluster_users[0]'s "
     "gid (each user's own group has the user's number)"),
    (m_user_system_name, "cluster: cluster_users[0].name slurm is an account or group of the "
     "system"),
    (m_user_uid_in_system_range, "cluster: cluster_users[0].uid 999 must be an integer from "
     "1000 to 59999"),
    (m_user_unknown_group, "cluster: cluster_users[0].groups physics is neither render, video "
     "nor another user's own group"),
    (m_user_private_key_as_public, "cluster: cluster_users[0].ssh_keys[0] -----BEGIN OPENSSH "
     "PRIVATE KEY----- is not an SSH public key line"),
    (m_users_without_home_dataset, "cluster: cluster_data_datasets /home has no dataset mounted "
     "there: the users' homes (/home/<name>) must be on the data network"),
    (m_dup_mgmt_mac, "node02: node_interfaces.mgmt.mac 52:54:00:77:00:11 is already used by "
     "node01 (node_interfaces.mgmt.mac) on the management network"),
    (m_dup_mgmt_ip, "node02: node_interfaces.mgmt.ip 10.77.0.11 is already used by node01"),
    (m_dup_data_ip_with_head, "node01: node_interfaces.data.ip 10.78.0.1 is already used by "
     "head (head_interfaces.data.ip) on the data network"),
    (m_dup_data_mac, "node02: node_interfaces.data.mac 52:54:00:78:00:11 is already used"),
    (m_dup_bmc, "node02: node_bmc.address:port 127.0.0.1:6231 is already used by node01"),
    (m_mgmt_ip_outside, "node02: node_interfaces.mgmt.ip 10.78.0.14 is not in the management "
     "subnet 10.77.0.0/24"),
    (m_data_ip_outside, "node01: node_interfaces.data.ip 192.168.5.3 is not in the data subnet "
     "10.78.0.0/24"),
    (m_head_ip_outside, "head: head_interfaces.mgmt.ip 10.77.1.1 is not in the management "
     "subnet 10.77.0.0/24"),
    (m_bmc_outside, "node01: node_bmc.address 10.99.0.5 is not in the BMC subnet 127.0.0.0/8"),
    (m_ip_is_network_address, "node01: node_interfaces.mgmt.ip 10.77.0.0 is the network or "
     "broadcast address"),
    (m_bad_mac, "node01: node_interfaces.mgmt.mac 52:54:00:77:00 is not a MAC address"),
    (m_unknown_profile, "node02: node_profile g292-z99 is not a hardware profile in "
     "cluster_hardware_profiles (g292-z20, g292-z45)"),
    (m_unknown_image, "node01: node_image trixie is not an image in cluster_images (bookworm)"),
    (m_zone_names_missing_gpu, "cluster: cluster_hardware_profiles.quad.fan_zones[1].gpus 4 "
     "names a GPU the profile does not have (it has 4: 0..3)"),
    (m_zone_gpu_twice, "cluster: cluster_hardware_profiles.quad.fan_zones[1].gpus 1 is already "
     "cooled by zone front"),
    (m_bad_gfx, "cluster: cluster_hardware_profiles.quad.gpu.gfx_target mi100 is not a gfx target"),
    (m_blacklist_string, "cluster: cluster_hardware_profiles.g292-z20.kernel_module_blacklist "
     "floppy,pcspkr must be a list of module names"),
    (m_blacklist_bad_name, "cluster: cluster_hardware_profiles.g292-z20.kernel_module_blacklist "
     "pcspkr ata_piix is not a kernel module name"),
    (m_initramfs_modules_empty, "cluster: cluster_hardware_profiles.g292-z20.initramfs_modules [] "
     "is empty: list the drivers of the management NIC"),
    (m_writable_relative, "cluster: cluster_writable_paths[10].path var/cache is not an absolute "
     "path"),
    (m_writable_repeated, "cluster: cluster_writable_paths[10].path /var/log repeats "
     "cluster_writable_paths[0]"),
    (m_writable_nested, "cluster: cluster_writable_paths[10].path /var/log/journal is nested with "
     "cluster_writable_paths[0] (/var/log/journal inside /var/log)"),
    (m_writable_kind, "cluster: cluster_writable_paths[2].kind ramdisk is not a writable path "
     "kind (persistent, tmpfs, overlay)"),
    (m_draid_too_wide, "cluster: cluster_pool.vdevs[0] draid2:10d:11c:1s cannot be built from "
     "11 disks"),
    (m_draid_children, "cluster: cluster_pool.vdevs[0].children 14 does not match the 11 disks "
     "listed"),
    (m_disk_twice, "cluster: cluster_pool.special[0].disks /dev/disk/by-id/virtio-jydisk05 is "
     "already used in cluster_pool.vdevs[0]"),
    (m_mirror_one_disk, "cluster: cluster_pool.special[0].disks 1 disks cannot build a mirror"),
    (m_plain_password, "node02: node_bmc.password <hidden> is given in plain text"),
    (m_plain_password_via_var, "node01: node_bmc.password <hidden> is given in plain text"),
    (m_two_heads, "must define the group storage_head with exactly one host and the group "
     "gpu_nodes (found storage_head: ['head', 'head2']"),
    (m_no_groups, "must define the group storage_head with exactly one host"),
    (m_head_is_node, "head: inventory_hostname head is both the storage head and a node"),
    (m_subnet_host_bits, "cluster: cluster_networks.mgmt.subnet 10.77.0.1/24 is not a valid "
     "network address"),
    (m_overlapping_networks, "cluster: cluster_networks.data.subnet 10.77.0.0/16 overlaps the "
     "management subnet 10.77.0.0/24"),
    (m_missing_bmc_network, "cluster_networks"),
    (m_failure_policy, "cluster_writable_failure_policy"),
    (m_bad_version, "node02: node_image_version v2/../../etc is not a version name"),
    (m_bad_hostname, "Node_03: inventory_hostname Node_03 is not a valid host name"),
    (m_networks_wrong_type, "cluster: cluster_networks 10.77.0.0/24 must be a mapping, not a "
     "string"),
    (m_unknown_cluster_variable, "cluster: cluster_writeable_paths is not a variable of "
     "junkyard.cluster (did you mean cluster_writable_paths?)"),
    (m_unknown_node_variable, "node02: node_image_verison is not a variable of junkyard.cluster "
     "nor of its role node_image (did you mean node_image_version?)"),
    (m_unknown_head_variable, "head: head_interface is not a variable of junkyard.cluster "
     "(did you mean head_interfaces?)"),
    (m_unknown_group_variable, "gpu_nodes: node_profle is not a variable of junkyard.cluster "
     "(did you mean node_profile?)"),
    (m_unknown_role_prefixed_variable, "gpu_nodes: node_network_tabel is not a variable of "
     "junkyard.cluster nor of its role node_network (did you mean node_network_table?)"),
    (m_draid_spare, "cluster: cluster_pool.vdevs[0] spare is not a known key (did you mean "
     "spares?); known keys: type, disks, parity, data, spares, children"),
    (m_network_key, "cluster: cluster_networks.data mut is not a known key (did you mean mtu?)"),
    (m_writable_key, "cluster: cluster_writable_paths[3] sise is not a known key (did you mean "
     "size?)"),
    (m_iface_key, "node01: node_interfaces.mgmt macaddr is not a known key (did you mean mac?)"),
    (m_bmc_key, "node01: node_bmc usrname is not a known key (did you mean username?)"),
    (m_bmc_defaults_key, "gpu_nodes: node_bmc_defaults usrname is not a known key (did you mean "
     "username?)"),
    (m_profile_key, "cluster: cluster_hardware_profiles.g292-z20 kernel_cmdlin is not a known key "
     "(did you mean kernel_cmdline?)"),
    (m_profile_bmc_key, "cluster: cluster_hardware_profiles.g292-z20.bmc cpu_temp_sensor is not a "
     "known key (did you mean cpu_temp_sensors?)"),
    (m_fan_zone_key, "cluster: cluster_hardware_profiles.quad.fan_zones[0] fanid is not a known "
     "key (did you mean fan_id?)"),
    (m_image_key, "cluster: cluster_images.bookworm current_verison is not a known key (did you "
     "mean current_version?)"),
    (m_data_dataset_key, "cluster: cluster_data_datasets[0] mountpoint is not a known key"),
    (m_pool_key, "cluster: cluster_pool mount_point is not a known key (did you mean "
     "mountpoint?)"),
    (m_interfaces_role, "node01: node_interfaces mgmnt is not a known key (did you mean mgmt?)"),
    (m_zone_gpus_string, "cluster: cluster_hardware_profiles.quad.fan_zones[0].gpus 0-1 must be "
     "a list of GPU numbers, not a string"),
    (m_sensors_string, "cluster: cluster_hardware_profiles.g292-z20.bmc.psu_status_sensors "
     "PSU1_STATUS PSU2_STATUS must be a list of sensor names, not a string"),
    (m_disks_string, "cluster: cluster_pool.special[0].disks /dev/disk/by-id/virtio-jydisk12 must "
     "be a list of device paths, not a string"),
    (m_writable_paths_mapping, "cluster: cluster_writable_paths {'/var/log': 'persistent'} must "
     "be a list of paths, not a mapping"),
    (m_data_datasets_string, "cluster: cluster_data_datasets scratch must be a list of "
     "datasets, not a string"),
    (m_profile_not_mapping, "cluster: cluster_hardware_profiles.g292-z20.gpu none must be a "
     "mapping, not a string"),
    (m_mac_as_number, "node02: node_interfaces.data.mac 6797531046 must be a string: YAML read "
     "the unquoted value as a number; write it in quotes"),
    (m_version_as_number, "cluster: cluster_images.bookworm.current_version 2026.1 must be a "
     "string: YAML read the unquoted value as a number; write it in quotes"),
    (m_pin_as_number, "node01: node_image_version 2026.1 must be a string: YAML read the "
     "unquoted value as a number; write it in quotes"),
    (m_port_as_string, "node01: node_bmc.port 623x must be an integer"),
    (m_mtu_string_and_more, "cluster: cluster_networks.data.mtu jumbo must be an integer "
     "576..9216"),
    (m_mtu_string_and_more, "cluster: cluster_pool.ashift 12k must be an integer 9..16"),
    (m_bmc_overlaps_mgmt, "cluster: cluster_networks.bmc.subnet 10.77.0.0/16 overlaps the "
     "management subnet 10.77.0.0/24: the BMCs must be on their own network"),
    (m_bmc_overlaps_data, "cluster: cluster_networks.bmc.subnet 10.78.0.128/25 overlaps the "
     "data subnet 10.78.0.0/24"),
    (m_gpu_in_no_zone, "cluster: cluster_hardware_profiles.quad.fan_zones 3 is a GPU in no fan "
     "zone"),
    (m_two_zones_one_fan, "cluster: cluster_hardware_profiles.quad.fan_zones[1].fan_id 1 is "
     "already the fan of zone front"),
    (m_head_name, "Storage_01: inventory_hostname Storage_01 is not a valid host name"),
    (m_zero_mac, "node01: node_interfaces.mgmt.mac 00:00:00:00:00:00 is the all-zero MAC "
     "address"),
    (m_multicast_mac, "node02: node_interfaces.data.mac 01:00:5e:00:00:12 is a multicast "
     "(group) MAC address"),
    (m_raidz_log, "cluster: cluster_pool.log[0].type raidz cannot be a log vdev"),
    (m_relative_pool_mountpoint, "cluster: cluster_pool.mountpoint tank is not an absolute "
     "path"),
    (m_tmpfs_over_usr, "cluster: cluster_writable_paths[10].path /usr is a directory the node "
     "needs from its image as a whole"),
    (m_overlay_over_etc, "cluster: cluster_writable_paths[7].path /etc is a directory the node "
     "needs from its image as a whole"),
    (m_domain_with_space, "cluster: cluster_domain lab internal is not a DNS domain"),
    (m_tftp_root_with_comma, "cluster: cluster_tftp_root /srv/tftp,ro contains a character an "
     "exports line, kernel command line or dnsmasq file cannot hold"),
    (m_cmdline_with_space, "cluster: cluster_hardware_profiles.g292-z20.kernel_cmdline "
     "console=ttyS0,115200 quiet is not one kernel argument"),
    (m_sharenfs, "cluster: cluster_pool.filesystem_properties sharenfs is refused"),
    (m_data_mount_with_comma, "cluster: cluster_data_datasets[0].mount /data/scratch,rw contains "
     "a character"),
    (m_unknown_timezone, "cluster: cluster_timezone Europe/Berln is not a time zone"),
    (m_apt_proxy_without_scheme, "cluster: cluster_apt_proxy 10.0.2.100:3142 is not an http:// "
     "or https:// URL"),
    (m_password_with_default, "node02: node_bmc.password <hidden> has a plain-text default= "
     "in its environment lookup"),
    (m_device_with_space, "head: head_interfaces.data.device 'enp65s0f0 ' is not a network "
     "interface name"),
    (m_data_mount_relative, "cluster: cluster_data_datasets[0].mount data/scratch is not an "
     "absolute path"),
    (m_password_with_default_filter, "node01: node_bmc.password <hidden> has a plain-text "
     "default= in its environment lookup"),
    (m_pool_property_sharenfs, "cluster: cluster_pool.properties sharenfs is refused"),
    (m_data_property_sharesmb, "cluster: cluster_data_datasets[0].properties sharesmb is "
     "refused"),
    (m_head_zero_mac, "head: head_interfaces.mgmt.mac 00-00-00-00-00-00 is the all-zero MAC "
     "address"),
    (m_two_data_mounts_on_one_path, "cluster: cluster_data_datasets[3].mount /data/scratch is "
     "also the mount of cluster_data_datasets[1] (/data/scratch)"),
    (m_data_mount_inside_another, "cluster: cluster_data_datasets[3].mount "
     "/data/scratch/archive is nested with the mount of cluster_data_datasets[1] "
     "(/data/scratch)"),
    (m_data_mount_on_writable_path, "cluster: cluster_data_datasets[0].mount /var/log is the "
     "persistent writable path /var/log: the data mount would hide what the node writes there"),
    (m_data_mount_inside_tmpfs, "cluster: cluster_data_datasets[0].mount /tmp/scratch is inside "
     "the tmpfs writable path /tmp: its empty file system would hide the mount point"),
    (m_data_mount_over_writable_path, "cluster: cluster_data_datasets[0].mount /var/lib "
     "contains the persistent writable path /var/lib/rasdaemon"),
    (m_data_mount_over_dev, "cluster: cluster_data_datasets[0].mount /dev would hide a "
     "directory the node needs"),
    (m_tmpfs_over_run, "cluster: cluster_writable_paths[10].path /run is where the kernel or the "
     "initramfs mounts a file system of its own"),
    (m_data_mountpoint_property, "cluster: cluster_data_datasets[0].properties mountpoint is "
     "refused"),
    (m_pool_mountpoint_property, "cluster: cluster_pool.filesystem_properties mountpoint is "
     "refused: write cluster_pool.mountpoint"),
    (m_suite_with_space, "cluster: cluster_images.bookworm.suite bookworm main is not a Debian "
     "suite or code name"),
    (m_profile_name_with_space, "cluster: cluster_hardware_profiles g292 z20 is not a profile "
     "name"),
    (m_gateway_is_network_address, "cluster: cluster_networks.data.gateway 10.78.0.0 is the "
     "network or broadcast address of 10.78.0.0/24"),
    (m_image_name_as_number, "cluster: cluster_images 2027 is not a name: YAML read the "
     "unquoted key as a number; write it in quotes"),
    (m_property_name_as_number, "cluster: cluster_pool.filesystem_properties 1 is not a name"),
    (m_bmc_default_port_as_string, "gpu_nodes: node_bmc_defaults.port 623x must be an integer"),
    (m_mgmt_ipv6, "cluster: cluster_networks.mgmt.subnet fd00:77::/64 is not an IPv4 network"),
    (m_persistent_path_size, "cluster: cluster_writable_paths[0].size 4g is the size of a tmpfs "
     "(of a tmpfs or overlay path): a persistent path is a dataset of the pool and takes none"),
    (m_tmpfs_path_name, "cluster: cluster_writable_paths[3].name tmp names the dataset of a "
     "persistent path: a tmpfs path has none"),
    (m_mirror_parity, "cluster: cluster_pool.special[0].parity 2 is not a setting of a mirror "
     "vdev (it takes type and disks only): it would be ignored"),
    (m_raidz_spares, "cluster: cluster_pool.vdevs[1].spares 1 is not a setting of a raidz vdev "
     "(parity): it would be ignored"),
    (m_version_with_newline, "node02: node_image_version 'v1\\n' is not a version name"),
    (m_size_with_newline, "cluster: cluster_writable_paths[3].size '4g\\n' is not a tmpfs size"),
    (m_role_list_as_string, "gpu_nodes: node_image_packages htop vim must be a list of strings, "
     "not a string"),
    (m_role_list_as_string_for_everyone, "cluster: node_image_components main non-free-firmware "
     "must be a list of strings, not a string"),
    (m_role_bool_not_a_boolean, "node01: node_image_snapshot maybe must be true or false, not a "
     "string"),
    (m_role_string_as_number, "gpu_nodes: node_network_data_mount_options 4 must be a string: "
     "YAML read the unquoted value as a number; write it in quotes"),
    (m_undefined_in_cluster_variable, "cluster: cluster_apt_proxy http://{{ proxy_host }}:3142 "
     "cannot be templated: 'proxy_host' is undefined"),
    (m_undefined_in_node_variable, "node02: node_interfaces.mgmt.ip {{ node02_mgmt_ip }} cannot "
     "be templated: 'node02_mgmt_ip' is undefined"),
    (m_bad_expression_in_head_variable, "head: head_interfaces.data.ip {{ 10.78.0.1 } cannot be "
     "templated: "),
    (m_undefined_in_group_variable, "gpu_nodes: node_bmc_defaults.username {{ bmc_user }} cannot "
     "be templated: 'bmc_user' is undefined"),
]


# --- valid but unusual inventories: accepted ---------------------------------


def _hosts(inv):
    return inv["hosts"]["all"]["children"]["gpu_nodes"]["hosts"]


def ok_one_node(inv):
    del _hosts(inv)["node02"]


def ok_64_generated_nodes(inv):
    template = _node(inv, "node01")
    hosts = _hosts(inv)
    hosts.clear()
    for i in range(1, 65):
        node = copy.deepcopy(template)
        for role, net in (("mgmt", 77), ("data", 78)):
            node["node_interfaces"][role].update(mac=f"52:54:00:{net}:01:{i:02x}",
                                                 ip=f"10.{net}.0.{100 + i}")
        node["node_bmc"]["port"] = 7000 + i
        hosts[f"gpu{i:02d}"] = node


def ok_mixed_profiles(inv):
    _gpu_profile(inv)
    _node(inv, "node02")["node_profile"] = "quad"


def ok_mtu_9000_on_data(inv):
    inv["cluster"]["cluster_networks"]["data"]["mtu"] = 9000


def ok_upper_case_dash_macs(inv):
    for n in ("node01", "node02"):
        for role in ("mgmt", "data"):
            iface = _node(inv, n)["node_interfaces"][role]
            iface["mac"] = iface["mac"].upper().replace(":", "-")


def ok_pin(inv):
    _node(inv, "node02")["node_image_version"] = "v1"


def ok_two_images(inv):
    inv["cluster"]["cluster_images"]["trixie"] = {"suite": "trixie", "current_version": "2026.10"}
    _node(inv, "node02")["node_image"] = "trixie"


def ok_gateways(inv):
    inv["cluster"]["cluster_networks"]["mgmt"]["gateway"] = "10.77.0.254"
    inv["cluster"]["cluster_networks"]["data"]["gateway"] = "10.78.0.254"


def ok_site_and_role_variables(inv):
    # (a role variable may name what only the role defines: it is templated there)
    inv["nodes_group"].update(rack="a1", node_image_packages=["htop"],
                              node_network_data_mount_options="hard,nconnect=4",
                              node_network_table="{{ cluster_model.nodes | length }}",
                              node_image_snapshot="yes", node_image_allow_plain_dir=0)
    _head(inv)["site_contact"] = "ops@example.org"


def ok_nothing_writable(inv):
    # (NFSv4 is refused now: every node's SSH host keys are on a persistent path)
    inv["cluster"]["cluster_writable_paths"] = []
    inv["cluster"]["cluster_data_datasets"] = []
    # (no data network dataset for homes: a cluster without users yet)
    inv["cluster"]["cluster_users"] = []


def ok_bmc_defaults_and_extra_vdevs(inv):
    # a node's own login over the lab's node_bmc_defaults
    _node(inv, "node01")["node_bmc"].update(
        username="operator",
        password="{{ lookup('ansible.builtin.env', 'JUNKYARD_LAB_BMC_PASSWORD') }}")
    inv["cluster"]["cluster_pool"]["log"] = [
        {"type": "mirror", "disks": ["/dev/disk/by-id/virtio-log1", "/dev/disk/by-id/virtio-log2"]}]
    inv["cluster"]["cluster_pool"]["mountpoint"] = "/srv/tank"


def ok_data_mount_inside_an_overlay(inv):
    # an overlay shows the image's directories, the data mount's mount point among them
    inv["cluster"]["cluster_data_datasets"].append({"name": "state",
                                                    "mount": "/var/lib/nfs/state"})


ACCEPTED = [ok_one_node, ok_64_generated_nodes, ok_mixed_profiles, ok_mtu_9000_on_data,
            ok_upper_case_dash_macs, ok_pin, ok_two_images, ok_gateways,
            ok_site_and_role_variables, ok_nothing_writable, ok_bmc_defaults_and_extra_vdevs,
            ok_data_mount_inside_an_overlay]


@pytest.mark.parametrize("mutate", ACCEPTED, ids=[m.__name__[3:] for m in ACCEPTED])
def test_unusual_inventory_is_accepted(tmp_path, mutate):
    inv = _load_lab()
    mutate(inv)
    r, out = _run(_write(inv, tmp_path), tmp_path)
    assert r.rc == 0, out
    assert "The inventory is refused" not in out
    assert "ok=3" in " ".join(out.split()), out


@pytest.mark.parametrize(("mutate", "expected"), CASES, ids=[c[0].__name__[2:] for c in CASES])
def test_bad_inventory_is_refused(tmp_path, mutate, expected):
    inv = _load_lab()
    mutate(inv)
    r, out = _run(_write(inv, tmp_path), tmp_path)
    assert r.rc != 0, out
    flat = " ".join(out.split())
    assert expected in flat, out
    # Nothing after the validation ran: the play recap shows no change.
    assert "changed=1" not in flat
    # The model's own words only: no traceback, no argument specification.
    assert "Traceback" not in out and "argument_spec" not in out, out


# Mutations whose refusals are unrelated: one run must report every one of them.
TOGETHER = [m_draid_spare, m_sensors_string, m_mac_as_number, m_port_as_string, m_bad_mac,
            m_bad_version, m_unknown_node_variable, m_two_zones_one_fan,
            m_bmc_overlaps_data, m_unknown_cluster_variable, m_undefined_in_cluster_variable,
            m_undefined_in_node_variable]


def test_every_problem_is_reported_at_once(tmp_path):
    inv = _load_lab()
    for mutate in TOGETHER:
        mutate(inv)
    r, out = _run(_write(inv, tmp_path), tmp_path)
    assert r.rc != 0
    flat = " ".join(out.split())
    expected = dict((m, e) for m, e in CASES if m in TOGETHER)
    missing = [e for e in expected.values() if e not in flat]
    assert not missing, out
    assert "Traceback" not in out and "argument_spec" not in out


def test_secret_never_printed(tmp_path):
    inv = _load_lab()
    m_plain_password(inv)
    _unused, out = _run(_write(inv, tmp_path), tmp_path)
    assert "hunter2" not in out


@pytest.mark.parametrize("name", ["lab", "example"])
def test_repository_inventories_are_accepted(tmp_path, name):
    pdd = tmp_path / "runner"
    pdd.mkdir()
    r = ansible_runner.run(
        private_data_dir=str(pdd), playbook=str(MODEL_PLAYBOOK),
        inventory=str(REPO / "inventories" / name / "hosts.yml"),
        envvars={"ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
                 "JUNKYARD_BMC_PASSWORD": "x", "JUNKYARD_LAB_BMC_PASSWORD": "x"},
        extravars=NO_STATE, quiet=True)
    assert r.rc == 0, r.stdout.read()
    assert r.stats["failures"] == {}


def test_vaulted_password_is_accepted_and_model_derived(tmp_path):
    vault_pw = tmp_path / "vault-pass"
    vault_pw.write_text("test-only-vault-password\n")
    enc = subprocess.run(
        ["ansible-vault", "encrypt_string", "--vault-password-file", str(vault_pw),
         "s3cret", "--name", "password"],
        check=True, capture_output=True, text=True).stdout
    inv = _load_lab()
    del _node(inv, "node02")["node_bmc"]
    # node02's BMC block in host_vars, with its password as a !vault value
    # (PyYAML cannot write the !vault tag, so this file is written as text).
    vaulted = "\n".join("  " + line for line in enc.strip().splitlines())
    inv_dir = _write(inv, tmp_path, {"host_vars/node02.yml": (
        "node_bmc:\n  address: 127.0.0.1\n  port: 6232\n  username: admin\n"
        f"{vaulted}\n")})
    dump = tmp_path / "model.json"
    play = tmp_path / "dump.yml"
    play.write_text(yaml.safe_dump([{
        "name": "Dump the model", "hosts": "storage_head:gpu_nodes", "gather_facts": False,
        "roles": ["junkyard.cluster.cluster_model"],
        "tasks": [{"name": "Write it", "delegate_to": "localhost", "run_once": True,
                   "ansible.builtin.copy": {"content": "{{ cluster_model | to_json }}",
                                            "dest": str(dump), "mode": "0600"}}]}]))
    pdd = tmp_path / "runner"
    pdd.mkdir()
    r = ansible_runner.run(private_data_dir=str(pdd), playbook=str(play),
                           inventory=str(inv_dir / "hosts.yml"),
                           envvars={"ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
                                    "ANSIBLE_NOCOLOR": "1",
                                    "ANSIBLE_ROLES_PATH": str(REPO / "roles")},
                           extravars=NO_STATE,
                           cmdline=f"--vault-password-file {vault_pw}", quiet=True)
    out = r.stdout.read()
    assert r.rc == 0, out
    assert "s3cret" not in out
    model = json.loads(dump.read_text())
    assert "s3cret" not in dump.read_text()
    assert [n["name"] for n in model["nodes"]] == ["node01", "node02"]
    n1 = model["nodes"][0]
    assert n1["bmc"] == {"address": "127.0.0.1", "port": 6231, "username": "admin",
                         "interface": "lanplus"}
    assert "nfsroot=10.77.0.1:/tank/images/bookworm/v1,vers=3,tcp" in n1["boot"]["cmdline"]
    assert "BOOTIF=01-52-54-00-77-00-11" in n1["boot"]["cmdline"]
    assert model["dhcp_hosts"][1] == {"mac": "52:54:00:77:00:12", "ip": "10.77.0.12",
                                      "name": "node02"}
    assert {"path": "/tank/nodes/node02/var-log",
            "clients": [{"host": "10.77.0.12",
                         "options": "rw,no_root_squash,no_subtree_check,mp"}]} in model["exports"]
    assert "tank/nodes/node01/var-lib-rasdaemon" in [d["name"] for d in model["datasets"]]


def test_a_pin_the_image_state_does_not_record_is_refused(tmp_path):
    inv = _load_lab()
    _node(inv, "node02")["node_image_version"] = "v3"
    state = {"schema": 1, "nodes": {}, "images": {"bookworm": {
        "current": "v2", "versions": {"v1": {"origin": None}, "v2": {"origin": "v1"}}}}}
    r, out = _run(_write(inv, tmp_path), tmp_path, extravars={"cluster_image_state": state})
    assert r.rc != 0
    assert ("node02: node_image_version v3 is not a recorded version of bookworm in the image "
            "state cluster_image_state (v1, v2)") in " ".join(out.split()), out


@pytest.mark.parametrize("where", ["hosts.yml", "group_vars/all/cluster.yml"])
def test_a_key_written_twice_in_inventory_yaml_is_an_error(tmp_path, where):
    # Ansible's default warns and keeps the last one: a host written twice in
    # hosts.yml would silently lose its first definition (ansible.cfg makes it an error)
    d = _write(_load_lab(), tmp_path)
    path = d / where
    text = path.read_text()
    if where == "hosts.yml":
        first = text.index("        node01:")
        block_end = text.index("        node02:")
        text = text[:block_end] + text[first:block_end] + text[block_end:]
        key = "node01"
    else:
        text += "cluster_domain: typo.example\n"
        key = "cluster_domain"
    assert text.count(f"{key}:") >= 2
    path.write_text(text)
    r, out = _run(d, tmp_path)
    assert r.rc != 0, out[-3000:]
    assert "found a duplicate dict key" in out.lower() or "duplicate" in out.lower(), out[-3000:]
    assert key in out, out[-3000:]
