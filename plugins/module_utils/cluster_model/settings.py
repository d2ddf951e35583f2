# Copyright: junkyard.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Cluster-wide settings that end up in configuration files as they are: the
cluster's name and DNS domain (dnsmasq, /etc/hosts), the time zone, the apt proxy
and the TFTP root (dnsmasq).  Each is checked where the inventory states it, not
later by the role that writes it."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from .common import NAME_RE, check_plain_path, fmt

DOMAIN_RE = re.compile(r"^(?=.{1,253}$)[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"
                       r"(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$")
TIMEZONE_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+)*$")


def _timezones():
    """The controller's tz database, or an empty set when it has none."""
    try:
        import zoneinfo  # pylint: disable=import-outside-toplevel
        return zoneinfo.available_timezones()
    except (ImportError, OSError):
        return set()


def check_settings(cluster, err):
    name = cluster.get("name", "junkyard")
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        err.add("cluster", "cluster_name", name,
                "is not a name of lower-case letters, digits and - (it names hosts and files)")
    domain = cluster.get("domain", "cluster.internal")
    if not isinstance(domain, str) or not DOMAIN_RE.fullmatch(domain):
        err.add("cluster", "cluster_domain", domain,
                "is not a DNS domain (lower-case labels of letters, digits and -, joined "
                "by dots; dnsmasq and /etc/hosts take it as it is)")
    tz = cluster.get("timezone", "Etc/UTC")
    known = _timezones()
    if not isinstance(tz, str) or not TIMEZONE_RE.fullmatch(tz) or \
            (known and tz not in known):
        err.add("cluster", "cluster_timezone", tz,
                "is not a time zone of the tz database (e.g. Etc/UTC, Europe/Berlin)")
    proxy = cluster.get("apt_proxy", "")
    if proxy not in ("", None):
        problem = _proxy_problem(proxy)
        if problem:
            err.add("cluster", "cluster_apt_proxy", proxy, problem)
    tftp_root = cluster.get("tftp_root", "/srv/tftp")
    check_plain_path("cluster", "cluster_tftp_root", tftp_root, err)


def _proxy_problem(proxy):
    if not isinstance(proxy, str) or re.search(r"\s", proxy):
        return "is not a URL (http://host:port, without white space)"
    try:
        url = urlsplit(proxy)
        port = url.port
    except ValueError:
        return "is not a URL with a valid port (http://host:port)"
    if url.scheme not in ("http", "https") or not url.hostname:
        return "is not an http:// or https:// URL with a host (e.g. http://10.20.0.1:3142)"
    if url.path not in ("", "/") or url.query or url.fragment:
        return f"must name the proxy only (scheme, host, port), not {fmt(url.path)}"
    if port == 0:
        return "has port 0"
    return None
