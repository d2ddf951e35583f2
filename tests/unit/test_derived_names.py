"""No derived name is built outside the cluster model (issue 18): dataset and export paths
below <pool>/images and <pool>/nodes, the per-MAC GRUB file name, and the merge of
node_bmc_defaults with node_bmc are made in plugins/module_utils/cluster_model/ only.
Playbooks, roles and the other plugins take them from cluster_model or from the thin
filters over it (image_version, node_storage, bmc_login).

Each pattern is checked against the forms it must catch (taken from the code it replaced),
so that a pattern that matches nothing cannot pass for a clean tree."""

from __future__ import annotations

import re

import pytest

from tests.conftest import REPO

ALLOWED = ("plugins/module_utils/cluster_model/",)
SCANNED = ("playbooks", "roles", "plugins", "site.yml")
SUFFIXES = (".yml", ".yaml", ".j2", ".py")

# (what, pattern, forms it must catch, forms it must leave alone)
PATTERNS = [
    ("an image or node dataset/path built from a variable",
     re.compile(r"(\}\}|\}|~\s*['\"])\s*/?(images|nodes)/"),
     ['    __prune_root: "{{ cluster_model.pool.name }}/images/{{ __prune_image }}"',
      '        return f"{pname}/images/{image}/{version}"',
      '            path = f"{export_root}/nodes/{n[\'name\']}/{w[\'name\']}"',
      "{{ cluster_model.tftp_root ~ '/images/' ~ image }}"],
     ["      {{ 'tank/images/bookworm-rocm/2026.10.1'",
      "# /boot appears read-only at <tftp_root>/images/<image>/<version>/boot"]),
    ("a variable put into an image or node path",
     re.compile(r"(images|nodes)/\s*(\{\{|\{[A-Za-z_]|['\"]\s*~)"),
     ['        path: "{{ cluster_model.tftp_root }}/images/{{ __prune_image }}/{{ item }}/boot"',
      '    __retire_root: "{{ cluster_model.pool.name }}/nodes/{{ retire_node }}"',
      "{{ root ~ '/nodes/' ~ node }}"],
     ["#       renames tank/nodes/gpu05 to tank/archive/gpu05-<timestamp> (kept)"]),
    ("a per-MAC GRUB file name",
     re.compile(r"grub\.cfg-01-\s*(\{\{|\{[A-Za-z_]|['\"]\s*[~+])"),
     ['                "grub_config": "grub/grub.cfg-01-" + n["mgmt"]["mac"].replace(":", "-"),',
      "dest: \"{{ tftp }}/grub/grub.cfg-01-{{ mac | replace(':', '-') }}\""],
     ['  source "/grub/grub.cfg-01-${m1}-${m2}-${m3}-${m4}-${m5}-${m6}"',
      "    prune_pattern: grub.cfg-01-*"]),
    ("a merge of node_bmc_defaults and node_bmc",
     re.compile(r"node_bmc\w*(?:(?!\}\}).){0,300}?\bcombine\b|\bcombine\((?:(?!\}\}).){0,300}?"
                r"node_bmc|\{\*\*[^}\n]*,\s*\*\*[^}\n]*bmc", re.S),
     ["{{ hostvars[n].node_bmc_defaults | default({})\n   | combine(hostvars[n].node_bmc"
      " | default({})) }}",
      "                bmc_raw = {**defaults_raw, **bmc_raw}",
      "{{ {} | combine(node_bmc_defaults, node_bmc) }}"],
     ["{{ node.bmc | junkyard.cluster.bmc_login(node_bmc | default({}),\n"
      "   node_bmc_defaults | default({})) }}"]),
]


def _files():
    for top in SCANNED:
        path = REPO / top
        for f in ([path] if path.is_file() else sorted(path.rglob("*"))):
            rel = f.relative_to(REPO).as_posix()
            if f.is_file() and f.suffix in SUFFIXES and not rel.startswith(ALLOWED):
                yield rel, f.read_text(encoding="utf-8")


def _code(text):
    """The text without comment lines (YAML/Python #, Jinja {# #}): comments may say
    what a name looks like."""
    return "\n".join("" if line.lstrip().startswith(("#", "{#")) else line
                     for line in text.splitlines())


@pytest.mark.parametrize("what,pattern,bad,good", PATTERNS, ids=[p[0] for p in PATTERNS])
def test_each_pattern_catches_the_forms_it_replaced(what, pattern, bad, good):
    for line in bad:
        assert pattern.search(line), f"{what}: misses {line!r}"
    for line in good:
        assert not pattern.search(line), f"{what}: flags {line!r}"


def test_no_derived_name_is_built_outside_the_model():
    hits = []
    for rel, text in _files():
        code = _code(text)
        for what, pattern, _bad, _good in PATTERNS:
            for m in pattern.finditer(code):
                line = code.count("\n", 0, m.start()) + 1
                hits.append(f"{rel}:{line}: {what}: {m.group(0)!r}")
    assert hits == [], "built outside plugins/module_utils/cluster_model/:\n" + "\n".join(hits)
