#!/usr/bin/python3
# Copyright: junkyard.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""junkyard-cluster-page: the cluster page, one static HTML file from Prometheus.

Meant to run on the storage head (later from a timer) as
/usr/local/bin/junkyard-cluster-page.  It asks Prometheus' HTTP API
(/api/v1/query and /api/v1/query_range) about every GPU node and writes one
self-contained HTML file (inline CSS, inline SVG, no script, nothing loaded
from elsewhere) showing per node: up or down now, Slurm state, the image it
boots, ECC error counts, fan duty against GPU power over the last hours, and
the GPU temperatures.

The nodes are the `node` labels of up{job="junkyard-nodes"} (the targets
Prometheus scrapes), unless --nodes names them.  What Prometheus has no
series for is shown as "no data" (charts, ECC) or "unknown" (Slurm state,
image), never as a made-up value.

The page is written atomically (a temporary file in the same directory, then
a rename); when Prometheus cannot be asked, nothing is written and the exit
status is 1, with a message naming the URL and the HTTP status or the
reason.  Exit status 2: bad arguments.

Python 3 standard library only: the head runs it with Debian's python3.
"""

from __future__ import annotations

import argparse
import contextlib
import html
import json
import math
import os
import re
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

PROG = "junkyard-cluster-page"
DEFAULT_JOB = "junkyard-nodes"
# Points per chart line: enough for a 1400 px wide page, few enough to keep
# the page small.
TARGET_POINTS = 240
MIN_STEP = 1.0

DUTY = "junkyard_fan_zone_duty_percent"
POWER = "junkyard_fan_gpu_power_watts"
SENSOR = "junkyard_fan_sensor_reading"
ECC_CE = "node_edac_correctable_errors_total"
ECC_UE = "node_edac_uncorrectable_errors_total"
SLURM = "junkyard_slurm_node_state"
IMAGE = "junkyard_node_image_info"

# Chart geometry (SVG user units).
WIDTH, HEIGHT = 640, 200
PLOT = (52, 12, 536, 156)  # x, y, width, height of the plotting area
DUTY_COLOURS = ("#1f77b4", "#17becf", "#9467bd", "#2ca02c")
POWER_COLOUR = "#d62728"
TEMP_COLOURS = ("#ff7f0e", "#8c564b", "#e377c2", "#bcbd22", "#7f7f7f", "#d62728",
                "#1f77b4", "#2ca02c")


class PrometheusError(Exception):
    """Prometheus could not be asked, or refused the query."""


# ---------------------------------------------------------------------------
# Prometheus' HTTP API


class Prometheus:
    """The two endpoints the page needs, over urllib."""

    def __init__(self, base_url, timeout=20.0):
        self.base = base_url.rstrip("/")
        self.timeout = timeout

    def _get(self, path, params):
        url = f"{self.base}{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=self.timeout) as resp:
                body = resp.read()
        except urllib.error.HTTPError as exc:
            detail = ""
            with contextlib.suppress(ValueError, AttributeError, OSError):
                detail = json.loads(exc.read()).get("error", "")
            raise PrometheusError(
                f"{url}: HTTP {exc.code} {exc.reason}" + (f": {detail}" if detail else "")
            ) from None
        except urllib.error.URLError as exc:
            raise PrometheusError(f"{url}: {exc.reason}") from None
        except OSError as exc:  # timeouts, resets after the headers
            raise PrometheusError(f"{url}: {exc}") from None
        try:
            answer = json.loads(body)
        except ValueError:
            raise PrometheusError(f"{url}: the answer is not JSON") from None
        if not isinstance(answer, dict) or answer.get("status") != "success":
            error = answer.get("error", answer) if isinstance(answer, dict) else answer
            raise PrometheusError(f"{url}: Prometheus answered {error}")
        data = answer.get("data") or {}
        return data.get("result") or []

    def query(self, expr, at):
        return self._get("/api/v1/query", {"query": expr, "time": f"{at:.3f}"})

    def query_range(self, expr, start, end, step):
        return self._get("/api/v1/query_range", {
            "query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"})


# ---------------------------------------------------------------------------
# pure helpers (tested on their own)


def node_sort_key(name):
    """node2 before node10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def finite(text):
    """A Prometheus sample value as a float, None when not finite."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def range_points(result):
    """[(t, v)] of one query_range series, non-finite values left out."""
    out = []
    for t, v in result.get("values", []):
        value = finite(v)
        if value is not None:
            out.append((float(t), value))
    return out


def split_runs(points, step):
    """Cut a series where samples are missing, so a gap is never drawn over."""
    runs, run = [], []
    for t, v in points:
        if run and t - run[-1][0] > 1.5 * step:
            runs.append(run)
            run = []
        run.append((t, v))
    if run:
        runs.append(run)
    return runs


def scale_points(points, t0, t1, lo, hi, box=PLOT):
    """SVG coordinates "x,y" of (t, v) points in the plotting box: t0..t1 left
    to right, lo..hi bottom to top, clamped to the box."""
    x0, y0, w, h = box
    tspan = (t1 - t0) or 1.0
    vspan = hi - lo
    out = []
    for t, v in points:
        fx = min(max((t - t0) / tspan, 0.0), 1.0)
        fy = 0.5 if vspan <= 0 else min(max((v - lo) / vspan, 0.0), 1.0)
        out.append(f"{x0 + fx * w:.1f},{y0 + (1.0 - fy) * h:.1f}")
    return out


def nice_ceiling(value):
    """The smallest 1, 2, 2.5 or 5 times a power of ten not below value."""
    if value <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    for mult in (1.0, 2.0, 2.5, 5.0, 10.0):
        if value <= mult * power * (1 + 1e-9):
            return mult * power
    return 10.0 * power


def fmt_number(value):
    return f"{value:.0f}" if abs(value - round(value)) < 1e-9 else f"{value:.1f}"


def fmt_span(hours):
    """6 h, 1.5 h, 36 min, 45 s."""
    if hours >= 1:
        return f"{fmt_number(hours)} h"
    if hours * 60 >= 1:
        return f"{fmt_number(hours * 60)} min"
    return f"{fmt_number(hours * 3600)} s"


def fmt_time(t, seconds):
    return time.strftime("%H:%M:%S" if seconds else "%H:%M", time.gmtime(t))


def esc(value):
    return html.escape(str(value), quote=True)


# ---------------------------------------------------------------------------
# what Prometheus knows, per node


def by_node(results):
    """{node: [result, ...]} of results carrying a node label."""
    out = {}
    for res in results:
        node = res.get("metric", {}).get("node")
        if node is not None:
            out.setdefault(node, []).append(res)
    return out


def newest_by_node(results):
    """by_node, keeping each node's series with the newest sample only.

    For the state and info series (queried as ``timestamp(x) and x == 1``: the
    timestamp of an expression is its evaluation time, of a selector its sample's): when a
    node's state changes, the old state's series can outlive it for up to
    Prometheus' lookback (5 minutes) if it was never marked stale (after a
    restart of Prometheus); the newest sample is the current state."""
    out = {}
    for node, results_of_node in by_node(results).items():
        newest = max(finite(r["value"][1]) or 0.0 for r in results_of_node)
        out[node] = [r for r in results_of_node if (finite(r["value"][1]) or 0.0) == newest]
    return out


def collect(prom, job, hours, now, nodes=None, step=None):
    """Everything the page shows, as plain data."""
    span = hours * 3600.0
    if step is None:
        step = max(MIN_STEP, round(span / TARGET_POINTS))
    start = now - span
    sel = 'job="{}"'.format(job.replace("\\", "\\\\").replace('"', '\\"'))

    up = {}
    for res in prom.query(f"up{{{sel}}}", now):
        node = res["metric"].get("node")
        if node is None:
            continue
        value = finite(res["value"][1])
        # A node with more than one target is up when every target is.
        up[node] = bool(value) and up.get(node, True)
    names = sorted(set(nodes) if nodes else set(up), key=node_sort_key)

    slurm = {}
    # the Slurm state comes from the controller's host (the head's textfile), whatever
    # job scrapes it
    current = f"timestamp({SLURM}) and {SLURM} == 1"
    for node, results in newest_by_node(prom.query(current, now)).items():
        slurm[node] = sorted(r["metric"].get("state", "?") for r in results)
    image = {}
    current = f"timestamp({IMAGE}{{{sel}}}) and {IMAGE}{{{sel}}} == 1"
    for node, results in newest_by_node(prom.query(current, now)).items():
        image[node] = sorted((r["metric"].get("image", "?"), r["metric"].get("version", "?"))
                             for r in results)
    ecc = {}
    for key, metric in (("correctable", ECC_CE), ("uncorrectable", ECC_UE)):
        for res in prom.query(f"sum by (node) ({metric}{{{sel}}})", now):
            node = res["metric"].get("node")
            if node is not None:
                ecc.setdefault(node, {})[key] = finite(res["value"][1])

    def ranged(expr):
        return by_node(prom.query_range(expr, start, now, step))

    duty = ranged(f"{DUTY}{{{sel}}}")
    power = ranged(f"sum by (node) ({POWER}{{{sel}}})")
    temps = ranged(f'{SENSOR}{{{sel},role="gpu_temp"}}')

    out = []
    for name in names:
        out.append({
            "name": name,
            "up": up.get(name),
            "slurm": slurm.get(name),
            "image": image.get(name),
            "ecc": ecc.get(name, {}),
            "duty": sorted(((r["metric"].get("zone", "?"), range_points(r))
                            for r in duty.get(name, [])), key=lambda z: node_sort_key(z[0])),
            "power": [range_points(r) for r in power.get(name, [])],
            "temps": sorted(((r["metric"].get("sensor", "?"), range_points(r))
                             for r in temps.get(name, [])), key=lambda s: node_sort_key(s[0])),
        })
    return {"nodes": out, "start": start, "end": now, "step": step, "hours": hours, "job": job}


# ---------------------------------------------------------------------------
# HTML


def polylines(points, metric, attrs, colour, t0, t1, lo, hi, step, dashed=False):
    """One <polyline> per unbroken run of the series."""
    out = []
    extra = "".join(f' data-{k}="{esc(v)}"' for k, v in attrs.items())
    dash = ' stroke-dasharray="5 3"' if dashed else ""
    for run in split_runs(points, step):
        coords = scale_points(run, t0, t1, lo, hi)
        if len(coords) == 1:  # a lone sample: a dot, still a polyline to find
            coords.append(coords[0])
        out.append(f'<polyline data-series="{esc(metric)}"{extra} fill="none" '
                   f'stroke="{colour}" stroke-width="1.6"{dash} '
                   f'points="{" ".join(coords)}"/>')
    return out


def axes(t0, t1, left, right=None, seconds=False):
    """Frame, horizontal grid, tick labels; left/right = (lo, hi, unit, ticks)."""
    x0, y0, w, h = PLOT
    parts = [f'<rect x="{x0}" y="{y0}" width="{w}" height="{h}" class="frame"/>']
    lo, hi, unit, ticks = left
    for i in range(ticks + 1):
        value = lo + (hi - lo) * i / ticks
        y = y0 + h - h * i / ticks
        parts.append(f'<line x1="{x0}" y1="{y:.1f}" x2="{x0 + w}" y2="{y:.1f}" class="grid"/>')
        parts.append(f'<text x="{x0 - 4}" y="{y + 4:.1f}" text-anchor="end">'
                     f'{fmt_number(value)}{esc(unit)}</text>')
    if right is not None:
        rlo, rhi, runit, rticks = right
        for i in range(rticks + 1):
            value = rlo + (rhi - rlo) * i / rticks
            y = y0 + h - h * i / rticks
            parts.append(f'<text x="{x0 + w + 4}" y="{y + 4:.1f}" class="right">'
                         f'{fmt_number(value)}{esc(runit)}</text>')
    for frac, anchor in ((0.0, "start"), (0.5, "middle"), (1.0, "end")):
        t = t0 + (t1 - t0) * frac
        parts.append(f'<text x="{x0 + w * frac:.1f}" y="{y0 + h + 16}" '
                     f'text-anchor="{anchor}">{fmt_time(t, seconds)}</text>')
    return parts


def legend(items):
    return ('<div class="legend">' + "".join(
        f'<span><i style="background:{colour}"></i>{esc(label)}</span>'
        for label, colour in items) + "</div>")


def svg(parts, label):
    return (f'<svg viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" '
            f'role="img" aria-label="{esc(label)}">' + "".join(parts) + "</svg>")


def no_data(what, chart):
    return f'<p class="nodata" data-chart="{chart}">{esc(what)}: no data</p>'


def fan_power_chart(node, page):
    t0, t1, step = page["start"], page["end"], page["step"]
    seconds = page["hours"] < 1
    duty = [(zone, pts) for zone, pts in node["duty"] if pts]
    power = [pts for pts in node["power"] if pts]
    if not duty and not power:
        return no_data("Fan duty and GPU power", "fan-power")
    power_max = nice_ceiling(max((p[1] for pts in power for p in pts), default=0.0))
    lines, keys = [], []
    for i, (zone, pts) in enumerate(duty):
        colour = DUTY_COLOURS[i % len(DUTY_COLOURS)]
        lines += polylines(pts, DUTY, {"zone": zone}, colour, t0, t1, 0.0, 100.0, step)
        keys.append((f"duty {zone} (%, left)", colour))
    for pts in power:
        lines += polylines(pts, POWER, {}, POWER_COLOUR, t0, t1, 0.0, power_max, step,
                           dashed=True)
        keys.append(("GPU power, all GPUs (W, right)", POWER_COLOUR))
    notes = []
    if not duty:
        notes.append(no_data("Fan duty", "fan"))
    if not power:
        notes.append(no_data("GPU power", "power"))
    right = (0.0, power_max, " W", 4) if power else None
    body = axes(t0, t1, (0.0, 100.0, "%", 4), right, seconds) + lines
    return (svg(body, f"{node['name']}: fan duty and GPU power") + legend(keys)
            + "".join(notes))


def temp_chart(node, page):
    t0, t1, step = page["start"], page["end"], page["step"]
    temps = [(sensor, pts) for sensor, pts in node["temps"] if pts]
    if not temps:
        return no_data("GPU temperatures", "temp")
    values = [p[1] for sensor_points in temps for p in sensor_points[1]]
    lo = 10.0 * math.floor(min(values) / 10.0 - 0.5)
    hi = 10.0 * math.ceil(max(values) / 10.0 + 0.5)
    lines, keys = [], []
    for i, (sensor, pts) in enumerate(temps):
        colour = TEMP_COLOURS[i % len(TEMP_COLOURS)]
        lines += polylines(pts, SENSOR, {"sensor": sensor, "role": "gpu_temp"}, colour,
                           t0, t1, lo, hi, step)
        keys.append((sensor, colour))
    body = axes(t0, t1, (lo, hi, "°C", 4), None, page["hours"] < 1) + lines
    return svg(body, f"{node['name']}: GPU temperatures") + legend(keys)


def node_card(node, page):
    up = node["up"]
    status = {True: ("up", "up"), False: ("down", "down"), None: ("unknown", "unknown")}[up]
    slurm = ", ".join(node["slurm"]) if node["slurm"] else "unknown"
    image = (", ".join(f"{img} {ver}" for img, ver in node["image"]) if node["image"]
             else "unknown")
    ecc = node["ecc"]

    def count(key):
        value = ecc.get(key)
        return "no data" if value is None else fmt_number(value)

    ue_class = ' class="bad"' if (ecc.get("uncorrectable") or 0) > 0 else ""
    name = esc(node["name"])
    badge = f'<span class="state {status[0]}" data-up="{status[1]}">{status[1]}</span>'
    return f"""<section class="node {status[0]}" data-node="{name}">
<h2>{name} {badge}</h2>
<dl>
<dt>Slurm</dt><dd data-field="slurm">{esc(slurm)}</dd>
<dt>Image</dt><dd data-field="image">{esc(image)}</dd>
<dt>ECC corrected</dt><dd data-field="ecc-correctable">{esc(count("correctable"))}</dd>
<dt>ECC uncorrected</dt>
<dd data-field="ecc-uncorrectable"{ue_class}>{esc(count("uncorrectable"))}</dd>
</dl>
<h3>Fan duty and GPU power</h3>
{fan_power_chart(node, page)}
<h3>GPU temperatures</h3>
{temp_chart(node, page)}
</section>"""


CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:16px;background:#f6f7f9;color:#222}
header{margin-bottom:12px}h1{font-size:20px;margin:0}header p{margin:2px 0;color:#555}
main{display:grid;grid-template-columns:repeat(auto-fill,minmax(660px,1fr));gap:12px}
.node{background:#fff;border:1px solid #d0d4da;border-left:6px solid #999;padding:8px 10px}
.node.up{border-left-color:#2ca02c}.node.down{border-left-color:#d62728}
h2{font-size:17px;margin:0 0 4px}h3{font-size:13px;margin:8px 0 2px;color:#444}
.state{font-size:12px;padding:1px 6px;border-radius:3px;color:#fff;background:#999}
.state.up{background:#2ca02c}.state.down{background:#d62728}
dl{display:grid;grid-template-columns:max-content 1fr;gap:0 10px;margin:0}
dt{color:#555}dd{margin:0}.bad{color:#d62728;font-weight:bold}
svg{display:block;max-width:100%;height:auto}svg text{font-size:11px;fill:#444}
svg text.right{text-anchor:start}.frame{fill:none;stroke:#bbb}.grid{stroke:#eee}
.legend{font-size:12px;color:#444}.legend span{margin-right:12px}
.legend i{display:inline-block;width:10px;height:10px;margin-right:4px;vertical-align:middle}
.nodata{color:#888;font-style:italic;margin:4px 0}
"""


def render_page(page, source):
    nodes = page["nodes"]
    cards = "\n".join(node_card(n, page) for n in nodes) if nodes else (
        f'<p class="nodata">No targets of job {esc(page["job"])}: no data</p>')
    down = sum(1 for n in nodes if n["up"] is False)
    generated = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(page["end"]))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>junkyard cluster</title>
<style>{CSS}</style></head>
<body>
<header><h1>junkyard cluster</h1>
<p>{len(nodes)} nodes, {down} down. Generated {esc(generated)} from {esc(source)};
charts cover the last {fmt_span(page["hours"])} (UTC times).</p></header>
<main>
{cards}
</main>
</body></html>
"""


# ---------------------------------------------------------------------------
# output


def write_atomic(path, text):
    """A temporary file next to path, then a rename: readers see the old page
    or the new one, never half of one."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp",
                               dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def positive(text):
    value = finite(text)
    if value is None or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number above 0")
    return value


def parse_args(argv):
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--prometheus", required=True, metavar="URL",
                        help="Prometheus' base URL, e.g. http://10.77.0.1:9090")
    parser.add_argument("--out", required=True, metavar="FILE", help="the HTML file to write")
    parser.add_argument("--hours", type=positive, default=6.0,
                        help="hours the charts cover (default 6)")
    parser.add_argument("--step", type=positive, default=None, metavar="SECONDS",
                        help=f"seconds between chart points (default: hours / {TARGET_POINTS}"
                             f", at least {MIN_STEP:g})")
    parser.add_argument("--job", default=DEFAULT_JOB,
                        help=f"the scrape job of the GPU nodes (default {DEFAULT_JOB})")
    who = parser.add_mutually_exclusive_group()
    who.add_argument("--nodes-from-targets", action="store_true", default=True,
                     help="the nodes are the node labels of up{job=JOB} (the default)")
    who.add_argument("--nodes", type=lambda s: [n for n in s.split(",") if n],
                     help="comma-separated node names instead")
    parser.add_argument("--timeout", type=positive, default=20.0,
                        help="seconds to wait for each answer (default 20)")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    prom = Prometheus(args.prometheus, timeout=args.timeout)
    try:
        page = collect(prom, args.job, args.hours, time.time(), nodes=args.nodes,
                       step=args.step)
        write_atomic(args.out, render_page(page, args.prometheus))
    except PrometheusError as exc:
        print(f"{PROG}: {exc}; {args.out} left as it was", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"{PROG}: cannot write {args.out}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
