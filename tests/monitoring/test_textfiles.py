"""The node's exporter wrapper and textfile writer (roles/node_metrics) and the
head's textfile writer (roles/monitoring), run for real on this machine.

The wrapper starts Debian's prometheus-node-exporter (1.5, as in the image):
given 127.0.0.0/8 it must listen on 127.0.0.1 and nowhere else, and serve
the textfile the node's writer wrote; given a subnet the host has no address
in, it must start nothing.  The textfiles pass ``promtool check metrics``.
The lab tests (tests/lab/test_monitoring.py) run the same programs on the
booted nodes and the head.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import REPO

NODE_BIN = REPO / "roles" / "node_metrics" / "files" / "usr" / "local" / "sbin"
WRAPPER = NODE_BIN / "junkyard-node-exporter"
NODE_WRITER = NODE_BIN / "junkyard-node-metrics"
HEAD_WRITER = REPO / "roles" / "monitoring" / "files" / "usr" / "local" / "sbin" / \
    "junkyard-head-metrics"
EXPORTER = shutil.which("prometheus-node-exporter")
PROMTOOL = shutil.which("promtool")


def load(path: Path):
    loader = importlib.machinery.SourceFileLoader(path.name.replace("-", "_"), str(path))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening(port: int) -> set[str]:
    """Local addresses (hex, as /proc/net/tcp gives them) listening on ``port``."""
    out = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        addr, hexport = local.split(":")
        if state == "0A" and int(hexport, 16) == port:
            out.add(addr)
    return out


def check_metrics(text: str) -> None:
    if PROMTOOL is None:
        pytest.skip("promtool (Debian's prometheus) is not installed: make setup")
    res = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True,
                         text=True, check=False)
    assert res.returncode == 0, res.stdout + res.stderr


def node_writer_once(tmp_path: Path, cmdline: str) -> str:
    (tmp_path / "cmdline").write_text(cmdline)
    out = tmp_path / "textfiles"
    res = subprocess.run([sys.executable, str(NODE_WRITER), "--textfile-dir", str(out),
                          "--once", "--cmdline", str(tmp_path / "cmdline")],
                         capture_output=True, text=True, check=False, timeout=30)
    assert res.returncode == 0, res.stderr
    assert [p.name for p in out.iterdir()] == ["junkyard_node.prom"]  # no temporary left
    return (out / "junkyard_node.prom").read_text()


def test_node_writer_reports_the_booted_image_version(tmp_path):
    text = node_writer_once(tmp_path, "BOOT_IMAGE=/x ro junkyard.node=node01 "
                                      "junkyard.image=bookworm-rocm/2026.11.1 quiet\n")
    assert 'junkyard_node_image_info{image="bookworm-rocm",version="2026.11.1"} 1' in text
    stamp = float(next(line.split()[1] for line in text.splitlines()
                       if line.startswith("junkyard_node_metrics_timestamp_seconds ")))
    assert abs(stamp - time.time()) < 60
    check_metrics(text)


def test_node_writer_without_an_image_on_the_command_line_reports_none(tmp_path):
    text = node_writer_once(tmp_path, "ro junkyard.image=noversion\n")
    assert "junkyard_node_image_info{" not in text
    check_metrics(text)


@pytest.fixture
def exporter_proc(tmp_path):
    if EXPORTER is None:
        pytest.skip("prometheus-node-exporter is not installed: make setup")
    procs = []

    def start(*args: str) -> subprocess.Popen:
        log = open(tmp_path / f"wrapper{len(procs)}.log", "w+")  # noqa: SIM115
        proc = subprocess.Popen([sys.executable, str(WRAPPER), *args], stdout=log,
                                stderr=subprocess.STDOUT, text=True)
        procs.append((proc, log))
        return proc

    yield start
    for proc, log in procs:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=30)
        log.close()


def test_exporter_listens_on_the_subnets_address_only_and_serves_the_textfiles(
        tmp_path, exporter_proc):
    node_writer_once(tmp_path, "ro junkyard.image=bookworm/v1\n")
    port = free_port()
    proc = exporter_proc("--subnet", "127.0.0.0/8", "--port", str(port), "--textfile-dir",
                         str(tmp_path / "textfiles"), "--collector", "drm",
                         "--exporter", EXPORTER)
    body = None
    end = time.monotonic() + 60
    while time.monotonic() < end and body is None:
        assert proc.poll() is None, "the wrapper or the exporter exited"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                body = r.read().decode()
        except OSError:
            time.sleep(0.2)
    assert body is not None, "the exporter never answered on 127.0.0.1"
    assert 'junkyard_node_image_info{image="bookworm",version="v1"} 1' in body
    assert 'node_scrape_collector_success{collector="drm"}' in body
    # bound to 127.0.0.1 (0100007F), not to every address (00000000)
    assert listening(port) == {"0100007F"}
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.2", port), timeout=5).close()


def test_exporter_without_an_address_in_the_subnet_starts_nothing(tmp_path, exporter_proc):
    port = free_port()
    proc = exporter_proc("--subnet", "10.255.254.0/24", "--port", str(port), "--textfile-dir",
                         str(tmp_path), "--wait", "0", "--exporter", EXPORTER)
    assert proc.wait(timeout=60) == 1
    log = (tmp_path / "wrapper0.log").read_text()
    assert "no address in 10.255.254.0/24" in log and "not started" in log
    assert listening(port) == set()


def test_exporter_refuses_every_address_as_the_subnet(tmp_path, exporter_proc):
    proc = exporter_proc("--subnet", "0.0.0.0/0", "--textfile-dir", str(tmp_path),
                         "--exporter", EXPORTER)
    assert proc.wait(timeout=60) == 2
    assert "is every address" in (tmp_path / "wrapper0.log").read_text()


# ------------------------------------------------------------- the head's writer

ZPOOL_STATUS = """\
  pool: tank
 state: ONLINE
  scan: scrub repaired 0B in 00:00:03 with 0 errors on Sun Dec  6 20:15:07 2026
config:
"""


def test_head_writer_reads_the_last_scrub_in_local_time():
    head = load(HEAD_WRITER)
    want = time.mktime(time.strptime("2026-12-06 20:15:07", "%Y-%m-%d %H:%M:%S"))
    assert head.scrub_end(ZPOOL_STATUS) == int(want)
    assert head.scrub_end("  scan: none requested\n") == 0
    assert head.scrub_end("  scan: resilvered 1G in 00:01:00 with 0 errors on "
                          "Sun Dec  6 20:15:07 2026\n") == 0


@pytest.mark.parametrize(("text", "want"), [
    ("idle", ("idle", True)), ("IDLE*", ("idle", False)), ("drained", ("drained", True)),
    ("down*", ("down", False)), ("mixed~", ("mixed", True)), ("allocated", ("allocated", True))])
def test_head_writer_splits_slurm_states_from_their_flags(text, want):
    assert load(HEAD_WRITER).slurm_state(text) == want


def test_head_writer_keeps_a_file_it_cannot_refresh_and_says_why(tmp_path, monkeypatch):
    # No zpool and no sinfo on PATH: both sources fail, nothing is written,
    # an old file stays as it was (its age shows it is stale), exit 1.
    (tmp_path / "junkyard_zfs.prom").write_text("old\n")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    res = subprocess.run([sys.executable, str(HEAD_WRITER), "--textfile-dir", str(tmp_path)],
                         capture_output=True, text=True, check=False, timeout=60)
    assert res.returncode == 1
    assert "junkyard_zfs.prom not written: zpool: not installed" in res.stderr
    assert "junkyard_slurm.prom not written: sinfo: not installed" in res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["junkyard_zfs.prom"]
    assert (tmp_path / "junkyard_zfs.prom").read_text() == "old\n"


def test_head_writer_reports_which_services_run(tmp_path):
    sleeper = subprocess.Popen(["sleep", "300"])  # a process named "sleep" runs now
    try:
        res = subprocess.run([sys.executable, str(HEAD_WRITER), "--textfile-dir",
                              str(tmp_path), "--no-zfs", "--no-slurm", "--service", "sleep",
                              "--service", "no-such-daemon"],
                             capture_output=True, text=True, check=False, timeout=60)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert res.returncode == 0, res.stderr
    text = (tmp_path / "junkyard_head.prom").read_text()
    up = {line.split('service="', 1)[1].split('"', 1)[0]: int(line.rsplit(" ", 1)[1])
          for line in text.splitlines() if line.startswith("junkyard_head_service_up{")}
    assert up == {"sleep": 1, "no-such-daemon": 0}, text
    check_metrics(text)
