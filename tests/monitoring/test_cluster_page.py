"""The cluster page (roles/monitoring's junkyard-cluster-page), rendered from a
real Prometheus (Debian's 2.42) and looked at in a real headless Chromium.

A Prometheus on 127.0.0.1 scrapes, every second, small exporters run by the
test: node01 with the fan daemon's series (written by the daemon's own
metrics module, values changing at every scrape), ECC counters, a Slurm state
and an image; node02 with none of them; node03 a closed port (down).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from html.parser import HTMLParser
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from junkyard_fan import metrics as fan_metrics

from tests.conftest import REPO

PROGRAM = (REPO / "roles" / "monitoring" / "files" / "usr" / "local" / "bin"
           / "junkyard-cluster-page.py")
PROMETHEUS = Path("/usr/bin/prometheus")
NODES = ("node01", "node02", "node03")
# node01's image label: HTML's special characters, to be escaped on the page.
IMAGE_NAME = 'jy-node<b>&"x"'
HOURS = "0.01"  # 36 s: the charts cover what the test's Prometheus has
DUTY_RANGE = {"cpu": (20.0, 35.0), "gpu": (40.0, 80.0)}
SCRAPES = 8


def load_module():
    spec = importlib.util.spec_from_file_location("junkyard_cluster_page", PROGRAM)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


page_mod = load_module()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------
# the exporters


def node01_metrics(n: int) -> str:
    """node01's series at its n-th scrape: every value moves between scrapes."""
    wave = (math.sin(n / 2.0) + 1) / 2  # 0..1
    samples = [
        ("zone_duty_percent", {"zone": "cpu"}, DUTY_RANGE["cpu"][0] + 15 * wave),
        ("zone_duty_percent", {"zone": "gpu"}, DUTY_RANGE["gpu"][0] + 40 * wave),
        ("gpu_power_watts", {"gpu": "0"}, 150 + 100 * wave),
        ("gpu_power_watts", {"gpu": "1"}, 160 + 90 * wave),
        ("sensor_reading", {"sensor": "GPU0_Temp", "role": "gpu_temp"}, 55 + 20 * wave),
        ("sensor_reading", {"sensor": "GPU1_Temp", "role": "gpu_temp"}, 50 + 25 * wave),
        ("sensor_reading", {"sensor": "CPU0_Temp", "role": "cpu_temp"}, 45 + n % 3),
    ]
    image = IMAGE_NAME.replace("\\", "\\\\").replace('"', '\\"')
    return fan_metrics.render(samples) + "\n".join([
        'node_edac_correctable_errors_total{controller="0"} 1',
        'node_edac_correctable_errors_total{controller="1"} 2',
        'node_edac_uncorrectable_errors_total{controller="0"} 0',
        'node_edac_uncorrectable_errors_total{controller="1"} 0',
        'junkyard_slurm_node_state{state="idle"} 1',
        'junkyard_slurm_node_state{state="alloc"} 0',
        f'junkyard_node_image_info{{image="{image}",version="2026.03.1"}} 1',
        "",
    ])


def node02_metrics(n: int) -> str:
    """An exporter without the fan daemon, ECC, Slurm or image series."""
    return f"node_load1 {n % 4 / 4}\n"


def serve(metrics):
    """An exporter on 127.0.0.1 answering /metrics with metrics(scrape number),
    404 for any other path."""
    count = {"n": 0}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404)
                return
            count["n"] += 1
            body = metrics(count["n"]).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


# ---------------------------------------------------------------------------
# Prometheus


def api(url: str, expr: str) -> list:
    query = urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(f"{url}/api/v1/query?{query}", timeout=5) as resp:
        return json.loads(resp.read())["data"]["result"]


def wait_for(check, proc, log: Path, what: str, timeout: float = 120.0):
    """Poll check() until it holds; fail if Prometheus died or it takes too long."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"prometheus exited ({proc.returncode}): {log.read_text()[-2000:]}")
        try:
            if check():
                return
        except OSError:
            pass  # not listening yet
        time.sleep(0.25)
    pytest.fail(f"prometheus: no {what} within {timeout:.0f} s: {log.read_text()[-2000:]}")


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    if not PROMETHEUS.exists():
        pytest.skip(f"{PROMETHEUS} is missing (Debian's prometheus package; make setup)")
    tmp = tmp_path_factory.mktemp("prometheus")
    exporters = [serve(node01_metrics), serve(node02_metrics)]
    closed = free_port()  # nothing listens there: node03 is down
    targets = [("node01", exporters[0].server_address[1]),
               ("node02", exporters[1].server_address[1]), ("node03", closed)]
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s",
                   "evaluation_interval": "1s"},
        "scrape_configs": [{
            "job_name": "junkyard-nodes",
            "static_configs": [{"targets": [f"127.0.0.1:{port}"], "labels": {"node": node}}
                               for node, port in targets],
        }],
    }
    (tmp / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp / "prometheus.log"
    with log.open("w") as logf:
        proc = subprocess.Popen(
            [str(PROMETHEUS), f"--config.file={tmp / 'prometheus.yml'}",
             f"--storage.tsdb.path={tmp / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
             "--log.level=warn"],
            stdout=logf, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: len(api(url, 'up{job="junkyard-nodes"}')) == 3, proc, log,
                 "scrape of all three targets")
        wait_for(lambda: api(url, 'count_over_time(junkyard_fan_zone_duty_percent'
                                  f'{{node="node01",zone="gpu"}}[5m]) >= {SCRAPES}'),
                 proc, log, f"{SCRAPES} scrapes of node01")
        yield {"url": url, "tmp": tmp}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for server in exporters:
            server.shutdown()
            server.server_close()


def run_page(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(PROGRAM), *args], capture_output=True,
                          text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def rendered(prometheus):
    out = prometheus["tmp"] / "cluster.html"
    proc = run_page("--prometheus", prometheus["url"], "--out", str(out), "--hours", HOURS)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    return out


# ---------------------------------------------------------------------------
# reading the page


class PageParser(HTMLParser):
    """The page's node sections: their text, fields, up state and polylines."""

    def __init__(self):
        super().__init__()
        self.nodes: dict[str, dict] = {}
        self.current = None
        self.depth = 0
        self.field = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "section" and "data-node" in a:
            self.current = self.nodes.setdefault(
                a["data-node"], {"text": "", "fields": {}, "lines": [], "up": None})
            self.depth = 0
        if self.current is None:
            return
        if tag == "section":
            self.depth += 1
        if "data-up" in a:
            self.current["up"] = a["data-up"]
        if "data-field" in a:
            self.field = a["data-field"]
            self.current["fields"][self.field] = ""
        if tag == "polyline":
            points = [tuple(float(c) for c in p.split(",")) for p in a["points"].split()]
            self.current["lines"].append({**a, "points": points})

    def handle_endtag(self, tag):
        if self.current is not None and tag == "section":
            self.depth -= 1
            if self.depth == 0:
                self.current = None
        if tag == "dd":
            self.field = None

    def handle_data(self, data):
        if self.current is not None:
            self.current["text"] += data
            if self.field:
                self.current["fields"][self.field] += data


def parse(text: str) -> dict[str, dict]:
    parser = PageParser()
    parser.feed(text)
    parser.close()
    return parser.nodes


def series(node: dict, metric: str, **labels) -> list[dict]:
    return [line for line in node["lines"] if line["data-series"] == metric
            and all(line.get(f"data-{k}") == v for k, v in labels.items())]


def y_of(value: float, lo: float, hi: float) -> float:
    y0, h = page_mod.PLOT[1], page_mod.PLOT[3]
    return y0 + (1 - (value - lo) / (hi - lo)) * h


def assert_chart_line(lines: list[dict]) -> list[tuple[float, float]]:
    """Lines with several points, inside the plot, in time order, not flat."""
    assert lines, "no polyline"
    x0, y0, w, h = page_mod.PLOT
    points = [p for line in lines for p in line["points"]]
    assert len(points) >= 3, points
    for x, y in points:
        assert x0 - 0.05 <= x <= x0 + w + 0.05, (x, points)
        assert y0 - 0.05 <= y <= y0 + h + 0.05, (y, points)
    assert len({p[1] for p in points}) > 1, f"flat line: {points}"
    xs = [p[0] for p in points]
    assert xs == sorted(xs), "points not in time order"
    return points


# ---------------------------------------------------------------------------
# against the real Prometheus


def test_the_page_names_every_target_node(rendered):
    nodes = parse(rendered.read_text())
    assert sorted(nodes) == list(NODES)


def test_the_fan_duty_and_gpu_power_of_a_node_are_charted(rendered):
    node = parse(rendered.read_text())["node01"]
    for zone, (lo, hi) in DUTY_RANGE.items():
        points = assert_chart_line(series(node, page_mod.DUTY, zone=zone))
        # the duty axis is 0..100 %: the points sit where the zone's values are
        for y in (p[1] for p in points):
            assert y_of(hi, 0, 100) - 0.05 <= y <= y_of(lo, 0, 100) + 0.05, (zone, y)
    assert_chart_line(series(node, page_mod.POWER))
    assert "no data" not in node["text"]


def test_only_gpu_temperatures_are_charted(rendered):
    node = parse(rendered.read_text())["node01"]
    temps = series(node, page_mod.SENSOR)
    assert {line["data-sensor"] for line in temps} == {"GPU0_Temp", "GPU1_Temp"}
    assert {line["data-role"] for line in temps} == {"gpu_temp"}
    for sensor in ("GPU0_Temp", "GPU1_Temp"):
        assert_chart_line(series(node, page_mod.SENSOR, sensor=sensor))


def test_a_node_without_series_shows_no_data_and_unknown(rendered):
    node = parse(rendered.read_text())["node02"]
    assert node["up"] == "up"
    assert node["lines"] == []
    assert "Fan duty and GPU power: no data" in node["text"]
    assert "GPU temperatures: no data" in node["text"]
    assert node["fields"] == {"slurm": "unknown", "image": "unknown",
                              "ecc-correctable": "no data", "ecc-uncorrectable": "no data"}


def test_a_down_target_shows_as_down(rendered):
    nodes = parse(rendered.read_text())
    assert nodes["node03"]["up"] == "down"
    assert nodes["node01"]["up"] == "up"
    assert 'class="node down" data-node="node03"' in rendered.read_text()
    assert "3 nodes, 1 down." in rendered.read_text()


def test_slurm_state_image_and_ecc_come_from_their_series(rendered):
    text = rendered.read_text()
    fields = parse(text)["node01"]["fields"]
    assert fields == {"slurm": "idle", "image": f"{IMAGE_NAME} 2026.03.1",
                      "ecc-correctable": "3", "ecc-uncorrectable": "0"}
    # the label value is escaped in the HTML source, not interpreted
    assert "<b>" not in text
    assert "jy-node&lt;b&gt;&amp;&quot;x&quot;" in text


def test_the_page_loads_nothing_from_elsewhere(rendered):
    text = rendered.read_text()
    for needle in ("<script", "src=", "href=", "url(", "@import", "<link", "<img"):
        assert needle not in text, needle
    assert "<style>" in text and "<svg" in text


def test_a_prometheus_error_leaves_the_old_page(prometheus, tmp_path):
    # 10 h at a 1 s step exceeds Prometheus' 11000 points per series: a real
    # HTTP 400 from the range query, after the instant queries succeeded.
    out = tmp_path / "cluster.html"
    out.write_text("the good page")
    proc = run_page("--prometheus", prometheus["url"], "--out", str(out), "--hours", "10",
                    "--step", "1")
    assert proc.returncode == 1
    assert f"{prometheus['url']}/api/v1/query_range?" in proc.stderr
    assert "HTTP 400 Bad Request" in proc.stderr
    assert "exceeded maximum resolution" in proc.stderr
    assert out.read_text() == "the good page"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cluster.html"]


def test_a_url_that_is_not_prometheus_fails_with_its_status(prometheus, tmp_path):
    out = tmp_path / "cluster.html"
    out.write_text("the good page")
    exporter = serve(node02_metrics)
    try:
        base = f"http://127.0.0.1:{exporter.server_address[1]}/nothing"
        proc = run_page("--prometheus", base, "--out", str(out))
    finally:
        exporter.shutdown()
        exporter.server_close()
    assert proc.returncode == 1
    assert f"{base}/api/v1/query?" in proc.stderr
    assert "HTTP 404 Not Found" in proc.stderr
    assert out.read_text() == "the good page"


# ---------------------------------------------------------------------------
# in a real browser


def chromium_binary() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def chromium(binary: str, tmp: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         "--no-first-run", f"--user-data-dir={tmp / 'chromium-profile'}", *args],
        capture_output=True, text=True, timeout=180, check=False,
        env={**os.environ, "HOME": str(tmp)})


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    length, kind, width, height = struct.unpack(">I4sII", data[8:24])
    assert (length, kind) == (13, b"IHDR")
    return width, height


def screenshot(binary: str, tmp: Path, html: Path, png: Path) -> None:
    proc = chromium(binary, tmp, f"--screenshot={png}", "--window-size=1400,1000",
                    html.as_uri())
    assert png.exists(), f"chromium wrote no screenshot: {proc.stderr[-2000:]}"


def test_the_page_in_a_headless_chromium(rendered, tmp_path):
    binary = chromium_binary()
    if binary is None:
        pytest.skip("no chromium or chromium-browser binary "
                    "(apt-get install --no-install-recommends chromium; make setup does)")
    blank = tmp_path / "blank.html"
    blank.write_text("<!DOCTYPE html><html><head><meta charset=\"utf-8\"></head>"
                     "<body></body></html>\n")
    shots = {"page": tmp_path / "cluster-page.png", "blank": tmp_path / "blank.png"}
    screenshot(binary, tmp_path, rendered, shots["page"])
    screenshot(binary, tmp_path, blank, shots["blank"])
    for png in shots.values():
        assert png_size(png) == (1400, 1000)
    # A blank page compresses to almost nothing; the cluster page's text and
    # charts cannot.
    sizes = {k: p.stat().st_size for k, p in shots.items()}
    assert sizes["page"] > 5 * sizes["blank"], sizes

    dom = chromium(binary, tmp_path, "--dump-dom", rendered.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    nodes = parse(dom.stdout)
    assert sorted(nodes) == list(NODES)
    node01 = nodes["node01"]
    for metric in (page_mod.DUTY, page_mod.POWER, page_mod.SENSOR):
        lines = series(node01, metric)
        assert lines and all(len(line["points"]) >= 2 for line in lines), metric
    assert nodes["node03"]["up"] == "down"
    assert "no data" in nodes["node02"]["text"]


# ---------------------------------------------------------------------------
# the renderer's pure parts


BOX = page_mod.PLOT


@pytest.mark.parametrize(("point", "expected"), [
    ((100.0, 0.0), (BOX[0], BOX[1] + BOX[3])),               # start, bottom
    ((200.0, 50.0), (BOX[0] + BOX[2], BOX[1])),              # end, top
    ((150.0, 25.0), (BOX[0] + BOX[2] / 2, BOX[1] + BOX[3] / 2)),
    ((50.0, -10.0), (BOX[0], BOX[1] + BOX[3])),              # clamped
    ((250.0, 90.0), (BOX[0] + BOX[2], BOX[1])),              # clamped
])
def test_scale_points(point, expected):
    (coords,) = page_mod.scale_points([point], 100.0, 200.0, 0.0, 50.0)
    x, y = (float(c) for c in coords.split(","))
    assert (x, y) == pytest.approx(expected, abs=0.06)


def test_scale_points_of_a_flat_range_is_the_middle():
    (coords,) = page_mod.scale_points([(150.0, 7.0)], 100.0, 200.0, 7.0, 7.0)
    assert float(coords.split(",")[1]) == pytest.approx(BOX[1] + BOX[3] / 2, abs=0.06)


def test_a_gap_in_a_series_cuts_the_line():
    points = [(0.0, 1.0), (10.0, 2.0), (20.0, 3.0), (60.0, 4.0), (70.0, 5.0)]
    assert page_mod.split_runs(points, 10.0) == [points[:3], points[3:]]
    lines = page_mod.polylines(points, "m", {}, "#000", 0.0, 70.0, 0.0, 5.0, 10.0)
    assert len(lines) == 2


@pytest.mark.parametrize(("hours", "expected"), [
    (6.0, "6 h"), (1.5, "1.5 h"), (0.01, "36 s"), (0.25, "15 min"), (0.005, "18 s"),
])
def test_the_span_is_said_in_a_readable_unit(hours, expected):
    assert page_mod.fmt_span(hours) == expected


@pytest.mark.parametrize(("value", "expected"), [
    (0.0, 1.0), (0.7, 1.0), (1.0, 1.0), (1.2, 2.0), (240.0, 250.0), (251.0, 500.0),
    (900.0, 1000.0), (3100.0, 5000.0),
])
def test_nice_ceiling(value, expected):
    assert page_mod.nice_ceiling(value) == pytest.approx(expected)


def test_non_finite_samples_are_left_out():
    result = {"values": [[1, "1"], [2, "NaN"], [3, "+Inf"], [4, "4"]]}
    assert page_mod.range_points(result) == [(1.0, 1.0), (4.0, 4.0)]


def synthetic_page(**node):
    base = {"name": "node01", "up": True, "slurm": None, "image": None, "ecc": {},
            "duty": [], "power": [], "temps": []}
    return {"nodes": [{**base, **node}], "start": 0.0, "end": 60.0, "step": 1.0,
            "hours": 60 / 3600, "job": "junkyard-nodes"}


def test_label_values_are_escaped():
    evil = '<script>alert("x")</script>&'
    page = synthetic_page(name=evil, slurm=[evil], image=[(evil, evil)],
                          duty=[(evil, [(0.0, 10.0), (30.0, 20.0)])],
                          temps=[(evil, [(0.0, 50.0), (30.0, 60.0)])])
    text = page_mod.render_page(page, 'http://h:9090/"<x>')
    assert "<script" not in text
    assert '"x"' not in text and "<x>" not in text
    escaped = "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;"
    assert f'data-node="{escaped}"' in text
    assert f'data-zone="{escaped}"' in text
    assert f'data-sensor="{escaped}"' in text
    nodes = parse(text)
    assert list(nodes) == [evil]
    assert nodes[evil]["fields"]["slurm"] == evil


def test_a_node_without_data_gets_no_line():
    nodes = parse(page_mod.render_page(synthetic_page(up=None), "http://h:9090"))
    node = nodes["node01"]
    assert node["lines"] == []
    assert node["up"] == "unknown"
    assert node["text"].count("no data") == 4  # two charts, two ECC counts


def test_power_without_duty_says_which_is_missing():
    page = synthetic_page(power=[[(0.0, 300.0), (1.0, 320.0)]])
    node = parse(page_mod.render_page(page, "http://h:9090"))["node01"]
    assert [line["data-series"] for line in node["lines"]] == [page_mod.POWER]
    assert "Fan duty: no data" in node["text"]
    assert "GPU power: no data" not in node["text"]


def test_unreachable_prometheus_leaves_the_old_page(tmp_path):
    out = tmp_path / "cluster.html"
    out.write_text("the good page")
    closed = free_port()
    proc = run_page("--prometheus", f"http://127.0.0.1:{closed}", "--out", str(out))
    assert proc.returncode == 1
    assert f"http://127.0.0.1:{closed}/api/v1/query?" in proc.stderr
    assert "Connection refused" in proc.stderr
    assert out.read_text() == "the good page"
    assert [p.name for p in tmp_path.iterdir()] == ["cluster.html"]


def test_write_atomic_replaces_the_file_and_leaves_no_temporary(tmp_path):
    out = tmp_path / "cluster.html"
    out.write_text("old")
    page_mod.write_atomic(str(out), "new")
    assert out.read_text() == "new"
    assert oct(out.stat().st_mode & 0o777) == oct(0o644)
    assert [p.name for p in tmp_path.iterdir()] == ["cluster.html"]


def test_a_nodes_newest_state_wins_over_one_that_outlived_it():
    # After a restart of Prometheus, a node's old Slurm state is not marked stale
    # and lingers for the lookback (5 min) beside the new one; the page queries
    # the samples' timestamps and shows the newest.
    page = load_module()
    results = [{"metric": {"node": "node01", "state": "down"}, "value": [1000.0, "900.5"]},
               {"metric": {"node": "node01", "state": "idle"}, "value": [1000.0, "960.5"]},
               {"metric": {"node": "node02", "state": "idle"}, "value": [1000.0, "955"]},
               {"metric": {"node": "node02", "state": "drain"}, "value": [1000.0, "955"]}]
    newest = page.newest_by_node(results)
    assert {n: sorted(r["metric"]["state"] for r in v) for n, v in newest.items()} == {
        "node01": ["idle"], "node02": ["drain", "idle"]}
