# Copyright (c) 2026, junkyard.cluster developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Watching nodes boot after a rollout powered them on, from the storage head
(docs/upgrades.md; the rollout_boot module runs it).

Two things tell how a node's boot goes:

- nginx's access log on the head: every boot starts with one GET of the node's kernel
  (a path ending in ``/boot/vmlinuz``, or ``/boot/vmlinuz.old`` for the previous-kernel
  entry), logged in the default ``combined`` format with the node's address as client.
  A node that cannot boot panics and, with ``panic=`` on its command line, starts again
  and fetches its kernel again: a boot loop, seen as one fetch too many.
- its SSH port on its management address: a banner starting ``SSH-`` means it is up.

The log is read from a mark taken before the power-on (its inode and size then), a
little more every round, across a rotation (``<log>.1``) or a truncation.  The loop
takes its clock, its sleep and its probe as arguments, so the tests drive it.  Stdlib
only."""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

KERNELS = ("/boot/vmlinuz", "/boot/vmlinuz.old")
FETCHED = frozenset({200, 206, 304})  # statuses of a kernel fetch that worked
BANNER_BYTES = 255  # RFC 4253: the identification line is at most 255 bytes

# $remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent ...
# (nginx writes a '"' inside a field as \x22, so a quoted field holds no bare quote)
_COMBINED = re.compile(
    r'(?P<client>\S+) \S+ .*?\[[^\]]*\] "(?P<method>[A-Z]+) (?P<target>\S+)(?: [^"]*)?" '
    r"(?P<status>\d{3})(?: |$)")


def parse_line(line):
    """One access log line in the combined format -> (client, method, path, status), the
    path without its query string; None for a line that is not one (a request nginx could
    not parse, garbage)."""
    match = _COMBINED.match(line.rstrip("\r\n"))
    if not match:
        return None
    client = match["client"]
    if client.startswith("::ffff:"):  # an IPv4 client on a dual-stack socket
        client = client[len("::ffff:"):]
    return client, match["method"], _bare(match["target"]), int(match["status"])


def _bare(target):
    return target.split("?", 1)[0].split("#", 1)[0]


def kernel_fetch(path):
    """The kernel path when ``path`` (query string ignored) is a node's kernel, else None."""
    path = _bare(path)
    return path if path.endswith(KERNELS) else None


def fetch_of(line):
    """(client, kernel path) when ``line`` logs a kernel fetch that worked (a GET answered
    200, 206 or 304), else None: the start of one boot of that client."""
    parsed = parse_line(line)
    if parsed is None:
        return None
    client, method, path, status = parsed
    kernel = kernel_fetch(path)
    if method != "GET" or status not in FETCHED or kernel is None:
        return None
    return client, kernel


def count_fetches(lines, addresses):
    """address -> the kernel paths it fetched in ``lines``, in order (only ``addresses``)."""
    fetched = {address: [] for address in addresses}
    for line in lines:
        fetch = fetch_of(line)
        if fetch is not None and fetch[0] in fetched:
            fetched[fetch[0]].append(fetch[1])
    return fetched


def tally(paths):
    """'/a/boot/vmlinuz x2, /a/boot/vmlinuz.old' - the paths in first-fetched order."""
    counts = Counter(paths)
    return ", ".join(path if n == 1 else f"{path} x{n}" for path, n in counts.items())


def reason_looping(name, address, port, fetched):
    return (f"{name} started its boot {len(fetched)} times (kernel fetched over HTTP: "
            f"{tally(fetched)}) without answering on {address}:{port}")


def reason_deadline(name, address, port, deadline, fetched):
    n = len(fetched)
    if n:
        how = f"kernel fetched {n} time{'' if n == 1 else 's'}: {tally(fetched)}"
    else:
        how = ("its kernel was never fetched over HTTP: no boot started, or it booted "
               "over TFTP")
    return f"{name} did not answer on {address}:{port} within {deadline} s ({how})"


def mark(path):
    """Where the log stands now: {path, inode, size}; inode None and size 0 when it does
    not exist yet (every line of the file that appears later is new)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return {"path": path, "inode": None, "size": 0}
    return {"path": path, "inode": st.st_ino, "size": st.st_size}


def _open(path):
    """(file, its stat) or (None, None) when it does not exist."""
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed by the caller
    except FileNotFoundError:
        return None, None
    return handle, os.fstat(handle.fileno())


def _complete_lines(handle, offset):
    """The whole lines from ``offset`` on (a line nginx is still writing stays for the
    next read) and the offset after them."""
    handle.seek(offset)
    data = handle.read()
    end = data.rfind(b"\n") + 1
    text = data[:end].decode("utf-8", errors="replace")
    return text.splitlines(), offset + end


class LogFollower:
    """Reads the lines written to an access log after a mark, a little more each call.

    When the log's inode is not the one followed any more, the log was rotated: the
    rest of the old file is read from ``<path>.1`` (if that is still the same inode, and
    again on later calls, since nginx writes to the old file until it reopens its logs),
    then the new file from its start.  A file shorter than the offset (same inode) was
    truncated: it is read from its start."""

    def __init__(self, path, mark_):
        self.path = path
        self.inode = mark_.get("inode")
        self.offset = int(mark_.get("size") or 0)
        self.rotated = None  # [inode, offset] of the file renamed to <path>.1

    def read(self):
        lines = self._read_rotated()
        handle, st = _open(self.path)
        if handle is None:
            if self.inode is not None:  # renamed away; the new file is not there yet
                self._rotate_away()
                lines += self._read_rotated()
                self.inode, self.offset = None, 0
            return lines
        with handle:
            if st.st_ino != self.inode:
                if self.inode is not None:
                    self._rotate_away()
                    lines += self._read_rotated()
                self.inode, self.offset = st.st_ino, 0
            elif st.st_size < self.offset:
                self.offset = 0
            new, self.offset = _complete_lines(handle, self.offset)
        return lines + new

    def _rotate_away(self):
        self.rotated = [self.inode, self.offset]

    def _read_rotated(self):
        if self.rotated is None:
            return []
        handle, st = _open(self.path + ".1")
        if handle is None:
            self.rotated = None
            return []
        with handle:
            if st.st_ino != self.rotated[0]:  # rotated on again, or compressed: gone
                self.rotated = None
                return []
            lines, self.rotated[1] = _complete_lines(handle, self.rotated[1])
        return lines


def ssh_answers(address, port, timeout):
    """Whether address:port answers with an SSH identification (``SSH-...``) within
    ``timeout`` seconds (for the connection and for the banner)."""
    try:
        with socket.create_connection((address, port), timeout=timeout) as conn:
            conn.settimeout(timeout)
            banner = b""
            while len(banner) < BANNER_BYTES and b"\n" not in banner:
                chunk = conn.recv(BANNER_BYTES - len(banner))
                if not chunk:
                    break
                banner += chunk
    except OSError:  # refused, unreachable, timed out, reset
        return False
    return banner.startswith(b"SSH-")


def _int(value, field):
    if isinstance(value, bool):
        raise ValueError(f"{field} {value!r} is not a whole number")
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{field} {value!r} is not a whole number") from None


def check_nodes(nodes):
    """The nodes as [{name, address, port}], or ValueError naming the entry and value."""
    checked, names, addresses = [], {}, {}
    for i, node in enumerate(nodes):
        if not isinstance(node, dict):
            raise ValueError(f"nodes[{i}] {node!r} is not a dict with name and address")
        name, address = node.get("name"), node.get("address")
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"nodes[{i}].name {name!r} is not a node name")
        if name in names:
            raise ValueError(f"nodes[{i}].name {name!r} is a duplicate of "
                             f"nodes[{names[name]}].name")
        try:
            ipaddress.IPv4Address(address)
        except ValueError:
            raise ValueError(f"nodes[{i}].address {address!r} is not an IPv4 address") from None
        if address in addresses:
            j = addresses[address]
            raise ValueError(f"nodes[{i}].address {address!r} ({name}) is also "
                             f"nodes[{j}].address ({checked[j]['name']}): the access log "
                             "cannot tell their boots apart")
        port = _int(22 if node.get("port") is None else node["port"], f"nodes[{i}].port")
        if not 1 <= port <= 65535:
            raise ValueError(f"nodes[{i}].port {port} is not a TCP port (1-65535)")
        names[name], addresses[address] = i, i
        checked.append({"name": name, "address": address, "port": port})
    return checked


def check_mark(mark_, access_log):
    """The mark of state=marked as {path, inode, size}, or ValueError."""
    if not isinstance(mark_, dict) or "size" not in mark_ or "inode" not in mark_:
        raise ValueError(f"mark {mark_!r} is not the mark returned by state=marked "
                         "({path, inode, size})")
    size = _int(mark_["size"], "mark.size")
    inode = None if mark_["inode"] is None else _int(mark_["inode"], "mark.inode")
    if size < 0:
        raise ValueError(f"mark.size {size} is negative")
    path = mark_.get("path")
    if path is not None and os.path.normpath(str(path)) != os.path.normpath(access_log):
        raise ValueError(f"mark.path {path!r} is not access_log {access_log!r} (a mark of "
                         "another log)")
    return {"path": access_log, "inode": inode, "size": size}


def check_watch(nodes, deadline, attempts, poll=5, connect_timeout=5):
    """Validated nodes (check_nodes) after the numbers, or ValueError naming the field."""
    if deadline is None or _int(deadline, "deadline") <= 0:
        raise ValueError(f"deadline {deadline!r} must be more than 0 seconds")
    if attempts is None or _int(attempts, "attempts") < 1:
        raise ValueError(f"attempts {attempts!r} must be at least 1 (the boots a node may "
                         "start)")
    if _int(poll, "poll") < 1:
        raise ValueError(f"poll {poll!r} must be at least 1 second")
    if _int(connect_timeout, "connect_timeout") < 1:
        raise ValueError(f"connect_timeout {connect_timeout!r} must be at least 1 second")
    return check_nodes(nodes or [])


def watch(nodes, follower, deadline, attempts, poll=5, connect_timeout=5,
          clock=time.monotonic, sleep=time.sleep, probe=ssh_answers):
    """Watch ``nodes`` (check_nodes' list) until each is decided or ``deadline`` seconds
    passed.  Every round: read the new log lines; a node that fetched its kernel more than
    ``attempts`` times is looping; the others are probed (at once, in threads) and one
    that answers is up.  A decided node is not looked at again.  Returns {nodes: {name:
    {state, attempts, seconds, fetched}}, up: [names], given_up: {name: reason}}."""
    start = clock()
    by_address = {node["address"]: node for node in nodes}
    fetched = {node["name"]: [] for node in nodes}
    decided = {}

    def decide(node, state):
        decided[node["name"]] = {"state": state, "attempts": len(fetched[node["name"]]),
                                 "seconds": round(clock() - start, 1),
                                 "fetched": list(fetched[node["name"]])}

    with ThreadPoolExecutor(max_workers=max(1, min(32, len(nodes)))) as pool:
        while True:
            for line in follower.read():
                fetch = fetch_of(line)
                node = by_address.get(fetch[0]) if fetch else None
                if node is not None and node["name"] not in decided:
                    fetched[node["name"]].append(fetch[1])
            for node in nodes:
                if node["name"] not in decided and len(fetched[node["name"]]) > attempts:
                    decide(node, "looping")
            pending = [node for node in nodes if node["name"] not in decided]
            answers = list(pool.map(
                lambda node: probe(node["address"], node["port"], connect_timeout), pending))
            for node, answered in zip(pending, answers, strict=True):
                if answered:
                    decide(node, "up")
            pending = [node for node in nodes if node["name"] not in decided]
            if not pending:
                break
            elapsed = clock() - start
            if elapsed >= deadline:
                for node in pending:
                    decide(node, "deadline")
                break
            sleep(min(poll, deadline - elapsed))
    return outcome(nodes, decided, deadline)


def outcome(nodes, decided, deadline):
    result = {"nodes": {}, "up": [], "given_up": {}}
    for node in nodes:
        name, address, port = node["name"], node["address"], node["port"]
        info = result["nodes"][name] = decided[name]
        if info["state"] == "up":
            result["up"].append(name)
        elif info["state"] == "looping":
            result["given_up"][name] = reason_looping(name, address, port, info["fetched"])
        else:
            result["given_up"][name] = reason_deadline(name, address, port, deadline,
                                                       info["fetched"])
    return result
