# Copyright (c) 2026, junkyard.cluster developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Node health, what a node knows about itself: readers and parsers.

Pure Python (stdlib only): the readers run inside modules on the nodes
(``ecc_facts``, ``health_facts``, ``health_burn_in_sample``) and are unit-tested
without them.  What the controller makes of their results lives in
:mod:`health_assess` (the report, the burn-in verdict) and :mod:`health_render`
(its rendering); the rasdaemon DIMM label files in :mod:`health_labels`.

Sources:

* EDAC sysfs (``/sys/devices/system/edac/mc``): per memory controller
  ``ce_count``/``ue_count``; per DIMM ``dimm*/`` (or ``rank*/``) with
  ``dimm_label``, ``dimm_location``, ``dimm_ce_count``, ``dimm_ue_count``; on
  older kernels ``csrow*/ch<N>_ce_count`` and ``ch<N>_dimm_label``.  These
  counters start at zero at every boot.
* rasdaemon's sqlite database (``ras-mc_event.db``, kept on a persistent
  writable path): table ``mc_event`` (EDAC memory events, ``err_count`` errors
  each, with the DIMM ``label``) and ``mce_record`` (machine checks: on AMD
  EPYC, corrected DRAM errors from the unified memory controllers arrive here,
  with ``mc_location`` but no label).
* The fan daemon's Prometheus textfile (``junkyard_fan_*`` metrics); the names
  it uses are mapped in one place, :data:`FAN_METRICS`.
"""

from __future__ import annotations

import calendar
import math
import os
import re
import sqlite3
import subprocess
import time

DAY = 86400
WINDOWS = {"24h": DAY, "7d": 7 * DAY}
DEFAULT_MEMORY_MC_PATTERN = r"memory controller|\bumc\b|dram|memory read|memory write"


class HealthError(Exception):
    """Input that cannot be read; the message names the source and the place."""


# ---------------------------------------------------------------------------
# Prometheus text exposition format

_METRIC_NAME_RE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME_RE = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}


def _parse_value(text, where):
    low = text.lower()
    if low in ("nan",):
        return math.nan
    if low in ("+inf", "inf"):
        return math.inf
    if low == "-inf":
        return -math.inf
    try:
        return float(text)
    except ValueError:
        raise HealthError(f"{where}: value {text!r} is not a number") from None


def _parse_labels(line, pos, where):
    """Parse ``{a="x",b="y"}`` starting at ``line[pos] == '{'``; return (labels, end)."""
    labels = {}
    pos += 1
    while True:
        while pos < len(line) and line[pos] in " \t":
            pos += 1
        if pos < len(line) and line[pos] == "}":
            return labels, pos + 1
        m = _LABEL_NAME_RE.match(line, pos)
        if not m:
            raise HealthError(f"{where}: expected a label name at column {pos + 1}")
        name = m.group(0)
        pos = m.end()
        while pos < len(line) and line[pos] in " \t":
            pos += 1
        if line[pos:pos + 2] != '="':
            raise HealthError(f"{where}: expected =\"...\" after label {name}")
        pos += 2
        value = []
        while True:
            if pos >= len(line):
                raise HealthError(f"{where}: unterminated value of label {name}")
            ch = line[pos]
            if ch == "\\":
                nxt = line[pos + 1:pos + 2]
                if nxt not in _ESCAPES:
                    raise HealthError(f"{where}: bad escape \\{nxt} in label {name}")
                value.append(_ESCAPES[nxt])
                pos += 2
                continue
            if ch == '"':
                pos += 1
                break
            value.append(ch)
            pos += 1
        if name in labels:
            raise HealthError(f"{where}: label {name} repeated")
        labels[name] = "".join(value)
        while pos < len(line) and line[pos] in " \t":
            pos += 1
        if pos < len(line) and line[pos] == ",":
            pos += 1
            continue
        if pos < len(line) and line[pos] == "}":
            return labels, pos + 1
        raise HealthError(f"{where}: expected , or }} after label {name}")


def parse_prometheus(text, source="metrics"):
    """Parse Prometheus text exposition into ``[(name, labels, value)]``.

    Comments, ``# HELP`` and ``# TYPE`` lines are skipped; an optional
    timestamp after the value is accepted and ignored.  Anything else that is
    not a sample raises :class:`HealthError` naming the line.
    """
    if not isinstance(text, str):
        raise HealthError(f"{source}: expected text, got {type(text).__name__}")
    samples = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        where = f"{source} line {n}"
        if not line or line.startswith("#"):
            continue
        m = _METRIC_NAME_RE.match(line)
        if not m:
            raise HealthError(f"{where}: {raw!r} does not start with a metric name")
        name = m.group(0)
        pos = m.end()
        labels = {}
        if pos < len(line) and line[pos] == "{":
            labels, pos = _parse_labels(line, pos, where)
        rest = line[pos:].split()
        if not rest or len(rest) > 2:
            raise HealthError(f"{where}: {raw!r} needs a value (and at most a timestamp)")
        value = _parse_value(rest[0], where)
        if len(rest) == 2 and not re.fullmatch(r"-?[0-9]+", rest[1]):
            raise HealthError(f"{where}: timestamp {rest[1]!r} is not an integer")
        samples.append((name, labels, value))
    return samples


# The fan daemon's metric names (daemon/src/junkyard_fan/metrics.py), in one
# place: report field -> metric name.  Its sensor readings carry a ``role``
# label (current, gpu_temp, cpu_temp, psu) and the sensor's name.
FAN_PREFIX = "junkyard_fan_"
# Where the gpu_fan_daemon role has the daemon write them (its default).
FAN_TEXTFILE = "/run/junkyard/metrics/junkyard_fan.prom"
FAN_METRICS = {
    "sensor": FAN_PREFIX + "sensor_reading",
    "gpu_power": FAN_PREFIX + "gpu_power_watts",
    "zone_duty": FAN_PREFIX + "zone_duty_percent",
    "zone_state": FAN_PREFIX + "zone_state",
    "zone_input_age": FAN_PREFIX + "zone_input_age_seconds",
    "bmc_reachable": FAN_PREFIX + "bmc_reachable",
    "psu_failed": FAN_PREFIX + "psu_failed",
    "power_cap_active": FAN_PREFIX + "power_cap_active",
    "power_cap_watts": FAN_PREFIX + "power_cap_watts",
    "cycles": FAN_PREFIX + "cycles_total",
    "probe_failed": FAN_PREFIX + "probe_failed",
}
FAN_ALARM_STATES = ("failsafe", "bmc_lost")
_SENSOR_ROLE_FIELD = {"gpu_temp": "gpu_temp_c", "cpu_temp": "cpu_temp_c"}


def _num(v):
    """A float for JSON: NaN and infinities become None."""
    return None if v is None or math.isnan(v) or math.isinf(v) else v


def fan_summary(samples):
    """Turn parsed fan-daemon samples into the fields of the health report.

    Returns ``gpu_temp_c`` and ``cpu_temp_c`` by sensor name, ``gpu_power_w``
    by GPU index, ``fan_duty_percent`` and ``zone_state`` by zone,
    ``psu_failed`` by PSU number, ``bmc_reachable``, ``power_cap_active`` and
    ``alarms`` (zones in fail-safe or with the BMC lost, a BMC that did not
    answer).
    """
    out = {"gpu_temp_c": {}, "cpu_temp_c": {}, "gpu_power_w": {}, "fan_duty_percent": {},
           "zone_state": {}, "psu_failed": {}, "bmc_reachable": None,
           "power_cap_active": None, "power_cap_watts": None, "cycles": None,
           "probe_failed": None, "alarms": []}
    m = FAN_METRICS
    for name, labels, value in samples:
        if name == m["sensor"]:
            field = _SENSOR_ROLE_FIELD.get(labels.get("role", ""))
            if field and "sensor" in labels:
                out[field][labels["sensor"]] = _num(value)
        elif name == m["gpu_power"] and "gpu" in labels:
            out["gpu_power_w"][labels["gpu"]] = _num(value)
        elif name == m["zone_duty"] and "zone" in labels:
            out["fan_duty_percent"][labels["zone"]] = _num(value)
        elif name == m["zone_state"] and "zone" in labels and "state" in labels:
            if value == 1:
                out["zone_state"][labels["zone"]] = labels["state"]
        elif name == m["psu_failed"] and "psu" in labels:
            out["psu_failed"][labels["psu"]] = value == 1
        elif name == m["bmc_reachable"]:
            out["bmc_reachable"] = value == 1
        elif name == m["power_cap_active"]:
            out["power_cap_active"] = value == 1
        elif name == m["power_cap_watts"]:
            out["power_cap_watts"] = _num(value)
        elif name == m["cycles"]:
            out["cycles"] = _num(value)
        elif name == m["probe_failed"]:
            out["probe_failed"] = value == 1
    for zone, state in sorted(out["zone_state"].items()):
        if state in FAN_ALARM_STATES:
            out["alarms"].append(f"fan zone {zone} is in state {state}")
    if out["bmc_reachable"] is False:
        out["alarms"].append("the fan daemon cannot reach the BMC")
    if out["probe_failed"]:
        out["alarms"].append("junkyard-fan --probe found that the fan command does not move "
                             "this node's fans: they stay under the BMC's control")
    return out


def read_fan_metrics(path, now=None, stale_after=30.0):
    """Read the fan daemon's textfile; ``present``/``age_s``/``stale`` plus the summary."""
    now = time.time() if now is None else now
    try:
        st = os.stat(path)
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return {"present": False, "path": path, "error": f"{path} does not exist"}
    except OSError as err:
        return {"present": False, "path": path, "error": f"cannot read {path}: {err}"}
    age = max(0.0, now - st.st_mtime)
    result = {"present": True, "path": path, "age_s": round(age, 1),
              "stale": age > stale_after}
    try:
        result.update(fan_summary(parse_prometheus(text, path)))
    except HealthError as err:
        result.update({"error": str(err), "alarms": [str(err)]})
    return result


# ---------------------------------------------------------------------------
# EDAC sysfs


def _read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return None


def _read_int(path, what):
    text = _read(path)
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        raise HealthError(f"EDAC: {path} holds {text!r}, not a {what} count") from None


def _sorted_entries(d, prefix):
    """Sub-directories ``<prefix><N>`` in numeric order."""
    try:
        names = os.listdir(d)
    except OSError:
        return []
    found = []
    for name in names:
        m = re.fullmatch(re.escape(prefix) + r"([0-9]+)", name)
        if m and os.path.isdir(os.path.join(d, name)):
            found.append((int(m.group(1)), name))
    return sorted(found)


def read_edac(root="/sys/devices/system/edac/mc"):
    """Read EDAC's counters: ``{"present", "controllers": [...], "dimms": [...]}``.

    A DIMM entry: ``mc``, ``label``, ``location`` (``mc.top.mid[.low]`` as
    rasdaemon's label files spell it, when the kernel says), ``ce``, ``ue``
    (counts since boot) and ``source`` (``dimm``, ``rank`` or ``csrow``).
    """
    if not os.path.isdir(root):
        return {"present": False, "root": root, "controllers": [], "dimms": []}
    controllers, dimms = [], []
    for mc, mc_name in _sorted_entries(root, "mc"):
        mcdir = os.path.join(root, mc_name)
        controllers.append({
            "mc": mc,
            "name": _read(os.path.join(mcdir, "mc_name")) or "",
            "ce": _read_int(os.path.join(mcdir, "ce_count"), "corrected") or 0,
            "ue": _read_int(os.path.join(mcdir, "ue_count"), "uncorrected") or 0,
            "ce_noinfo": _read_int(os.path.join(mcdir, "ce_noinfo_count"), "corrected") or 0,
            "ue_noinfo": _read_int(os.path.join(mcdir, "ue_noinfo_count"), "uncorrected") or 0,
        })
        found = False
        for kind in ("dimm", "rank"):
            for idx, name in _sorted_entries(mcdir, kind):
                d = os.path.join(mcdir, name)
                location = _read(os.path.join(d, "dimm_location")) or ""
                dimms.append({
                    "mc": mc, "index": idx, "source": kind,
                    "label": _read(os.path.join(d, "dimm_label")) or "",
                    "location": _location_key(mc, location),
                    "kernel_location": location,
                    "ce": _read_int(os.path.join(d, "dimm_ce_count"), "corrected") or 0,
                    "ue": _read_int(os.path.join(d, "dimm_ue_count"), "uncorrected") or 0,
                })
                found = True
        if found:
            continue
        for row, name in _sorted_entries(mcdir, "csrow"):
            d = os.path.join(mcdir, name)
            try:
                files = os.listdir(d)
            except OSError:
                files = []
            chans = sorted({int(m.group(1)) for f in files
                            if (m := re.fullmatch(r"ch([0-9]+)_ce_count", f))})
            for ch in chans:
                dimms.append({
                    "mc": mc, "index": row * 100 + ch, "source": "csrow",
                    "label": _read(os.path.join(d, f"ch{ch}_dimm_label")) or "",
                    "location": f"{mc}.{row}.{ch}",
                    "kernel_location": f"csrow {row} channel {ch}",
                    "ce": _read_int(os.path.join(d, f"ch{ch}_ce_count"), "corrected") or 0,
                    # csrow directories count UEs per row, not per channel.
                    "ue": (_read_int(os.path.join(d, "ue_count"), "uncorrected") or 0)
                    if ch == chans[0] else 0,
                })
    return {"present": True, "root": root, "controllers": controllers, "dimms": dimms}


def _location_key(mc, kernel_location):
    """``"csrow 1 channel 0"`` on mc 2 -> ``"2.1.0"`` (the label-file spelling)."""
    nums = re.findall(r"[0-9]+", kernel_location or "")
    return ".".join([str(mc), *nums]) if nums else ""


# ---------------------------------------------------------------------------
# rasdaemon's database

_TS_RE = re.compile(
    r"^\s*([0-9]{4})-([0-9]{2})-([0-9]{2})[ T]([0-9]{2}):([0-9]{2}):([0-9]{2})"
    r"(?:\.[0-9]+)?\s*(?:([+-])([0-9]{2}):?([0-9]{2})|Z|UTC)?\s*$")
_UE_TYPES = ("uncorrected", "fatal", "deferred")
_MC_LOCATION_RE = re.compile(r"memory_channel=([0-9]+)\s*,\s*csrow=([0-9]+)")
MCI_STATUS_UC = 1 << 61


def parse_timestamp(text):
    """rasdaemon's ``2026-11-29 20:12:01 +0100`` -> seconds since the epoch (UTC)."""
    m = _TS_RE.match(str(text or ""))
    if not m:
        raise HealthError(f"rasdaemon: timestamp {text!r} is not 'YYYY-MM-DD HH:MM:SS +ZZZZ'")
    y, mo, d, h, mi, s = (int(x) for x in m.groups()[:6])
    epoch = calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0))
    if m.group(7):
        offset = int(m.group(8)) * 3600 + int(m.group(9)) * 60
        epoch -= offset if m.group(7) == "+" else -offset
    return epoch


def _columns(db, table):
    return {row[1] for row in db.execute(f"PRAGMA table_info({table})")}


def _err_class(err_type):
    t = str(err_type or "").strip().lower()
    if t.startswith("corrected"):
        return "ce"
    if t.startswith(_UE_TYPES):
        return "ue"
    return None


def _mce_class(status, mcistatus_msg):
    msg = (mcistatus_msg or "").lower()
    if "uncorrected" in msg or "deferred" in msg:
        return "ue"
    if "corrected" in msg:
        return "ce"
    if isinstance(status, int):
        return "ue" if (status & 0xFFFFFFFFFFFFFFFF) & MCI_STATUS_UC else "ce"
    return None


def read_rasdaemon_db(path, memory_mce_pattern=DEFAULT_MEMORY_MC_PATTERN):
    """Memory error events from rasdaemon's database, oldest first.

    Each event: ``source`` (``mc_event`` or ``mce``), ``time`` (epoch),
    ``kind`` (``ce``/``ue``), ``count``, ``label`` and ``location``.  Machine
    checks count only when their bank or message is a memory controller's
    (``memory_mce_pattern``); an AMD UMC record's label is
    ``cpu<socket>-umc<channel>`` (rasdaemon gives it no DIMM label).  A missing
    database means no events (rasdaemon has not recorded any yet); a file that
    is not such a database raises :class:`HealthError`.
    """
    if not os.path.exists(path):
        return {"present": False, "path": path, "events": []}
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
    except sqlite3.Error as err:
        raise HealthError(f"rasdaemon: cannot open {path}: {err}") from None
    events = []
    try:
        try:
            tables = {r[0] for r in db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
        except sqlite3.DatabaseError as err:
            raise HealthError(f"rasdaemon: {path} is not an sqlite database ({err})") from None
        if "mc_event" in tables:
            cols = _columns(db, "mc_event")
            need = {"timestamp", "err_count", "err_type", "label", "mc", "top_layer",
                    "middle_layer", "lower_layer"}
            if need - cols:
                raise HealthError(f"rasdaemon: {path} table mc_event lacks columns "
                                  f"{', '.join(sorted(need - cols))}")
            rows = db.execute("SELECT id, timestamp, err_count, err_type, label, mc, top_layer,"
                              " middle_layer, lower_layer FROM mc_event ORDER BY id")
            for rid, ts, count, etype, label, mc, top, mid, low in rows:
                kind = _err_class(etype)
                if kind is None:
                    continue
                layers = [x for x in (top, mid, low) if isinstance(x, int) and x >= 0]
                location = ".".join(str(x) for x in [mc, *layers]) if mc is not None else ""
                events.append({"source": "mc_event", "id": rid, "time": parse_timestamp(ts),
                               "kind": kind, "count": max(int(count or 1), 1),
                               "label": _clean_label(label), "location": location})
        if "mce_record" in tables:
            cols = _columns(db, "mce_record")
            need = {"timestamp", "status", "bank_name", "error_msg"}
            if need - cols:
                raise HealthError(f"rasdaemon: {path} table mce_record lacks columns "
                                  f"{', '.join(sorted(need - cols))}")
            opt = [c if c in cols else f"NULL AS {c}"
                   for c in ("mcistatus_msg", "mc_location", "socketid")]
            rows = db.execute(
                "SELECT id, timestamp, status, bank_name, error_msg, "
                + ", ".join(opt) + " FROM mce_record ORDER BY id")
            memory = re.compile(memory_mce_pattern, re.IGNORECASE)
            for rid, ts, status, bank, msg, mcimsg, mcloc, socket in rows:
                if not memory.search(f"{bank or ''} {msg or ''}"):
                    continue
                kind = _mce_class(status, mcimsg)
                if kind is None:
                    continue
                m = _MC_LOCATION_RE.search(mcloc or "")
                sock = socket if isinstance(socket, int) and socket >= 0 else 0
                label = f"cpu{sock}-umc{m.group(1)}" if m else f"cpu{sock}-memory"
                location = f"{sock}.{m.group(1)}.{m.group(2)}" if m else ""
                events.append({"source": "mce", "id": rid, "time": parse_timestamp(ts),
                               "kind": kind, "count": 1, "label": label,
                               "location": location})
    except sqlite3.DatabaseError as err:
        raise HealthError(f"rasdaemon: cannot read {path}: {err}") from None
    finally:
        db.close()
    events.sort(key=lambda e: (e["time"], e["source"], e["id"]))
    return {"present": True, "path": path, "events": events}


def _clean_label(label):
    label = (label or "").strip()
    return "" if label.lower() in ("", "unknown", "unknown memory", "(null)") else label


# ---------------------------------------------------------------------------
# ECC summary per DIMM label


def _blank(label):
    row = {"label": label, "locations": []}
    for src in ("mc_event", "mce"):
        for kind in ("ce", "ue"):
            for w in (*WINDOWS, "total"):
                row.setdefault(src, {})[f"{kind}_{w}"] = 0
    row["edac"] = {"ce_boot": 0, "ue_boot": 0}
    return row


def ecc_summary(edac, db, now=None, expected_labels=()):
    """Corrected/uncorrected counts per DIMM label over 24 h, 7 d and in total.

    Windows and totals come from rasdaemon's database (persistent); the EDAC
    counters give ``ce_boot``/``ue_boot`` (since boot).  The same corrected
    error can be recorded twice on AMD (an ``mce`` record and an EDAC
    ``mc_event``), so per label the headline counts are the larger of the two
    sources, never their sum; each source's own counts stay in the row.
    ``expected_labels`` (the inventory's labels) always appear, with zeros.
    """
    now = time.time() if now is None else now
    rows = {}
    for label in expected_labels:
        rows.setdefault(label, _blank(label))
    for d in edac.get("dimms", []):
        label = d["label"] or (f"mc{d['mc']}:{d['location']}" if d["location"]
                               else f"mc{d['mc']}:{d['source']}{d['index']}")
        row = rows.setdefault(label, _blank(label))
        row["edac"]["ce_boot"] += d["ce"]
        row["edac"]["ue_boot"] += d["ue"]
        if d["location"] and d["location"] not in row["locations"]:
            row["locations"].append(d["location"])
    by_location = {loc: r["label"] for r in rows.values() for loc in r["locations"]}
    for e in db.get("events", []):
        label = e["label"]
        if not label and e["source"] == "mc_event":
            label = by_location.get(e["location"]) or (
                f"mc{e['location']}" if e["location"] else "unattributed")
        row = rows.setdefault(label, _blank(label))
        counts = row[e["source"]]
        age = now - e["time"]
        counts[f"{e['kind']}_total"] += e["count"]
        for w, seconds in WINDOWS.items():
            if age <= seconds:
                counts[f"{e['kind']}_{w}"] += e["count"]
    out = []
    for label in sorted(rows, key=_label_sort_key(expected_labels)):
        r = rows[label]
        for kind in ("ce", "ue"):
            for w in (*WINDOWS, "total"):
                k = f"{kind}_{w}"
                r[k] = max(r["mc_event"][k], r["mce"][k])
            # Since boot, EDAC's own counter may know more than the database
            # (rasdaemon not yet running, or a lost event).
            r[f"{kind}_total"] = max(r[f"{kind}_total"], r["edac"][f"{kind}_boot"])
        out.append(r)
    controllers = edac.get("controllers", [])
    return {
        "dimms": out,
        "edac_present": bool(edac.get("present")),
        "db_present": bool(db.get("present")),
        "controllers_ce": sum(c["ce"] for c in controllers),
        "controllers_ue": sum(c["ue"] for c in controllers),
        "noinfo_ce": sum(c.get("ce_noinfo", 0) for c in controllers),
        "noinfo_ue": sum(c.get("ue_noinfo", 0) for c in controllers),
    }


def _label_sort_key(expected):
    order = {label: i for i, label in enumerate(expected)}
    return lambda label: (0, order[label], "") if label in order else (1, 0, label)


# ---------------------------------------------------------------------------
# small readers for health_facts


def parse_cmdline(text):
    """``/proc/cmdline`` -> ``{"node", "image", "image_name", "image_version"}``."""
    out = {"node": None, "image": None, "image_name": None, "image_version": None}
    for word in (text or "").split():
        key, _sep, value = word.partition("=")
        if key == "junkyard.node":
            out["node"] = value
        elif key == "junkyard.image":
            out["image"] = value
            name, sep, version = value.rpartition("/")
            if sep:
                out["image_name"], out["image_version"] = name, version
    return out


def parse_uptime(text):
    """``/proc/uptime`` -> seconds (float)."""
    try:
        return float((text or "").split()[0])
    except (IndexError, ValueError):
        raise HealthError(f"/proc/uptime holds {text!r}, not seconds") from None


def parse_mounts(text):
    """``/proc/mounts`` -> ``{mountpoint: {"source", "fstype", "options"}}`` (last wins)."""
    out = {}
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) < 4:
            continue
        point = parts[1].replace("\\040", " ").replace("\\011", "\t").replace("\\134", "\\")
        out[point] = {"source": parts[0], "fstype": parts[2], "options": parts[3]}
    return out


def probe(paths, timeout):
    """Run ``stat -f`` on every path at once; ``{path: (ok, error, elapsed)}``.

    Every path gets its own process and all of them share one deadline: a mount
    whose NFS server is gone blocks ``stat`` forever (in the kernel, where no
    signal reaches it), so each one runs apart and is abandoned when the
    deadline passes, and the caller still returns.  (``AnsibleModule.run_command``
    runs one command at a time and cannot give up on it.)
    """
    start = time.monotonic()
    procs = {}
    for path in paths:
        try:
            procs[path] = subprocess.Popen(["stat", "-f", "--", path], stdin=subprocess.DEVNULL,
                                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        except OSError as err:
            procs[path] = err
    results = {}
    deadline = start + timeout
    for path, proc in procs.items():
        if isinstance(proc, OSError):
            results[path] = (False, f"cannot run stat: {proc}", 0.0)
            continue
        try:
            # One shared deadline; a process that has already ended is read
            # without waiting, even after the deadline has passed.
            wait = None if proc.poll() is not None else max(0.05, deadline - time.monotonic())
            _out, err = proc.communicate(timeout=wait)
            elapsed = round(time.monotonic() - start, 3)
            if proc.returncode == 0:
                results[path] = (True, None, elapsed)
            else:
                msg = err.decode(errors="replace").strip() or f"rc {proc.returncode}"
                results[path] = (False, msg, elapsed)
        except subprocess.TimeoutExpired:
            proc.kill()
            results[path] = (False, f"no answer within {timeout:g} s", round(timeout, 3))
    return results
