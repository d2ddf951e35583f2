# Copyright (c) 2026, junkyard.cluster developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Node health: parsers for what a node knows about itself, and the report.

Pure Python (stdlib only): the readers run inside modules on the nodes
(``ecc_facts``, ``health_facts``), the report and burn-in verdict run in filter
plugins on the controller, and everything is unit-tested without either.

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
FAN_TEXTFILE = "/run/junkyard-fan/metrics/junkyard_fan.prom"
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
           "alarms": []}
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
    for zone, state in sorted(out["zone_state"].items()):
        if state in FAN_ALARM_STATES:
            out["alarms"].append(f"fan zone {zone} is in state {state}")
    if out["bmc_reachable"] is False:
        out["alarms"].append("the fan daemon cannot reach the BMC")
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
# DIMM label files for rasdaemon (ras-mc-ctl --register-labels)


def dimm_label_entries(labels, default_locations="{index}.0.0,{index}.1.0", where="dimm_labels"):
    """Normalise a profile's ``memory.dimm_labels`` into ``[{label, locations}]``.

    An entry is a label string (its locations come from ``default_locations``
    with ``{index}`` = its position: one EDAC memory controller per channel and
    the DIMM's two chip selects, the EPYC one-DIMM-per-channel layout), or a
    mapping ``{label, location}`` with ``location`` a ``mc.top.mid[.low]``
    string or a list of them.
    """
    if labels is None:
        return []
    if not isinstance(labels, list):
        raise HealthError(f"{where} must be a list, got {labels!r}")
    out, seen = [], set()
    for i, entry in enumerate(labels):
        if isinstance(entry, str):
            label, locs = entry, default_locations.format(index=i).split(",")
        elif isinstance(entry, dict) and isinstance(entry.get("label"), str):
            label, locs = entry["label"], entry.get("location", entry.get("locations"))
            locs = [locs] if isinstance(locs, str) else locs
            if not isinstance(locs, list) or not locs:
                raise HealthError(f"{where}[{i}].location {locs!r} must be mc.top.mid or "
                                  "a list of them")
        else:
            raise HealthError(f"{where}[{i}] {entry!r} must be a label or "
                              "{label: ..., location: mc.top.mid}")
        label = label.strip()
        if not label or re.search(r"[:;,\s]", label):
            raise HealthError(f"{where}[{i}] label {label!r} must be non-empty, without "
                              "spaces, ':', ';' or ','")
        if label in seen:
            raise HealthError(f"{where}[{i}] label {label} is repeated")
        seen.add(label)
        clean = []
        for loc in locs:
            loc = str(loc).strip()
            if not re.fullmatch(r"[0-9]+(\.[0-9]+){1,3}", loc):
                raise HealthError(f"{where}[{i}] location {loc!r} is not mc.top[.mid[.low]]")
            clean.append(loc)
        out.append({"label": label, "locations": clean})
    return out


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


# ---------------------------------------------------------------------------
# the health report (controller side)

SEVERITY_ORDER = {"ok": 0, "warn": 1, "fail": 2}
DEFAULT_THRESHOLDS = {
    "ce_per_day_limit": 10,
    "gpu_temp_limit_c": 95.0,
    "fan_metrics_max_age_s": 30.0,
}


def _flag(flags, severity, what, message):
    flags.append({"severity": severity, "what": what, "message": message})


def _thresholds(thresholds):
    t = dict(DEFAULT_THRESHOLDS)
    for key, value in (thresholds or {}).items():
        if key not in DEFAULT_THRESHOLDS:
            raise HealthError(f"health thresholds: unknown key {key!r} "
                              f"(known: {', '.join(sorted(DEFAULT_THRESHOLDS))})")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise HealthError(f"health thresholds: {key} {value!r} must be a number > 0")
        t[key] = value
    return t


def _model_nodes(model):
    nodes = (model or {}).get("nodes") or []
    return {n["name"]: n for n in nodes if isinstance(n, dict) and "name" in n}


def _unreachable_message(result):
    msg = result.get("msg") if isinstance(result, dict) else None
    return str(msg or "host unreachable").strip()


def assess_memory(ecc, thresholds, flags):
    """Flag DIMMs with uncorrected errors or corrected errors at the rate limit."""
    limit = thresholds["ce_per_day_limit"]
    if not ecc:
        _flag(flags, "warn", "memory", "no ECC data was gathered")
        return []
    if not ecc.get("edac_present") and not ecc.get("db_present"):
        _flag(flags, "warn", "memory",
              "no ECC data: EDAC is not loaded and rasdaemon has no database")
    rows = []
    for d in ecc.get("dimms", []):
        row = {"label": d["label"], "locations": d.get("locations", [])}
        for k in ("ce_24h", "ce_7d", "ce_total", "ue_24h", "ue_7d", "ue_total"):
            row[k] = d.get(k, 0)
        row["flagged"] = False
        counts = (f"24 h {row['ce_24h']}, 7 d {row['ce_7d']}, total {row['ce_total']}")
        if row["ue_total"] > 0:
            _flag(flags, "fail", "memory",
                  f"DIMM {d['label']}: {row['ue_total']} uncorrected errors "
                  f"(24 h {row['ue_24h']}, 7 d {row['ue_7d']}): replace it")
            row["flagged"] = True
        if row["ce_24h"] >= limit or row["ce_7d"] >= 7 * limit:
            _flag(flags, "warn", "memory",
                  f"DIMM {d['label']}: corrected errors at or over {limit:g}/day ({counts})")
            row["flagged"] = True
        rows.append(row)
    return rows


def assess_fan(fan, thresholds, flags, gpu_count):
    """GPU temperatures, power, fan duties and PSU state from the fan daemon's file."""
    out = {"gpu_temp_c": {}, "gpu_power_w": {}, "fan_duty_percent": {}, "psu": "unknown",
           "psu_failed": [], "metrics_age_s": None}
    if not fan or not fan.get("present"):
        why = (fan or {}).get("error") or "not gathered"
        _flag(flags, "warn", "fan",
              f"fan daemon metrics missing ({why}): GPU temperatures and PSU state unknown")
        return out
    out["metrics_age_s"] = fan.get("age_s")
    if fan.get("error"):
        _flag(flags, "fail", "fan", f"fan daemon metrics unreadable: {fan['error']}")
        return out
    if fan.get("stale") or (fan.get("age_s") or 0) > thresholds["fan_metrics_max_age_s"]:
        _flag(flags, "warn", "fan",
              f"fan daemon metrics are {fan.get('age_s')} s old: is the daemon running?")
    out["gpu_temp_c"] = fan.get("gpu_temp_c", {})
    out["gpu_power_w"] = fan.get("gpu_power_w", {})
    out["fan_duty_percent"] = fan.get("fan_duty_percent", {})
    limit = thresholds["gpu_temp_limit_c"]
    for sensor, temp in sorted(out["gpu_temp_c"].items()):
        if temp is not None and temp >= limit:
            _flag(flags, "fail", "gpu", f"{sensor} at {temp:g} C (limit {limit:g} C)")
    if gpu_count and not out["gpu_temp_c"]:
        _flag(flags, "warn", "gpu", "the fan daemon reports no GPU temperature")
    failed = sorted(p for p, bad in fan.get("psu_failed", {}).items() if bad)
    out["psu_failed"] = failed
    if fan.get("psu_failed"):
        out["psu"] = "one PSU" if failed else "all PSUs"
    if failed:
        _flag(flags, "fail", "psu",
              f"running on one PSU: PSU {', '.join(failed)} reports failure or AC loss")
    for alarm in fan.get("alarms", []):
        _flag(flags, "fail", "fan", alarm)
    return out


def assess_image(health, model_node, images, flags):
    booted = (health or {}).get("cmdline", {})
    out = {"booted": booted.get("image"), "assigned": None, "current": None}
    if model_node:
        name = model_node.get("image")
        out["assigned"] = f"{name}/{model_node.get('image_version')}"
        current = (images or {}).get(name, {}).get("current_version")
        out["current"] = f"{name}/{current}" if current else None
    if not out["booted"]:
        _flag(flags, "warn", "image", "the booted image is unknown (no junkyard.image= "
              "on the kernel command line)")
        return out
    if out["current"] and out["booted"] != out["current"]:
        _flag(flags, "warn", "image",
              f"stale image: booted {out['booted']}, current is {out['current']}")
    if out["assigned"] and out["booted"] != out["assigned"]:
        _flag(flags, "warn", "image",
              f"booted {out['booted']} but its boot entry names {out['assigned']}: "
              "reboot pending?")
    return out


def assess_mounts(health, flags):
    mounts = (health or {}).get("mounts", [])
    for m in mounts:
        if not m.get("mounted"):
            why = f": {m['error']}" if m.get("error") else ""
            _flag(flags, "fail", "nfs", f"{m['path']} ({m.get('kind')}) is not mounted{why}")
        elif not m.get("responsive"):
            _flag(flags, "fail", "nfs",
                  f"{m['path']} ({m.get('kind')}) does not answer: {m.get('error') or 'timeout'}")
    return mounts


def assess_node(name, results, model_node, images, thresholds):
    """One node's entry of the report, from what the playbook registered for it.

    ``results`` maps ``health``/``ecc`` to the registered task results; a
    result marked ``unreachable`` (or a node with no result at all) makes the
    node *unreachable*, never healthy.
    """
    results = results or {}
    entry = {"name": name, "flags": []}
    for key in ("health", "ecc"):
        r = results.get(key)
        if isinstance(r, dict) and r.get("unreachable"):
            entry.update(status="unreachable", reachable=False,
                         flags=[{"severity": "fail", "what": "reachability",
                                 "message": f"unreachable: {_unreachable_message(r)}"}])
            return entry
    if not any(isinstance(results.get(k), dict) for k in ("health", "ecc")):
        entry.update(status="unreachable", reachable=False,
                     flags=[{"severity": "fail", "what": "reachability",
                             "message": "unreachable: no result was gathered from it"}])
        return entry
    entry["reachable"] = True
    flags = entry["flags"]
    health = results.get("health") or {}
    ecc = results.get("ecc") or {}
    for key, r in (("health", health), ("ecc", ecc)):
        # A failed module (also under failed_when: false) returns no payload.
        if r.get("failed") or key not in r:
            _flag(flags, "fail", key, f"{key} gathering failed: {r.get('msg', 'no message')}")
    facts = health.get("health") or {}
    entry["uptime_s"] = facts.get("uptime_s")
    entry["image"] = assess_image(facts, model_node, images, flags)
    gpu_count = (model_node or {}).get("gpu_count", 0)
    entry.update(assess_fan(facts.get("fan"), thresholds, flags, gpu_count))
    entry["mounts"] = assess_mounts(facts, flags)
    entry["memory"] = assess_memory(ecc.get("ecc"), thresholds, flags)
    worst = max((SEVERITY_ORDER[f["severity"]] for f in flags), default=0)
    entry["status"] = {v: k for k, v in SEVERITY_ORDER.items()}[worst]
    return entry


def collect_results(hostvars, names, keys):
    """``{name: {key: hostvars[name][var]}}`` for ``keys`` = ``{key: var}``; absent vars skipped."""
    out = {}
    for name in names:
        hv = hostvars.get(name, {})
        out[name] = {key: hv[var] for key, var in keys.items() if var in hv}
    return out


def build_report(hosts, model=None, thresholds=None, now=None):
    """The whole report: ``{"generated", "thresholds", "summary", "nodes"}``.

    ``hosts`` is ``{name: {"health": <result>, "ecc": <result>}}`` for every
    node that was targeted (a node without results is unreachable).
    """
    if not isinstance(hosts, dict):
        raise HealthError(f"health report: hosts must be a mapping, got {type(hosts).__name__}")
    t = _thresholds(thresholds)
    now = time.time() if now is None else now
    model_nodes = _model_nodes(model)
    images = (model or {}).get("images") or {}
    nodes = [assess_node(name, hosts[name], model_nodes.get(name), images, t)
             for name in sorted(hosts)]
    counts = {s: 0 for s in ("ok", "warn", "fail", "unreachable")}
    for n in nodes:
        counts[n["status"]] += 1
    return {
        "generated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
        "thresholds": t,
        "summary": counts,
        "unreachable": [n["name"] for n in nodes if n["status"] == "unreachable"],
        "nodes": nodes,
    }


def _fmt_uptime(seconds):
    if seconds is None:
        return "-"
    s = int(seconds)
    d, s = divmod(s, DAY)
    h, s = divmod(s, 3600)
    return f"{d}d {h}h" if d else f"{h}h {s // 60}m"


def _md(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def report_markdown(report):
    """The report as Markdown: one row per node, then flagged DIMMs, then every flag."""
    t = report["thresholds"]
    s = report["summary"]
    lines = [
        f"# Cluster health {report['generated']}",
        "",
        f"{len(report['nodes'])} nodes: {s['ok']} ok, {s['warn']} warn, {s['fail']} fail, "
        f"{s['unreachable']} unreachable.  Limits: {t['ce_per_day_limit']:g} corrected "
        f"errors/day per DIMM, GPU {t['gpu_temp_limit_c']:g} C.",
        "",
        "| node | status | image | uptime | hottest GPU | fan duty % | PSU | DIMM CE 24h/7d/total"
        " | flags |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for n in report["nodes"]:
        if n["status"] == "unreachable":
            lines.append(f"| {n['name']} | **unreachable** | - | - | - | - | - | - | "
                         f"{_md(n['flags'][0]['message'])} |")
            continue
        temps = {k: v for k, v in n.get("gpu_temp_c", {}).items() if v is not None}
        hot = max(temps.items(), key=lambda kv: kv[1]) if temps else None
        duty = ", ".join(f"{z} {v:g}" for z, v in sorted(n.get("fan_duty_percent", {}).items())
                         if v is not None) or "-"
        worst = max(n.get("memory", []), key=lambda d: (d["ce_24h"], d["ce_total"]),
                    default=None)
        mem = (f"{worst['label']} {worst['ce_24h']}/{worst['ce_7d']}/{worst['ce_total']}"
               if worst and worst["ce_total"] else "0")
        status = n["status"] if n["status"] == "ok" else f"**{n['status']}**"
        lines.append(
            f"| {n['name']} | {status} | {_md(n['image'].get('booted') or '?')} | "
            f"{_fmt_uptime(n.get('uptime_s'))} | "
            f"{f'{hot[0]} {hot[1]:g} C' if hot else '-'} | {_md(duty)} | {n.get('psu', '-')} | "
            f"{_md(mem)} | {len(n['flags'])} |")
    dimms = [(n["name"], d) for n in report["nodes"] for d in n.get("memory", [])
             if d["ce_total"] or d["ue_total"]]
    if dimms:
        lines += ["", "## DIMMs with errors", "",
                  "| node | DIMM | CE 24h | CE 7d | CE total | UE 24h | UE 7d | UE total "
                  "| flagged |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for node, d in dimms:
            lines.append(f"| {node} | {_md(d['label'])} | {d['ce_24h']} | {d['ce_7d']} | "
                         f"{d['ce_total']} | {d['ue_24h']} | {d['ue_7d']} | {d['ue_total']} | "
                         f"{'yes' if d['flagged'] else ''} |")
    flagged = [(n["name"], f) for n in report["nodes"] for f in n["flags"]]
    if flagged:
        lines += ["", "## Flags", ""]
        lines += [f"- **{node}** {f['severity']} ({f['what']}): {_md(f['message'])}"
                  for node, f in flagged]
    return "\n".join(lines) + "\n"


def report_summary(report):
    """A few lines for the console: the counts, then every fail and warn flag."""
    s = report["summary"]
    lines = [f"{len(report['nodes'])} nodes: {s['ok']} ok, {s['warn']} warn, "
             f"{s['fail']} fail, {s['unreachable']} unreachable"]
    for n in report["nodes"]:
        for f in n["flags"]:
            lines.append(f"{n['name']}: {f['severity']}: {f['message']}")
    return lines


# ---------------------------------------------------------------------------
# burn-in verdict


def _ecc_totals(ecc):
    rows = {d["label"]: d for d in (ecc or {}).get("dimms", [])}
    return rows, (ecc or {}).get("controllers_ce", 0), (ecc or {}).get("controllers_ue", 0)


def error_count(ecc):
    """Every error any source has counted (database rows, EDAC since boot, EDAC
    without a DIMM): it grows with each new error, whichever source sees it."""
    total = 0
    for d in ecc.get("dimms", []):
        for src in ("mc_event", "mce"):
            total += d[src]["ce_total"] + d[src]["ue_total"]
        total += d["edac"]["ce_boot"] + d["edac"]["ue_boot"]
    return total + ecc.get("noinfo_ce", 0) + ecc.get("noinfo_ue", 0)


def burn_in_stop_reasons(sample, gpu_temp_limit_c=95.0, baseline_errors=None):
    """Why a burn-in must stop now (empty: carry on), from one sample."""
    reasons = []
    fan = sample.get("fan") or {}
    for sensor, temp in sorted((fan.get("gpu_temp_c") or {}).items()):
        if temp is not None and temp >= gpu_temp_limit_c:
            reasons.append(f"{sensor} at {temp:g} C (limit {gpu_temp_limit_c:g} C)")
    reasons += list(fan.get("alarms") or [])
    failed = sorted(p for p, bad in (fan.get("psu_failed") or {}).items() if bad)
    if failed:
        reasons.append(f"PSU {', '.join(failed)} reports failure or AC loss")
    if baseline_errors is not None and sample.get("errors_total", 0) > baseline_errors:
        reasons.append(f"{sample['errors_total'] - baseline_errors} new memory error(s)")
    return reasons


def _sample_body(sample):
    sample = sample or {}
    return sample.get("sample") or sample.get("health") or {}


def burn_in_verdict(before, after, samples, gpu_temp_limit_c=95.0, stress=None,
                    gpu_expected=False):
    """Pass or fail a burn-in run, with every reason.

    ``before``/``after`` are ``ecc_facts`` summaries; ``samples`` the
    ``health_burn_in_sample`` results taken during the run; ``stress`` maps a
    part (``memory``, ``gpu``) to a command result (``rc``, ``stderr``), to
    ``{"results": [...], "ok_rc": [0, 124]}``, or to ``{"skipped": true,
    "reason": ...}``.  Fails on
    any new corrected or uncorrected error, a GPU at or over its limit, a fan
    alarm or failed PSU in any sample, a stress run that failed, or a GPU node
    whose temperatures were never seen.
    """
    problems, notes = [], []
    b_rows, b_ce, b_ue = _ecc_totals(before)
    a_rows, a_ce, a_ue = _ecc_totals(after)
    new_errors = {}
    for label, row in a_rows.items():
        prev = b_rows.get(label, {})
        for kind in ("ce", "ue"):
            grew = max(row.get(f"{kind}_total", 0) - prev.get(f"{kind}_total", 0),
                       row.get("edac", {}).get(f"{kind}_boot", 0)
                       - prev.get("edac", {}).get(f"{kind}_boot", 0), 0)
            if grew:
                new_errors.setdefault(label, {})[kind] = grew
    for label, kinds in sorted(new_errors.items()):
        what = ", ".join(f"{n} {'corrected' if k == 'ce' else 'uncorrected'}"
                         for k, n in sorted(kinds.items()))
        problems.append(f"DIMM {label}: {what} new error(s) during the burn-in")
    if not new_errors and (a_ce > b_ce or a_ue > b_ue):
        problems.append(f"EDAC counted {a_ce - b_ce} corrected and {a_ue - b_ue} uncorrected "
                        "new errors not attributed to a DIMM")
    max_temp, max_duty, alarms, psu = {}, {}, [], set()
    for i, sample in enumerate(samples or []):
        fan = _sample_body(sample).get("fan") or {}
        for sensor, temp in (fan.get("gpu_temp_c") or {}).items():
            if temp is not None:
                max_temp[sensor] = max(temp, max_temp.get(sensor, temp))
        for zone, duty in (fan.get("fan_duty_percent") or {}).items():
            if duty is not None:
                max_duty[zone] = max(duty, max_duty.get(zone, duty))
        for alarm in fan.get("alarms") or []:
            alarms.append(f"sample {i + 1}: {alarm}")
        psu |= {p for p, bad in (fan.get("psu_failed") or {}).items() if bad}
    for sensor, temp in sorted(max_temp.items()):
        if temp >= gpu_temp_limit_c:
            problems.append(f"{sensor} reached {temp:g} C (limit {gpu_temp_limit_c:g} C)")
    problems += alarms
    if psu:
        problems.append(f"PSU {', '.join(sorted(psu))} reported failure or AC loss")
    for part, res in sorted((stress or {}).items()):
        res = res or {}
        if res.get("skipped"):
            notes.append(f"{part} stress skipped: {res.get('reason', 'not applicable')}")
            continue
        ok_rc = res.get("ok_rc", [0])
        for r in res.get("results", [res]):
            r = r or {}
            if r.get("rc") is None and not r.get("failed"):
                continue
            if r.get("rc") not in ok_rc:
                tail = (r.get("stderr") or r.get("msg") or "").strip().splitlines()[-3:]
                problems.append(f"{part} stress failed (rc {r.get('rc')}): {' / '.join(tail)}")
    for i, sample in enumerate(samples or []):
        if (sample or {}).get("stopped"):
            notes.append(f"the load was stopped at sample {i + 1}: "
                         f"{'; '.join(sample.get('stop_reasons') or [])}")
            break
    if gpu_expected and not max_temp:
        problems.append("no GPU temperature was seen during the run (is the fan daemon "
                        "running and writing its metrics?)")
    return {"passed": not problems, "problems": problems, "notes": notes,
            "new_errors": new_errors, "max_gpu_temp_c": max_temp,
            "max_fan_duty_percent": max_duty, "samples": len(samples or [])}


# ---------------------------------------------------------------------------
# mounts a node should have, and whether they answer

FSTYPES = {"root": ("nfs", "nfs4"), "persistent": ("nfs", "nfs4"), "data": ("nfs", "nfs4"),
           "tmpfs": ("tmpfs",), "overlay": ("overlay",)}


def expected_mounts(model_node, data_datasets=(), include_data=True):
    """The mounts a node of the model must have: its root, its writable paths, the data."""
    if not isinstance(model_node, dict) or "name" not in model_node:
        raise HealthError(f"expected_mounts: {model_node!r} is not a node of cluster_model")
    out = [{"path": "/", "kind": "root", "source": model_node.get("root_path", "")}]
    for w in model_node.get("writable", []):
        out.append({"path": w["path"], "kind": w["kind"], "source": w.get("source", "")})
    if include_data:
        for ds in data_datasets or []:
            out.append({"path": ds.get("mount") or f"/data/{ds['name']}", "kind": "data",
                        "source": ""})
    return out


def check_mount_table(expected, table):
    """Match expected mounts against ``parse_mounts`` output (no I/O)."""
    out = []
    for m in expected:
        entry = table.get(m["path"])
        row = {"path": m["path"], "kind": m.get("kind", ""), "expected_source": m.get("source", ""),
               "mounted": False, "source": None, "fstype": None, "responsive": None,
               "error": None}
        if entry:
            row.update(source=entry["source"], fstype=entry["fstype"])
            want = FSTYPES.get(row["kind"])
            if want and entry["fstype"] not in want:
                row["error"] = (f"mounted as {entry['fstype']} from {entry['source']}, "
                                f"expected {' or '.join(want)}")
            else:
                row["mounted"] = True
        else:
            row["error"] = "not a mount point"
        out.append(row)
    return out


def label_files(profiles, boards=None, default_locations="{index}.0.0,{index}.1.0"):
    """One rasdaemon label file per hardware profile that has DIMM labels.

    ``[{profile, description, board, entries}]``; ``board`` is the profile's
    ``memory.board`` or ``boards[profile]`` (``{}`` when neither: the role
    refuses that with a message naming the profile).
    """
    if not isinstance(profiles, dict):
        raise HealthError(f"hardware profiles must be a mapping, got {profiles!r}")
    boards = boards or {}
    out = []
    for name in sorted(profiles):
        prof = profiles[name] if isinstance(profiles[name], dict) else {}
        memory = prof.get("memory") if isinstance(prof.get("memory"), dict) else {}
        entries = dimm_label_entries(memory.get("dimm_labels"), default_locations,
                                     f"cluster_hardware_profiles.{name}.memory.dimm_labels")
        if not entries:
            continue
        board = memory.get("board") or boards.get(name) or {}
        out.append({"profile": name,
                    "description": " ".join(str(prof.get("description", "")).split()),
                    "board": board if isinstance(board, dict) else {}, "entries": entries})
    return out


def burn_in_markdown(node, verdict, settings=None):
    """A burn-in verdict as Markdown."""
    lines = [f"# Burn-in of {node}: {'PASSED' if verdict['passed'] else 'FAILED'}", ""]
    for key, value in sorted((settings or {}).items()):
        lines.append(f"- {key}: {_md(value)}")
    lines.append(f"- samples: {verdict['samples']}")
    if verdict["problems"]:
        lines += ["", "## Problems", ""] + [f"- {_md(p)}" for p in verdict["problems"]]
    if verdict["notes"]:
        lines += ["", "## Notes", ""] + [f"- {_md(n)}" for n in verdict["notes"]]
    if verdict["max_gpu_temp_c"]:
        lines += ["", "| GPU sensor | max C |", "|---|---|"]
        lines += [f"| {k} | {v:g} |" for k, v in sorted(verdict["max_gpu_temp_c"].items())]
    if verdict["max_fan_duty_percent"]:
        lines += ["", "| fan zone | max duty % |", "|---|---|"]
        lines += [f"| {k} | {v:g} |"
                  for k, v in sorted(verdict["max_fan_duty_percent"].items())]
    return "\n".join(lines) + "\n"
