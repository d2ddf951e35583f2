"""No derived name is built outside the cluster model (issue 18): dataset and export paths
below <pool>/images and <pool>/nodes, the per-MAC GRUB file name, and the merge of
node_bmc_defaults with node_bmc are made in plugins/module_utils/cluster_model/ only.
Playbooks, roles and the other plugins take them from cluster_model or from the thin
filters over it (image_version, node_storage, bmc_login).

Playbooks go further: they read no raw cluster_* variable (cluster_model only) and their
templates derive nothing (the day-2 playbooks that became roles template their hosts only).

Each pattern is checked against the forms it must catch (taken from the code it replaced),
so that a pattern that matches nothing cannot pass for a clean tree."""

from __future__ import annotations

import re

import pytest
import yaml

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


# --- playbooks read the model and call roles ---------------------------------------------
#
# A playbook is a story of role calls (issue 18): it reads no raw cluster_* variable (the
# roles and the model do; cluster_model is what it may read), and its templates derive
# nothing: a default for a command-line name or the play's hosts is all they do.  Checked
# in what Ansible templates: every "{{ }}" / "{% %}" and every conditional (when, that,
# failed_when, changed_when, until).

PLAYBOOKS = sorted([*(REPO / "playbooks").glob("*.yml"), REPO / "site.yml"])
CONDITIONALS = ("when", "that", "failed_when", "changed_when", "until")
JINJA = re.compile(r"\{\{(.*?)\}\}|\{%(.*?)%\}", re.S)
RAW_CLUSTER = re.compile(r"(?<![\w.'\"])cluster_(?!model\b)\w+")
# a filter other than default, a ~ concatenation, or a call that computes a value
DERIVATION = re.compile(r"\|\s*(?!(?:default|d)\b)[A-Za-z_][\w.]*|~|"
                        r"(?<![\w.])(?:now|lookup|query|q|range)\s*\(")
# Playbooks that still derive in their templates, and why (each must still do so: the
# list only shrinks).
DERIVING: dict[str, str] = {}
# The day-2 playbooks that are roles now: their one template is the play's hosts.
THIN = ("playbooks/discover.yml", "playbooks/health_report.yml",
        "playbooks/retire_node_datasets.yml")


def _expressions(node, key=None, path=""):
    """(path, expression) of every template and conditional in a loaded playbook."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _expressions(v, k, f"{path}.{k}" if path else str(k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _expressions(v, key, f"{path}[{i}]")
    elif isinstance(node, str):
        if key in CONDITIONALS:
            yield path, node
        else:
            for m in JINJA.finditer(node):
                yield path, m.group(1) if m.group(1) is not None else m.group(2)


def _playbook_expressions(path):
    return list(_expressions(yaml.safe_load(path.read_text(encoding="utf-8"))))


def test_the_playbook_patterns_catch_the_forms_they_replaced():
    raw = "{{ (cluster_hardware_profiles[node_profile].memory | default({})).dimm_labels }}"
    assert [e for _p, e in _expressions({"expected_labels": raw})] == [raw[2:-2]]
    assert RAW_CLUSTER.search(raw) and RAW_CLUSTER.search("cluster_slurm is defined")
    assert list(_expressions({"when": "cluster_users | length > 0"}))
    for fine in ("cluster_model.slurm.controller.name", "hostvars[h].cluster_model",
                 "junkyard.cluster.cluster_users", "'cluster_users'"):
        assert not RAW_CLUSTER.search(fine), fine
    # not templated: a role name, a role parameter's name
    assert list(_expressions({"name": "junkyard.cluster.cluster_users",
                              "cluster_users_homes": False})) == []
    for derived in ("discover_dir | default(inventory_dir ~ '/discovered')",
                    "now(utc=true, fmt='%Y%m%dT%H%M%SZ')",
                    "cluster_model | junkyard.cluster.node_storage(retire_node)",
                    "cluster_model.nodes | selectattr('name', 'equalto', inventory_hostname)"):
        assert DERIVATION.search(derived), derived
    for plain in ("health_report_nodes | default(health_nodes | default('gpu_nodes'))",
                  "version | d(upgrade_version)", "burn_in_node"):
        assert not DERIVATION.search(plain), plain


def test_no_playbook_reads_a_raw_cluster_variable():
    hits = [f"{p.relative_to(REPO)}: {where}: {m.group(0)}"
            for p in PLAYBOOKS for where, expr in _playbook_expressions(p)
            for m in RAW_CLUSTER.finditer(expr)]
    assert hits == [], "read cluster_model (or a role) instead:\n" + "\n".join(hits)


def test_playbook_templates_derive_nothing():
    deriving = {}
    for p in PLAYBOOKS:
        rel = p.relative_to(REPO).as_posix()
        hits = [f"{where}: {expr.strip()}" for where, expr in _playbook_expressions(p)
                if DERIVATION.search(expr)]
        if hits:
            deriving[rel] = hits
    unexpected = {k: v for k, v in deriving.items() if k not in DERIVING}
    assert unexpected == {}, "derived in a playbook (a role's job):\n" + "\n".join(
        f"{k}: {h}" for k, v in unexpected.items() for h in v)
    assert sorted(set(DERIVING) - set(deriving)) == [], "no longer deriving: drop from DERIVING"


@pytest.mark.parametrize("rel", THIN)
def test_a_day2_playbook_templates_its_hosts_only(rel):
    found = _playbook_expressions(REPO / rel)
    assert [w for w, _e in found if not re.fullmatch(r"\[\d+\]\.hosts", w)] == [], found


# --- roles take their defaults from the model ----------------------------------------------
#
# A role's defaults and vars read cluster_model, never a raw cluster_* variable (issue 18):
# what the inventory says reaches a role validated.  The scalars below are the leftovers,
# read as the inventory writes them (a proxy URL, a time zone): the list may only shrink.
# (the cluster_model role reads the inventory: that is its job, and its own variables are
# named cluster_model_*)
ROLE_DEFAULTS = sorted(p for p in [*REPO.glob("roles/*/defaults/main.yml"),
                                   *REPO.glob("roles/*/vars/main.yml")]
                       if p.parts[-3] != "cluster_model")
RAW_DEFAULTS = {
    "roles/common/defaults/main.yml": {"cluster_apt_proxy", "cluster_timezone"},
    "roles/node_image/defaults/main.yml": {"cluster_apt_proxy"},
}


def test_role_defaults_read_the_model_not_the_raw_inventory():
    found = {}
    for path in ROLE_DEFAULTS:
        rel = path.relative_to(REPO).as_posix()
        names = {m.group(0) for _w, expr in _playbook_expressions(path)
                 for m in RAW_CLUSTER.finditer(expr)}
        if names:
            found[rel] = names
    assert found == RAW_DEFAULTS


def test_the_role_defaults_check_sees_a_raw_read():
    raw = {"gpu_fan_daemon_profiles": "{{ cluster_hardware_profiles }}",
           "x": "{{ cluster_model.hardware_profiles }}"}
    assert [m.group(0) for _w, e in _expressions(raw) for m in RAW_CLUSTER.finditer(e)] \
        == ["cluster_hardware_profiles"]
