# Copyright (c) 2026, junkyard.cluster developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Validate NFS export entries and render an exports(5) file in one pass."""

from __future__ import annotations

import ipaddress
import re

HEADER = "# Managed by Ansible (junkyard.cluster.nfs_exports); local changes are overwritten.\n"

# exports(5) options that take no value, and the option each one contradicts.
FLAGS = {
    "rw": "ro", "ro": "rw",
    "sync": "async", "async": "sync",
    "secure": "insecure", "insecure": "secure",
    "wdelay": "no_wdelay", "no_wdelay": "wdelay",
    "hide": "nohide", "nohide": "hide",
    "subtree_check": "no_subtree_check", "no_subtree_check": "subtree_check",
    "root_squash": "no_root_squash", "no_root_squash": "root_squash",
    "all_squash": "no_all_squash", "no_all_squash": "all_squash",
    "secure_locks": "insecure_locks", "insecure_locks": "secure_locks",
    "auth_nlm": "no_auth_nlm", "no_auth_nlm": "auth_nlm",
    "pnfs": "no_pnfs", "no_pnfs": "pnfs",
    "crossmnt": None, "mp": None, "security_label": None,
}
SEC_FLAVOURS = {"sys", "krb5", "krb5i", "krb5p"}
XPRTSEC = {"none", "tls", "mtls"}
UUID_RE = re.compile(r"^[0-9a-fA-F]{8}(-?[0-9a-fA-F]{4}){3}-?[0-9a-fA-F]{12}$|^[0-9a-fA-F:]{32,}$")
HOST_LABEL_RE = re.compile(r"^[A-Za-z0-9*?]([A-Za-z0-9*?-]{0,61}[A-Za-z0-9*?])?$")
NETGROUP_RE = re.compile(r"^@[A-Za-z0-9_.-]+$")
NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


class ExportError(ValueError):
    """An export entry exports(5) or exportfs would reject; the message names it."""


def _check_value(key: str, value: str, where: str) -> None:
    def bad(expected):
        raise ExportError(f"{where}: option {key}={value} is invalid: {expected}")

    if key in ("anonuid", "anongid"):
        if not re.fullmatch(r"-?\d+", value):
            bad("expected an integer")
    elif key == "fsid":
        if value != "root" and not value.isdigit() and not UUID_RE.match(value):
            bad("expected root, a number or a UUID")
    elif key == "sec":
        if not value or any(f not in SEC_FLAVOURS for f in value.split(":")):
            bad(f"expected flavours from {', '.join(sorted(SEC_FLAVOURS))} joined by ':'")
    elif key == "xprtsec":
        if not value or any(f not in XPRTSEC for f in value.split(":")):
            bad(f"expected {', '.join(sorted(XPRTSEC))} joined by ':'")
    elif key in ("mp", "mountpoint"):
        if not value.startswith("/"):
            bad("expected an absolute path")
    elif key in ("refer", "replicas"):
        if "@" not in value:
            bad("expected path@host[+host]")
    else:
        raise ExportError(f"{where}: unknown option {key}={value}")


def normalise_options(options, where: str) -> list[str]:
    """Options as a list (from a list or a comma-separated string), checked."""
    if isinstance(options, str):
        options = [o for o in options.split(",") if o.strip()]
    out: list[str] = []
    seen: dict[str, str] = {}
    for raw in options or []:
        opt = str(raw).strip()
        if not opt or any(c.isspace() for c in opt) or "(" in opt or ")" in opt:
            raise ExportError(f"{where}: option {raw!r} contains whitespace or parentheses")
        key, eq, value = opt.partition("=")
        if eq:
            _check_value(key, value, where)
        elif key not in FLAGS and key != "mountpoint":
            raise ExportError(f"{where}: unknown option {key}")
        if key in seen:
            raise ExportError(f"{where}: option {key} is given twice")
        opposite = FLAGS.get(key)
        if opposite and opposite in seen:
            raise ExportError(f"{where}: options {opposite} and {key} contradict each other")
        seen[key] = opt
        out.append(opt)
    return out


def check_host(host: str, where: str) -> str:
    host = str(host).strip()
    if not host:
        raise ExportError(f"{where}: empty host")
    if host == "*" or NETGROUP_RE.match(host):
        return host
    try:
        if "/" in host:
            addr, _sep, mask = host.partition("/")
            if re.fullmatch(r"\d+\.\d+\.\d+\.\d+", mask):
                ipaddress.IPv4Network(f"{addr}/{mask}", strict=False)
            else:
                ipaddress.ip_network(host, strict=False)
            return host
        ipaddress.ip_address(host)
        return host
    except ValueError as exc:
        if "/" in host or re.fullmatch(r"[\d.]+", host) or ":" in host:
            raise ExportError(f"{where}: host {host} is not a valid address or network") from exc
    labels = host.split(".")
    if len(host) > 253 or not all(HOST_LABEL_RE.match(label) for label in labels):
        raise ExportError(f"{where}: host {host} is not a valid hostname, wildcard, "
                          f"@netgroup, address or network")
    return host


def check_path(path: str, where: str) -> str:
    if not isinstance(path, str) or not path.startswith("/"):
        raise ExportError(f"{where}: path {path!r} is not absolute")
    if any(ord(c) < 32 for c in path) or '"' in path or "\\" in path:
        raise ExportError(f"{where}: path {path!r} contains a control character, quote or "
                          f"backslash")
    parts = path.split("/")[1:]
    if path != "/" and (path.endswith("/") or "" in parts or "." in parts or ".." in parts):
        raise ExportError(f"{where}: path {path} is not normalised (no //, ., .. or trailing /)")
    return path


def normalise(exports: list[dict]) -> list[dict]:
    """Checked copy of the export list: [{path, clients: [{host, options}]}]."""
    out = []
    paths: dict[str, int] = {}
    for i, entry in enumerate(exports):
        where = f"exports[{i}]"
        path = check_path(entry.get("path"), where)
        if path in paths:
            raise ExportError(f"{where}: path {path} is already exported by exports[{paths[path]}]")
        paths[path] = i
        clients = entry.get("clients") or []
        if not clients:
            raise ExportError(f"{where}: path {path} has no clients")
        hosts: dict[str, int] = {}
        norm_clients = []
        for j, client in enumerate(clients):
            cwhere = f"{where}.clients[{j}]"
            host = check_host(client.get("host"), cwhere)
            if host in hosts:
                raise ExportError(f"{cwhere}: host {host} is already listed for {path} "
                                  f"(clients[{hosts[host]}])")
            hosts[host] = j
            norm_clients.append({"host": host,
                                 "options": normalise_options(client.get("options"), cwhere)})
        out.append({"path": path, "clients": norm_clients})
    return out


def _client(c: dict) -> str:
    return f"{c['host']}({','.join(c['options'])})" if c["options"] else c["host"]


def render(exports: list[dict]) -> str:
    """exports(5) text: one entry per path, one client per continuation line."""
    lines = [HEADER]
    for entry in exports:
        path = f'"{entry["path"]}"' if " " in entry["path"] else entry["path"]
        clients = [_client(c) for c in entry["clients"]]
        if len(clients) == 1:
            lines.append(f"{path} {clients[0]}\n")
        else:
            lines.append(f"{path} \\\n" + " \\\n".join(f"\t{c}" for c in clients) + "\n")
    return "".join(lines)


def check_name(name: str) -> str:
    if not NAME_RE.match(name or "") or name.endswith(".exports"):
        raise ExportError(f"name {name!r} must be letters, digits, '_', '.', '-' (the file is "
                          f"<name>.exports)")
    return name
