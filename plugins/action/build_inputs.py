# Copyright: junkyard.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin: the digest of everything a build reads on the controller.

An image version is converged by the roles of ``playbooks/image_build.yml``
through the chroot connection.  What decides its content is (1) the files of
the collection those roles read (tasks, templates, files, defaults, the
plugins they call, the fan daemon's sources) and (2) the host's variables
(inventory, extra vars, the cluster model).  The digest covers both, so that a
build can be skipped when nothing it reads has changed since the version was
last converged (see docs/image.md, "Up to date with its inputs").

Variables are hashed as written (untemplated): magic and connection variables
(``ansible_*``, ``hostvars``, ``groups``, paths of the inventory and the
playbook) are left out, so the digest does not depend on where the checkout
lives, and so are the internal ``__*`` ones (registered results, which carry
times such as a file's atime); a vaulted value counts by its ciphertext and is never decrypted.
Variables that only say how or where a build runs (``exclude``: the tree's
location, the connection, a seed to start from) do not count, so a tree built
elsewhere with the same inputs (the lab's seed) counts as converged; variables
that read something through a lookup (``resolve``: authorized keys from a
file) count by their value."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.text.converters import to_text
from ansible.parsing.vault import VaultHelper
from ansible.plugins.action import ActionBase

COLLECTION_ROOT = Path(__file__).resolve().parents[2]

# Variables Ansible itself provides (or that only say where things are): they
# do not feed the build, and some change on every run or checkout.
MAGIC_VARIABLES = frozenset((
    "hostvars", "groups", "group_names", "inventory_hostname", "inventory_hostname_short",
    "inventory_dir", "inventory_file", "playbook_dir", "play_hosts", "role_names",
    "role_name", "role_path", "role_uuid", "omit", "environment", "vars",
))
SKIPPED_DIRS = frozenset(("__pycache__", ".pytest_cache", "build", ".mypy_cache"))


def _plain(value):
    """A JSON-able form of a raw variable: vaulted values by their ciphertext."""
    ciphertext = VaultHelper.get_ciphertext(value, with_tags=False)
    if ciphertext is not None:
        return {"vault": to_text(ciphertext)}
    if isinstance(value, dict):
        return {to_text(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return to_text(value)


def _without(value, keys):
    """A mapping without ``keys`` (a value that is no mapping as it is)."""
    if isinstance(value, dict):
        return {k: v for k, v in value.items() if k not in keys}
    return value


def variables_digest(task_vars, exclude=(), resolved=None):
    """(sha256 hex, names) of the variables that feed a build.

    ``exclude`` names variables (``name``) or keys of a mapping variable
    (``name.key``) that say only how or where the build runs, not what it
    builds.  ``resolved`` maps names to their templated values, which count
    instead of the text (variables that read the environment or a file through
    a lookup: their text stays the same when what they read changes)."""
    resolved = resolved or {}
    whole = {e for e in exclude if "." not in e}
    keys: dict[str, set[str]] = {}
    for entry in exclude:
        if "." in entry:
            name, key = entry.split(".", 1)
            keys.setdefault(name, set()).add(key)
    names = sorted(k for k in task_vars
                   if k not in MAGIC_VARIABLES and k not in whole
                   and not k.startswith(("ansible_", "__")))
    blob = json.dumps({k: _plain(_without(resolved[k] if k in resolved else task_vars[k],
                                          keys.get(k, ())))
                       for k in names}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest(), names


def files_digest(paths, root=COLLECTION_ROOT):
    """(sha256 hex, file count) over the files under ``paths`` (relative to the
    collection root), by relative name and content, in a stable order."""
    digest = hashlib.sha256()
    count = 0
    for rel in sorted(set(paths)):
        base = (root / rel).resolve()
        if not base.exists():
            raise AnsibleActionFail(f"build input {rel} does not exist under {root}")
        files = [base] if base.is_file() else sorted(
            p for p in base.rglob("*")
            if p.is_file() and not SKIPPED_DIRS.intersection(p.relative_to(base).parts)
            and p.suffix != ".pyc")
        for path in files:
            name = path.relative_to(root.resolve()) if path.is_relative_to(root.resolve()) \
                else Path(rel) / path.relative_to(base)
            digest.update(f"{name}\0".encode())
            digest.update(hashlib.sha256(path.read_bytes()).digest())
            count += 1
    return digest.hexdigest(), count


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _VALID_ARGS = frozenset(("paths", "exclude", "resolve"))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        paths = self._task.args.get("paths")
        if not isinstance(paths, list) or not paths or \
                not all(isinstance(p, str) and p and not p.startswith("/") for p in paths):
            raise AnsibleActionFail(
                f"paths must be a non-empty list of paths relative to the collection root "
                f"(roles/..., plugins/...), not {paths!r}")
        lists = {}
        for opt in ("exclude", "resolve"):
            value = self._task.args.get(opt) or []
            if not isinstance(value, list) or \
                    not all(isinstance(v, str) and v and not v.startswith("__") for v in value):
                raise AnsibleActionFail(f"{opt} must be a list of variable names, not {value!r}")
            lists[opt] = value
        task_vars = task_vars or {}
        templar = self._templar.copy_with_new_env(available_variables=task_vars)
        resolved = {}
        for name in lists["resolve"]:
            if name in task_vars:
                try:
                    resolved[name] = templar.template(task_vars[name])
                except Exception as exc:  # any templating error, named with the variable
                    raise AnsibleActionFail(
                        f"build input {name} could not be resolved: {exc}") from exc
        files, count = files_digest(paths)
        variables, names = variables_digest(task_vars, lists["exclude"], resolved)
        digest = hashlib.sha256(f"files {files}\nvariables {variables}\n".encode()).hexdigest()
        result.update(changed=False, digest=digest, files_digest=files, file_count=count,
                      variables_digest=variables, variable_count=len(names))
        return result
