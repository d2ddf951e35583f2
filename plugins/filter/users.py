# Copyright (c) 2026, junkyard.cluster developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter of the cluster_users role.

- ``account_clashes(user, passwd, group)``: what already on a system stands in
  the way of a cluster user (``cluster_model.users.accounts[]``), given the
  system's ``getent passwd`` and ``getent group`` (the getent module's facts):
  an account or group of the user's name with other numbers, or the user's uid
  or gid taken by another name.  An empty list when nothing does.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError


def _number(entry):
    try:
        return int(entry[1])
    except (IndexError, TypeError, ValueError):
        return None


def _clashes(kind, field, name, number, table):
    out = []
    for other, entry in sorted((table or {}).items()):
        have = _number(entry)
        if other == name and have != number:
            out.append(f"the {kind} {name} exists with {field} {have}, not {number}")
        elif other != name and have == number:
            out.append(f"{field} {number} is the {kind} {other}'s")
    return out


def account_clashes(user, passwd, group):
    """The clashes of ``user`` with ``passwd`` and ``group`` (name -> fields after
    the name, as getent gives them)."""
    if not isinstance(user, dict) or not {"name", "uid", "gid"} <= set(user):
        raise AnsibleFilterError("account_clashes: the input must be a user of "
                                 "cluster_model.users.accounts")
    return (_clashes("user", "uid", user["name"], user["uid"], passwd)
            + _clashes("group", "gid", user["name"], user["gid"], group))


class FilterModule:
    """The cluster users' checks."""

    def filters(self):
        return {"account_clashes": account_clashes}
