# Copyright (c) 2026, junkyard.cluster developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Node health rendering: the health report and burn-in verdicts as Markdown and console lines.

Pure Python (stdlib only); runs in the health filters on the controller.
"""

from __future__ import annotations

from ansible_collections.junkyard.cluster.plugins.module_utils.health_parsers import DAY


def _fmt_uptime(seconds):
    if seconds is None:
        return "-"
    s = int(seconds)
    d, s = divmod(s, DAY)
    h, s = divmod(s, 3600)
    return f"{d}d {h}h" if d else f"{h}h {s // 60}m"


def _md(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def _slurm_cell(node):
    slurm = node.get("slurm")
    if not slurm:
        return "-"
    return _md(f"{slurm['state']} ({slurm['reason']})" if slurm["reason"] else slurm["state"])


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
        "| node | status | Slurm | image | uptime | hottest GPU | fan duty % | PSU "
        "| DIMM CE 24h/7d/total | flags |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for n in report["nodes"]:
        if n["status"] == "unreachable":
            lines.append(f"| {n['name']} | **unreachable** | {_slurm_cell(n)} | - | - | - | - "
                         f"| - | - | {_md(n['flags'][0]['message'])} |")
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
            f"| {n['name']} | {status} | {_slurm_cell(n)} | "
            f"{_md(n['image'].get('booted') or '?')} | "
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
