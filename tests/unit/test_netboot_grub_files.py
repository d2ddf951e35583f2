"""The netboot role's per-MAC GRUB files: the role's own file_set task (read from
roles/netboot/tasks/grub_nodes.yml, which grub.yml and boot_entries.yml import; run by
ansible-playbook on this machine) writes files byte-identical to what
ansible.builtin.template wrote from the same template, one file per node, removes files
of MACs that left, keeps the rest of the directory, and changes nothing on a second
run.  Also the template_each filter's own contract."""

from __future__ import annotations

import copy
import grp
import os
import pwd
import subprocess
import sys

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.junkyard.cluster.plugins.filter import netboot as nb
from ansible_collections.junkyard.cluster.plugins.filter.template_each import template_each
from test_netboot_filters import lab_model

from tests.conftest import REPO

ROLE = REPO / "roles" / "netboot"
TEMPLATE = ROLE / "templates" / "tftp_root" / "grub" / "grub.cfg-01-mac.j2"


def role_task():
    """The role's task that writes the per-MAC files (found by its module)."""
    tasks = yaml.safe_load((ROLE / "tasks" / "grub_nodes.yml").read_text())
    found = [t for t in tasks if "junkyard.cluster.file_set" in t]
    assert len(found) == 1, "grub_nodes.yml must write the per-MAC files with one file_set task"
    return copy.deepcopy(found[0])


def entries():
    """The lab's nodes, plus one whose command line needs GRUB quoting and backslashes and
    that a rollout reverted, for a reason on several lines with GRUB's syntax in it."""
    model = lab_model()
    odd = copy.deepcopy(model["nodes"][0])
    odd["name"] = "odd01"
    odd["mgmt"]["mac"] = "52:54:00:77:00:aa"
    odd["boot"]["grub_config"] = "grub/grub.cfg-01-52-54-00-77-00-aa"
    odd["boot"]["cmdline"] += " quiet x=it's path=C:\\boot\\n $var {a}"
    odd["image_reverted"] = {
        "image": "bookworm", "version": "v2", "to": "v1", "at": "2026-12-07T01:02:03Z",
        "reason": "expected junkyard.image=bookworm/v2\n}\nmenuentry evil {\n\t'$x\" }"}
    return nb.netboot_grub_entries([*model["nodes"], odd])


def run_playbook(tmp_path, play_vars, tasks):
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "Per-MAC GRUB files", "hosts": "localhost", "connection": "local",
        "gather_facts": False, "vars": play_vars, "tasks": tasks}], sort_keys=False))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_CALLBACK_RESULT_FORMAT="json")
    proc = subprocess.run(
        ["ansible-playbook", "-i", "localhost,", "--diff", str(playbook),
         "-e", f"ansible_python_interpreter={sys.executable}"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def recap_changed(stdout):
    line = next(ln for ln in stdout.splitlines() if ln.startswith("localhost "))
    return int(line.split("changed=")[1].split()[0])


@pytest.mark.parametrize("managed", [None, "Managed by junkyard ({{ 'cluster' | upper }})"])
def test_role_task_writes_what_the_template_wrote(tmp_path, managed):
    grub_entries = entries()
    user = pwd.getpwuid(os.getuid()).pw_name
    group = grp.getgrgid(os.getgid()).gr_name
    new_root, old_root = tmp_path / "new", tmp_path / "old"
    (new_root / "grub").mkdir(parents=True)
    (old_root / "grub").mkdir(parents=True)
    # left by earlier runs: a MAC that left the inventory, and files the task does not own
    (new_root / "grub" / "grub.cfg-01-52-54-00-77-00-99").write_text("set junkyard_node=gone\n")
    (new_root / "grub" / "grub.cfg").write_text("top-level\n")
    (new_root / "grub" / ".junkyard-grub-version").write_text("grub 2.06\n")

    task = role_task()
    task["junkyard.cluster.file_set"].update(owner=user, group=group)
    play_vars = {
        # what the role gives the task: its path, defaults and the entries of
        # assert_role_vars.yml
        "role_path": str(ROLE),
        "netboot_tftp_root": str(new_root),
        "netboot_grub_timeout": 7,
        "__netboot_grub_entries": grub_entries,
    }
    if managed is not None:
        play_vars["ansible_managed"] = managed
    before = {
        "name": "Write the files the old way, one template task per node",
        "ansible.builtin.template": {"src": str(TEMPLATE),
                                     "dest": f"{old_root}/{{{{ item.path }}}}", "mode": "0644"},
        "loop": "{{ __netboot_grub_entries }}",
    }
    out = run_playbook(tmp_path, play_vars, [before, task])

    old = {p.name: p.read_bytes() for p in (old_root / "grub").iterdir()}
    new = {p.name: p.read_bytes() for p in (new_root / "grub").iterdir()}
    assert len(old) == len(grub_entries) == 3
    assert {n: c for n, c in new.items() if n.startswith("grub.cfg-01-")} == old
    # the stale MAC's file is gone, the files the pattern does not match are kept
    assert new["grub.cfg"] == b"top-level\n"
    assert new[".junkyard-grub-version"] == b"grub 2.06\n"
    assert "grub.cfg-01-52-54-00-77-00-99" not in new
    odd = old["grub.cfg-01-52-54-00-77-00-aa"].decode()
    assert "set timeout=7\n" in odd
    # HTTP first (current, previous kernel), the same files over TFTP as the fallback
    assert "set fallback=2\n" in odd
    assert "\n  if ! linux '(http,10.77.0.1)/images/bookworm/v1/boot/vmlinuz' root=/dev/nfs " in odd
    # a load that fails is tried once more
    assert ("\n  if ! initrd '(http,10.77.0.1)/images/bookworm/v1/boot/initrd.img.old'; then\n"
            "    echo 'Loading the initrd again'\n"
            "    initrd '(http,10.77.0.1)/images/bookworm/v1/boot/initrd.img.old'\n  fi\n") in odd
    assert "--id tftp {\n" in odd
    assert "\n  if ! linux /images/bookworm/v1/boot/vmlinuz root=/dev/nfs " in odd
    assert " 'path=C:\\boot\\n' " in odd and " 'x=it'\\''s' " in odd
    header = "# Managed by junkyard (CLUSTER)\n" if managed else "# Ansible managed\n"
    assert odd.startswith("#\n" + header + "#\n")
    # the revert, in comment lines only, the reason on one line
    assert odd.split("\n")[4:7] == [
        "# odd01 (52:54:00:77:00:aa) boots bookworm version v1.",
        "# Reverted automatically on 2026-12-07T01:02:03Z: it did not pass on bookworm "
        "version v2",
        "# (expected junkyard.image=bookworm/v2 } menuentry evil { '$x\" }); it boots v1 "
        "again.",
    ]
    assert odd.count("menuentry") == 4  # the three entries, and the one in the comment
    node01 = old["grub.cfg-01-52-54-00-77-00-11"].decode()
    assert "Reverted" not in node01 and node01.split("\n")[5].startswith("# The kernel")
    assert "changed: [localhost]" in out

    # a second run of the role's task alone changes nothing
    assert recap_changed(run_playbook(tmp_path, play_vars, [task])) == 0


def test_template_each_renders_each_item_like_the_template_action(tmp_path):
    template = tmp_path / "t.j2"
    template.write_text("{{ ansible_managed | comment }}\n{% if item.a %}a={{ item.a }}\n"
                        "{% endif %}b={{ b }}\\n\n\n")
    out = template_each([{"a": 1}, {"a": 0}], str(template), {"b": "x"})
    assert out == ["#\n# Ansible managed\n#\na=1\nb=x\\n\n\n",
                   "#\n# Ansible managed\n#\nb=x\\n\n\n"]
    assert template_each([], str(template)) == []


def test_template_each_fails_on_a_variable_it_was_not_given(tmp_path):
    template = tmp_path / "t.j2"
    template.write_text("{{ item }} {{ netboot_missing }}\n")
    with pytest.raises(Exception, match="netboot_missing"):
        template_each([1], str(template), {})


@pytest.mark.parametrize(("template", "variables", "message"), [
    ("relative.j2", None, "template 'relative.j2' must be an absolute path"),
    ("/nonexistent/t.j2", None, "cannot read /nonexistent/t.j2"),
    (str(TEMPLATE), ["not", "a", "mapping"], "variables must be a mapping, got list"),
])
def test_template_each_refuses(template, variables, message):
    with pytest.raises(AnsibleFilterError, match=message):
        template_each([{}], template, variables)
