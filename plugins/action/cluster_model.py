# Copyright: junkyard.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin: validate the whole inventory once and return the cluster model.

The image state (docs/upgrades.md) comes in as arguments: ``image_state`` (the
variable cluster_image_state, a mapping or its YAML text), or
``image_state_content`` read by the cluster_model role from ``image_state_file``
on the storage head.  Neither = no state."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.parsing.vault import VaultHelper
from ansible.plugins.action import ActionBase
from ansible_collections.junkyard.cluster.plugins.module_utils.cluster_model import (
    build_model,
    merge_bmc,
)
from ansible_collections.junkyard.cluster.plugins.module_utils.cluster_model.schema import (
    CLUSTER,
    MODEL_VARIABLES,
    NAMESPACES,
)

CLUSTER_KEYS = tuple(CLUSTER)
NODE_KEYS = ("node_profile", "node_image", "node_image_version", "node_interfaces")
ROLES = Path(__file__).resolve().parents[2] / "roles"
ENV_LOOKUP_RE = re.compile(r"""(lookup|query|q)\(\s*['"](ansible\.builtin\.)?env['"]""")
ENV_DEFAULT_RE = re.compile(r"""\bdefault\s*(?:=|\()\s*(['"])(.*?)\1""")
VAR_REF_RE = re.compile(r"^\s*\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}\s*$")


def secret_verdict(value, raw_vars, depth=0):
    """Tell how a raw (untemplated) secret is supplied: vault, env, absent or plain."""
    # Vault first: comparing a vaulted value with anything decrypts it.
    if VaultHelper.get_ciphertext(value, with_tags=False) is not None:
        return "vault"
    if value is None or value == "":
        return "absent"
    if not isinstance(value, str):
        return "plain"
    if ENV_LOOKUP_RE.search(value):
        # a default= in the lookup is the password whenever the variable is unset
        default = ENV_DEFAULT_RE.search(value)
        return "env-default" if default and default.group(2) else "env"
    ref = VAR_REF_RE.match(value)
    if ref and depth < 5 and ref.group(1) in raw_vars:
        return secret_verdict(raw_vars[ref.group(1)], raw_vars, depth + 1)
    return "plain"


def render(templar, value, field, problems):
    """``value`` templated leaf by leaf; a leaf that cannot be templated (an undefined
    variable, a bad expression) is left out (None) and reported in ``problems`` as
    (field, value as written, problem), so that every such leaf is named, not the
    first one only, and in the model's form."""
    if isinstance(value, dict):
        return {k: render(templar, v, f"{field}.{k}", problems) for k, v in value.items()}
    if isinstance(value, list):
        return [render(templar, v, f"{field}[{i}]", problems) for i, v in enumerate(value)]
    try:
        return templar.template(value)
    except AnsibleError as exc:
        reason = (getattr(exc, "message", "") or str(exc)).strip().splitlines()
        problems.append((field, value, "cannot be templated: "
                         + (reason[0] if reason else type(exc).__name__)))
        return None


def role_variables(roles=ROLES):
    """{role: {variable: its argument specification, or None}} of the collection's
    roles named in its namespaces (node_image, node_network, cluster_model): their
    inputs (every entry point of meta/argument_specs.yml) and their defaults."""
    out = {}
    for role in sorted(p for p in roles.iterdir() if p.name.startswith(NAMESPACES)):
        names = {}
        defaults = role / "defaults" / "main.yml"
        if defaults.is_file():
            names.update(dict.fromkeys(yaml.safe_load(defaults.read_text()) or {}))
        specs = role / "meta" / "argument_specs.yml"
        if specs.is_file():
            for entry in ((yaml.safe_load(specs.read_text()) or {})
                          .get("argument_specs") or {}).values():
                names.update((entry or {}).get("options") or {})
        out[role.name] = dict(sorted(names.items()))
    return out


def role_values(templar, raw, names, role_vars):
    """{name: value} of the collection's roles' variables among ``names`` that the
    host's variables ``raw`` set, templated; a value that cannot be templated yet
    (it may name what the role itself defines, e.g. cluster_model) is left to the
    role."""
    declared = {k for rv in role_vars.values() for k, spec in rv.items() if spec}
    out = {}
    for name in names:
        if name in declared and name not in MODEL_VARIABLES:
            problems = []
            value = render(templar, raw.get(name), name, problems)
            if not problems:
                out[name] = value
    return out


def _parse_yaml(text, where):
    """(data, errors): YAML text parsed, or the refusal naming ``where`` and the line."""
    try:
        return yaml.safe_load(str(text)), []
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        return None, [f"{where} is not valid YAML ({problem}{at}); the image state is "
                      "written by the upgrade playbooks, see docs/upgrades.md"]


def image_state(args, head):
    """(state, where it was read or None for the variable, errors) from the action's
    arguments: the variable cluster_image_state wins over the file read on the head."""
    if args.get("image_state") is not None:
        state = args["image_state"]
        if isinstance(state, str):
            state, errors = _parse_yaml(state, "cluster: cluster_image_state")
            return state, None, errors
        return state, None, []
    if args.get("image_state_content") is not None:
        where = f"{head}:{args.get('image_state_file') or '(unnamed file)'}"
        state, errors = _parse_yaml(args["image_state_content"], where)
        return state, where, errors
    return None, None, []


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _VALID_ARGS = frozenset(("head_group", "node_group", "image_state", "image_state_file",
                             "image_state_content"))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        head_group = self._task.args.get("head_group", "storage_head")
        node_group = self._task.args.get("node_group", "gpu_nodes")
        groups = task_vars.get("groups", {})
        hostvars = task_vars["hostvars"]

        cluster, unrendered = {}, []
        problems = []
        for key in CLUSTER_KEYS:
            name = f"cluster_{key}"
            if name in task_vars:
                cluster[key] = render(self._templar, task_vars[name], name, problems)
        unrendered += [("cluster", *p) for p in problems]

        heads = groups.get(head_group, [])
        head = {}
        errors = []
        variables, values = {}, {}
        rvars = role_variables()
        if len(heads) == 1:
            raw = hostvars.raw_get(heads[0])
            variables[heads[0]] = sorted(k for k in raw if k.startswith(NAMESPACES))
            templar = self._templar.copy_with_new_env(available_variables=raw)
            values[heads[0]] = role_values(templar, raw, variables[heads[0]], rvars)
            problems = []
            head = {"name": heads[0],
                    "vars": {"head_interfaces": render(
                        templar, raw.get("head_interfaces"), "head_interfaces", problems)}}
            unrendered += [(heads[0], *p) for p in problems]
        elif len(heads) > 1:
            errors.append(f"cluster: the group {head_group} holds {len(heads)} hosts "
                          f"({', '.join(heads)}); it must hold exactly one storage head")

        nodes, secrets = {}, {}
        for host in groups.get(node_group, []):
            # One variable lookup per host (hostvars[host][key] would redo it
            # for every key), templated with that host's own variables.
            raw = hostvars.raw_get(host)
            variables[host] = sorted(k for k in raw if k.startswith(NAMESPACES))
            templar = self._templar.copy_with_new_env(available_variables=raw)
            values[host] = role_values(templar, raw, variables[host], rvars)
            problems = []
            node = {key: render(templar, raw.get(key), key, problems) for key in NODE_KEYS}
            # The one merge of node_bmc_defaults and node_bmc (the bmc_login filter
            # takes the password from the same function).
            bmc_raw = merge_bmc(raw.get("node_bmc_defaults"), raw.get("node_bmc"))
            # As written, for the check of their keys (the password's value stays here).
            node["_bmc_sources"] = {
                key: ({k: (None if k == "password" else render(templar, v, f"{key}.{k}",
                                                               problems))
                       for k, v in raw[key].items()} if isinstance(raw[key], dict)
                      else render(templar, raw[key], key, problems))
                for key in ("node_bmc", "node_bmc_defaults") if key in raw}
            if isinstance(bmc_raw, dict):
                # (each leaf's problem is reported above, as written)
                node["node_bmc"] = {k: render(templar, v, f"node_bmc.{k}", [])
                                    for k, v in bmc_raw.items() if k != "password"}
                secrets[host] = secret_verdict(bmc_raw.get("password"), raw)
            else:
                node["node_bmc"] = bmc_raw
            nodes[host] = node
            unrendered += [(host, *p) for p in problems]

        state, state_file, state_errors = image_state(
            self._task.args, head.get("name") or head_group)
        errors.extend(state_errors)
        model, model_errors = build_model(
            {"cluster": cluster, "head": head, "nodes": nodes, "secrets": secrets,
             "image_state": state, "image_state_file": state_file,
             "variables": variables, "role_variables": rvars, "role_values": values,
             "unrendered": unrendered})
        errors.extend(model_errors)
        if errors:
            raise AnsibleActionFail(
                f"The inventory is refused ({len(errors)} problem"
                f"{'s' if len(errors) != 1 else ''}):\n- " + "\n- ".join(errors),
                result={"errors": errors})
        result.update(changed=False, model=model)
        return result
