# Copyright (c) 2026, junkyard.cluster developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""``items | junkyard.cluster.template_each(template, variables)``: one template file
rendered once per item, in one pass, on the controller.

Returns a list of strings, in item order: the template rendered with ``item`` set to
each item, plus ``variables`` and the variables ``ansible.builtin.template`` adds
(``ansible_managed`` from the configuration unless ``variables`` gives one,
``template_path``, ``template_host``, ...).  The template sees nothing else: a variable
it uses and ``variables`` lacks is an error, never a silent empty string.

Why not ``lookup('ansible.builtin.template', ...)`` once per item: each lookup copies
every variable of the task (the cluster model included, which grows with the node
count), so N lookups cost O(N^2): 120 nodes took 29 s, 600 would take minutes.  Here
the template is compiled once and rendered for every item by one Jinja loop
(``{% include %}``) through Ansible's own template engine, with the template action's
options (trailing newlines kept as in the source, backslashes not escaped), so each
result is byte for byte what ``ansible.builtin.template`` writes.
"""

from __future__ import annotations

import os
import uuid

from ansible.errors import AnsibleFilterError
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, generate_ansible_template_vars, trust_as_template


def _trailing_newlines(text):
    return len(text) - len(text.rstrip("\n"))


def template_each(items, template, variables=None):
    """Render the template file ``template`` (an absolute path) once per item."""
    if not isinstance(template, str) or not os.path.isabs(template):
        raise AnsibleFilterError(f"template_each: template {template!r} must be an absolute "
                                 "path (e.g. role_path ~ '/templates/x.j2')")
    if variables is not None and not isinstance(variables, dict):
        raise AnsibleFilterError(f"template_each: variables must be a mapping, got "
                                 f"{type(variables).__name__}")
    items = list(items or [])
    try:
        with open(template, encoding="utf-8") as f:
            source = f.read()
    except OSError as exc:
        raise AnsibleFilterError(f"template_each: cannot read {template}: {exc}") from exc
    # The pieces are told apart by a separator no template output contains.
    separator = f"\0{uuid.uuid4().hex}\0"
    context = generate_ansible_template_vars(path=template, fullpath=template)
    context.update(variables or {})
    context.update(__template_each_items=items, __template_each_separator=separator,
                   __template_each_name=os.path.basename(template))
    loop = trust_as_template(
        "{% for item in __template_each_items %}{{ __template_each_separator }}"
        "{% include __template_each_name %}{% endfor %}")
    templar = Templar(loader=DataLoader(), variables=context).copy_with_new_env(
        searchpath=[os.path.dirname(template)])
    rendered = templar.template(loop, escape_backslashes=False, preserve_trailing_newlines=False)
    pieces = str(rendered).split(separator)[1:]
    if len(pieces) != len(items):
        raise AnsibleFilterError(f"template_each: {template} rendered {len(pieces)} pieces "
                                 f"for {len(items)} items")
    # {% include %} drops the template's final newline; ansible.builtin.template keeps
    # as many trailing newlines as the source has.
    wanted = _trailing_newlines(source)
    return [p + "\n" * max(0, wanted - _trailing_newlines(p)) for p in pieces]


class FilterModule:
    """junkyard.cluster template_each filter."""

    def filters(self):
        return {"template_each": template_each}
