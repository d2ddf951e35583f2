"""Each layer module of the cluster model on its own: what it refuses (the model's
``host: field value problem`` form) and what it derives.  tests/unit/test_cluster_model.py
and tests/model/ test the whole model."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.junkyard.cluster.plugins.filter.model import image_version as image_filter
from ansible_collections.junkyard.cluster.plugins.filter.model import node_storage as storage_filter
from ansible_collections.junkyard.cluster.plugins.module_utils import cluster_model as cm
from ansible_collections.junkyard.cluster.plugins.module_utils.cluster_model import (
    hardware,
    images,
    netboot,
    networks,
    nodes,
    storage,
    upgrades,
)
from ansible_collections.junkyard.cluster.plugins.module_utils.cluster_model.common import Errors

from tests.unit.test_cluster_model import lab_data

NETS = {"mgmt": {"subnet": "10.20.0.0/24"}, "data": {"subnet": "10.30.0.0/24"},
        "bmc": {"subnet": "10.40.0.0/24"}}


def _nets():
    err = Errors()
    nets = networks.check_networks({"networks": NETS}, err)
    assert err.items == []
    return nets


# --- networks -----------------------------------------------------------------------


def test_networks_derive_netmask_and_refuse_overlap_and_bad_gateway():
    nets = _nets()
    assert nets["mgmt"]["netmask"] == "255.255.255.0" and nets["mgmt"]["mtu"] == 1500
    assert networks.public(nets)["mgmt"] == {
        "subnet": "10.20.0.0/24", "network": "10.20.0.0", "prefix": 24,
        "netmask": "255.255.255.0", "mtu": 1500, "gateway": None}
    err = Errors()
    networks.check_networks({"networks": {**NETS, "data": {"subnet": "10.30.0.1/24"},
                                          "bmc": {"subnet": "10.40.0.0/24",
                                                  "gateway": "10.41.0.1"}}}, err)
    assert err.items == [
        "cluster: cluster_networks.data.subnet 10.30.0.1/24 is not a valid network address "
        "with prefix (e.g. 10.20.0.0/24)",
        "cluster: cluster_networks.bmc.gateway 10.41.0.1 is not an address in 10.40.0.0/24"]
    err = Errors()
    networks.check_networks({"networks": {**NETS, "data": {"subnet": "10.20.0.0/16"}}}, err)
    assert err.items == [
        "cluster: cluster_networks.data.subnet 10.20.0.0/16 overlaps the management subnet "
        "10.20.0.0/24: root NFS and science data must be on separate networks"]


@pytest.mark.parametrize("iface,msg", [
    ({"mac": "zz", "ip": "10.20.0.5"}, "n1: node_interfaces.mgmt.mac zz is not a MAC address"),
    ({"mac": "aa:bb:cc:dd:ee:ff", "ip": "10.21.0.5"},
     "n1: node_interfaces.mgmt.ip 10.21.0.5 is not in the management subnet 10.20.0.0/24"),
    ({"mac": "aa:bb:cc:dd:ee:ff", "ip": "10.20.0.255"},
     "n1: node_interfaces.mgmt.ip 10.20.0.255 is the network or broadcast address"),
])
def test_interface_refusals(iface, msg):
    err = Errors()
    networks.check_iface("n1", "node_interfaces.mgmt", iface, "mgmt", _nets(), err)
    assert len(err.items) == 1 and err.items[0].startswith(msg)


def test_interface_mac_is_normalised_and_hosts_entries_cover_both_networks():
    err = Errors()
    out = networks.check_iface("n1", "f", {"mac": "AA-BB-CC-DD-EE-FF", "ip": "10.20.0.5"},
                               "mgmt", _nets(), err)
    assert out == {"mac": "aa:bb:cc:dd:ee:ff", "ip": "10.20.0.5", "device": None}
    head = {"name": "h", "mgmt": {"ip": "10.20.0.1"}, "data": {"ip": "10.30.0.1"}}
    node = {"name": "n1", "mgmt": {"ip": "10.20.0.5"}, "data": {"ip": "10.30.0.5"}}
    assert networks.hosts_entries(head, [node], "c.example") == [
        {"ip": "10.20.0.1", "names": ["h.c.example", "h"]},
        {"ip": "10.20.0.5", "names": ["n1.c.example", "n1"]},
        {"ip": "10.30.0.1", "names": ["h-data.c.example", "h-data"]},
        {"ip": "10.30.0.5", "names": ["n1-data.c.example", "n1-data"]}]


# --- storage --------------------------------------------------------------------------


def test_pool_refuses_a_draid_too_wide_for_its_disks_and_a_disk_used_twice():
    err = Errors()
    disks = [f"/dev/sd{c}" for c in "abcde"]
    storage.check_pool({"pool": {"name": "tank", "vdevs": [
        {"type": "draid", "parity": 2, "data": 4, "spares": 1, "disks": disks},
        {"type": "disk", "disks": ["/dev/sda"]}]}}, err)
    assert err.items == [
        "cluster: cluster_pool.vdevs[0] draid2:4d:5c:1s cannot be built from 5 disks: a "
        "redundancy group needs 4 data + 2 parity and 1 distributed spares take 1 more "
        "(7 > 5)",
        "cluster: cluster_pool.vdevs[1].disks /dev/sda is already used in cluster_pool.vdevs[0]"]


def test_storage_layout_names_and_data_layer():
    assert storage.dataset("tank", "images", "deb", "v1") == "tank/images/deb/v1"
    assert [d["name"] for d in storage.top_datasets("tank")] == [
        "tank/images", "tank/nodes", "tank/data"]
    assert storage.metrics_layer("tank") == (
        {"name": "tank/metrics", "properties": {"mountpoint": "/var/lib/prometheus/metrics2"}},
        {"dataset": "tank/metrics", "data_dir": "/var/lib/prometheus/metrics2"})
    ds, ex, mounts = storage.data_layer("tank", "/tank", [
        {"name": "scratch", "properties": {"recordsize": "1M"}, "mount": "/scratch"}],
        ["10.30.0.11", "10.30.0.12"], "10.30.0.1")
    assert ds == [{"name": "tank/data/scratch", "properties": {"recordsize": "1M"}}]
    # each node's data address, nobody else on the data subnet; mp: never the
    # directory beneath an unmounted dataset
    assert ex == [{"path": "/tank/data/scratch", "clients": [
        {"host": "10.30.0.11", "options": "rw,root_squash,no_subtree_check,mp"},
        {"host": "10.30.0.12", "options": "rw,root_squash,no_subtree_check,mp"}]}]
    assert mounts == [{"name": "scratch", "path": "/scratch",
                       "source": "10.30.0.1:/tank/data/scratch"}]


# --- images and writable paths --------------------------------------------------------


def test_version_names_are_the_only_layout_of_an_image_version():
    assert images.version_names("tank", "/srv/tank", "/srv/tftp", "deb", "2026.12.1") == {
        "image": "deb", "version": "2026.12.1", "image_dataset": "tank/images/deb",
        "dataset": "tank/images/deb/2026.12.1", "path": "/srv/tank/images/deb/2026.12.1",
        "boot_dir": "images/deb/2026.12.1", "tftp_boot": "/srv/tftp/images/deb/2026.12.1/boot",
        "tag": "deb/2026.12.1"}


@pytest.mark.parametrize("paths,msg", [
    ([{"path": "/tmp", "kind": "tmpfs", "size": "lots"}],
     "cluster: cluster_writable_paths[0].size lots is not a tmpfs size"),
    ([{"path": "/var/log", "kind": "persistent"}, {"path": "/var/log/x", "kind": "tmpfs"}],
     "cluster: cluster_writable_paths[1].path /var/log/x is nested with "
     "cluster_writable_paths[0]"),
    ([{"path": "var/log", "kind": "tmpfs"}],
     "cluster: cluster_writable_paths[0].path var/log is not an absolute path"),
    ([{"path": "/a b", "kind": "tmpfs"}],
     "cluster: cluster_writable_paths[0].path /a b contains white space"),
])
def test_writable_path_refusals(paths, msg):
    err = Errors()
    images.check_writable_paths({"writable_paths": paths}, err)
    assert len(err.items) == 1 and err.items[0].startswith(msg), err.items


def test_writable_sizes_are_kept_and_nfs_version_follows_persistent_paths():
    err = Errors()
    writable = images.check_writable_paths({"writable_paths": [
        {"path": "/tmp", "kind": "tmpfs", "size": "10%"},
        {"path": "/var/log", "kind": "persistent"}]}, err)
    assert err.items == []
    assert writable[0]["size"] == "10%" and writable[1]["name"] == "var-log"
    # the model adds every node's SSH host key path
    assert writable[2] == {"path": "/var/lib/ssh-host-keys", "kind": "persistent",
                           "name": "ssh-host-keys", "size": ""}
    assert images.check_nfs_version({"nfs_version": 3}, writable, err) == 3
    assert images.persistent_mount_options(3, writable) == "vers=3,tcp"
    assert images.persistent_mount_options(4, writable[:1]) == ""
    images.check_nfs_version({"nfs_version": 4}, writable[:1], err)
    assert err.items == []
    images.check_nfs_version({"nfs_version": 4}, writable, err)
    assert err.items == [
        "cluster: cluster_nfs_version 4 cannot be used with persistent writable paths "
        "(/var/log, /var/lib/ssh-host-keys): the initramfs mounts them with klibc nfsmount, "
        "which speaks NFSv2/v3 only"]


@pytest.mark.parametrize(("entry", "problem"), [
    ({"path": "/var/lib/ssh-host-keys", "kind": "tmpfs"},
     "cluster: cluster_writable_paths[0] /var/lib/ssh-host-keys is where every node keeps its "
     "own SSH host keys: leave it out (the model adds it) or make it persistent"),
    ({"path": "/var/lib", "kind": "overlay"},
     "cluster: cluster_writable_paths[0].path /var/lib is nested with /var/lib/ssh-host-keys, "
     "where every node keeps its own SSH host keys (a persistent path the model adds); "
     "writable paths must not contain each other"),
])
def test_the_host_key_path_is_refused_as_anything_else(entry, problem):
    err = Errors()
    images.check_writable_paths({"writable_paths": [entry]}, err)
    assert err.items == [problem]


def test_the_host_key_path_may_be_listed_as_the_model_would():
    err = Errors()
    out = images.check_writable_paths({"writable_paths": [
        {"path": "/var/lib/ssh-host-keys", "kind": "persistent"}]}, err)
    assert err.items == [] and [w["path"] for w in out] == ["/var/lib/ssh-host-keys"]


def test_an_image_needs_the_firmware_of_its_nodes_gpus():
    profiles = {"z20": {"gpu_count": 8, "gfx_target": "gfx908"},
                "z45": {"gpu_count": 8, "gfx_target": "gfx908"},
                "mi210": {"gpu_count": 4, "gfx_target": "gfx90a"},
                "cpu": {"gpu_count": 0, "gfx_target": None}}
    node_list = [{"image": "rocm", "profile": "z20"}, {"image": "rocm", "profile": "z45"},
                 {"image": "rocm", "profile": "mi210"}, {"image": "rocm", "profile": "cpu"},
                 {"image": "plain", "profile": "cpu"}]
    assert images.gfx_targets("rocm", node_list, profiles) == ["gfx908", "gfx90a"]
    assert images.gfx_targets("plain", node_list, profiles) == []


def test_image_layer_exports_every_booted_version_and_declares_only_the_current():
    imgs = {"deb": {"name": "deb", "suite": "bookworm", "current_version": "v1"}}
    node_list = [{"name": "n1", "image": "deb", "image_version": "v2",
                  "mgmt": {"ip": "10.20.0.11"}},
                 {"name": "n2", "image": "deb", "image_version": "v1",
                  "mgmt": {"ip": "10.20.0.12"}},
                 {"name": "n3", "image": "deb", "image_version": "v1",
                  "mgmt": {"ip": "10.20.0.13"}}]

    def names(i, v):
        return images.version_names("tank", "/tank", "/srv/tftp", i, v)

    ds, ex, builds = images.image_layer(names, imgs, node_list, "10.20.0.1")
    assert [d["name"] for d in ds] == ["tank/images/deb", "tank/images/deb/v1"]
    # each version to the head and the nodes that boot it, nobody else
    opts = "ro,no_root_squash,no_subtree_check,mp"
    assert ex == [
        {"path": "/tank/images/deb/v1", "clients": [
            {"host": "10.20.0.1", "options": opts}, {"host": "10.20.0.12", "options": opts},
            {"host": "10.20.0.13", "options": opts}]},
        {"path": "/tank/images/deb/v2", "clients": [
            {"host": "10.20.0.1", "options": opts}, {"host": "10.20.0.11", "options": opts}]}]
    assert [(b["version"], b["nodes"]) for b in builds] == [("v1", ["n2", "n3"]), ("v2", ["n1"])]


# --- hardware ---------------------------------------------------------------------------


def test_profiles_refuse_a_gpu_cooled_twice_and_append_the_blacklist():
    err = Errors()
    out = hardware.check_profiles({"hardware_profiles": {"p": {
        "gpu": {"count": 2, "gfx_target": "gfx908"},
        "fan_zones": [{"name": "a", "gpus": [0, 1]}, {"name": "b", "gpus": [1, 2]}],
        "kernel_cmdline": ["quiet"], "kernel_module_blacklist": ["floppy"]}}}, err)
    assert err.items == [
        "cluster: cluster_hardware_profiles.p.fan_zones[1].gpus 1 is already cooled by zone a",
        "cluster: cluster_hardware_profiles.p.fan_zones[1].gpus 2 names a GPU the profile "
        "does not have (it has 2: 0..1)"]
    assert out["p"]["kernel_cmdline"] == ["quiet", "modprobe.blacklist=floppy"]
    assert out["p"]["initramfs_modules"] is None


def test_profiles_publish_their_dimm_labels_normalised():
    err = Errors()
    labels = [" DIMM_P0_A0 ", {"label": "DIMM_P1_A0", "location": "8.0.0"}]
    out = hardware.check_profiles({"hardware_profiles": {
        "p": {"memory": {"dimm_labels": labels}},
        "none": {"memory": {"size_mib": 1024}},
        "empty": {"memory": {"dimm_labels": []}}}}, err)
    assert err.items == []
    assert out["p"]["dimm_labels"] == ["DIMM_P0_A0", "DIMM_P1_A0"]
    assert out["none"]["dimm_labels"] == [] and out["empty"]["dimm_labels"] == []


@pytest.mark.parametrize(("labels", "problem"), [
    (["A0", "A0"], "cluster_hardware_profiles.p.memory.dimm_labels[1] label A0 is repeated"),
    (["A 0"], "cluster_hardware_profiles.p.memory.dimm_labels[0] label A 0 must be "
     "non-empty, without spaces, ':', ';' or ','"),
    ([""], "cluster_hardware_profiles.p.memory.dimm_labels[0] label '' must be non-empty"),
    ([{"label": "A0", "location": "0.x"}], "cluster_hardware_profiles.p.memory.dimm_labels[0] "
     "location 0.x is not mc.top[.mid[.low]]"),
    ([{"label": "A0"}], "cluster_hardware_profiles.p.memory.dimm_labels[0].location None must "
     "be mc.top.mid or a list of them"),
    ([7], "cluster_hardware_profiles.p.memory.dimm_labels[0] 7 must be a label or "
     "{label: ..., location: mc.top.mid}"),
])
def test_profiles_refuse_a_bad_dimm_label_and_publish_the_good_ones(labels, problem):
    err = Errors()
    out = hardware.check_profiles({"hardware_profiles": {"p": {"memory": {
        "dimm_labels": ["GOOD", *labels]}}}}, err)
    # the good label's index is 0: the others are one further
    shifted = problem.replace("dimm_labels[1]", "dimm_labels[2]").replace(
        "dimm_labels[0]", "dimm_labels[1]")
    assert [e for e in err.items if e.startswith(f"cluster: {shifted}")], err.items
    assert len(err.items) == 1, err.items
    assert out["p"]["dimm_labels"][0] == "GOOD"
    assert out["p"]["dimm_labels"] == (["GOOD", "A0"] if labels == ["A0", "A0"] else ["GOOD"])


# --- nodes and BMC ----------------------------------------------------------------------


def test_bmc_endpoint_has_no_password_and_plain_text_is_refused():
    err = Errors()
    out = nodes.check_bmc("n1", {"address": "10.40.0.9", "password": "x"}, _nets(), "env", err)
    assert out == {"address": "10.40.0.9", "port": 623, "username": "admin",
                   "interface": "lanplus"}
    assert err.items == []
    nodes.check_bmc("n1", {"address": "10.41.0.9", "port": 0}, _nets(), "plain", err)
    assert err.items == [
        "n1: node_bmc.address 10.41.0.9 is not in the BMC subnet 10.40.0.0/24",
        "n1: node_bmc.port 0 is not a UDP port",
        "n1: node_bmc.password <hidden> is given in plain text: use an Ansible Vault value or "
        "\"{{ lookup('ansible.builtin.env', 'VAR') }}\""]


def test_node_layer_gives_each_persistent_path_a_dataset_exported_to_that_node_only():
    writable = [{"path": "/var/log", "kind": "persistent", "name": "var-log", "size": ""},
                {"path": "/tmp", "kind": "tmpfs", "name": "tmp", "size": "1g"}]
    node = {"name": "n1", "mgmt": {"ip": "10.20.0.5"}}
    names, ds, ex, mounts = nodes.node_layer("tank", "/tank", "10.20.0.1", node, writable)
    assert names == ["tank/nodes/n1/var-log"]
    assert ds == [{"name": "tank/nodes/n1", "properties": {"canmount": "off"}},
                  {"name": "tank/nodes/n1/var-log", "properties": {}}]
    assert ex[0]["clients"] == [{"host": "10.20.0.5",
                                 "options": "rw,no_root_squash,no_subtree_check,mp"}]
    assert mounts == [
        {"path": "/var/log", "kind": "persistent", "source": "10.20.0.1:/tank/nodes/n1/var-log"},
        {"path": "/tmp", "kind": "tmpfs", "source": ""}]


# --- netboot ----------------------------------------------------------------------------


def test_boot_entry_names_the_version_and_the_grub_file():
    node = {"name": "n1", "mgmt": {"ip": "10.20.0.5", "mac": "aa:bb:cc:dd:ee:01"}}
    version = images.version_names("tank", "/tank", "/srv/tftp", "deb", "v2")
    mgmt = {"netmask": "255.255.255.0", "gateway": "10.20.0.254"}
    boot = netboot.boot_entry(node, version, {"kernel_cmdline": ["quiet"]}, mgmt,
                              "10.20.0.1", 3)
    assert boot["grub_config"] == "grub/grub.cfg-01-aa-bb-cc-dd-ee-01"
    assert boot["kernel"] == "/images/deb/v2/boot/vmlinuz"
    assert boot["cmdline"] == (
        "root=/dev/nfs nfsroot=10.20.0.1:/tank/images/deb/v2,vers=3,tcp,nocto "
        "ip=10.20.0.5::10.20.0.254:255.255.255.0:n1::off BOOTIF=01-aa-bb-cc-dd-ee-01 ro "
        "fastboot junkyard.node=n1 junkyard.image=deb/v2 panic=10 quiet")


def test_initramfs_modules_are_every_booting_profiles_or_none():
    profiles = {"a": {"initramfs_modules": ["e1000e"]}, "b": {"initramfs_modules": ["igb"]},
                "c": {"initramfs_modules": None}}
    assert netboot.initramfs_modules(profiles, [{"profile": "a"}, {"profile": "b"}]) == [
        "e1000e", "igb"]
    assert netboot.initramfs_modules(profiles, [{"profile": "a"}, {"profile": "c"}]) is None


# --- upgrades ---------------------------------------------------------------------------


def test_image_state_refusal_names_the_file_and_versions_follow_the_state():
    imgs = {"deb": {"name": "deb", "suite": "bookworm", "current_version": "v1"}}
    node_list = [{"name": "n1", "image": "deb", "image_version": None},
                 {"name": "n2", "image": "deb", "image_version": "v1"}]
    err = Errors()
    state = {"schema": 1, "nodes": {}, "images": {"deb": {
        "current": "v2", "versions": {"v1": {"origin": None}, "v2": {"origin": "v1"}}}}}
    ctx = upgrades.check_image_state({"image_state": state, "image_state_file": "h:/s.yml"},
                                     imgs, node_list, err)
    assert err.items == []
    assert ctx["pins"] == {"n2": "v1"} and ctx["nodes"] == {"n1": "deb", "n2": "deb"}
    upgrades.settle_versions(ctx, imgs, node_list)
    assert [(n["image_version"], n["image_version_source"]) for n in node_list] == [
        ("v2", "state"), ("v1", "pin")]
    assert imgs["deb"]["current_version"] == "v2"
    bad = {**state, "images": {"deb": {**state["images"]["deb"], "current": "v9"}}}
    upgrades.check_image_state({"image_state": bad, "image_state_file": "h:/s.yml"},
                               imgs, node_list, err)
    assert err.items == ["h:/s.yml: images.deb.current v9 is not a recorded version of deb "
                         "(v1, v2)"]


# --- the package's entry points -------------------------------------------------------------


def test_model_publishes_the_upgrade_context_with_pins_and_the_inventory_images():
    data = lab_data()
    data["nodes"]["node02"]["node_image_version"] = "v1"
    model, errors = cm.build_model(data)
    assert errors == []
    ctx = model["upgrade_context"]
    assert ctx["pins"] == {"node02": "v1"}
    assert ctx["nodes"] == {"node01": "bookworm", "node02": "bookworm"}
    assert ctx["images"]["bookworm"]["current_version"] == "v1"
    assert ctx["state"] == model["image_state"]
    assert model["images"]["bookworm"]["dataset"] == "tank/images/bookworm"
    assert [b["dataset"] for b in model["image_builds"]] == ["tank/images/bookworm/v1"]


def test_image_version_and_node_storage_filters_render_the_models_names():
    model, _unused = cm.build_model(lab_data())
    v = image_filter(model, "bookworm", "v7")
    assert (v["dataset"], v["path"], v["tftp_boot"]) == (
        "tank/images/bookworm/v7", "/tank/images/bookworm/v7",
        f"{model['tftp_root']}/images/bookworm/v7/boot")
    # the node's own boot entry uses the same names
    node = model["nodes"][0]
    mine = image_filter(model, node["image"], node["image_version"])
    assert (mine["dataset"], mine["path"], mine["boot_dir"]) == (
        node["image_dataset"], node["root_path"], node["boot"]["dir"])
    assert [x["version"] for x in image_filter(model, "bookworm", ["v1", "v2"])] == ["v1", "v2"]
    with pytest.raises(AnsibleFilterError, match="image nope is not in cluster_images"):
        image_filter(model, "nope", "v1")
    with pytest.raises(AnsibleFilterError, match="is not a version name"):
        image_filter(model, "bookworm", "../v1")
    assert storage_filter(model, "gpu05") == {"dataset": "tank/nodes/gpu05",
                                              "archive_prefix": "tank/archive/gpu05-"}
    with pytest.raises(AnsibleFilterError, match="is not a valid host name"):
        storage_filter(model, "../x")
