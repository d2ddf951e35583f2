# Copyright (c) 2026, junkyard.cluster developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the netboot role: what it renders, computed once from the cluster model.

- ``netboot_interfaces(facts)``: device -> IPv4 addresses and MAC, from gathered facts.
- ``netboot_mgmt_interface(mgmt, facts)``: the head's management device name.
- ``netboot_grub_entries(nodes)``: one GRUB boot entry per node (per-MAC file).
- ``netboot_boot_mounts(nodes, tftp_root)``: the image versions' /boot bind mounts.
- ``netboot_grub_quote(word)``: a word quoted for GRUB's script language.
"""

from __future__ import annotations

import ipaddress
import posixpath
import re

from ansible.errors import AnsibleFilterError

# Characters GRUB's script language takes literally in an unquoted word.
_GRUB_PLAIN = re.compile(r"^[A-Za-z0-9_.,:/=@+%-]+$")
_MAC = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")


def netboot_grub_quote(word):
    """Quote one word for GRUB's script language (single quotes, like sh)."""
    word = str(word)
    if word and _GRUB_PLAIN.match(word):
        return word
    return "'" + word.replace("'", "'\\''") + "'"


def _facts_key(device):
    # Ansible stores per-interface facts under the name with '-' and ':' as '_'.
    return device.replace("-", "_").replace(":", "_")


def _addresses(info):
    ipv4 = info.get("ipv4") or {}
    found = [ipv4.get("address")] if isinstance(ipv4, dict) else []
    for extra in info.get("ipv4_secondaries") or []:
        found.append(extra.get("address"))
    return {a for a in found if a}


def netboot_interfaces(facts):
    """The host's interfaces (``lo`` left out) from gathered facts: device name ->
    ``{"addresses": [IPv4 addresses], "mac": MAC or ''}``."""
    facts = facts or {}
    out = {}
    for device in sorted(facts.get("interfaces") or []):
        info = facts.get(_facts_key(device))
        if device == "lo" or not isinstance(info, dict):
            continue
        out[device] = {"addresses": sorted(_addresses(info)),
                       "mac": str(info.get("macaddress") or "").lower()}
    return out


def netboot_mgmt_interface(mgmt, facts):
    """The management device of the head: ``mgmt.device`` if given, else the interface
    that holds ``mgmt.ip`` (or, failing that, ``mgmt.mac``) in the gathered ``facts``.

    Returns '' when nothing matches (the role's assertion then names the value).
    """
    if not isinstance(mgmt, dict):
        raise AnsibleFilterError(f"netboot_mgmt_interface: expected a dict, got {mgmt!r}")
    if mgmt.get("device"):
        return mgmt["device"]
    interfaces = netboot_interfaces(facts)
    ip = str(mgmt.get("ip") or "")
    mac = str(mgmt.get("mac") or "").lower()
    by_ip = [d for d, i in interfaces.items() if ip and ip in i["addresses"]]
    by_mac = [d for d, i in interfaces.items() if mac and i["mac"] == mac]
    for found in (by_ip, by_mac):
        if len(found) == 1:
            return found[0]
        # a bridge and its ports share the MAC; the address is on the bridge
        with_ip = [d for d in found if interfaces[d]["addresses"]]
        if len(with_ip) == 1:
            return with_ip[0]
    return ""


def _one_line(value):
    """``value`` on one line: control characters and runs of whitespace as single spaces."""
    text = "" if value is None else str(value)
    return " ".join("".join(c if c.isprintable() else " " for c in text).split())


def netboot_grub_entries(nodes):
    """One entry per node: the per-MAC file (relative to the TFTP root) and what it boots.

    Sorted by file name, so the rendered set does not depend on inventory order.
    """
    entries = []
    seen = {}
    for index, node in enumerate(nodes or []):
        try:
            name, boot, mac = node["name"], node["boot"], node["mgmt"]["mac"].lower()
            image, version = node["image"], node["image_version"]
            path, server = boot["grub_config"], boot["server"]
        except (KeyError, TypeError, AttributeError) as exc:
            raise AnsibleFilterError(
                f"netboot_grub_entries: nodes[{index}] lacks {exc} (is it cluster_model.nodes?)"
            ) from exc
        if not _MAC.match(mac):
            raise AnsibleFilterError(f"netboot_grub_entries: nodes[{index}] ({name}) "
                                     f"mgmt.mac {mac} is not a MAC address")
        if path in seen:
            raise AnsibleFilterError(f"netboot_grub_entries: nodes[{index}] ({name}) "
                                     f"grub_config {path} is also {seen[path]}'s")
        seen[path] = name
        try:
            ipaddress.IPv4Address(str(server))
        except ValueError:
            raise AnsibleFilterError(f"netboot_grub_entries: nodes[{index}] ({name}) "
                                     f"boot.server {server} is not an IPv4 address") from None
        args = " ".join(netboot_grub_quote(w) for w in str(boot["cmdline"]).split())
        reverted = node.get("image_reverted")
        if reverted:
            # written into comment lines only: each value on one line (whitespace and
            # newlines collapsed to single spaces), so no reason can end the comment
            reverted = {k: _one_line(reverted.get(k))
                        for k in ("image", "version", "to", "reason", "at")}
        entries.append({
            "name": name,
            "mac": mac,
            "path": path,
            "image": image,
            "version": version,
            "title": f"{name}: {image} {version}",
            "kernel": boot["kernel"],
            "initrd": boot["initrd"],
            "kernel_old": boot["kernel_old"],
            "initrd_old": boot["initrd_old"],
            # GRUB's device for the head's HTTP server: the kernel and initrd
            # come from there; the same paths over TFTP are the fallback
            "http": f"(http,{server})",
            "args": args,
            # the rollout switched the node back automatically (cluster_model's
            # image_reverted), or None
            "reverted": reverted or None,
        })
    return sorted(entries, key=lambda e: e["path"])


def netboot_boot_mounts(nodes, tftp_root):
    """The image versions booted by ``nodes``, each once: the image's /boot (``src``)
    and where it is bind-mounted in the TFTP tree (``path``), sorted by ``path``."""
    root = posixpath.normpath(str(tftp_root))
    if not root.startswith("/"):
        raise AnsibleFilterError(f"netboot_boot_mounts: tftp_root {tftp_root} is not absolute")
    mounts = {}
    for index, node in enumerate(nodes or []):
        try:
            boot_dir, root_path = node["boot"]["dir"], node["root_path"]
        except (KeyError, TypeError) as exc:
            raise AnsibleFilterError(
                f"netboot_boot_mounts: nodes[{index}] lacks {exc} (is it cluster_model.nodes?)"
            ) from exc
        path = posixpath.join(root, boot_dir, "boot")
        src = posixpath.join(posixpath.normpath(root_path), "boot")
        if posixpath.normpath(path) != path or ".." in boot_dir.split("/"):
            raise AnsibleFilterError(f"netboot_boot_mounts: nodes[{index}] boot.dir "
                                     f"{boot_dir} leaves the TFTP root")
        if path in mounts and mounts[path]["src"] != src:
            raise AnsibleFilterError(f"netboot_boot_mounts: {path} would bind both "
                                     f"{mounts[path]['src']} and {src}")
        mounts[path] = {"path": path, "src": src, "image": node.get("image"),
                        "version": node.get("image_version")}
    return [mounts[p] for p in sorted(mounts)]


def netboot_dhcp_range(subnet):
    """dnsmasq's ``dhcp-range`` start for a static-only range: the network address."""
    try:
        net = ipaddress.ip_network(str(subnet), strict=True)
    except ValueError as exc:
        raise AnsibleFilterError(f"netboot_dhcp_range: {subnet}: {exc}") from exc
    return f"{net.network_address},static,{net.netmask}"


class FilterModule:
    """junkyard.cluster netboot filters."""

    def filters(self):
        return {
            "netboot_interfaces": netboot_interfaces,
            "netboot_mgmt_interface": netboot_mgmt_interface,
            "netboot_grub_entries": netboot_grub_entries,
            "netboot_boot_mounts": netboot_boot_mounts,
            "netboot_grub_quote": netboot_grub_quote,
            "netboot_dhcp_range": netboot_dhcp_range,
        }
