# Copyright (c) 2026, junkyard.cluster developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters for the health report, the burn-in verdict and the rasdaemon DIMM labels.

The logic lives in module_utils: health_parsers, health_assess, health_labels, health_render.
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.junkyard.cluster.plugins.module_utils import (
    health_assess,
    health_labels,
    health_parsers,
    health_render,
)


def _wrap(fn):
    def inner(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except health_parsers.HealthError as err:
            raise AnsibleFilterError(str(err)) from None
    inner.__name__ = fn.__name__
    inner.__doc__ = fn.__doc__
    return inner


def health_report(hosts, model=None, thresholds=None, now=None, slurm=None):
    return health_assess.build_report(hosts, model, thresholds, now, slurm)


def health_collect(hostvars, names, keys):
    return health_assess.collect_results(hostvars, names, keys)


def health_expected_mounts(model, node, include_data=True):
    nodes = {n.get("name"): n for n in (model or {}).get("nodes", [])}
    if node not in nodes:
        raise health_parsers.HealthError(f"{node} is not a node of cluster_model "
                                         f"({', '.join(sorted(nodes)) or 'none'})")
    return health_assess.expected_mounts(nodes[node], model.get("data_datasets", []), include_data)


def health_dimm_labels(labels, default_locations="{index}.0.0,{index}.1.0", where="dimm_labels"):
    return health_labels.dimm_label_entries(labels, default_locations, where)


def health_label_files(profiles, boards=None, default_locations="{index}.0.0,{index}.1.0"):
    return health_labels.label_files(profiles, boards, default_locations)


def health_burn_in_verdict(before, after, samples, gpu_temp_limit_c=95.0, stress=None,
                           gpu_expected=False):
    return health_assess.burn_in_verdict(before, after, samples, gpu_temp_limit_c, stress,
                                         gpu_expected)


def health_burn_in_markdown(verdict, node, settings=None):
    return health_render.burn_in_markdown(node, verdict, settings)


def health_parse_prometheus(text):
    return [{"name": n, "labels": lab, "value": health_parsers._num(v)}
            for n, lab, v in health_parsers.parse_prometheus(text)]


class FilterModule:
    def filters(self):
        return {
            "health_report": _wrap(health_report),
            "health_collect": _wrap(health_collect),
            "health_markdown": _wrap(health_render.report_markdown),
            "health_summary": _wrap(health_render.report_summary),
            "health_expected_mounts": _wrap(health_expected_mounts),
            "health_dimm_labels": _wrap(health_dimm_labels),
            "health_label_files": _wrap(health_label_files),
            "health_burn_in_verdict": _wrap(health_burn_in_verdict),
            "health_parse_prometheus": _wrap(health_parse_prometheus),
            "health_burn_in_markdown": _wrap(health_burn_in_markdown),
        }
