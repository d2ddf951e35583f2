# Copyright (c) 2026, junkyard.cluster developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""SSH to a host, then run everything inside a chroot on that host."""

from __future__ import annotations

DOCUMENTATION = r"""
name: ssh_chroot
short_description: Run tasks inside a chroot on a remote host reached over SSH
description:
  - Connects like C(ansible.builtin.ssh) and runs every command as
    C(chroot <chroot_root> /bin/sh -c '<command>') on that host; files are put
    and fetched at C(<chroot_root>/<path>) after the path has been resolved
    inside the chroot (so an absolute symbolic link in the image points into
    the image, never at the host's own file).
  - Why it exists. The node image of junkyard.cluster is a directory tree (a
    ZFS dataset) on the storage head, configured with ordinary roles.
    C(community.general.chroot) only reaches a chroot on the controller, but
    the controller is usually not the head (in the lab the head is a VM reached
    over SSH on 127.0.0.1). Where Ansible runs on the head itself, use
    C(community.general.chroot) instead; the image playbook picks one or the
    other from C(node_image_connection).
  - Every option of C(ansible.builtin.ssh) applies unchanged (host, port, user,
    private key, ssh arguments, pipelining, ...); only the options below are
    added.
  - The commands get the environment variables C(debian_chroot) (so the
    C(ansible_is_chroot) fact is true inside the image) and
    C(JUNKYARD_CHROOT_ROOT) (the image path on the host), which scripts in the
    image can test before touching anything that belongs to a running system.
  - Connect as root; become is not supported (chroot needs root on the host).
author: junkyard.cluster developers (!UNKNOWN)
version_added: 0.1.0
options:
  chroot_root:
    description:
      - Absolute path of the image root on the remote host. C(/) is refused.
    type: string
    required: true
    vars:
      - name: ansible_chroot_root
  chroot_exe:
    description:
      - The chroot binary on the remote host.
    type: string
    default: chroot
    vars:
      - name: ansible_chroot_exe
  chroot_shell:
    description:
      - The shell inside the chroot that runs each command.
    type: string
    default: /bin/sh
    vars:
      - name: ansible_chroot_shell
  chroot_label:
    description:
      - Value of C(debian_chroot) for the commands (shown by shells, makes
        C(ansible_is_chroot) true).
    type: string
    default: junkyard-image
    vars:
      - name: ansible_chroot_label
notes:
  - Module temp files are written inside the image; point C(ansible_remote_tmp)
    at a path that is a tmpfs on the booted nodes (for example C(/tmp/.ansible))
    so nothing of a build run survives in what the nodes see.
"""

EXAMPLES = r"""
# From the head's inventory entry, add the image as a host and configure it.
- name: Add the image as a host reached through the head
  ansible.builtin.add_host:
    name: image-bookworm-v1
    groups: [node_images]
    ansible_connection: junkyard.cluster.ssh_chroot
    ansible_host: "{{ ansible_host }}"
    ansible_port: "{{ ansible_port | default(22) }}"
    ansible_user: root
    ansible_chroot_root: /tank/images/bookworm/v1
    ansible_remote_tmp: /tmp/.ansible
"""


import posixpath
import shlex
import sys

import yaml
from ansible.errors import AnsibleConnectionFailure, AnsibleError
from ansible.plugins.connection import ssh as _ssh
from ansible.utils.display import Display

display = Display()


def _merged_documentation() -> str:
    """This plugin's options plus every option of ansible.builtin.ssh.

    Ansible reads a plugin's configuration definitions from the module's
    DOCUMENTATION attribute at load time; the literal above documents what
    this plugin adds, and the attribute the loader sees also carries the ssh
    options (so ansible_port, ansible_ssh_private_key_file, ... keep working)
    without repeating their text here.
    """
    ours = yaml.safe_load(DOCUMENTATION)
    theirs = yaml.safe_load(_ssh.DOCUMENTATION)
    merged = dict(ours)
    merged["options"] = {**theirs.get("options", {}), **ours["options"]}
    fragments = list(theirs.get("extends_documentation_fragment") or [])
    if fragments:
        merged["extends_documentation_fragment"] = fragments
    return yaml.safe_dump(merged, sort_keys=False)


# The loader reads getattr(module, "DOCUMENTATION"); ansible-doc reads the literal.
setattr(sys.modules[__name__], "DOCUMENTATION", _merged_documentation())  # noqa: B010


def check_root(root) -> str:
    """Return the normalised chroot root or raise AnsibleError."""
    if not isinstance(root, str) or not root:
        raise AnsibleError("ssh_chroot: chroot_root (ansible_chroot_root) is not set")
    norm = posixpath.normpath(root)
    if not root.startswith("/"):
        raise AnsibleError(f"ssh_chroot: chroot_root {root} is not an absolute path")
    if norm == "/":
        raise AnsibleError("ssh_chroot: chroot_root / is the host itself; refusing to run "
                           "image tasks on the host's own root")
    return norm


def wrap_command(cmd: str, root: str, exe: str = "chroot", shell: str = "/bin/sh",
                 label: str = "junkyard-image") -> str:
    """The command line run on the host for ``cmd`` inside ``root``."""
    return " ".join([
        "env",
        shlex.quote(f"debian_chroot={label}"),
        shlex.quote(f"JUNKYARD_CHROOT_ROOT={root}"),
        shlex.quote(exe), shlex.quote(root), shlex.quote(shell), "-c", shlex.quote(cmd),
    ])


def host_path(root: str, path: str) -> str:
    """Map a path inside the chroot to the host's path (never outside ``root``)."""
    inner = posixpath.normpath(posixpath.join("/", path))
    if inner.startswith("//"):
        inner = "/" + inner.lstrip("/")
    return root if inner == "/" else root + inner


class Connection(_ssh.Connection):
    """ansible.builtin.ssh with every command and file transfer inside a chroot."""

    transport = "junkyard.cluster.ssh_chroot"

    def _root(self) -> str:
        return check_root(self.get_option("chroot_root"))

    def _wrap(self, cmd: str) -> str:
        return wrap_command(cmd, self._root(), self.get_option("chroot_exe"),
                            self.get_option("chroot_shell"), self.get_option("chroot_label"))

    def exec_command(self, cmd, in_data=None, sudoable=True):
        wrapped = self._wrap(cmd)
        display.vvv(f"SSH_CHROOT {self._root()}: {cmd}", host=self.get_option("host"))
        return super().exec_command(wrapped, in_data=in_data, sudoable=sudoable)

    def _resolve(self, path: str) -> str:
        """Resolve symbolic links of ``path`` inside the chroot (the last
        component need not exist), so the transfer lands where a process in
        the image would see the file."""
        inner = posixpath.normpath(posixpath.join("/", path))
        rc, out, err = self.exec_command(f"readlink -f -- {shlex.quote(inner)}",
                                         sudoable=False)
        resolved = out.decode("utf-8", "surrogateescape").strip()
        if rc != 0 or not resolved.startswith("/"):
            raise AnsibleConnectionFailure(
                f"ssh_chroot: cannot resolve {inner} inside {self._root()} (rc={rc}): "
                f"{err.decode('utf-8', 'replace').strip()}")
        return resolved

    def put_file(self, in_path, out_path):
        target = host_path(self._root(), self._resolve(out_path))
        return super().put_file(in_path, target)

    def fetch_file(self, in_path, out_path):
        source = host_path(self._root(), self._resolve(in_path))
        return super().fetch_file(source, out_path)
