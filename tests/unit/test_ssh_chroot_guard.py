"""The image roles refuse to run outside an image tree, and ssh_chroot
refuses the host's own root, through real ansible-playbook runs on this
machine (nothing is changed: the refusals come first)."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.conftest import REPO

PLAY = """
- name: Image roles aimed at the wrong host
  hosts: all
  gather_facts: false
  tasks:
    - name: Run the role
      ansible.builtin.import_role:
        name: junkyard.cluster.{role}
        tasks_from: {tasks_from}
"""


def run(tmp_path, playbook, inventory):
    (tmp_path / "play.yml").write_text(playbook)
    (tmp_path / "hosts.yml").write_text(inventory)
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_ROLES_PATH=str(REPO / "roles"))
    proc = subprocess.run(["ansible-playbook", "-i", str(tmp_path / "hosts.yml"),
                           str(tmp_path / "play.yml")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.parametrize("role,tasks_from", [
    ("node_image", "image.yml"),
    ("node_image", "kernel.yml"),
    ("stateless_root", "main.yml"),
    ("node_network", "main.yml"),
])
def test_image_roles_refuse_a_local_host(tmp_path, role, tasks_from):
    inventory = ("all:\n  hosts:\n    not-an-image:\n      ansible_connection: local\n"
                 "      ansible_python_interpreter: /usr/bin/python3\n")
    rc, out = run(tmp_path, PLAY.format(role=role, tasks_from=tasks_from), inventory)
    assert rc == 2, out
    assert ("not-an-image: not a junkyard node image (connection local, "
            "/etc/junkyard/image.conf missing)") in " ".join(out.split()), out
    assert "changed=0" in out


def test_ssh_chroot_refuses_the_host_root(tmp_path):
    inventory = ("all:\n  hosts:\n    image:\n"
                 "      ansible_connection: junkyard.cluster.ssh_chroot\n"
                 "      ansible_host: 127.0.0.1\n      ansible_port: 9\n"
                 "      ansible_chroot_root: /tank/..\n")
    play = ("- hosts: all\n  gather_facts: false\n  tasks:\n"
            "    - ansible.builtin.command: 'true'\n")
    rc, out = run(tmp_path, play, inventory)
    assert rc != 0
    assert "chroot_root / is the host itself" in out, out
