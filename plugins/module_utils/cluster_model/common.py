# Copyright: junkyard.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What every layer of the cluster model shares: the error list (one message per
problem, ``host: field value problem``) and the parsing of addresses and names."""

from __future__ import annotations

import ipaddress
import posixpath
import re

MAC_RE = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")
NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
DATASET_PART_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$")
# A field written into a white-space separated boot-time table.
TABLE_FIELD_RE = re.compile(r"^[^\s#]\S*$")
# Directories a node needs as the image has them, whole: a writable mount over one
# of them hides the system (their subdirectories, /var/log or /etc/ssh, are fine).
SYSTEM_DIRS = ("/bin", "/boot", "/etc", "/lib", "/lib32", "/lib64", "/sbin", "/usr", "/var")
# Where the kernel and the initramfs mount file systems of their own (devtmpfs,
# proc, sysfs, the initramfs's /run, moved onto the root at switch_root): a
# writable path or data mount there hides them or is hidden by them.
KERNEL_DIRS = ("/dev", "/proc", "/run", "/sys")
# A path written into an exports line, a kernel command line or a dnsmasq file.
PLAIN_PATH_RE = re.compile(r"^/[A-Za-z0-9_.@+/-]*$")


def fmt(value):
    """A value as a message shows it: a string as it is, unless it is empty or its
    white space would not show (a newline, a tab, a space at either end), which it
    shows quoted, with escapes ('v1\\n')."""
    if isinstance(value, str) and value and value == value.strip() and value.isprintable():
        return value
    return repr(value)


class Errors:
    """The refusals of one run, in the order they were found."""

    def __init__(self):
        self.items = []
        self._seen = set()
        self._closed = set()
        self.entries = []

    def add(self, where, field, value, problem):
        """One problem; a second one about the same host, field and value (a shape
        refusal, then the layer's own check of that value) is left out, and so is
        every problem about a field that is closed (see :meth:`close`)."""
        key = (where, field, fmt(value))
        if key in self._seen or self._is_closed(where, field):
            return
        self._seen.add(key)
        self.entries.append((where, field, fmt(value), problem))
        field = f"{field} " if field else ""
        self.items.append(f"{where}: {field}{fmt(value)} {problem}")

    def close(self, where, field):
        """Report nothing more about ``where``'s ``field`` and what it holds (its
        value could not be read: what the layers would say of it is noise)."""
        self._closed.add((where, field))

    def closed(self):
        """The (where, field) pairs closed so far."""
        return set(self._closed)

    def _is_closed(self, where, field):
        if not field or not self._closed:
            return False
        return any((where, f) in self._closed
                   for f in [field] + [field[:i] for i, c in enumerate(field) if c in ".["])

    def seen(self, where, field, value):
        """Take a problem about ``where``'s ``field`` ``value`` as reported."""
        self._seen.add((where, field, fmt(value)))

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
    return mac if MAC_RE.fullmatch(mac) else None


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


def check_plain_path(where, field, path, err):
    """An absolute, normalised path of plain characters (no white space, comma,
    newline, quote or #: it is written into exports lines, kernel command lines or
    dnsmasq files as it is).  Returns it, or None (reported)."""
    if not isinstance(path, str) or not path.startswith("/"):
        err.add(where, field, path, "is not an absolute path")
        return None
    if not PLAIN_PATH_RE.fullmatch(path):
        err.add(where, field, path,
                "contains a character an exports line, kernel command line or dnsmasq "
                "file cannot hold (white space, comma, quote, #); use letters, digits "
                "and _ . @ + - /")
        return None
    if posixpath.normpath(path) != (path.rstrip("/") or "/") or "//" in path:
        err.add(where, field, path, "is not a normalised path (no //, . or ..)")
        return None
    return path
