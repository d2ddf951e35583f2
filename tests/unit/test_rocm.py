"""rocm: parsing rocminfo / rocm-smi / amd-smi / modinfo / the HIP check, the comparison
with the hardware profile, and the rocm_facts module end to end on recorded output
(8 x MI100, gfx908, on a G292-Z20)."""

from __future__ import annotations

import json

import pytest
from ansible_collections.junkyard.cluster.plugins.module_utils import rocm
from ansible_collections.junkyard.cluster.plugins.modules import rocm_facts
from storage_harness import Cmd, run_module

KREL = "6.1.0-28-amd64"
BUS = ["03", "06", "23", "26", "43", "46", "63", "66"]


def _cpu_agent():
    return """*******
Agent 1
*******
  Name:                    AMD EPYC 7D13 64-Core Processor
  Uuid:                    CPU-XX
  Marketing Name:          AMD EPYC 7D13 64-Core Processor
  Vendor Name:             CPU
  Feature:                 None specified
  Profile:                 FULL_PROFILE
  Float Round Mode:        NEAR
  Max Queue Number:        0(0x0)
  Queue Min Size:          0(0x0)
  Queue Max Size:          0(0x0)
  Queue Type:              MULTI
  Node:                    0
  Device Type:             CPU
  Cache Info:
    L1:                      32768(0x8000) KB
  Chip ID:                 0(0x0)
  ASIC Revision:           0(0x0)
  Cacheline Size:          64(0x40)
  Max Clock Freq. (MHz):   2450
  BDFID:                   0
  Internal Node ID:        0
  Compute Unit:            128
  SIMDs per CU:            0
  Shader Engines:          0
  Shader Arrs. per Eng.:   0
  WatchPts on Addr. Ranges:1
  Features:                None
  Pool Info:
    Pool 1
      Segment:                 GLOBAL; FLAGS: FINE GRAINED
      Size:                    528157352(0x1f7b0da8) KB
      Allocatable:             TRUE
      Alloc Granule:           4KB
      Alloc Alignment:         4KB
      Accessible by all:       TRUE
  ISA Info:
"""


def _gpu_agent(n, name="gfx908", marketing="AMD Instinct MI100"):
    return f"""*******
Agent {n + 2}
*******
  Name:                    {name}
  Uuid:                    GPU-{0x3c3ba1b3d7e10000 + n:016x}
  Marketing Name:          {marketing}
  Vendor Name:             AMD
  Feature:                 KERNEL_DISPATCH
  Profile:                 BASE_PROFILE
  Float Round Mode:        NEAR
  Max Queue Number:        128(0x80)
  Queue Min Size:          64(0x40)
  Queue Max Size:          131072(0x20000)
  Queue Type:              MULTI
  Node:                    {n + 1}
  Device Type:             GPU
  Cache Info:
    L1:                      16(0x10) KB
    L2:                      8192(0x2000) KB
  Chip ID:                 29580(0x738c)
  ASIC Revision:           2(0x2)
  Cacheline Size:          64(0x40)
  Max Clock Freq. (MHz):   1502
  BDFID:                   {int(BUS[n], 16) * 256}
  Internal Node ID:        {n + 1}
  Compute Unit:            120
  SIMDs per CU:            4
  Shader Engines:          8
  Shader Arrs. per Eng.:   1
  WatchPts on Addr. Ranges:4
  Features:                KERNEL_DISPATCH
  Fast F16 Operation:      TRUE
  Wavefront Size:          64(0x40)
  Workgroup Max Size:      1024(0x400)
  Max Waves Per CU:        40(0x28)
  Max Work-item Per CU:    2560(0xa00)
  Packet Processor uCode:: 1014
  SDMA engine uCode::      18
  IOMMU Support::          None
  Pool Info:
    Pool 1
      Segment:                 GLOBAL; FLAGS: COARSE GRAINED
      Size:                    33538048(0x1ffc000) KB
      Allocatable:             TRUE
      Alloc Granule:           4KB
      Alloc Alignment:         4KB
      Accessible by all:       FALSE
  ISA Info:
    ISA 1
      Name:                    amdgcn-amd-amdhsa--{name}:sramecc+:xnack-
      Machine Models:          HSA_MACHINE_MODEL_LARGE
      Profiles:                HSA_PROFILE_BASE
      Default Rounding Mode:   NEAR
      Fast f16:                TRUE
      Workgroup Max Size:      1024(0x400)
"""


def rocminfo_text(gpus=8, names=None):
    head = """ROCk module is loaded
=====================
HSA System Attributes
=====================
Runtime Version:         1.1
System Timestamp Freq.:  100.000000MHz
Sig. Max Wait Duration:  18446744073709551615 (0xFFFFFFFFFFFFFFFF) (timestamp count)
Machine Model:           LARGE
System Endianness:       LITTLE

==========
HSA Agents
==========
"""
    names = names or ["gfx908"] * gpus
    return head + _cpu_agent() + "".join(_gpu_agent(i, names[i]) for i in range(gpus)) + \
        "*** Done ***\n"


ROCMINFO_NO_KFD = "\x1b[31mROCk module is NOT loaded, possibly no GPU devices\x1b[0m\n"


def rocm_smi_json(gpus=8):
    return json.dumps({f"card{i}": {
        "GPU ID": "0x738c", "Card series": "Arcturus GL-XL [Instinct MI100]",
        "Card model": "0x0c34", "Card vendor": "Advanced Micro Devices, Inc. [AMD/ATI]",
        "Card SKU": "D34304"} for i in range(gpus)})


def amd_smi_json(gpus=8, gfx="gfx908"):
    return json.dumps([{"gpu": i, "asic": {
        "market_name": "AMD Instinct MI100", "vendor_id": "0x1002",
        "vendor_name": "Advanced Micro Devices Inc. [AMD/ATI]", "subvendor_id": "0x1002",
        "device_id": "0x738c", "rev_id": "0x01", "asic_serial": f"0x{0x52A8C41E0000 + i:X}",
        "oam_id": "N/A", "num_compute_units": 120, "target_graphics_version": gfx}}
        for i in range(gpus)], indent=4)


def hip_text(gpus=8, fail=None):
    lines = [f"hip-check: devices {gpus}"]
    for i in range(gpus):
        if i == fail:
            lines.append(f"hip-check: device {i} gfx908:sramecc+:xnack- FAIL wrong result at 17: 1")
        else:
            lines.append(f"hip-check: device {i} gfx908:sramecc+:xnack- ok")
    return "\n".join(lines) + "\n"


IN_TREE = f"/lib/modules/{KREL}/kernel/drivers/gpu/drm/amd/amdgpu/amdgpu.ko\n"
DKMS = f"/lib/modules/{KREL}/updates/dkms/amdgpu.ko\n"


# --------------------------------------------------------------------------- parsers

def test_rocminfo_eight_mi100():
    info = rocm.parse_rocminfo(rocminfo_text())
    assert info["kfd_loaded"] is True
    assert len(info["agents"]) == 9
    assert info["agents"][0]["device_type"] == "CPU"
    gpus = info["gpus"]
    assert [g["gfx_target"] for g in gpus] == ["gfx908"] * 8
    assert [g["node"] for g in gpus] == list(range(1, 9))
    assert gpus[0]["marketing_name"] == "AMD Instinct MI100"
    assert gpus[0]["chip_id"] == "0x738c"
    assert gpus[0]["compute_units"] == 120
    assert gpus[0]["isa"] == ["amdgcn-amd-amdhsa--gfx908:sramecc+:xnack-"]
    # the nested pool/ISA "Name:" lines never replace the agent's own name
    assert all(g["name"] == "gfx908" for g in gpus)
    assert len({g["uuid"] for g in gpus}) == 8


def test_rocminfo_without_kfd():
    info = rocm.parse_rocminfo(ROCMINFO_NO_KFD)
    assert info == {"kfd_loaded": False, "agents": [], "gpus": []}


@pytest.mark.parametrize("value, gfx", [
    ("gfx908", "gfx908"), ("gfx908:sramecc+:xnack-", "gfx908"),
    ("amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-", "gfx90a"), ("gfx1100", "gfx1100"),
    ("AMD EPYC 7D13 64-Core Processor", None), ("", None), (None, None), ("N/A", None),
])
def test_gfx_of(value, gfx):
    assert rocm.gfx_of(value) == gfx


def test_rocm_smi_json():
    cards = rocm.parse_rocm_smi_json(rocm_smi_json())
    assert [c["index"] for c in cards] == list(range(8))
    assert cards[3] == {"index": 3, "device_id": "0x738c",
                        "series": "Arcturus GL-XL [Instinct MI100]",
                        "vendor": "Advanced Micro Devices, Inc. [AMD/ATI]", "gfx_target": None}


def test_rocm_smi_json_skips_system_and_sorts_numerically():
    text = json.dumps({"card10": {"GPU ID": "0x738C"}, "card2": {"GPU ID": "0x738c",
                       "GFX Version": "gfx908"}, "system": {"Driver version": "6.1.0"}})
    cards = rocm.parse_rocm_smi_json("WARNING: something\n" + text)
    assert [(c["index"], c["device_id"], c["gfx_target"]) for c in cards] == [
        (2, "0x738c", "gfx908"), (10, "0x738c", None)]


def test_amd_smi_list_and_dict_forms():
    listed = rocm.parse_amd_smi_static(amd_smi_json())
    assert [(g["index"], g["gfx_target"], g["market_name"]) for g in listed][:2] == [
        (0, "gfx908", "AMD Instinct MI100"), (1, "gfx908", "AMD Instinct MI100")]
    older = json.dumps({"gpu_1": {"asic": {"target_graphics_version": "gfx908"}},
                        "gpu_0": {"asic": {"target_graphics_version": "gfx908"}}})
    assert [g["index"] for g in rocm.parse_amd_smi_static(older)] == [0, 1]


def test_smi_without_json_is_an_error():
    with pytest.raises(ValueError, match="printed no JSON"):
        rocm.parse_amd_smi_static("ERROR: no AMD GPUs found\n")


@pytest.mark.parametrize("text, in_tree, dkms", [
    (IN_TREE, True, False),
    (f"/lib/modules/{KREL}/kernel/drivers/gpu/drm/amd/amdgpu/amdgpu.ko.xz\n", True, False),
    (f"/usr/lib/modules/{KREL}/kernel/drivers/gpu/drm/amd/amdgpu/amdgpu.ko.zst", True, False),
    (DKMS, False, True),
    (f"/lib/modules/{KREL}/extra/amdgpu.ko\n", False, True),
    ("/lib/modules/6.1.0-99-amd64/kernel/drivers/gpu/drm/amd/amdgpu/amdgpu.ko", False, False),
    ("", False, False),
])
def test_modinfo(text, in_tree, dkms):
    parsed = rocm.parse_modinfo_filename(text, KREL)
    assert (parsed["in_tree"], parsed["dkms"]) == (in_tree, dkms)


def test_hip_check_output():
    res = rocm.parse_hip_check(hip_text(fail=5))
    assert res["device_count"] == 8
    assert [d["ok"] for d in res["devices"]] == [True] * 5 + [False] + [True] * 2
    assert res["devices"][5]["detail"] == "wrong result at 17: 1"
    assert res["devices"][0]["gfx_target"] == "gfx908"


# --------------------------------------------------------------------------- comparison

def facts(rocminfo=None, smi="rocm-smi", smi_gpus=8, driver=IN_TREE, dkms_version=None):
    out = {"rocminfo": rocm.parse_rocminfo(rocminfo if rocminfo is not None else rocminfo_text())}
    if smi == "rocm-smi":
        out["smi"] = {"tool": smi, "gpus": rocm.parse_rocm_smi_json(rocm_smi_json(smi_gpus))}
    elif smi == "amd-smi":
        out["smi"] = {"tool": smi, "gpus": rocm.parse_amd_smi_static(amd_smi_json(smi_gpus))}
    else:
        out["smi"] = None
    out["driver"] = dict(rocm.parse_modinfo_filename(driver, KREL), dkms_version=dkms_version)
    return out


def test_matching_node_has_no_problems():
    assert rocm.check_gpus(facts(), 8, "gfx908") == []
    assert rocm.check_gpus(facts(smi="amd-smi"), 8, "gfx908") == []


def test_a_missing_gpu_is_named_by_each_tool():
    problems = rocm.check_gpus(facts(rocminfo_text(gpus=7), smi_gpus=7), 8, "gfx908")
    assert problems == ["rocminfo reports 7 GPU agents, the profile expects 8 x gfx908",
                        "rocm-smi reports 7 GPUs, the profile expects 8 x gfx908"]


def test_wrong_gfx_target():
    text = rocminfo_text(names=["gfx908"] * 7 + ["gfx90a"])
    problems = rocm.check_gpus(facts(text, smi="amd-smi"), 8, "gfx908")
    assert problems == ["rocminfo reports gfx targets gfx90a, the profile expects gfx908"]
    amd = {"rocminfo": rocm.parse_rocminfo(rocminfo_text()),
           "smi": {"tool": "amd-smi",
                   "gpus": rocm.parse_amd_smi_static(amd_smi_json(gfx="gfx90a"))},
           "driver": rocm.parse_modinfo_filename(IN_TREE, KREL)}
    assert rocm.check_gpus(amd, 8, "gfx908") == [
        "amd-smi reports gfx targets gfx90a, the profile expects gfx908"]


def test_dkms_driver_is_refused_twice():
    problems = rocm.check_gpus(facts(driver=DKMS, dkms_version="6.8.5"), 8, "gfx908")
    assert len(problems) == 2
    assert problems[0].startswith(f"amdgpu is loaded from /lib/modules/{KREL}/updates/dkms/")
    assert "running amdgpu is a DKMS build" in problems[1]


def test_no_gpu_is_said_as_such():
    problems = rocm.check_gpus(facts(ROCMINFO_NO_KFD, smi_gpus=0, driver=""), 8, "gfx908")
    assert problems == [
        "rocminfo: the amdgpu/KFD driver is not loaded (no /dev/kfd): no GPU found, "
        "the profile expects 8 x gfx908",
        "rocm-smi reports 0 GPUs, the profile expects 8 x gfx908",
        "modinfo finds no amdgpu module for the running kernel"]


def test_a_gpu_less_profile_accepts_a_gpu_less_machine():
    assert rocm.check_gpus(facts(ROCMINFO_NO_KFD, smi_gpus=0, driver=""), 0, "") == []


def test_missing_tools_are_problems():
    f = facts(smi=None)
    f["rocminfo"] = None
    assert rocm.check_gpus(f, 8, "gfx908") == [
        "rocminfo is not installed", "neither amd-smi nor rocm-smi is installed"]


def test_hip_problems():
    assert rocm.check_hip(rocm.parse_hip_check(hip_text()), 8, "gfx908") == []
    assert rocm.check_hip(rocm.parse_hip_check(hip_text(fail=2)), 8, "gfx908") == [
        "the HIP check failed on device 2: wrong result at 17: 1",
        "the HIP check did not pass on devices [2]"]
    assert rocm.check_hip(rocm.parse_hip_check("hip-check: devices 0\n"), 8, "gfx908") == [
        "the HIP check sees 0 devices, the profile expects 8"]


# --------------------------------------------------------------------------- module

@pytest.fixture
def node(monkeypatch, tmp_path):
    monkeypatch.setattr(rocm_facts, "kernel_release", lambda: KREL)
    (tmp_path / "amdgpu").mkdir()
    return tmp_path


def test_module_on_a_healthy_node_with_amd_smi(node):
    res, _unused = run_module(rocm_facts.main, {
        "expected_gpu_count": 8, "expected_gfx_target": "gfx908",
        "sys_module_dir": str(node), "hip_check": "/tmp/x/hip_check"}, [
        Cmd(["/usr/sbin/rocminfo"], 0, rocminfo_text()),
        Cmd(["/usr/sbin/amd-smi", "static", "--asic", "--json"], 0, amd_smi_json()),
        Cmd(["/usr/sbin/modinfo", "-k", KREL, "-F", "filename", "amdgpu"], 0, IN_TREE),
        Cmd(["/tmp/x/hip_check"], 0, hip_text()),
    ])
    assert res["failed"] is False and res["changed"] is False
    assert res["problems"] == []
    assert res["gpu_count"] == 8
    assert res["smi"]["tool"] == "amd-smi"
    assert res["driver"]["in_tree"] is True and res["driver"]["loaded"] is True
    assert res["driver"]["dkms_version"] is None
    assert res["hip_check"]["device_count"] == 8


def test_module_falls_back_to_rocm_smi_and_flags_dkms(node):
    (node / "amdgpu" / "version").write_text("6.8.5\n")
    res, _unused = run_module(rocm_facts.main, {
        "expected_gpu_count": 8, "expected_gfx_target": "gfx908", "sys_module_dir": str(node)}, [
        Cmd(["/usr/sbin/rocminfo"], 0, rocminfo_text()),
        Cmd(["/usr/sbin/rocm-smi", "--showid", "--showproductname", "--json"], 0,
            rocm_smi_json()),
        Cmd(["/usr/sbin/modinfo", "-k", KREL, "-F", "filename", "amdgpu"], 0, DKMS),
    ], missing=("amd-smi",))
    assert res["smi"]["tool"] == "rocm-smi"
    assert [p.split(":")[0] for p in res["problems"]] == [
        f"amdgpu is loaded from /lib/modules/{KREL}/updates/dkms/amdgpu.ko, not from the "
        "kernel's own tree (/lib/modules/<release>/kernel/)",
        "/sys/module/amdgpu/version is 6.8.5"]


def test_module_on_a_machine_without_gpu(tmp_path, monkeypatch):
    monkeypatch.setattr(rocm_facts, "kernel_release", lambda: KREL)
    res, _unused = run_module(rocm_facts.main, {
        "expected_gpu_count": 8, "expected_gfx_target": "gfx908",
        "sys_module_dir": str(tmp_path)}, [
        Cmd(["/usr/sbin/rocminfo"], 1, ROCMINFO_NO_KFD),
        Cmd(["/usr/sbin/rocm-smi", "--showid", "--showproductname", "--json"], 0, "",
            "ERROR:root:Driver not initialized (amdgpu not found in modules)\n"),
        Cmd(["/usr/sbin/modinfo", "-k", KREL, "-F", "filename", "amdgpu"], 1, "",
            "modinfo: ERROR: Module amdgpu not found.\n"),
    ], missing=("amd-smi",))
    assert res["failed"] is False
    assert res["gpu_count"] == 0
    assert res["driver"]["loaded"] is False
    assert res["problems"][0].endswith("no GPU found, the profile expects 8 x gfx908")
    assert res["command_errors"]["rocminfo"].endswith("possibly no GPU devices\x1b[0m")
    assert "modinfo" in res["command_errors"]


def test_module_without_expectation_only_reports(node):
    res, _unused = run_module(rocm_facts.main, {"sys_module_dir": str(node)}, [
        Cmd(["/usr/sbin/rocminfo"], 0, rocminfo_text(gpus=3)),
        Cmd(["/usr/sbin/modinfo", "-k", KREL, "-F", "filename", "amdgpu"], 0, IN_TREE),
    ], missing=("amd-smi", "rocm-smi"))
    assert res["problems"] == [] and res["gpu_count"] == 3 and res["smi"] is None


def test_module_fails_on_unreadable_smi_output(node):
    res, _unused = run_module(rocm_facts.main, {"sys_module_dir": str(node)}, [
        Cmd(["/usr/sbin/rocminfo"], 0, rocminfo_text()),
        Cmd(["/usr/sbin/amd-smi", "static", "--asic", "--json"], 0, "not json at all"),
    ])
    assert res["failed"] is True and "amd-smi printed no JSON" in res["msg"]
