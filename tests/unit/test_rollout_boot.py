"""rollout_boot: the nginx access log read from a mark on the real file system (appends,
a rotation, a truncation), SSH answered by a real listener on 127.0.0.1, and the watch
loop driven by a fake clock (no test waits for a deadline)."""

from __future__ import annotations

import io
import json
import os
import socket
import socketserver
import subprocess
import sys
import threading
from contextlib import redirect_stdout
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.junkyard.cluster.plugins.module_utils import rollout_boot as rb
from ansible_collections.junkyard.cluster.plugins.modules import rollout_boot

REPO = Path(__file__).resolve().parents[2]
KERNEL = "/images/bookworm/v2/boot/vmlinuz"
OLD = "/images/bookworm/v1/boot/vmlinuz.old"


def line(client="10.77.0.11", path=KERNEL, method="GET", status=200, stamp="01:00:00"):
    return (f'{client} - - [07/Dec/2026:{stamp} +0000] "{method} {path} HTTP/1.1" {status} '
            f'8123456 "-" "GRUB 2.06-13+deb12u1"\n')


def append(log, *lines):
    with open(log, "a", encoding="utf-8") as handle:
        handle.write("".join(lines))


class _Banner(socketserver.BaseRequestHandler):
    def handle(self):
        self.request.sendall(self.server.banner)


@pytest.fixture
def listener():
    """Start a TCP server on 127.0.0.1 that sends ``banner`` to every client; its port."""
    servers = []

    def start(banner=b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n"):
        server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Banner)
        server.daemon_threads = True
        server.banner = banner
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        servers.append(server)
        return server.server_address[1]

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture
def closed_port():
    """A port of 127.0.0.1 where nothing listens (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class FakeTime:
    """clock() and sleep() for watch(): sleeping moves the clock and runs the next of
    ``between`` (what happens in the world while the loop sleeps)."""

    def __init__(self, between=()):
        self.now, self.slept, self.between = 1000.0, [], list(between)

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.slept.append(seconds)
        self.now += seconds
        if self.between:
            self.between.pop(0)()


def node(name="gpu01", address="127.0.0.1", port=22):
    return {"name": name, "address": address, "port": port}


def watch(nodes, log, mark, deadline=900, attempts=1, fake=None, probe=rb.ssh_answers):
    fake = fake or FakeTime()
    return rb.watch(nodes, rb.LogFollower(str(log), mark), deadline, attempts, poll=5,
                    connect_timeout=2, clock=fake.clock, sleep=fake.sleep, probe=probe)


# ---- parsing ---------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "parsed"), [
    (line(), ("10.77.0.11", "GET", KERNEL, 200)),
    (line(path=KERNEL + "?nocache=17"), ("10.77.0.11", "GET", KERNEL, 200)),
    (line(status=404), ("10.77.0.11", "GET", KERNEL, 404)),
    (line(method="POST"), ("10.77.0.11", "POST", KERNEL, 200)),
    (line(client="10.77.0.12", path=OLD), ("10.77.0.12", "GET", OLD, 200)),
    (line(client="::ffff:10.77.0.13"), ("10.77.0.13", "GET", KERNEL, 200)),
    ('10.77.0.11 - alice [07/Dec/2026:01:00:00 +0000] "HEAD /x/boot/initrd.img HTTP/1.1" '
     '304 0 "-" "curl/7.88"', ("10.77.0.11", "HEAD", "/x/boot/initrd.img", 304)),
    ('10.77.0.11 - - [07/Dec/2026:01:00:00 +0000] "\\x16\\x03\\x01" 400 157 "-" "-"', None),
    ("garbage, not a log line", None),
    ("", None),
], ids=["get", "query", "404", "post", "old-kernel", "v4-mapped", "head", "tls-junk",
        "garbage", "empty"])
def test_parse_line(text, parsed):
    assert rb.parse_line(text) == parsed


def test_only_a_get_of_a_kernel_that_worked_starts_a_boot():
    assert rb.kernel_fetch(KERNEL + "?x=1") == KERNEL
    assert rb.kernel_fetch(OLD) == OLD
    assert rb.kernel_fetch("/images/bookworm/v2/boot/initrd.img") is None
    assert rb.kernel_fetch("/images/bookworm/v2/boot/vmlinuz.sig") is None
    assert rb.fetch_of(line()) == ("10.77.0.11", KERNEL)
    for status in (206, 304):
        assert rb.fetch_of(line(status=status)) == ("10.77.0.11", KERNEL)
    for other in (line(status=404), line(status=500), line(method="HEAD"),
                  line(method="POST"), line(path="/images/x/boot/initrd.img"), "junk"):
        assert rb.fetch_of(other) is None, other
    lines = [line(), line(client="10.77.0.12"), line(path=OLD), line(status=404),
             line(client="10.77.0.99")]
    assert rb.count_fetches(lines, ["10.77.0.11", "10.77.0.12", "10.77.0.13"]) == {
        "10.77.0.11": [KERNEL, OLD], "10.77.0.12": [KERNEL], "10.77.0.13": []}


# ---- the log from the mark on ----------------------------------------------------------

def test_mark_of_a_missing_log_then_the_whole_new_file_counts(tmp_path):
    log = tmp_path / "access.log"
    mark = rb.mark(str(log))
    assert mark == {"path": str(log), "inode": None, "size": 0}
    follower = rb.LogFollower(str(log), mark)
    assert follower.read() == []
    append(log, line())
    assert follower.read() == [line().rstrip("\n")]


def test_only_lines_after_the_mark_count_and_each_is_read_once(tmp_path):
    log = tmp_path / "access.log"
    append(log, line(stamp="00:50:00"), line(stamp="00:51:00"))  # an earlier boot
    mark = rb.mark(str(log))
    assert mark == {"path": str(log), "inode": log.stat().st_ino, "size": log.stat().st_size}
    follower = rb.LogFollower(str(log), mark)
    assert follower.read() == []
    append(log, line(stamp="01:00:00"))
    assert follower.read() == [line(stamp="01:00:00").rstrip("\n")]
    assert follower.read() == []  # incremental: nothing new, nothing re-read
    # a line nginx is half-way through writing waits for its end
    with open(log, "a", encoding="utf-8") as handle:
        handle.write(line(stamp="01:01:00")[:30])
    assert follower.read() == []
    append(log, line(stamp="01:01:00")[30:])
    assert follower.read() == [line(stamp="01:01:00").rstrip("\n")]


def test_a_rotation_is_followed_into_the_old_and_the_new_file(tmp_path):
    log = tmp_path / "access.log"
    append(log, line(stamp="00:50:00"))
    follower = rb.LogFollower(str(log), rb.mark(str(log)))
    append(log, line(stamp="01:00:00"))
    os.rename(log, f"{log}.1")  # logrotate; nginx still writes to the old file ...
    append(f"{log}.1", line(stamp="01:00:10"))
    got = follower.read()  # ... the new one is not there yet
    assert got == [line(stamp=s).rstrip("\n") for s in ("01:00:00", "01:00:10")]
    append(f"{log}.1", line(stamp="01:00:20"))
    append(log, line(stamp="01:00:30"))  # nginx reopened its logs
    assert follower.read() == [line(stamp=s).rstrip("\n") for s in ("01:00:20", "01:00:30")]
    append(log, line(stamp="01:00:40"))
    assert follower.read() == [line(stamp="01:00:40").rstrip("\n")]


def test_a_rotation_between_two_reads(tmp_path):
    log = tmp_path / "access.log"
    append(log, line(stamp="00:50:00"))
    mark = rb.mark(str(log))
    append(log, line(stamp="01:00:00"))
    os.rename(log, f"{log}.1")
    append(log, line(stamp="01:00:30"))
    lines = rb.LogFollower(str(log), mark).read()
    assert lines == [line(stamp=s).rstrip("\n") for s in ("01:00:00", "01:00:30")]
    # a .1 that is another file (rotated twice since) is not read from the mark's offset
    log2 = tmp_path / "other.log"
    append(log2, line(stamp="00:50:00"))
    mark2 = rb.mark(str(log2))
    os.rename(log2, tmp_path / "gone")
    append(f"{log2}.1", line(stamp="00:40:00") * 3)
    append(log2, line(stamp="01:00:30"))
    assert rb.LogFollower(str(log2), mark2).read() == [line(stamp="01:00:30").rstrip("\n")]


def test_a_truncated_log_is_read_from_its_start(tmp_path):
    log = tmp_path / "access.log"
    append(log, line(stamp="00:50:00"), line(stamp="00:51:00"))
    mark = rb.mark(str(log))
    inode = log.stat().st_ino
    with open(log, "w", encoding="utf-8") as handle:  # copytruncate
        handle.write(line(stamp="01:00:00"))
    assert log.stat().st_ino == inode and log.stat().st_size < mark["size"]
    assert rb.LogFollower(str(log), mark).read() == [line(stamp="01:00:00").rstrip("\n")]


def test_an_unreadable_log_raises(tmp_path):
    log = tmp_path / "access.log"
    log.mkdir()  # not readable as a file, whoever runs the test
    follower = rb.LogFollower(str(log), {"path": str(log), "inode": None, "size": 0})
    with pytest.raises(OSError):
        follower.read()


# ---- SSH -------------------------------------------------------------------------------

def test_ssh_answers_only_with_an_ssh_banner(listener, closed_port):
    assert rb.ssh_answers("127.0.0.1", listener(), 2)
    assert not rb.ssh_answers("127.0.0.1", listener(b"HTTP/1.0 400 Bad Request\r\n\r\n"), 2)
    assert not rb.ssh_answers("127.0.0.1", listener(b""), 2)  # accepts, then hangs up
    assert not rb.ssh_answers("127.0.0.1", closed_port, 2)


# ---- the watch loop --------------------------------------------------------------------

def test_a_node_that_answers_is_up_and_one_fetch_later_changes_nothing(tmp_path, listener):
    log = tmp_path / "access.log"
    mark = rb.mark(str(log))
    append(log, line(client="127.0.0.1"))
    res = watch([node(port=listener())], log, mark)
    assert res["up"] == ["gpu01"] and res["given_up"] == {}
    assert res["nodes"]["gpu01"] == {"state": "up", "attempts": 1, "seconds": 0.0,
                                     "fetched": [KERNEL]}


def test_looping_is_decided_at_the_fetch_after_attempts(tmp_path, closed_port):
    log = tmp_path / "access.log"
    append(log, line(client="127.0.0.1", stamp="00:50:00"))  # before the mark
    mark = rb.mark(str(log))
    append(log, line(client="127.0.0.1", stamp="01:00:00"))
    fake = FakeTime(between=[
        lambda: None,  # round 2: still one boot
        lambda: append(log, line(client="127.0.0.1", path=OLD, stamp="01:01:10")),
    ])
    res = watch([node(port=closed_port)], log, mark, attempts=1, fake=fake)
    assert fake.slept == [5, 5]  # decided in round 3, at the 2nd fetch since the mark
    assert res["nodes"]["gpu01"] == {"state": "looping", "attempts": 2, "seconds": 10.0,
                                     "fetched": [KERNEL, OLD]}
    assert res["up"] == []
    assert res["given_up"]["gpu01"] == (
        f"gpu01 started its boot 2 times (kernel fetched over HTTP: {KERNEL}, {OLD}) "
        f"without answering on 127.0.0.1:{closed_port}")


def test_a_looping_node_is_given_up_even_if_its_ssh_answers_later(tmp_path, listener):
    log = tmp_path / "access.log"
    mark = rb.mark(str(log))
    append(log, *[line(client="127.0.0.1")] * 3)
    probed = []

    def probe(address, port, timeout):
        probed.append(address)
        return rb.ssh_answers(address, port, timeout)

    res = watch([node(port=listener())], log, mark, attempts=2, probe=probe)
    assert res["nodes"]["gpu01"]["state"] == "looping" and probed == []
    assert f"started its boot 3 times (kernel fetched over HTTP: {KERNEL} x3)" in (
        res["given_up"]["gpu01"])


def test_the_deadline_with_a_fake_clock(tmp_path, closed_port, listener):
    log = tmp_path / "access.log"
    mark = rb.mark(str(log))
    append(log, line(client="127.0.0.3"))
    wrong = listener(b"HTTP/1.0 400 Bad Request\r\n\r\n")
    nodes = [node("gpu01", "127.0.0.1", closed_port), node("gpu02", "127.0.0.2", wrong),
             node("gpu03", "127.0.0.3", closed_port)]
    fake = FakeTime()
    res = watch(nodes, log, mark, deadline=12, attempts=1, fake=fake)
    assert fake.slept == [5, 5, 2]  # the last sleep ends at the deadline
    assert res["up"] == []
    assert {n: i["state"] for n, i in res["nodes"].items()} == dict.fromkeys(
        ["gpu01", "gpu02", "gpu03"], "deadline")
    assert res["nodes"]["gpu03"] == {"state": "deadline", "attempts": 1, "seconds": 12.0,
                                     "fetched": [KERNEL]}
    assert res["given_up"]["gpu01"] == (
        f"gpu01 did not answer on 127.0.0.1:{closed_port} within 12 s (its kernel was never "
        "fetched over HTTP: no boot started, or it booted over TFTP)")
    assert f"gpu02 did not answer on 127.0.0.2:{wrong} within 12 s" in res["given_up"]["gpu02"]
    assert res["given_up"]["gpu03"] == (
        f"gpu03 did not answer on 127.0.0.3:{closed_port} within 12 s (kernel fetched 1 time: "
        f"{KERNEL})")


def test_nodes_are_decided_one_by_one_across_a_rotation(tmp_path, listener, closed_port):
    """gpu01 comes up in round 2; gpu02 loops with its fetches split by a rotation; a
    decided node is not probed again."""
    log = tmp_path / "access.log"
    append(log, line(client="127.0.0.2", stamp="00:50:00"))
    mark = rb.mark(str(log))
    append(log, line(client="127.0.0.2", stamp="01:00:00"))
    probed = []

    def probe(address, port, timeout):
        probed.append(address)
        return rb.ssh_answers(address, port, timeout)

    def rotate_and_start_gpu01():
        os.rename(log, f"{log}.1")
        append(f"{log}.1", line(client="127.0.0.1", stamp="01:00:30"))
        append(log, line(client="127.0.0.2", stamp="01:01:00"))
        nodes[0]["port"] = listener()  # its sshd starts

    nodes = [node("gpu01", "127.0.0.1", closed_port), node("gpu02", "127.0.0.2", closed_port)]
    fake = FakeTime(between=[rotate_and_start_gpu01])
    res = watch(nodes, log, mark, attempts=1, fake=fake, probe=probe)
    assert res["up"] == ["gpu01"] and list(res["given_up"]) == ["gpu02"]
    assert res["nodes"]["gpu01"]["fetched"] == [KERNEL]
    assert res["nodes"]["gpu02"] == {"state": "looping", "attempts": 2, "seconds": 5.0,
                                     "fetched": [KERNEL, KERNEL]}
    assert sorted(probed) == ["127.0.0.1", "127.0.0.1", "127.0.0.2"]
    assert fake.slept == [5]


def test_no_nodes_returns_at_once(tmp_path):
    log = tmp_path / "access.log"
    fake = FakeTime()
    assert watch([], log, rb.mark(str(log)), fake=fake) == {"nodes": {}, "up": [],
                                                            "given_up": {}}
    assert fake.slept == []


# ---- parameters ------------------------------------------------------------------------

@pytest.mark.parametrize(("kwargs", "message"), [
    ({"nodes": [node(), node("gpu02", "x")]}, "nodes[1].address 'x' is not an IPv4 address"),
    ({"nodes": [node(address="10.77.0.11/24")]},
     "nodes[0].address '10.77.0.11/24' is not an IPv4 address"),
    ({"nodes": [node(), node(address="10.0.0.2")]},
     "nodes[1].name 'gpu01' is a duplicate of nodes[0].name"),
    ({"nodes": [node(), node("gpu02")]},
     "nodes[1].address '127.0.0.1' (gpu02) is also nodes[0].address (gpu01)"),
    ({"nodes": [node(name="")]}, "nodes[0].name '' is not a node name"),
    ({"nodes": [node(port=70000)]}, "nodes[0].port 70000 is not a TCP port"),
    ({"attempts": 0}, "attempts 0 must be at least 1"),
    ({"deadline": 0}, "deadline 0 must be more than 0 seconds"),
    ({"deadline": -5}, "deadline -5 must be more than 0 seconds"),
    ({"poll": 0}, "poll 0 must be at least 1 second"),
    ({"connect_timeout": 0}, "connect_timeout 0 must be at least 1 second"),
])
def test_bad_parameters_are_named_with_their_value(kwargs, message):
    args = {"nodes": [node()], "deadline": 900, "attempts": 1, **kwargs}
    with pytest.raises(ValueError) as err:
        rb.check_watch(**args)
    assert message in str(err.value)


def test_the_default_port_and_a_bad_mark():
    assert rb.check_nodes([{"name": "gpu01", "address": "10.77.0.11"}]) == [
        {"name": "gpu01", "address": "10.77.0.11", "port": 22}]
    assert rb.check_mark({"path": "/a.log", "inode": 12, "size": 30}, "/a.log") == {
        "path": "/a.log", "inode": 12, "size": 30}
    for bad, message in [({}, "is not the mark returned by state=marked"),
                         ({"inode": None, "size": -1}, "mark.size -1 is negative"),
                         ({"inode": "x", "size": 0}, "mark.inode 'x' is not a whole number"),
                         ({"path": "/b.log", "inode": None, "size": 0},
                          "mark.path '/b.log' is not access_log '/a.log'")]:
        with pytest.raises(ValueError, match=message.replace(".", r"\.")):
            rb.check_mark(bad, "/a.log")


# ---- the module ------------------------------------------------------------------------

def run(args, check=False):
    out = io.StringIO()
    with patch_module_args({**args, "_ansible_check_mode": check}), \
            redirect_stdout(out), pytest.raises(SystemExit):
        rollout_boot.main()
    return json.loads(out.getvalue())


def test_module_mark_then_watch(tmp_path, listener):
    log = tmp_path / "access.log"
    assert run({"state": "marked", "access_log": str(log)})["mark"] == {
        "path": str(log), "inode": None, "size": 0}
    append(log, line(stamp="00:50:00"))
    got = run({"state": "marked", "access_log": str(log)}, check=True)
    assert not got["changed"] and got["mark"]["size"] == log.stat().st_size
    append(log, line(client="127.0.0.1"))
    args = {"state": "watched", "access_log": str(log), "mark": got["mark"], "deadline": 30,
            "attempts": 1, "nodes": [{"name": "gpu01", "address": "127.0.0.1",
                                      "port": listener()}]}
    res = run(args)
    assert not res["changed"] and not res.get("failed")
    assert res["up"] == ["gpu01"] and res["given_up"] == {}
    assert res["nodes"]["gpu01"]["fetched"] == [KERNEL]
    would = run(args, check=True)
    assert would["nodes"] == {} and would["up"] == [] and would["given_up"] == {}
    assert "check mode" in would["msg"] and not would["changed"]


def test_module_refuses_bad_parameters(tmp_path):
    log = str(tmp_path / "access.log")
    base = {"state": "watched", "access_log": log, "mark": rb.mark(log), "deadline": 30,
            "attempts": 1, "nodes": [{"name": "gpu01", "address": "10.77.0.11"}]}
    for bad, message in [({"attempts": 0}, "attempts 0 must be at least 1"),
                         ({"nodes": [{"name": "gpu01", "address": "gpu01.mgmt"}]},
                          "nodes[0].address 'gpu01.mgmt' is not an IPv4 address")]:
        res = run({**base, **bad}, check=True)  # check mode validates too
        assert res.get("failed") and message in res["msg"], res
    res = run({"state": "watched", "access_log": log})
    assert res.get("failed") and "mark" in res["msg"] and "attempts" in res["msg"]


def test_module_as_ansible_runs_it(tmp_path, closed_port):
    """The module file run by python -m with its arguments on stdin, as Ansible runs it."""
    log = tmp_path / "access.log"
    append(log, line(client="127.0.0.1", stamp="00:50:00"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO / "collections"), os.environ.get("PYTHONPATH", "")])}

    def call(args):
        proc = subprocess.run(
            [sys.executable, "-m",
             "ansible_collections.junkyard.cluster.plugins.modules.rollout_boot"],
            input=json.dumps({"ANSIBLE_MODULE_ARGS": args}), capture_output=True, text=True,
            env=env, timeout=60, check=False)
        return proc.returncode, json.loads(proc.stdout)

    rc, marked = call({"state": "marked", "access_log": str(log)})
    assert rc == 0 and marked["mark"]["size"] == log.stat().st_size
    append(log, line(client="127.0.0.1", stamp="01:00:00"),
           line(client="127.0.0.1", stamp="01:01:00"))
    rc, res = call({"state": "watched", "access_log": str(log), "mark": marked["mark"],
                    "deadline": 30, "attempts": 1,
                    "nodes": [{"name": "gpu01", "address": "127.0.0.1", "port": closed_port}]})
    assert rc == 0 and not res.get("failed") and res["up"] == []
    assert res["nodes"]["gpu01"]["state"] == "looping"
    assert res["given_up"]["gpu01"].startswith("gpu01 started its boot 2 times")
    rc, res = call({"state": "watched", "access_log": str(log), "mark": marked["mark"],
                    "deadline": 0, "attempts": 1, "nodes": []})
    assert rc == 1 and res["failed"] and "deadline 0 must be more than 0" in res["msg"]
