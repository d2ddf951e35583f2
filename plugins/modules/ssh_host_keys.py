#!/usr/bin/python
# Copyright (c) 2026, junkyard.cluster developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
module: ssh_host_keys
short_description: Give every node SSH host keys of its own, made once on the storage head
version_added: 0.1.0
description:
  - For each entry of O(hosts), makes the host key pairs of O(types) in its C(dir) with
    C(ssh-keygen) where the private key is missing (a public key that went missing is
    derived again from its private key); a key that exists is never replaced, so a node keeps
    its keys across reboots, image upgrades and re-runs.
  - Private keys are C(0600) and owned by root; the directory C(0700).
  - Returns each host's public keys and the C(known_hosts) lines naming the host by every
    name in its C(names).
attributes:
  check_mode:
    support: full
    description: >-
      Reports the keys it would make and makes none; known_hosts lines only for keys that
      exist.
  diff_mode:
    support: none
    description: Key files are not shown.
author:
  - junkyard.cluster developers (!UNKNOWN)
options:
  hosts:
    description: One entry per host.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: The host's name (the keys' comment).
        type: str
        required: true
      dir:
        description: The directory of its keys, on this machine.
        type: path
        required: true
      names:
        description: Every name and address the host is reached by (its C(known_hosts) line).
        type: list
        elements: str
        required: true
  types:
    description: Key types, in the order sshd offers them.
    type: list
    elements: str
    choices: [ed25519, ecdsa, rsa]
    default: [ed25519]
"""

EXAMPLES = r"""
- name: Give every node its own SSH host keys
  junkyard.cluster.ssh_host_keys:
    hosts:
      - name: gpu01
        dir: /tank/nodes/gpu01/ssh-host-keys
        names: [gpu01, gpu01.cluster.internal, 10.20.0.11]
"""

RETURN = r"""
created:
  description: The private keys made by this run (in check mode, that it would make).
  returned: always
  type: list
  elements: str
public_keys:
  description: Host name -> its public keys (C(<type> <base64>)), in O(types) order.
  returned: always
  type: dict
known_hosts:
  description: One C(known_hosts) line per host and key, sorted by host.
  returned: always
  type: list
  elements: str
"""

import os

from ansible.module_utils.basic import AnsibleModule

KEYGEN_TYPES = {"ed25519": "ed25519", "ecdsa": "ecdsa", "rsa": "rsa"}


def _public(path):
    with open(path, encoding="ascii") as handle:
        fields = handle.read().split()
    return " ".join(fields[:2])


def main():
    module = AnsibleModule(
        argument_spec={
            "hosts": {"type": "list", "elements": "dict", "required": True, "options": {
                "name": {"type": "str", "required": True},
                "dir": {"type": "path", "required": True},
                "names": {"type": "list", "elements": "str", "required": True},
            }},
            "types": {"type": "list", "elements": "str", "default": ["ed25519"],
                      "choices": list(KEYGEN_TYPES)},
        },
        supports_check_mode=True,
    )
    keygen = module.get_bin_path("ssh-keygen", required=True)
    created, public, lines, fixed = [], {}, [], []
    for host in module.params["hosts"]:
        public[host["name"]] = []
        for kind in module.params["types"]:
            key = os.path.join(host["dir"], f"ssh_host_{kind}_key")
            if not os.path.exists(key):
                created.append(key)
                if module.check_mode:
                    continue
                if not os.path.isdir(host["dir"]):
                    module.fail_json(msg=f"{host['name']}: {host['dir']} does not exist (its "
                                         "dataset is made by the storage play)",
                                     created=created)
                rc, _out, err = module.run_command(
                    [keygen, "-q", "-t", KEYGEN_TYPES[kind], "-N", "", "-C", host["name"],
                     "-f", key])
                if rc != 0:
                    module.fail_json(msg=f"{host['name']}: ssh-keygen -t {kind} failed: {err}",
                                     created=created)
            elif not os.path.exists(key + ".pub") and not module.check_mode:
                rc, out, err = module.run_command([keygen, "-y", "-f", key])
                if rc != 0:
                    module.fail_json(msg=f"{host['name']}: {key} is not a readable private "
                                         f"key: {err}", created=created)
                with open(key + ".pub", "w", encoding="ascii") as handle:
                    handle.write(f"{out.strip()} {host['name']}\n")
                fixed.append(key + ".pub")
            if os.path.exists(key + ".pub"):
                for path, mode in ((key, 0o600), (host["dir"], 0o700)):
                    if os.stat(path).st_mode & 0o7777 != mode:
                        fixed.append(path)
                        if not module.check_mode:
                            os.chmod(path, mode)
                public[host["name"]].append(_public(key + ".pub"))
                lines.append(f"{','.join(host['names'])} {_public(key + '.pub')}")
    module.exit_json(changed=bool(created or fixed), created=created, public_keys=public,
                     known_hosts=sorted(lines))


if __name__ == "__main__":
    main()
