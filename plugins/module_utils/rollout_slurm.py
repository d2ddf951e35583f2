# Copyright (c) 2026, junkyard.cluster developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the rollout asks Slurm and how it reads the answers (the rollout_drain module
runs the commands).  Stdlib only.

A node the rollout drains carries a reason starting with OWN_PREFIX; that prefix is how
a later step (or a later run, after a failure) knows the rollout drained it and may
resume it.  A node drained with any other reason (an operator, the health check) is
never resumed by a rollout."""

from __future__ import annotations

import re

OWN_PREFIX = "junkyard rollout "
# the job states that occupy a node (squeue -t): a job in any of them still runs there
BUSY_STATES = "CONFIGURING,RUNNING,SUSPENDED,COMPLETING,STOPPED,SIGNALING"


def scontrol_show_nodes(scontrol):
    return [scontrol, "show", "node", "-o"]


def squeue_busy(squeue, nodes):
    return [squeue, "-h", "-t", BUSY_STATES, "-w", ",".join(nodes), "-o", "%i|%u|%N"]


def scontrol_drain(scontrol, nodes, reason):
    return [scontrol, "update", f"nodename={','.join(nodes)}", "state=drain",
            f"reason={reason}"]


def scontrol_resume(scontrol, nodes):
    return [scontrol, "update", f"nodename={','.join(nodes)}", "state=resume"]


def scancel_on(scancel, nodes):
    return [scancel, f"--nodelist={','.join(nodes)}"]


def reason_for(image, version, run_id, what=""):
    """The drain reason of a rollout (what: an addition such as 'verify failed')."""
    base = f"{OWN_PREFIX}{image}/{version} (run {run_id})"
    return f"{base}: {what}" if what else base


def expand_hostlist(expr):
    """Slurm's compressed host list (``node[01-03,07],gpu5``) as names."""
    out = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?[^,]*", expr or ""):
        m = re.fullmatch(r"([^\[]*)\[([^\]]*)\](.*)", part)
        if not m:
            out.append(part)
            continue
        prefix, ranges, suffix = m.groups()
        for rng in ranges.split(","):
            lo, _sep, hi = rng.partition("-")
            if not hi:
                out.append(f"{prefix}{lo}{suffix}")
                continue
            width = len(lo)
            out += [f"{prefix}{i:0{width}d}{suffix}" for i in range(int(lo), int(hi) + 1)]
    return out


def parse_nodes(text):
    """``scontrol show node -o``: node -> {state, flags, reason}.  State is the base state
    (IDLE, ALLOCATED, MIXED, DOWN, ...), flags the rest (DRAIN, NOT_RESPONDING, ...);
    Reason may hold spaces: it runs to its ``[user@time]`` stamp (dropped)."""
    nodes = {}
    for line in (text or "").splitlines():
        head, _sep, reason = line.partition(" Reason=")
        fields = dict(f.split("=", 1) for f in head.split() if "=" in f)
        name = fields.get("NodeName")
        if not name:
            continue
        # a trailing * (not responding) may sit on any part: DOWN*+DRAIN
        base, *flags = [s.rstrip("*") for s in fields.get("State", "UNKNOWN").split("+")]
        # the reason ends at its "[user@time]" stamp (fields such as Comment= may follow)
        stamped = re.match(r"(.*?)\s*\[[^\]\s]*@\d{4}-[\d:T-]+\]", reason)
        reason = stamped.group(1) if stamped else reason.strip()
        nodes[name] = {"state": base, "flags": flags, "reason": "" if reason == "(null)"
                       else reason}
    return nodes


def drained(info):
    """Whether the node has the drain flag (drained or draining)."""
    return "DRAIN" in info["flags"] or info["state"] in ("DRAIN", "DRAINED", "DRAINING")


def ours(info):
    return drained(info) and info["reason"].startswith(OWN_PREFIX)


def parse_jobs(text, nodes):
    """``squeue -o %i|%u|%N``: node -> ["<job id> (<user>)", ...] for the nodes asked."""
    wanted, busy = set(nodes), {}
    for line in (text or "").splitlines():
        parts = line.strip().split("|")
        if len(parts) != 3:
            continue
        job, user, where = parts
        for node in expand_hostlist(where):
            if node in wanted:
                busy.setdefault(node, []).append(f"{job} ({user})")
    return busy


def plan_drain(infos, nodes):
    """Split the wave: nodes to drain now, nodes a rollout drained before (resumable),
    nodes drained for another reason (left drained afterwards)."""
    to_drain = [n for n in nodes if not drained(infos[n])]
    earlier = [n for n in nodes if ours(infos[n])]
    admin = {n: infos[n]["reason"] for n in nodes if drained(infos[n]) and not ours(infos[n])}
    return to_drain, earlier, admin
