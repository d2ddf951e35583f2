#!/usr/bin/python3
# Copyright: junkyard.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""junkyard-slurm-health: slurmd's HealthCheckProgram on a junkyard.cluster node.

Installed into the node image by the slurm_node role as
/usr/local/sbin/junkyard-slurm-health; slurmd runs it as root at its start and
every HealthCheckInterval, with SLURMD_NODENAME as its only environment.  It
reads its settings from /etc/junkyard/slurm-health.conf (rendered from the
cluster model) and checks this node:

  gpu       every render node this node's lines of gres.conf (the configless
            copy slurmd fetched) name exists as a character device
  ecc       EDAC: no uncorrected memory error; corrected errors in the last
            24 h (since boot, if it was less) below the limit, per DIMM
  fan       where the node's hardware profile has fan zones: junkyard-fan is
            started, its metrics file is fresh, no zone is in failsafe,
            bmc_lost or bmc_control, and it reaches the BMC
  writable  no persistent writable path on its tmpfs fallback (the
            initramfs's record, /run/junkyard-writable/mounted)
  root      / over NFS comes from the management subnet

When one does not hold, it drains the node (scontrol update state=drain)
with the reason "junkyard-health: <check>: <what, with values>[; <check>: ...]".  It
never resumes a node, and it leaves alone a node that is drained or
draining (by an operator or by an earlier run: that reason stays), failed,
or down by anyone but slurmctld.

Exit status: 0 healthy, 1 not healthy (drained now, left drained, or the
drain failed), 2 the check cannot run (arguments, settings).

Python 3 standard library only: the image has python3, not the collection.
The roots of /sys, /proc and /dev and the scontrol command can be given
(--sysfs, --procfs, --devfs, --scontrol) to run it on a copy of a node's
files; --dry-run says what it would do without changing the node;
--check-config checks the settings file only.
"""

from __future__ import annotations

import argparse
import configparser
import ipaddress
import json
import math
import os
import re
import socket
import stat
import subprocess
import sys
import time

REASON_PREFIX = "junkyard-health"
DEFAULT_CONFIG = "/etc/junkyard/slurm-health.conf"
DAY = 86400.0
SCONTROL_TIMEOUT = 20
# Zone states of the fan daemon in which it does not regulate the zone's fans.
FAN_BAD_STATES = ("failsafe", "bmc_lost", "bmc_control")
FAN_METRIC = "junkyard_fan_"
PATH_KEYS = ("fan_metrics", "openrc_dir", "gres_conf", "slurm_conf", "writable_state",
             "state_dir")


class CannotRun(Exception):
    """The check cannot run: its settings, its arguments, or /proc."""


# ---------------------------------------------------------------------------
# settings


def _number(section, key, zero_ok=False):
    text = section[key]
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
        raise CannotRun(f"{key} {text!r} must be a number {'>=' if zero_ok else '>'} 0")
    return value


def read_settings(path):
    """The [health] section of ``path``, checked."""
    parser = configparser.ConfigParser(interpolation=None)
    try:
        with open(path, encoding="utf-8") as f:
            parser.read_file(f)
    except OSError as err:
        raise CannotRun(f"cannot read {path}: {err.strerror}") from None
    except configparser.Error as err:
        raise CannotRun(f"{path}: {err}") from None
    if not parser.has_section("health"):
        raise CannotRun(f"{path} has no [health] section")
    section = parser["health"]
    required = ("fan_nodes", "mgmt_subnet", "ce_per_day_limit", "fan_metrics_max_age",
                "fan_boot_grace", "fan_service", "scontrol", "slurm_user", *PATH_KEYS)
    missing = [k for k in required if k not in section]
    if missing:
        raise CannotRun(f"{path}: [health] lacks {', '.join(missing)}")
    try:
        subnet = ipaddress.ip_network(section["mgmt_subnet"].strip(), strict=False)
    except ValueError:
        raise CannotRun(f"{path}: mgmt_subnet {section['mgmt_subnet']!r} is not a network "
                        "address with prefix (e.g. 10.20.0.0/24)") from None
    out = {
        "fan_nodes": section["fan_nodes"].split(),
        "mgmt_subnet": subnet,
        "fan_service": section["fan_service"].strip(),
        "scontrol": section["scontrol"].strip(),
        "slurm_user": section["slurm_user"].strip(),
    }
    try:
        out["ce_per_day_limit"] = _number(section, "ce_per_day_limit")
        out["fan_metrics_max_age"] = _number(section, "fan_metrics_max_age")
        out["fan_boot_grace"] = _number(section, "fan_boot_grace", zero_ok=True)
    except CannotRun as err:
        raise CannotRun(f"{path}: {err}") from None
    for key in PATH_KEYS:
        value = section[key].strip()
        if not value.startswith("/"):
            raise CannotRun(f"{path}: {key} {value!r} is not an absolute path")
        out[key] = value
    return out


# ---------------------------------------------------------------------------
# small readers


def read_text(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def read_int(path):
    """An integer file of sysfs; None when it is missing or holds something else."""
    text = read_text(path)
    try:
        return int(text.strip()) if text is not None else None
    except ValueError:
        return None


def uptime(procfs):
    text = read_text(os.path.join(procfs, "uptime"))
    try:
        return float(text.split()[0])
    except (AttributeError, IndexError, ValueError):
        raise CannotRun(f"cannot read the uptime from {procfs}/uptime") from None


def expand_list(text):
    """Slurm's list syntax, as gres.conf uses it for NodeName= and File=:
    ``a,b[01-03,7]c`` -> ``a``, ``b01c``, ``b02c``, ``b03c``, ``b7c``."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    out = []
    for part in parts:
        m = re.fullmatch(r"([^\[\]]*)\[([0-9,-]+)\]([^\[\]]*)", part)
        if not m:
            if part:
                out.append(part)
            continue
        head, ranges, tail = m.groups()
        for item in ranges.split(","):
            low, dash, high = item.partition("-")
            if not low.isdigit() or (dash and not high.isdigit()):
                raise ValueError(f"{part!r} is not a list Slurm reads")
            for n in range(int(low), int(high or low) + 1):
                out.append(f"{head}{n:0{len(low)}d}{tail}")
    return out


# ---------------------------------------------------------------------------
# the checks: each returns (state, message), state "ok", "skip" (nothing to
# check here), "wait" (not yet: reported, not drained) or "sick" (drain)


def check_gpu(node, settings, devfs):
    """The render nodes of this node's gres.conf lines exist as character devices."""
    path = settings["gres_conf"]
    text = read_text(path)
    if text is None:
        return "skip", f"no {path} (slurmd has not fetched it): not checked"
    files = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        words = {}
        for word in line.split():
            key, value = word.split("=", 1) if "=" in word else (word, "")
            words[key.lower()] = value
        if words.get("name", "").lower() != "gpu" or "file" not in words:
            continue
        try:
            if "nodename" in words and node not in expand_list(words["nodename"]):
                continue
            for f in expand_list(words["file"]):
                if f not in files:
                    files.append(f)
        except ValueError as err:
            return "skip", f"{path}: {err}: not checked"
    if not files:
        return "skip", f"{path} names no GPU of {node}: not checked"
    missing = []
    for f in files:
        local = os.path.join(devfs, f[len("/dev/"):]) if f.startswith("/dev/") else f
        try:
            if stat.S_ISCHR(os.stat(local).st_mode):
                continue
        except OSError:
            pass
        missing.append(f)
    found = len(files) - len(missing)
    if missing:
        return "sick", (f"{found} of {len(files)} GPUs (gres.conf), missing "
                        f"{', '.join(missing)}")
    return "ok", f"{found} of {len(files)} GPUs (gres.conf): every render node is there"


def _edac_counters(mc_root):
    """Per memory controller: its name, UE count and the CE counters to rate
    (per DIMM or rank where the kernel shows them, else the controller's)."""
    controllers = []
    try:
        names = sorted((n for n in os.listdir(mc_root) if re.fullmatch(r"mc[0-9]+", n)),
                       key=lambda n: int(n[2:]))
    except OSError:
        return controllers
    for name in names:
        mcdir = os.path.join(mc_root, name)
        mc = {"name": name, "ue": read_int(os.path.join(mcdir, "ue_count")),
              "ce": read_int(os.path.join(mcdir, "ce_count")), "dimms": []}
        try:
            entries = sorted(os.listdir(mcdir))
        except OSError:
            entries = []
        for entry in entries:
            if not re.fullmatch(r"(dimm|rank)[0-9]+", entry):
                continue
            d = os.path.join(mcdir, entry)
            mc["dimms"].append({
                "key": f"{name}/{entry}",
                "label": (read_text(os.path.join(d, "dimm_label")) or "").strip(),
                "ce": read_int(os.path.join(d, "dimm_ce_count")),
                "ue": read_int(os.path.join(d, "dimm_ue_count")),
            })
        controllers.append(mc)
    return controllers


def _where(key, label):
    return f"{label} ({key})" if label else key


def _load_state(path):
    text = read_text(path)
    try:
        state = json.loads(text) if text else {}
    except ValueError:
        state = {}
    return state if isinstance(state, dict) else {}


def _save_state(path, state):
    """Atomically, in a directory only root reads; a failure is reported, not fatal."""
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(state, f)
        os.replace(tmp, path)
    except OSError as err:
        return f"cannot keep the counts in {path}: {err.strerror}"
    return None


def _in_window(history, count, now):
    """Corrected errors in the last 24 h of uptime, from ``history`` (``[uptime,
    count]`` each time the count changed, oldest first), brought up to date."""
    if history and history[-1][0] > now:
        history.clear()  # a record of an earlier boot
    elif history and history[-1][1] > count:
        history[:] = [[history[-1][0], 0]]  # EDAC reloaded: what it counts is new
    if not history:
        # EDAC counts from boot, and the record lives in /run: unless a day has
        # passed, every error counted so far happened within the last 24 h
        history.append([0.0, 0] if now <= DAY else [now, count])
    if count != history[-1][1]:
        history.append([now, count])
    start = now - DAY
    base, keep = history[0][1], 0
    for i, (t, c) in enumerate(history):
        if t <= start:
            base, keep = c, i
    del history[:keep]
    return count - base


def _ue_counts(controllers):
    """(where, count) of every uncorrected error count above zero."""
    out = []
    for mc in controllers:
        on_dimms = 0
        for d in mc["dimms"]:
            if d["ue"]:
                out.append((_where(d["key"], d["label"]), d["ue"]))
                on_dimms += d["ue"]
        rest = (mc["ue"] or 0) - on_dimms
        if rest > 0:
            out.append((f"{mc['name']}/no-dimm" if mc["dimms"] else mc["name"], rest))
    return out


def _ce_counters(controllers):
    """(key, label, count) of the corrected error counters to rate: per DIMM or
    rank where the kernel shows them (plus what it could not put on one), else
    per memory controller."""
    out = []
    for mc in controllers:
        dimms = [d for d in mc["dimms"] if d["ce"] is not None]
        out += [(d["key"], d["label"], d["ce"]) for d in dimms]
        if mc["ce"] is not None:
            rest = max(0, mc["ce"] - sum(d["ce"] for d in dimms))
            out.append((f"{mc['name']}/no-dimm" if dimms else mc["name"], "", rest))
    return out


def check_ecc(settings, sysfs, procfs, keep_counts=True):
    """EDAC's counters: any uncorrected error, or corrected ones at the limit."""
    controllers = _edac_counters(os.path.join(sysfs, "devices/system/edac/mc"))
    if not controllers:
        return "skip", "no EDAC memory controller (EDAC not loaded): not checked"
    now = uptime(procfs)
    limit = settings["ce_per_day_limit"]
    problems, notes = [], []
    ue = _ue_counts(controllers)
    if ue:
        problems.append("uncorrected errors: " + ", ".join(f"{n} on {w}" for w, n in ue))
    state_path = os.path.join(settings["state_dir"], "ecc.json")
    histories = _load_state(state_path).get("ce")
    histories = histories if isinstance(histories, dict) else {}
    span = "in the last 24 h" if now >= DAY else f"in the {now / 3600:.1f} h since boot"
    over, total = [], 0
    for key, label, count in _ce_counters(controllers):
        history = histories.get(key)
        history = [e for e in history if isinstance(e, list) and len(e) == 2] \
            if isinstance(history, list) else []
        n = _in_window(history, count, now)
        histories[key] = history
        total += n
        if n >= limit:
            over.append(f"{n} on {_where(key, label)}")
    if keep_counts:
        note = _save_state(state_path, {"ce": histories})
        if note:
            notes.append(note)
    if over:
        problems.append(f"corrected errors {span} at or over {limit:g}/day: {', '.join(over)}")
    extra = f" ({'; '.join(notes)})" if notes else ""
    if problems:
        return "sick", " and ".join(problems) + extra
    return "ok", (f"{len(controllers)} memory controllers, no uncorrected error, "
                  f"{total} corrected {span} (limit {limit:g}/day per DIMM){extra}")


def parse_metrics(text):
    """The fan daemon's samples: [(name, {label: value}, value)]."""
    samples = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r"([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+-?[0-9]+)?",
                         line)
        if not m:
            raise ValueError(f"line {n} is not a sample: {raw!r}")
        labels = {}
        for lm in re.finditer(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(2) or ""):
            labels[lm.group(1)] = re.sub(r"\\(.)", lambda e: "\n" if e.group(1) == "n"
                                         else e.group(1), lm.group(2))
        try:
            value = float(m.group(3))
        except ValueError:
            raise ValueError(f"line {n}: {m.group(3)!r} is not a number") from None
        samples.append((m.group(1), labels, value))
    return samples


def _openrc_state(openrc_dir, service):
    """The service's state: started, starting, stopped; None without OpenRC."""
    if not os.path.isdir(os.path.join(openrc_dir, "started")):
        return None
    for state in ("started", "starting"):
        if os.path.lexists(os.path.join(openrc_dir, state, service)):
            return state
    return "stopped"


def check_fan(node, settings, procfs, now_wall):
    """junkyard-fan regulates this node's fans (where its profile has fan zones)."""
    if node not in settings["fan_nodes"]:
        return "skip", f"the hardware profile of {node} has no fan zones: nothing to regulate"
    service, path = settings["fan_service"], settings["fan_metrics"]
    booted = uptime(procfs)
    grace = booted < settings["fan_boot_grace"]
    state = _openrc_state(settings["openrc_dir"], service)
    if state == "starting":
        # its start returns once the daemon wrote its first metrics (or gave up waiting)
        return "wait", f"{service} is starting, {booted:.0f} s after boot"
    if state == "stopped":
        if grace:
            return "wait", (f"{service} is not started yet, {booted:.0f} s after boot "
                            f"(grace {settings['fan_boot_grace']:g} s)")
        return "sick", f"{service} is not started (OpenRC)"
    try:
        age = max(0.0, now_wall - os.stat(path).st_mtime)
        text = read_text(path)
    except OSError:
        if grace:
            return "wait", (f"no metrics from {service} yet, {booted:.0f} s after boot "
                            f"(grace {settings['fan_boot_grace']:g} s)")
        return "sick", f"no metrics from {service} ({path} is missing)"
    limit = settings["fan_metrics_max_age"]
    if age > limit:
        return "sick", f"{service} metrics {age:.0f} s old (limit {limit:g} s)"
    try:
        samples = parse_metrics(text or "")
    except ValueError as err:
        return "sick", f"{service} metrics unreadable: {path} {err}"
    zones, bad, bmc, probe = set(), {}, None, None
    for name, labels, value in samples:
        if name == FAN_METRIC + "zone_state" and "zone" in labels:
            zones.add(labels["zone"])
            if value == 1 and labels.get("state") in FAN_BAD_STATES:
                bad.setdefault(labels["state"], []).append(labels["zone"])
        elif name == FAN_METRIC + "bmc_reachable":
            bmc = value == 1
        elif name == FAN_METRIC + "probe_failed":
            probe = value == 1
    problems = []
    if not zones:
        problems.append(f"{path} names no fan zone")
    for state in FAN_BAD_STATES:
        if state in bad:
            word = "zone" if len(bad[state]) == 1 else "zones"
            problems.append(f"{word} {', '.join(sorted(bad[state]))} in {state}")
    if bmc is False:
        problems.append("BMC not answering")
    if probe:
        problems.append("fans left to the BMC (junkyard-fan --probe: the fan command does "
                        "not move them)")
    if problems:
        return "sick", " and ".join(problems)
    return "ok", (f"{service} regulates {len(zones)} fan zones, metrics {age:.0f} s old "
                  f"(limit {limit:g} s)")


def check_writable(settings):
    """No persistent writable path on its tmpfs fallback (the initramfs's record)."""
    path = settings["writable_state"]
    text = read_text(path)
    if text is None:
        return "skip", f"no {path} (no junkyard initramfs on this root): not checked"
    fallback = [w[0] for w in (line.split() for line in text.splitlines())
                if len(w) >= 2 and w[1] == "tmpfs-fallback"]
    if fallback:
        whose = "its" if len(fallback) == 1 else "their"
        return "sick", f"{', '.join(fallback)} on {whose} tmpfs fallback"
    return "ok", "every writable path is mounted as configured"


def check_root(settings, procfs):
    """/ over NFS is served from the management subnet."""
    text = read_text(os.path.join(procfs, "mounts")) or ""
    root = None
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[1] == "/":
            root = fields  # the last one is on top
    if root is None:
        return "skip", f"no / in {procfs}/mounts: not checked"
    source, fstype, options = root[0], root[2], root[3]
    if fstype not in ("nfs", "nfs4"):
        return "skip", f"/ is {fstype}, not NFS: not checked"
    server = next((o[len("addr="):] for o in options.split(",") if o.startswith("addr=")),
                  None)
    if server is None:
        host = source.rsplit(":", 1)[0] if ":" in source else ""
        server = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        addr = ipaddress.ip_address(server)
    except ValueError:
        return "skip", f"/ is NFS from {source}, whose address is unknown: not checked"
    subnet = settings["mgmt_subnet"]
    if addr not in subnet:
        return "sick", f"/ from NFS server {addr}, outside the management subnet {subnet}"
    return "ok", f"/ from NFS server {addr} in the management subnet {subnet}"


# ---------------------------------------------------------------------------
# Slurm


def _scontrol(settings, args):
    env = dict(os.environ)
    # slurmd runs this program with SLURMD_NODENAME only: scontrol finds the
    # configuration slurmd fetched through SLURM_CONF.
    if "SLURM_CONF" not in env and os.path.exists(settings["slurm_conf"]):
        env["SLURM_CONF"] = settings["slurm_conf"]
    env.setdefault("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
    try:
        proc = subprocess.run([settings["scontrol"], *args], capture_output=True, text=True,
                              env=env, timeout=SCONTROL_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        return 127, "", str(err)
    return proc.returncode, proc.stdout, proc.stderr


def node_hold(settings, node):
    """Why the node must be left as it is ("" if it may be drained), or raise
    RuntimeError when its state cannot be read."""
    rc, out, errout = _scontrol(settings, ["show", "node", node])
    m = re.search(r"(?:^|\s)State=(\S+)", out)
    if rc != 0 or not m:
        raise RuntimeError(f"scontrol show node {node} failed (rc {rc}): "
                           f"{(errout or out).strip()[:200]}")
    state = m.group(1)
    flags = state.upper().split("+")
    reason_m = re.search(r"(?m)^\s*Reason=(.*?)\s*$", out)
    reason = reason_m.group(1) if reason_m else ""
    said = f"State={state}" + (f" Reason={reason}" if reason else "")
    if any(f.startswith(("DRAIN", "FAIL")) for f in flags):
        return f"drained or draining already ({said})"
    by = re.search(r"\[([^\]@]+)@[^\]]*\]$", reason)
    if flags[0] == "DOWN" and reason and (not by or by.group(1) != settings["slurm_user"]):
        return f"down by an operator ({said})"
    return ""


def drain(settings, node, reason):
    rc, out, errout = _scontrol(settings, ["update", f"nodename={node}", "state=drain",
                                           f"reason={reason}"])
    if rc != 0:
        raise RuntimeError(f"scontrol update nodename={node} state=drain failed (rc {rc}): "
                           f"{(errout or out).strip()[:200]}")


# ---------------------------------------------------------------------------


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="junkyard-slurm-health",
        description="Check this node; drain it in Slurm with a reason when it is not healthy "
                    "(never resumes it).")
    p.add_argument("--config", default=DEFAULT_CONFIG, help=f"settings (default {DEFAULT_CONFIG})")
    p.add_argument("--node", help="the node's Slurm name (default $SLURMD_NODENAME, else the "
                                  "short host name)")
    p.add_argument("--sysfs", default="/sys", help="root of sysfs (default /sys)")
    p.add_argument("--procfs", default="/proc", help="root of procfs (default /proc)")
    p.add_argument("--devfs", default="/dev", help="root of /dev (default /dev)")
    p.add_argument("--scontrol", help="scontrol command (default: the settings' scontrol)")
    p.add_argument("--dry-run", action="store_true",
                   help="say what would be done; change nothing (no drain, no ECC counts kept)")
    p.add_argument("--check-config", action="store_true",
                   help="check the settings file and exit")
    return p.parse_args(argv)


def run(args, now_wall):
    settings = read_settings(args.config)
    if args.check_config:
        print(f"{args.config}: ok")
        return 0
    if args.scontrol:
        settings["scontrol"] = args.scontrol
    node = args.node or os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    results = [
        ("gpu", *check_gpu(node, settings, args.devfs)),
        ("ecc", *check_ecc(settings, args.sysfs, args.procfs, keep_counts=not args.dry_run)),
        ("fan", *check_fan(node, settings, args.procfs, now_wall)),
        ("writable", *check_writable(settings)),
        ("root", *check_root(settings, args.procfs)),
    ]
    print(f"junkyard-slurm-health: node {node}")
    for check, state, message in results:
        print(f"  {check:<9}{state.upper():<6}{message}")
    sick = [(check, message) for check, state, message in results if state == "sick"]
    if not sick:
        print(f"{node}: healthy")
        return 0
    reason = f"{REASON_PREFIX}: " + "; ".join(f"{c}: {m}" for c, m in sick)
    try:
        hold = node_hold(settings, node)
        if hold:
            print(f"{node}: not healthy, left as it is: {hold}")
            return 1
        if args.dry_run:
            print(f"{node}: not healthy, would drain: reason={reason}")
            return 1
        drain(settings, node, reason)
    except RuntimeError as err:
        print(f"{node}: not healthy, not drained: {err}")
        return 1
    print(f"{node}: drained: reason={reason}")
    return 1


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return run(args, time.time())
    except CannotRun as err:
        print(f"junkyard-slurm-health: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
