#!/usr/bin/python
# Copyright: junkyard.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: file_set
short_description: Make a directory hold exactly a given set of files, in one call
version_added: 0.1.0
description:
  - Writes every file of O(files) into the directory O(path) and removes the files
    matching O(prune_pattern) that are not in the set, in one module run. Per-node
    files (one GRUB configuration per MAC, for example) then cost one task however
    many nodes there are, where a loop of M(ansible.builtin.template) or
    M(ansible.builtin.copy) costs one remote round trip per file.
  - Reads the directory once and rewrites only the files whose content, mode, owner or
    group differ. Each is written to a temporary file in the same directory, given its
    mode and owner, synced, and renamed over the old one, so a reader (a TFTP server)
    sees either the old file or the new one, never a partial file.
  - Removes only entries whose name matches O(prune_pattern) (regular files and
    symbolic links; directories are left alone and reported in RV(skipped)). Without
    O(prune_pattern) nothing is removed. Nothing else in the directory is touched.
  - Refuses, before changing anything, a O(path) that is not a directory, a file name
    with a slash, C(.), C(..) or NUL, a name given twice, a non-string content, an
    entry of the set that exists as a directory or special file, and an unknown user
    or group.
attributes:
  check_mode:
    support: full
    description: >-
      Reads the directory and reports RV(written), RV(removed) and the diff; writes and
      removes nothing. A missing O(path) counts as an empty directory in check mode (the
      task that creates it did not run), and as an error otherwise.
  diff_mode:
    support: full
    description: >-
      One before/after entry per changed file (content, and mode/owner in the headers)
      for the first O(diff_max_files) files in name order, then one line counting the
      others, so a run over hundreds of files prints a bounded diff.
options:
  path:
    description: The directory. It must exist (create it with M(ansible.builtin.file)).
    type: path
    required: true
  files:
    description:
      - The files the directory must hold, as a mapping of file name to content, or a
        list of mappings with the keys C(name) and C(content).
      - Names are plain file names (no slash, not C(.) or C(..)); content is text,
        written as UTF-8 exactly as given (no newline is added).
      - An empty set is allowed (with O(prune_pattern), it removes every matching file).
    type: raw
    required: true
  mode:
    description: >-
      Octal permissions of every file of the set, as a string (V("0644")) or the
      integer YAML reads from an unquoted C(0644). Symbolic modes are not supported.
    type: raw
    default: "0644"
  owner:
    description: User (name or number) owning every file of the set; unset, files are
      created as the connecting user and existing owners are not compared.
    type: str
  group:
    description: Group (name or number) of every file of the set; unset, not managed.
    type: str
  prune_pattern:
    description:
      - A glob (Python C(fnmatch) syntax, case-sensitive, no slash) of the file names this set
        owns. Entries of O(path) that match it and are not in O(files) are removed.
      - Unset, nothing is removed.
    type: str
  diff_max_files:
    description: How many changed files get a full before/after diff; the others are
      counted in one line.
    type: int
    default: 10
notes:
  - Every file's content is a module argument, so Ansible would log it to the target's
    syslog/journal with the invocation; for large sets set the variable
    C(ansible_no_target_syslog) to V(true) on the task. The result's C(invocation) lists
    the file names and sizes rather than echoing the contents back.
  - Files are created with the directory's default SELinux context (no context is
    copied from the file they replace).
seealso:
  - module: ansible.builtin.template
  - module: ansible.builtin.copy
author:
  - junkyard.cluster developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Write every node's GRUB configuration and remove those of MACs that left the inventory
  junkyard.cluster.file_set:
    path: /srv/tftp/grub
    files: "{{ dict(__names | zip(__contents)) }}"
    prune_pattern: grub.cfg-01-*
    owner: root
    group: root
    mode: "0644"
  vars:
    ansible_no_target_syslog: true
    __names: "{{ entries | map(attribute='file') | list }}"
    __contents: >-
      {{ entries | junkyard.cluster.template_each(role_path ~ '/templates/node.cfg.j2') }}

- name: Two files given as a list; nothing is pruned
  junkyard.cluster.file_set:
    path: /etc/junkyard/motd.d
    files:
      - name: 10-cluster
        content: "jylab cluster\n"
      - name: 20-contact
        content: "ops@example.invalid\n"
    mode: "0644"
"""

RETURN = r"""
path:
  description: The directory.
  returned: always
  type: str
  sample: /srv/tftp/grub
written:
  description: Names of the files written (created, or content/mode/owner changed), in
    name order; in check mode, those that would be.
  returned: always
  type: list
  elements: str
  sample: [grub.cfg-01-52-54-00-77-00-11]
removed:
  description: Names of the files removed because they match O(prune_pattern) and are
    not in the set; in check mode, those that would be.
  returned: always
  type: list
  elements: str
  sample: [grub.cfg-01-52-54-00-77-00-99]
unchanged:
  description: How many files of the set were already as wanted.
  returned: always
  type: int
  sample: 598
skipped:
  description: Directories matching O(prune_pattern), left alone.
  returned: always
  type: list
  elements: str
"""


from ansible.module_utils.basic import AnsibleModule
from ansible_collections.junkyard.cluster.plugins.module_utils.file_set import (
    FileSetError,
    apply,
    check_pattern,
    diff,
    normalise_files,
    parse_mode,
    plan,
    resolve_group,
    resolve_user,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            files=dict(type="raw", required=True),
            mode=dict(type="raw", default="0644"),
            owner=dict(type="str"),
            group=dict(type="str"),
            prune_pattern=dict(type="str"),
            diff_max_files=dict(type="int", default=10),
        ),
        supports_check_mode=True,
    )
    p = module.params
    files = p["files"] if isinstance(p["files"], (dict, list)) else None
    invocation = {"module_args": dict(
        p, files={str(n): f"({len(c)} characters)" for n, c in _pairs(files)})}
    try:
        wanted = normalise_files(p["files"])
        change = plan(p["path"], wanted, parse_mode(p["mode"]), resolve_user(p["owner"]),
                      resolve_group(p["group"]), check_pattern(p["prune_pattern"]),
                      missing_ok=module.check_mode)
        if not module.check_mode:
            apply(change)
    except (FileSetError, OSError) as exc:
        module.fail_json(msg=str(exc), invocation=invocation)
    result = {
        "changed": change.changed,
        "path": p["path"],
        "written": [c.name for c in change.writes],
        "removed": [c.name for c in change.removes],
        "unchanged": change.unchanged,
        "skipped": change.skipped,
        "invocation": invocation,
    }
    if change.skipped:
        module.warn(f"{p['path']}: directories matching prune_pattern {p['prune_pattern']} "
                    f"were left alone: {', '.join(change.skipped)}")
    if module._diff and change.changed:
        result["diff"] = diff(change, p["diff_max_files"])
    module.exit_json(**result)


def _pairs(files):
    """(name, content) of ``files`` for the invocation summary, whatever its shape."""
    if isinstance(files, dict):
        return [(n, c if isinstance(c, str) else "") for n, c in files.items()]
    return [(e.get("name"), e.get("content") if isinstance(e.get("content"), str) else "")
            for e in files or [] if isinstance(e, dict)]


if __name__ == "__main__":
    main()
