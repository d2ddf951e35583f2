#!/usr/bin/python
# Copyright (c) 2026, junkyard.cluster developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: rollout_boot
short_description: Watch the nodes a rollout powered on boot, from the storage head
version_added: 0.1.0
description:
  - Runs on the storage head, which serves each node's kernel over HTTP (nginx).
  - V(marked), before the power-on, notes where the nginx access log O(access_log) stands
    (its inode and size).
  - V(watched), after it, decides for each node of O(nodes) whether it came up, is in a
    boot loop, or missed the deadline, and returns when every node is decided or
    O(deadline) seconds passed.  A node is up once its SSH port answers with a banner
    starting C(SSH-).  Every boot starts with one GET of the node's kernel (a path ending
    in C(/boot/vmlinuz) or C(/boot/vmlinuz.old)), logged with the node's address as client;
    a node that fetched its kernel more than O(attempts) times since the mark is looping
    (a kernel panic with C(panic=) on its command line reboots it) and is given up at once.
  - The log is read a little more each round from the mark on, across a rotation (the rest
    of C(<access_log>.1), then the new file) and a truncation.
  - A node that is not up never fails the task; it is named in RV(given_up) with the
    reason.  The task fails only on bad parameters or a log it cannot read.
attributes:
  check_mode:
    support: full
    description: V(marked) reads the log as in a real run; V(watched) validates its
      parameters and returns at once, watching nothing (empty results).
  diff_mode:
    support: none
    description: Changes nothing.
author:
  - junkyard.cluster developers (!UNKNOWN)
options:
  state:
    description:
      - V(marked) returns RV(mark), where the access log stands now.
      - V(watched) watches O(nodes) boot.
    type: str
    choices: [marked, watched]
    required: true
  access_log:
    description: nginx's access log of the kernel downloads, in the C(combined) format.
    type: path
    default: /var/log/nginx/access.log
  mark:
    description: V(watched) - RV(mark) of the V(marked) call made before the power-on.
    type: dict
  nodes:
    description: V(watched) - the nodes that were powered on.
    type: list
    elements: dict
    suboptions:
      name:
        description: The node's name (the key of its result).
        type: str
        required: true
      address:
        description: Its management IPv4 address (the client in the access log, and where
          its SSH answers).
        type: str
        required: true
      port:
        description: Its SSH port.
        type: int
        default: 22
  deadline:
    description: V(watched) - seconds from the start of the task by which a node must be up.
    type: int
  attempts:
    description: V(watched) - the boots a node may start; one more kernel fetch since the
      mark and it is looping.
    type: int
  poll:
    description: Seconds between two rounds of looking.
    type: int
    default: 5
  connect_timeout:
    description: Seconds a node's SSH port has to accept the connection and to send its
      banner.
    type: int
    default: 5
"""

EXAMPLES = r"""
- name: Mark where the access log stands before the power-on
  junkyard.cluster.rollout_boot:
    state: marked
  register: boot_mark

- name: Watch the nodes boot (give a node 15 minutes, and one boot)
  junkyard.cluster.rollout_boot:
    state: watched
    mark: "{{ boot_mark.mark }}"
    nodes:
      - name: gpu01
        address: 10.77.0.11
      - name: gpu02
        address: 10.77.0.12
    deadline: 900
    attempts: 1
  register: boot
"""

RETURN = r"""
mark:
  description: V(marked) - the access log now (C(inode) null and C(size) 0 when it does not
    exist yet); pass it to V(watched) as O(mark).
  returned: when state is marked
  type: dict
  contains:
    path:
      description: O(access_log).
      type: str
    inode:
      description: Its inode number.
      type: int
    size:
      description: Its size in bytes.
      type: int
nodes:
  description: V(watched) - node name -> how its boot went.
  returned: when state is watched
  type: dict
  sample:
    gpu01: {state: up, attempts: 1, seconds: 74.2,
            fetched: [/images/bookworm/v2/boot/vmlinuz]}
  contains:
    state:
      description: V(up), V(looping) or V(deadline).
      type: str
    attempts:
      description: The boots it started (kernel fetches) until it was decided.
      type: int
    seconds:
      description: Seconds from the start of the task to the decision.
      type: float
    fetched:
      description: The kernel paths it fetched, in order.
      type: list
      elements: str
up:
  description: V(watched) - the nodes that came up, in the order of O(nodes).
  returned: when state is watched
  type: list
  elements: str
given_up:
  description: V(watched) - node name -> why it is not up (looping, or the deadline passed),
    one line naming the node, its address and port and its kernel fetches.
  returned: when state is watched
  type: dict
  sample:
    gpu02: >-
      gpu02 started its boot 2 times (kernel fetched over HTTP:
      /images/bookworm/v2/boot/vmlinuz x2) without answering on 10.77.0.12:22
msg:
  description: One line for the operator.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.junkyard.cluster.plugins.module_utils import rollout_boot as rb


def main():
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "required": True, "choices": ["marked", "watched"]},
            "access_log": {"type": "path", "default": "/var/log/nginx/access.log"},
            "mark": {"type": "dict"},
            "nodes": {"type": "list", "elements": "dict", "options": {
                "name": {"type": "str", "required": True},
                "address": {"type": "str", "required": True},
                "port": {"type": "int", "default": 22},
            }},
            "deadline": {"type": "int"},
            "attempts": {"type": "int"},
            "poll": {"type": "int", "default": 5},
            "connect_timeout": {"type": "int", "default": 5},
        },
        required_if=[("state", "watched", ["mark", "nodes", "deadline", "attempts"])],
        supports_check_mode=True,
    )
    p = module.params
    log = p["access_log"]
    if p["state"] == "marked":
        try:
            mark = rb.mark(log)
        except OSError as exc:
            module.fail_json(msg=f"cannot read access_log {log}: {exc}")
        stands = ("does not exist yet" if mark["inode"] is None else
                  f"inode {mark['inode']}, {mark['size']} bytes")
        module.exit_json(changed=False, mark=mark, msg=f"{log}: {stands}")
    try:
        nodes = rb.check_watch(p["nodes"], p["deadline"], p["attempts"], p["poll"],
                               p["connect_timeout"])
        mark = rb.check_mark(p["mark"], log)
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    if module.check_mode:
        module.exit_json(changed=False, nodes={}, up=[], given_up={},
                         msg=f"check mode: watched nothing ({len(nodes)} nodes would be "
                             f"watched for up to {p['deadline']} s)")
    try:
        result = rb.watch(nodes, rb.LogFollower(log, mark), p["deadline"], p["attempts"],
                          p["poll"], p["connect_timeout"])
    except OSError as exc:
        module.fail_json(msg=f"cannot read access_log {log}: {exc}")
    down = len(result["given_up"])
    module.exit_json(changed=False, msg=f"{len(result['up'])} of {len(nodes)} nodes up"
                                        + (f", {down} given up" if down else ""), **result)


if __name__ == "__main__":
    main()
