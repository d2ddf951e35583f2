# Copyright: junkyard.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What every layer of the cluster model shares: the error list (one message per
problem, ``host: field value problem``) and the parsing of addresses and names."""

from __future__ import annotations

import ipaddress
import re

MAC_RE = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")
NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
DATASET_PART_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$")
# A field written into a white-space separated boot-time table.
TABLE_FIELD_RE = re.compile(r"^[^\s#]\S*$")


def fmt(value):
    if isinstance(value, str):
        return value if value else "''"
    return repr(value)


class Errors:
    """The refusals of one run, in the order they were found."""

    def __init__(self):
        self.items = []

    def add(self, where, field, value, problem):
        field = f"{field} " if field else ""
        self.items.append(f"{where}: {field}{fmt(value)} {problem}")

    def plain(self, message):
        self.items.append(message)


def as_dict(value):
    return value if isinstance(value, dict) else {}


def as_list(value):
    return value if isinstance(value, list) else []


def norm_mac(value):
    if not isinstance(value, str):
        return None
    mac = value.strip().lower().replace("-", ":")
    return mac if MAC_RE.match(mac) else None


def ip(value):
    try:
        return ipaddress.ip_address(str(value))
    except ValueError:
        return None


def network(value):
    try:
        return ipaddress.ip_network(str(value), strict=True)
    except ValueError:
        return None


def is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)
