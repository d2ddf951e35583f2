"""Issue 5: a kernel upgraded inside the image boots with no file copied by hand.

Runs after the other lab tests (see LAB_FILE_ORDER in conftest.py): it leaves
node01 on another kernel.  The kernel installed is Debian's ``cloud`` flavour:
the mirror carries one version per flavour, so "another kernel" is another
flavour, and the cloud one (virtio, NFS, no hardware drivers) is the smallest to
unpack and to build an initramfs for under TCG.  What is proven does not depend
on the flavour: the image's ``vmlinuz``/``initrd.img`` links move to the new
kernel, the TFTP tree serves them through its bind mount of the image's /boot,
``vmlinuz.old`` keeps the previous one for the GRUB fallback entry, and a
power-cycled node comes up on the new kernel while the other node, not
rebooted, stays on the old one.
"""

from __future__ import annotations

import json
import time

import pytest
from labtools import lab_cli

pytestmark = pytest.mark.lab

NEW_KERNEL = "linux-image-cloud-amd64"
IMAGE_BOOT = "/tank/images/bookworm/v1/boot"
SERVED_BOOT = "/srv/tftp/images/bookworm/v1/boot"


def test_kernel_upgraded_in_the_image_boots_without_copying(lab, site, lab_log):
    """Install another kernel in the image the operator's way (the image playbook
    with a kernel package set) and power-cycle node01."""
    before = lab.node_ssh("node01", "uname -r").stdout.strip()
    assert before, "node01 is not up after site.yml"
    # only the node_image role's tasks: the other image roles have nothing to do
    res = lab_cli("run", "playbooks/image.yml", "--tags", "role::node_image", "-e",
                  json.dumps({"node_image_kernel_packages": [NEW_KERNEL]}),
                  log=lab_log, timeout=3600)
    assert res.returncode == 0, res.stdout[-6000:]
    served = lab.ssh(f"readlink -f {SERVED_BOOT}/vmlinuz; readlink -f {SERVED_BOOT}/initrd.img; "
                     f"readlink {IMAGE_BOOT}/vmlinuz.old; "
                     f"findmnt -n -o SOURCE {SERVED_BOOT}")
    new_kernel, new_initrd, old_link, source = served.stdout.split()
    assert new_kernel.endswith("-cloud-amd64"), served.stdout
    assert new_initrd.endswith(new_kernel.rsplit("vmlinuz-", 1)[1]), served.stdout
    assert old_link.endswith(before), served.stdout
    # served from the image itself, not from a copy
    assert source == "tank/images/bookworm/v1[/boot]", served.stdout
    assert lab.ipmitool(lab.cfg.node("node01"), "chassis", "power", "cycle").returncode == 0
    time.sleep(10)
    assert lab.wait_login("node01", timeout=900), "node01 did not answer SSH after the cycle"
    after = lab.node_ssh("node01", "uname -r").stdout.strip()
    assert after.endswith("-cloud-amd64") and after != before, (before, after)
    # the root is still the shared image, read-only
    root = lab.node_ssh("node01", "findmnt -n -o SOURCE,FSTYPE /").stdout.split()
    assert root[0] == "10.77.0.1:/tank/images/bookworm/v1" and root[1].startswith("nfs"), root
    assert lab.node_ssh("node02", "uname -r").stdout.strip() == before
