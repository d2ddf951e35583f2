# Copyright (c) 2026, junkyard.cluster developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters that turn the cluster model into Prometheus' scrape targets and
the per-profile alert limits (roles/monitoring)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError


def _port(port, what):
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise AnsibleFilterError(f"{what} {port!r} is not a TCP port (1-65535)")
    return port


def prometheus_targets(model, exporter_port=9100):
    """Static scrape groups of the node exporters: the head's, then one per
    node on its management address, labelled with the node's name and
    hardware profile (the alert rules match limits by profile).

    Returns ``{"head": [group], "nodes": [group, ...]}``, each group
    ``{"targets": ["<ip>:<port>"], "labels": {...}}``."""
    port = _port(exporter_port, "exporter port")
    head = model["head"]
    out = {"head": [{"targets": [f"{head['mgmt']['ip']}:{port}"],
                     "labels": {"node": head["name"], "role": "head"}}],
           "nodes": []}
    for n in sorted(model["nodes"], key=lambda n: n["name"]):
        ip = (n.get("mgmt") or {}).get("ip")
        if not ip:
            raise AnsibleFilterError(f"{n['name']}: mgmt.ip missing, it cannot be scraped")
        out["nodes"].append({"targets": [f"{ip}:{port}"],
                             "labels": {"node": n["name"], "profile": n["profile"]}})
    return out


def gpu_temp_limits(model, default_c=85, per_profile=None):
    """``[{"profile", "limit_c"}]`` for every hardware profile a node boots
    with: the profile's entry of ``per_profile``, else ``default_c`` (the
    fan daemon's default control.gpu.temp_limit_c)."""
    per_profile = dict(per_profile or {})
    used = sorted({n["profile"] for n in model["nodes"]})
    unknown = sorted(set(per_profile) - set(used))
    if unknown:
        raise AnsibleFilterError(
            f"monitoring_gpu_temp_limits names {', '.join(unknown)}, which no node uses "
            f"(profiles in use: {', '.join(used) or 'none'})")
    out = []
    for profile in used:
        limit = per_profile.get(profile, default_c)
        where = (f"monitoring_gpu_temp_limits.{profile}" if profile in per_profile
                 else "monitoring_gpu_temp_limit_c")
        if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not 0 < limit < 150:
            raise AnsibleFilterError(
                f"{where}: {limit!r} is not a temperature in degrees Celsius (0-150)")
        out.append({"profile": profile, "limit_c": limit})
    return out


class FilterModule:
    def filters(self):
        return {
            "junkyard_prometheus_targets": prometheus_targets,
            "junkyard_gpu_temp_limits": gpu_temp_limits,
        }
