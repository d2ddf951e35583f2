"""The cluster_users role's check of the accounts a system already has
(plugins/filter/users.py), on getent tables as the getent module gives them."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.junkyard.cluster.plugins.filter.users import account_clashes

ALICE = {"name": "alice", "uid": 2001, "gid": 2001}
PASSWD = {"root": ["x", "0", "0", "root", "/root", "/bin/bash"],
          "debian": ["x", "1000", "1000", "", "/home/debian", "/bin/bash"]}
GROUP = {"root": ["x", "0", ""], "render": ["x", "105", ""], "debian": ["x", "1000", ""]}


def test_a_new_user_on_a_fresh_system_clashes_with_nothing():
    assert account_clashes(ALICE, PASSWD, GROUP) == []


def test_the_same_account_again_clashes_with_nothing():
    passwd = {**PASSWD, "alice": ["x", "2001", "2001", "", "/home/alice", "/bin/bash"]}
    group = {**GROUP, "alice": ["x", "2001", ""]}
    assert account_clashes(ALICE, passwd, group) == []


def test_an_account_of_the_name_with_another_uid_is_named():
    passwd = {**PASSWD, "alice": ["x", "1001", "1001", "", "/home/alice", "/bin/bash"]}
    group = {**GROUP, "alice": ["x", "1001", ""]}
    assert account_clashes(ALICE, passwd, group) == [
        "the user alice exists with uid 1001, not 2001",
        "the group alice exists with gid 1001, not 2001"]


def test_numbers_taken_by_another_name_are_named():
    passwd = {**PASSWD, "carol": ["x", "2001", "2001", "", "/home/carol", "/bin/sh"]}
    group = {**GROUP, "staff2": ["x", "2001", ""]}
    assert account_clashes(ALICE, passwd, group) == [
        "uid 2001 is the user carol's", "gid 2001 is the group staff2's"]


def test_anything_but_a_model_user_is_refused():
    with pytest.raises(AnsibleFilterError, match=r"cluster_model\.users\.accounts"):
        account_clashes({"name": "alice"}, PASSWD, GROUP)
