"""The lab inventory is the example's shape with lab addresses (issue 22).

Whatever the lab proves must hold for the inventory users copy, so the two may
differ only where a virtual cluster on one machine must: addresses and names,
disks, sizes, the drivers of the hardware, and the lab machine's own access
and build settings.  Every other value, and every key, is the same; a key or
value added to one of them alone fails here with its path.
"""

from __future__ import annotations

import fnmatch

import pytest

from tests.inventory_files import EXAMPLE, LAB, group_vars, hosts

# Paths (dot-separated, * matches one key or index) whose values may differ, by reason.
MAY_DIFFER = {
    "addresses and names": [
        "cluster_name", "cluster_domain", "cluster_apt_proxy", "cluster_networks.*.subnet",
        "cluster_images", "cluster_images.*", "node_image", "ssh_host_keys_controller_file",
        "head.*", "head.head_interfaces.*.*", "node.node_interfaces.*.*", "node.node_bmc.*",
        "node_bmc_defaults.password",
    ],
    "where the cluster stands": ["cluster_timezone"],
    "disks": ["cluster_pool.vdevs.*.disks", "cluster_pool.special.*.disks"],
    "sizes": [
        "cluster_networks.*.mtu", "cluster_writable_paths.*.size",
        "cluster_pool.vdevs.*.data", "cluster_pool.vdevs.*.spares",
        "cluster_hardware_profiles.*.description", "cluster_hardware_profiles.*.cpu_*",
        "cluster_hardware_profiles.*.memory.size_mib",
    ],
    "the hardware's own drivers, board and firmware settings": [
        "cluster_hardware_profiles.*.memory.board", "cluster_hardware_profiles.*.memory.board.*",
        "cluster_hardware_profiles.*.memory.dimm_labels",
        "cluster_hardware_profiles.*.kernel_cmdline",
        "cluster_hardware_profiles.*.initramfs_modules",
        "cluster_hardware_profiles.*.kernel_module_blacklist",
    ],
    "the lab machine's access to its VMs": ["ansible_ssh_common_args", "head.ansible_*"],
}
# Variables only the lab sets, by reason.
LAB_ONLY = {
    "node_image_seed": "the image starts from a seed built natively (no debootstrap under TCG)",
    "node_image_authorized_keys": "the lab's own SSH key logs in on the nodes",
    "ansible_ssh_private_key_file": "the lab's own SSH key",
    "rocm_packages": "a small ROCm set for the emulated head to install",
    "rocm_verify_gpus": "the VMs' GPUs are virtio GPUs: no amdgpu device to verify",
}


def _allowed(path: str) -> bool:
    return any(fnmatch.fnmatchcase(path, pattern)
               for patterns in MAY_DIFFER.values() for pattern in patterns)


def differences(example, lab, path: str = "") -> list[str]:
    """Where ``lab`` departs from ``example`` outside MAY_DIFFER, as readable lines."""
    if _allowed(path):
        return []
    if isinstance(example, dict) and isinstance(lab, dict):
        out = []
        for k in {**example, **lab}:
            sub = f"{path}.{k}".lstrip(".")
            if k not in lab or k not in example:
                if not _allowed(sub):
                    out.append(f"{sub}: only in the {'example' if k in example else 'lab'}")
            else:
                out += differences(example[k], lab[k], sub)
        return out
    if isinstance(example, list) and isinstance(lab, list) and len(example) == len(lab):
        out = []
        for i, (e, l_) in enumerate(zip(example, lab, strict=True)):
            out += differences(e, l_, f"{path}.{i}")
        return out
    return [] if example == lab else [f"{path}: example {example!r}, lab {lab!r}"]


# lists of named things, compared by their names (order is not a shape)
KEYED_LISTS = {"cluster_writable_paths": "path", "cluster_data_datasets": "name"}


def comparable(variables: dict) -> dict:
    return {k: {item[KEYED_LISTS[k]]: item for item in v} if k in KEYED_LISTS else v
            for k, v in variables.items()}


def test_the_lab_is_the_example_with_lab_addresses_disks_and_sizes():
    ex, lab = group_vars(EXAMPLE), group_vars(LAB)
    assert set(lab) - set(ex) == set(LAB_ONLY), set(lab) - set(ex)
    assert set(ex) - set(lab) == set(), set(ex) - set(lab)
    for name in LAB_ONLY:
        lab.pop(name)
    problems = differences(comparable(ex), comparable(lab))
    ex_head, ex_nodes = hosts(EXAMPLE)
    lab_head, lab_nodes = hosts(LAB)
    problems += differences({"head": ex_head}, {"head": lab_head})
    # every lab node is shaped as one of the example's, on one of its profiles
    ex_shape = {k: v for k, v in next(iter(ex_nodes.values())).items() if k != "node_profile"}
    for name, node in lab_nodes.items():
        problems += [f"{name}: {p}" for p in differences(
            {"node": ex_shape}, {"node": {k: v for k, v in node.items() if k != "node_profile"}})]
    assert not problems, "\n".join(problems)


def test_the_lab_boots_every_profile_of_the_example():
    _unused, ex_nodes = hosts(EXAMPLE)
    _unused, lab_nodes = hosts(LAB)
    ex_profiles = {n["node_profile"] for n in ex_nodes.values()}
    assert {n.get("node_profile") for n in lab_nodes.values()} == ex_profiles


@pytest.mark.parametrize(("change", "expected"), [
    (lambda g: g["cluster_hardware_profiles"]["g292-z20"]["fan_zones"][0]["gpus"].pop(),
     "cluster_hardware_profiles.g292-z20.fan_zones.0.gpus: example [0, 1, 4, 5], lab [0, 1, 4]"),
    (lambda g: g["cluster_hardware_profiles"]["g292-z45"]["bmc"].update(
        current_calibration=1.0),
     "cluster_hardware_profiles.g292-z45.bmc.current_calibration: example 0.5, lab 1.0"),
    (lambda g: g["cluster_hardware_profiles"]["g292-z20"].update(spare_fans=2),
     "cluster_hardware_profiles.g292-z20.spare_fans: only in the lab"),
])
def test_a_drift_is_named_with_its_path(change, expected):
    ex, lab = group_vars(EXAMPLE), group_vars(LAB)
    change(lab)
    assert expected in differences(ex, lab)
