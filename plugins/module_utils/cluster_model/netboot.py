# Copyright: junkyard.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Netboot layer: each node's boot entry (its per-MAC GRUB file, the kernel and
initrd of the image version it boots, the kernel command line) and the drivers
the shared initramfs carries."""

from __future__ import annotations

GRUB_CONFIG_PREFIX = "grub/grub.cfg-01-"


def grub_config(mac):
    """The node's GRUB file relative to the TFTP root: GRUB's net_default_mac with
    dashes, as grub.cfg sources it."""
    return GRUB_CONFIG_PREFIX + mac.replace(":", "-")


def kernel_ip_arg(ip, net, hostname):
    gw = net.get("gateway") or ""
    return f"ip={ip}::{gw}:{net['netmask']}:{hostname}::off"


def boot_entry(node, version, profile, mgmt_net, head_ip, nfs_version):
    """The boot entry of ``node``, which boots image version ``version`` (its
    :func:`images.version_names`)."""
    cmdline = [
        "root=/dev/nfs",
        # nocto: an image version does not change under the nodes that boot it (a
        # change is a new version, booted by a reboot), so open() need not ask the
        # head for fresh attributes every time (close-to-open consistency); the
        # attribute cache's own timeouts (the defaults, at most 60 s) still apply.
        # A boot then makes about a tenth of the GETATTR calls (lab: 9486 -> 734
        # from power-on to SSH).
        f"nfsroot={head_ip}:{version['path']},vers={nfs_version},tcp,nocto",
        kernel_ip_arg(node["mgmt"]["ip"], mgmt_net, node["name"]),
        "BOOTIF=01-" + node["mgmt"]["mac"].replace(":", "-"),
        "ro",
        # no local file system to check: initscripts' checkroot.sh and checkfs.sh
        # skip fsck (seconds of boot each, for nothing, on a diskless node)
        "fastboot",
        f"junkyard.node={node['name']}",
        f"junkyard.image={version['tag']}",
        # a kernel or initramfs that cannot mount the root panics; without panic= the
        # node then hangs until someone power-cycles it (an image rollout only notices at
        # its deadline).  With it the node reboots after 10 s and starts its boot again,
        # which the head sees as a second kernel fetch: the rollout's boot-loop signal.
        # initramfs-tools' own panic() honours it too (it reboots instead of opening its
        # shell).  Before the profile's words: the kernel takes the last panic=, so a
        # profile's kernel_cmdline can set another delay.
        "panic=10",
        *profile["kernel_cmdline"],
    ]
    boot_dir = version["boot_dir"]
    return {
        "dir": boot_dir,
        "kernel": f"/{boot_dir}/boot/vmlinuz",
        "initrd": f"/{boot_dir}/boot/initrd.img",
        "kernel_old": f"/{boot_dir}/boot/vmlinuz.old",
        "initrd_old": f"/{boot_dir}/boot/initrd.img.old",
        "cmdline": " ".join(cmdline),
        "grub_config": grub_config(node["mgmt"]["mac"]),
        # the head serves the boot tree over HTTP on this address (the kernel and
        # initrd; TFTP only for GRUB itself and its files)
        "server": head_ip,
    }


def initramfs_modules(profiles, nodes):
    """The initramfs's network drivers: every booting profile's, or None (every NIC
    driver) when one of them does not name its own."""
    used = sorted({n["profile"] for n in nodes if n["profile"] in profiles})
    lists = [profiles[p]["initramfs_modules"] for p in used]
    if not lists or any(lst is None for lst in lists):
        return None
    return sorted({m for lst in lists for m in lst})
