"""netboot filters: the management interface from facts, per-MAC GRUB entries,
/boot bind mounts and GRUB quoting, on the lab's real cluster model."""

from __future__ import annotations

import copy

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.junkyard.cluster.plugins.filter import netboot as nb
from ansible_collections.junkyard.cluster.plugins.module_utils.cluster_model import build_model

from tests.unit.test_cluster_model import lab_data


def lab_model(versions=None):
    """The lab inventory's model; ``versions`` overrides node_image_version per node."""
    data = lab_data()
    for name, version in (versions or {}).items():
        data["nodes"][name]["node_image_version"] = version
    model, errors = build_model(data)
    assert errors == []
    return model


def facts(*interfaces):
    """Gathered facts for (device, ipv4 address or None, mac, [secondary addresses])."""
    out = {"interfaces": ["lo"] + [i[0] for i in interfaces],
           "lo": {"ipv4": {"address": "127.0.0.1"}, "macaddress": "00:00:00:00:00:00"}}
    for device, ip, mac, *extra in interfaces:
        info = {"macaddress": mac}
        if ip:
            info["ipv4"] = {"address": ip, "netmask": "255.255.255.0"}
        if extra:
            info["ipv4_secondaries"] = [{"address": a} for a in extra[0]]
        out[device.replace("-", "_").replace(":", "_")] = info
    return out


HEAD = facts(("eth0", "10.78.0.1", "52:54:00:78:00:01"),
             ("eth1", "10.77.0.1", "52:54:00:77:00:01"))


@pytest.mark.parametrize(("mgmt", "host_facts", "device"), [
    # found by address, not by position (eth0 is the data interface)
    ({"ip": "10.77.0.1", "mac": None, "device": None}, HEAD, "eth1"),
    # a device named in the inventory wins without looking
    ({"ip": "10.77.0.1", "mac": None, "device": "eno1"}, HEAD, "eno1"),
    # by MAC when the address is not up yet
    ({"ip": "10.77.0.1", "mac": "52:54:00:77:00:01", "device": None},
     facts(("eth0", "10.78.0.1", "52:54:00:78:00:01"), ("eth1", None, "52:54:00:77:00:01")),
     "eth1"),
    # MAC given in upper case
    ({"ip": "10.77.0.9", "mac": "52:54:00:77:00:0A", "device": None},
     facts(("eth1", None, "52:54:00:77:00:0a")), "eth1"),
    # a secondary address; a device name with '-' (facts key br_mgmt)
    ({"ip": "10.77.0.1", "mac": None, "device": None},
     facts(("br-mgmt", "10.77.0.5", "52:54:00:77:00:05", ["10.77.0.1"])), "br-mgmt"),
    # a bridge and its port share the MAC: the bridge holds the address
    ({"ip": "10.77.0.7", "mac": "52:54:00:77:00:01", "device": None},
     facts(("br0", "10.77.0.2", "52:54:00:77:00:01"), ("eth1", None, "52:54:00:77:00:01")),
     "br0"),
    # nothing matches: '' (the role's assertion names the values)
    ({"ip": "10.77.0.9", "mac": "52:54:00:77:00:09", "device": None}, HEAD, ""),
    # the loopback never counts
    ({"ip": "127.0.0.1", "mac": None, "device": None}, HEAD, ""),
    ({"ip": "10.77.0.1", "mac": None, "device": None}, {}, ""),
])
def test_mgmt_interface(mgmt, host_facts, device):
    assert nb.netboot_mgmt_interface(mgmt, host_facts) == device


def test_interfaces_summary_leaves_out_lo():
    assert nb.netboot_interfaces(HEAD) == {
        "eth0": {"addresses": ["10.78.0.1"], "mac": "52:54:00:78:00:01"},
        "eth1": {"addresses": ["10.77.0.1"], "mac": "52:54:00:77:00:01"},
    }


def test_mgmt_interface_refuses_a_non_dict():
    with pytest.raises(AnsibleFilterError, match="expected a dict"):
        nb.netboot_mgmt_interface("eth1", HEAD)


def test_grub_entries_from_the_lab_model():
    model = lab_model()
    entries = nb.netboot_grub_entries(model["nodes"])
    assert [e["path"] for e in entries] == ["grub/grub.cfg-01-52-54-00-77-00-11",
                                            "grub/grub.cfg-01-52-54-00-77-00-12"]
    e = entries[0]
    assert e["name"] == "node01"
    assert e["title"] == "node01: bookworm v1"
    assert e["kernel"] == "/images/bookworm/v1/boot/vmlinuz"
    assert e["initrd"] == "/images/bookworm/v1/boot/initrd.img"
    assert e["kernel_old"] == "/images/bookworm/v1/boot/vmlinuz.old"
    assert e["initrd_old"] == "/images/bookworm/v1/boot/initrd.img.old"
    # the kernels come over HTTP from the head's management address
    assert e["http"] == "(http,10.77.0.1)"
    # the model's command line, word for word (nothing in it needs quoting)
    assert e["args"] == model["nodes"][0]["boot"]["cmdline"]
    assert e["args"] == (
        "root=/dev/nfs nfsroot=10.77.0.1:/tank/images/bookworm/v1,vers=3,tcp,nocto "
        "ip=10.77.0.11:::255.255.255.0:node01::off BOOTIF=01-52-54-00-77-00-11 ro fastboot "
        "junkyard.node=node01 junkyard.image=bookworm/v1 panic=10 iommu=pt amdgpu.ras_enable=1 "
        "console=ttyS0,115200 drm_kms_helper.fbdev_emulation=0 "
        "modprobe.blacklist=floppy,pcspkr,ata_piix,ata_generic,pata_acpi,psmouse,serio_raw,"
        "i2c_piix4,qemu_fw_cfg,kvm,kvm_amd,kvm_intel,ccp,aesni_intel,ghash_clmulni_intel,"
        "crc32_pclmul,crct10dif_pclmul,crc32c_intel,sha1_ssse3,sha256_ssse3,sha512_ssse3")


def test_grub_entries_say_a_revert_on_one_line_each():
    nodes = copy.deepcopy(lab_model()["nodes"])
    assert [e["reverted"] for e in nb.netboot_grub_entries(nodes)] == [None, None]
    nodes[1]["image_reverted"] = {
        "image": "bookworm", "version": "v2", "to": "v1", "at": "2026-12-07T01:02:03Z",
        "reason": "verify failed:\n  expected }\r\n\tmenuentry x {\x00 }"}
    assert nb.netboot_grub_entries(nodes)[1]["reverted"] == {
        "image": "bookworm", "version": "v2", "to": "v1", "at": "2026-12-07T01:02:03Z",
        "reason": "verify failed: expected } menuentry x { }"}


def test_grub_entries_are_sorted_and_independent_of_inventory_order():
    nodes = lab_model()["nodes"]
    assert nb.netboot_grub_entries(list(reversed(nodes))) == nb.netboot_grub_entries(nodes)


def test_grub_entries_quote_what_grub_would_expand():
    node = copy.deepcopy(lab_model()["nodes"][0])
    node["boot"]["cmdline"] = "ro quiet pci=noaer foo=$bar x=a;b it's"
    (entry,) = nb.netboot_grub_entries([node])
    assert entry["args"] == "ro quiet pci=noaer 'foo=$bar' 'x=a;b' 'it'\\''s'"


def test_grub_entries_refuse_two_nodes_with_one_file():
    nodes = copy.deepcopy(lab_model()["nodes"])
    nodes[1]["boot"]["grub_config"] = nodes[0]["boot"]["grub_config"]
    with pytest.raises(AnsibleFilterError, match=r"nodes\[1\] \(node02\) grub_config .* node01"):
        nb.netboot_grub_entries(nodes)


def test_grub_entries_refuse_something_that_is_not_the_model():
    with pytest.raises(AnsibleFilterError, match=r"nodes\[0\] lacks 'boot'"):
        nb.netboot_grub_entries([{"name": "x", "mgmt": {"mac": "52:54:00:00:00:01"}}])


def test_grub_entries_refuse_a_boot_server_that_is_not_an_address():
    node = copy.deepcopy(lab_model()["nodes"][0])
    node["boot"]["server"] = "10.77.0.1) (tftp"
    with pytest.raises(AnsibleFilterError,
                       match=r"nodes\[0\] \(node01\) boot.server .* is not an IPv4 address"):
        nb.netboot_grub_entries([node])


def test_grub_entries_refuse_a_bad_mac():
    node = copy.deepcopy(lab_model()["nodes"][0])
    node["mgmt"]["mac"] = "52-54-00-77-00-11"
    with pytest.raises(AnsibleFilterError, match="is not a MAC address"):
        nb.netboot_grub_entries([node])


@pytest.mark.parametrize(("word", "quoted"), [
    ("root=/dev/nfs", "root=/dev/nfs"),
    ("console=ttyS0,115200", "console=ttyS0,115200"),
    ("node01: bookworm v1", "'node01: bookworm v1'"),
    ("$x", "'$x'"),
    ("a'b", "'a'\\''b'"),
    ("", "''"),
    ("{x}", "'{x}'"),
])
def test_grub_quote(word, quoted):
    assert nb.netboot_grub_quote(word) == quoted


def test_boot_mounts_one_per_image_version():
    nodes = lab_model()["nodes"]
    assert nb.netboot_boot_mounts(nodes, "/srv/tftp") == [
        {"path": "/srv/tftp/images/bookworm/v1/boot", "src": "/tank/images/bookworm/v1/boot",
         "image": "bookworm", "version": "v1"},
    ]


def test_boot_mounts_of_two_versions_sorted_and_root_normalised():
    nodes = lab_model(versions={"node01": "v2"})["nodes"]
    mounts = nb.netboot_boot_mounts(nodes, "/srv/tftp/")
    assert [(m["src"], m["path"]) for m in mounts] == [
        ("/tank/images/bookworm/v1/boot", "/srv/tftp/images/bookworm/v1/boot"),
        ("/tank/images/bookworm/v2/boot", "/srv/tftp/images/bookworm/v2/boot"),
    ]


def test_boot_mounts_refuse_a_relative_tftp_root():
    with pytest.raises(AnsibleFilterError, match="is not absolute"):
        nb.netboot_boot_mounts(lab_model()["nodes"], "srv/tftp")


def test_boot_mounts_refuse_a_dir_that_leaves_the_tree():
    nodes = copy.deepcopy(lab_model()["nodes"])
    nodes[0]["boot"]["dir"] = "images/../../etc"
    with pytest.raises(AnsibleFilterError, match="leaves the TFTP root"):
        nb.netboot_boot_mounts(nodes, "/srv/tftp")


def test_boot_mounts_refuse_one_path_for_two_sources():
    nodes = copy.deepcopy(lab_model()["nodes"])
    nodes[1]["root_path"] = "/other/images/bookworm/v1"
    with pytest.raises(AnsibleFilterError, match="would bind both"):
        nb.netboot_boot_mounts(nodes, "/srv/tftp")


@pytest.mark.parametrize(("subnet", "value"), [
    ("10.77.0.0/24", "10.77.0.0,static,255.255.255.0"),
    ("10.20.0.0/22", "10.20.0.0,static,255.255.252.0"),
])
def test_dhcp_range(subnet, value):
    assert nb.netboot_dhcp_range(subnet) == value


def test_dhcp_range_refuses_a_host_address():
    with pytest.raises(AnsibleFilterError, match=r"10\.77\.0\.1/24"):
        nb.netboot_dhcp_range("10.77.0.1/24")


def test_filters_are_registered():
    assert set(nb.FilterModule().filters()) == {
        "netboot_interfaces", "netboot_mgmt_interface", "netboot_grub_entries",
        "netboot_boot_mounts", "netboot_grub_quote", "netboot_dhcp_range"}
