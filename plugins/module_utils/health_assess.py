# Copyright (c) 2026, junkyard.cluster developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Node health assessment: the cluster health report, burn-in verdicts and mount checks.

Pure Python (stdlib only).  The report and the verdict are built on the controller
(filter plugins) from what the readers of :mod:`health_parsers` returned on the nodes;
``check_mount_table`` and ``burn_in_stop_reasons`` also run on the nodes, inside
``health_facts`` and ``health_burn_in_sample``.
"""

from __future__ import annotations

import time

from ansible_collections.junkyard.cluster.plugins.module_utils.health_parsers import HealthError

# ---------------------------------------------------------------------------
# the health report

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


# Slurm node states (sinfo %T) that take a node out of service; a trailing "*"
# means slurmctld has not heard from slurmd.
SLURM_OUT_OF_SERVICE = ("drain", "down", "fail", "inval", "not_responding")


def parse_sinfo(text):
    """``{node: {"state", "reason"}}`` from ``sinfo -h -N -o '%N|%T|%E'``; a node's
    repeated lines (one per partition) agree.  Reason "none" is an empty reason."""
    out = {}
    for line in (text or "").splitlines():
        parts = line.strip().split("|", 2)
        if len(parts) != 3 or not parts[0]:
            continue
        reason = "" if parts[2].strip() in ("none", "(null)") else parts[2].strip()
        out[parts[0]] = {"state": parts[1].strip(), "reason": reason}
    return out


def assess_slurm(slurm_node, flags):
    """The node's Slurm state beside the report's own findings: out of service
    (drained, down, not responding) is a warning with Slurm's reason."""
    if slurm_node is None:
        return None
    state = slurm_node["state"].lower()
    if state.rstrip("*").startswith(SLURM_OUT_OF_SERVICE) or state.endswith("*"):
        why = f": {slurm_node['reason']}" if slurm_node["reason"] else ""
        _flag(flags, "warn", "slurm", f"Slurm has the node {slurm_node['state']}{why}")
    return slurm_node


def assess_node(name, results, model_node, images, thresholds, slurm_node=None):
    """One node's entry of the report, from what the playbook registered for it.

    ``results`` maps ``health``/``ecc`` to the registered task results; a
    result marked ``unreachable`` (or a node with no result at all) makes the
    node *unreachable*, never healthy.  ``slurm_node``: its Slurm state and reason
    (:func:`parse_sinfo`), None where the controller was not asked.
    """
    results = results or {}
    entry = {"name": name, "flags": []}
    entry["slurm"] = assess_slurm(slurm_node, entry["flags"])
    for key in ("health", "ecc"):
        r = results.get(key)
        if isinstance(r, dict) and r.get("unreachable"):
            entry.update(status="unreachable", reachable=False,
                         flags=[{"severity": "fail", "what": "reachability",
                                 "message": f"unreachable: {_unreachable_message(r)}"}]
                         + entry["flags"])
            return entry
    if not any(isinstance(results.get(k), dict) for k in ("health", "ecc")):
        entry.update(status="unreachable", reachable=False,
                     flags=[{"severity": "fail", "what": "reachability",
                             "message": "unreachable: no result was gathered from it"}]
                     + entry["flags"])
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


def build_report(hosts, model=None, thresholds=None, now=None, slurm=None):
    """The whole report: ``{"generated", "thresholds", "summary", "nodes"}``.

    ``hosts`` is ``{name: {"health": <result>, "ecc": <result>}}`` for every
    node that was targeted (a node without results is unreachable).  ``slurm``:
    ``sinfo -h -N -o '%N|%T|%E'`` on the controller (None: not asked; a node it
    does not list has no Slurm state).
    """
    if not isinstance(hosts, dict):
        raise HealthError(f"health report: hosts must be a mapping, got {type(hosts).__name__}")
    t = _thresholds(thresholds)
    now = time.time() if now is None else now
    model_nodes = _model_nodes(model)
    images = (model or {}).get("images") or {}
    states = parse_sinfo(slurm) if slurm is not None else {}
    nodes = [assess_node(name, hosts[name], model_nodes.get(name), images, t,
                         states.get(name) if slurm is not None else None)
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
