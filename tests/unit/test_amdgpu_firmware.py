"""The GPU firmware check of an image: which files amdgpu declares for a gfx target
and which an image lacks.

The table tests use what Debian 12's 6.1 kernel (linux-image-6.1.0-57-amd64)
declares (`modinfo -F firmware amdgpu`) and what firmware-amd-graphics 20230210-5
ships, as read from the two packages.  The module tests run the real `modinfo`
(kmod) on an ELF object with a `.modinfo` section, indexed by the real `depmod`,
in a tree laid out as an image's /lib/modules."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
from contextlib import redirect_stdout

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.junkyard.cluster.plugins.module_utils import amdgpu_firmware as fw
from ansible_collections.junkyard.cluster.plugins.modules import amdgpu_firmware

# amdgpu of Debian 12's 6.1 kernel, the files of three data-centre ASICs
DECLARED_61 = ["amdgpu/arcturus_gpu_info.bin", "amdgpu/arcturus_ta.bin",
               "amdgpu/arcturus_asd.bin", "amdgpu/arcturus_sos.bin", "amdgpu/vega20_ta.bin",
               "amdgpu/vega20_asd.bin", "amdgpu/vega20_sos.bin", "amdgpu/aldebaran_cap.bin",
               "amdgpu/aldebaran_ta.bin", "amdgpu/aldebaran_sos.bin",
               "amdgpu/aldebaran_sjt_mec2.bin", "amdgpu/aldebaran_sjt_mec.bin",
               "amdgpu/aldebaran_rlc.bin", "amdgpu/aldebaran_mec2.bin",
               "amdgpu/aldebaran_mec.bin", "amdgpu/arcturus_rlc.bin", "amdgpu/arcturus_mec.bin",
               "amdgpu/vega20_rlc.bin", "amdgpu/vega20_mec2.bin", "amdgpu/vega20_mec.bin",
               "amdgpu/vega20_me.bin", "amdgpu/vega20_pfp.bin", "amdgpu/vega20_ce.bin",
               "amdgpu/aldebaran_sdma.bin", "amdgpu/arcturus_sdma.bin", "amdgpu/vega20_sdma1.bin",
               "amdgpu/vega20_sdma.bin", "amdgpu/vega20_uvd.bin", "amdgpu/vega20_vce.bin",
               "amdgpu/aldebaran_vcn.bin", "amdgpu/arcturus_vcn.bin", "amdgpu/arcturus_smc.bin",
               "amdgpu/aldebaran_smc.bin", "amdgpu/vega20_smc.bin"]

MI100 = ["amdgpu/arcturus_asd.bin", "amdgpu/arcturus_gpu_info.bin", "amdgpu/arcturus_mec.bin",
         "amdgpu/arcturus_rlc.bin", "amdgpu/arcturus_sdma.bin", "amdgpu/arcturus_smc.bin",
         "amdgpu/arcturus_sos.bin", "amdgpu/arcturus_ta.bin", "amdgpu/arcturus_vcn.bin"]


def test_the_mi100_needs_the_arcturus_files_the_driver_declares():
    assert fw.required(DECLARED_61, ["gfx908"]) == {"gfx908": MI100}


def test_the_sriov_capability_firmware_is_not_required():
    # firmware-amd-graphics 20230210-5 lacks aldebaran_cap.bin; an MI210 works without it
    needed = fw.required(DECLARED_61, ["gfx90a", "gfx908"])
    assert "amdgpu/aldebaran_cap.bin" not in needed["gfx90a"]
    assert "amdgpu/aldebaran_sos.bin" in needed["gfx90a"] and needed["gfx908"] == MI100


def test_an_unknown_target_or_an_undeclared_one_is_an_error():
    with pytest.raises(fw.FirmwareError, match=r"gfx_target gfx942: no firmware table .*gfx908"):
        fw.required(DECLARED_61, ["gfx942"])
    with pytest.raises(fw.FirmwareError, match="gfx_target gfx1030: amdgpu declares no firmware "
                                               "file starting with amdgpu/sienna_cichlid_"):
        fw.required(DECLARED_61, ["gfx1030"])


@pytest.mark.parametrize(("present", "lost"), [
    (MI100, []),
    ([f + ".xz" for f in MI100], []),  # the loader tries .xz and .zst too
    ([f + ".zst" for f in MI100[1:]], [MI100[0]]),
    ([f for f in MI100 if "sos" not in f] + ["amdgpu/arcturus_sos.bin.gz"],
     ["amdgpu/arcturus_sos.bin"]),
])
def test_missing_files_are_named(present, lost):
    assert fw.missing({"gfx908": MI100}, present) == lost


def test_the_initramfs_listing_tells_whether_amdgpu_and_its_firmware_are_inside():
    listing = ("usr/lib/modules/6.1.0-57-amd64/kernel/drivers/gpu/drm/amd/amdgpu/amdgpu.ko\n"
               "usr/lib/firmware/amdgpu/arcturus_sos.bin\n./lib/firmware/amdgpu/arcturus_ta.bin\n"
               "usr/lib/modules/6.1.0-57-amd64/kernel/net/sunrpc/sunrpc.ko\n")
    assert fw.initramfs_firmware(listing) == (
        True, {"amdgpu/arcturus_sos.bin", "amdgpu/arcturus_ta.bin"})
    assert fw.initramfs_firmware("usr/lib/modules/x/kernel/virtio_net.ko\n") == (False, set())


# --- the module with the real modinfo and depmod ---------------------------------------

needs_kmod = pytest.mark.skipif(shutil.which("modinfo") is None or shutil.which("depmod") is None
                                or shutil.which("objcopy") is None,
                                reason="needs kmod and binutils")


def image(tmp_path, declared, firmware, kernel="6.1.0-57-amd64"):
    """An image tree whose kernel has an amdgpu.ko declaring ``declared`` and whose
    /lib/firmware holds ``firmware``."""
    moddir = tmp_path / "lib/modules" / kernel / "kernel/drivers/gpu/drm/amd/amdgpu"
    moddir.mkdir(parents=True)
    info = tmp_path / "modinfo.bin"
    info.write_bytes(b"".join(f"firmware={f}\0".encode() for f in declared)
                     + b"license=GPL\0name=amdgpu\0")
    obj = tmp_path / "empty.o"
    subprocess.run(["as", "-o", str(obj)], input=b"", check=True)
    subprocess.run(["objcopy", "--add-section", f".modinfo={info}", "--set-section-flags",
                    ".modinfo=alloc,readonly", str(obj), str(moddir / "amdgpu.ko")], check=True)
    subprocess.run(["depmod", "-b", str(tmp_path), kernel], check=True, capture_output=True)
    for f in firmware:
        path = tmp_path / "lib/firmware" / f
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"\0")
    return tmp_path


def run(root, targets):
    args = {"gfx_targets": targets, "modinfo_root": str(root),
            "modules_dir": str(root / "lib/modules"), "firmware_dir": str(root / "lib/firmware"),
            "boot_dir": str(root / "boot")}
    out = io.StringIO()
    with patch_module_args(args), redirect_stdout(out), pytest.raises(SystemExit):
        amdgpu_firmware.main()
    return json.loads(out.getvalue())


@needs_kmod
def test_an_image_with_the_firmware_passes(tmp_path):
    res = run(image(tmp_path, DECLARED_61, MI100), ["gfx908"])
    assert not res.get("failed"), res
    assert res["checked"] == {"6.1.0-57-amd64": {"gfx908": MI100}}
    assert res["missing"] == {} and res["kernels_without_amdgpu"] == []


@needs_kmod
def test_a_removed_file_is_named(tmp_path):
    res = run(image(tmp_path, DECLARED_61, [f for f in MI100 if "smc" not in f]), ["gfx908"])
    assert res["failed"]
    assert res["msg"] == ("kernel 6.1.0-57-amd64, gfx_target gfx908: amdgpu needs "
                          f"amdgpu/arcturus_smc.bin (missing from {tmp_path}/lib/firmware): "
                          "install the GPU firmware (firmware-amd-graphics, non-free-firmware) "
                          "in the image")
    assert res["missing"] == {"6.1.0-57-amd64": ["amdgpu/arcturus_smc.bin"]}


@needs_kmod
def test_a_kernel_without_amdgpu_is_reported_and_no_target_checks_nothing(tmp_path):
    root = image(tmp_path, DECLARED_61, MI100)
    (root / "lib/modules/6.1.0-cloud-amd64").mkdir()
    res = run(root, ["gfx908"])
    assert not res.get("failed"), res
    assert res["kernels_without_amdgpu"] == ["6.1.0-cloud-amd64"]
    assert list(res["checked"]) == ["6.1.0-57-amd64"]
    assert run(root, [])["checked"] == {}
