#!/usr/bin/python
# Copyright (c) 2026, junkyard.cluster developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: rollout_lease
short_description: One image rollout at a time, through a lease file on the storage head
version_added: 0.1.0
description:
  - Takes, renews or drops the rollout lease, a small JSON file on the storage head naming
    the run that may take nodes out of service now (its owner, run id, image and version,
    when it started and when it expires).
  - The expiry is a time in the file, not a process; a run that died stops renewing and its
    lease counts as released once the expiry passed.  A live lease of another run refuses
    O(state=acquired) with a message naming that run.
  - Every change happens under an exclusive C(flock) of C(<path>.lock) and is written by a
    rename, so two runs racing for the lease cannot both get it.
attributes:
  check_mode:
    support: full
    description: Reports what it would do (and refuses as the real run would); writes nothing.
  diff_mode:
    support: full
    description: The lease before and after.
author:
  - junkyard.cluster developers (!UNKNOWN)
options:
  path:
    description: The lease file (its directory is made if missing).
    type: path
    default: /run/junkyard/rollout.lease
  state:
    description:
      - V(acquired) takes the lease for O(run_id) (renews it if this run has it).
      - V(renewed) pushes the expiry of this run's lease O(ttl) seconds ahead; fails if the
        lease is gone or held by another run.
      - V(released) drops this run's lease; another run's lease is left alone.
      - V(query) only reads it.
    type: str
    choices: [acquired, renewed, released, query]
    default: acquired
  run_id:
    description: This run's id (required except for V(query)).
    type: str
  owner:
    description: Who runs it, C(user@controller) (V(acquired)).
    type: str
    default: ""
  image:
    description: The image being rolled out (V(acquired)).
    type: str
    default: ""
  version:
    description: The version it moves nodes to (V(acquired)).
    type: str
    default: ""
  ttl:
    description: Seconds from now until the lease expires unless renewed.
    type: int
    default: 3600
  nodes:
    description: V(renewed) only; the nodes this run has out of service now (shown to others).
    type: list
    elements: str
"""

EXAMPLES = r"""
- name: Take the rollout lease
  junkyard.cluster.rollout_lease:
    run_id: 20261206T213000-1a2b
    owner: alice@ops1
    image: bookworm-rocm
    version: 2026.12.1
    ttl: 3600

- name: Give it back
  junkyard.cluster.rollout_lease:
    run_id: 20261206T213000-1a2b
    state: released
"""

RETURN = r"""
lease:
  description: The lease after the call (for V(query) and a refused or foreign release, the
    lease in the file; null when there is none).
  returned: always
  type: dict
live:
  description: Whether the returned lease has not expired.
  returned: always
  type: bool
replaced:
  description: V(acquired) only; the expired lease of a dead run that this run took over.
  returned: when state is acquired
  type: dict
message:
  description: One line for the operator.
  returned: always
  type: str
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.junkyard.cluster.plugins.module_utils import rollout_lease as rl


def main():
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "default": "/run/junkyard/rollout.lease"},
            "state": {"type": "str", "default": "acquired",
                      "choices": ["acquired", "renewed", "released", "query"]},
            "run_id": {"type": "str"},
            "owner": {"type": "str", "default": ""},
            "image": {"type": "str", "default": ""},
            "version": {"type": "str", "default": ""},
            "ttl": {"type": "int", "default": 3600},
            "nodes": {"type": "list", "elements": "str"},
        },
        required_if=[("state", "acquired", ["run_id"]), ("state", "renewed", ["run_id"]),
                     ("state", "released", ["run_id"])],
        supports_check_mode=True,
    )
    p = module.params
    path, state, check = p["path"], p["state"], module.check_mode
    if p["ttl"] < 1:
        module.fail_json(msg=f"ttl {p['ttl']} must be at least 1 second")
    now = time.time()
    try:
        before = rl.read(path)
        if state == "query":
            module.exit_json(changed=False, lease=before, live=rl.live(before, now),
                             message=_line(path, before, now))
        if state == "acquired":
            changed, lease, replaced = rl.acquire(path, p["owner"], p["run_id"], p["image"],
                                                  p["version"], p["ttl"], now=now, check=check)
            msg = f"run {p['run_id']} holds {path} until {rl.iso(lease['expires'])}"
            if replaced:
                msg += (f" (took over the expired lease of run {replaced['run_id']} by "
                        f"{replaced.get('owner')}, expired {rl.iso(replaced['expires'])})")
            module.exit_json(changed=changed, lease=lease, live=True, replaced=replaced,
                             message=msg, diff={"before": before or {}, "after": lease})
        if state == "renewed":
            changed, lease = rl.renew(path, p["run_id"], p["ttl"], p["nodes"], now=now,
                                      check=check)
            module.exit_json(changed=changed, lease=lease, live=True,
                             message=f"run {p['run_id']} holds {path} until "
                                     f"{rl.iso(lease['expires'])}",
                             diff={"before": before or {}, "after": lease})
        changed, lease = rl.release(path, p["run_id"], check=check)
        msg = (f"run {p['run_id']} released {path}" if changed else
               f"{path}: not held by run {p['run_id']}; left alone ({_line(path, lease, now)})")
        module.exit_json(changed=changed, lease=lease, live=rl.live(lease, now), message=msg,
                         diff={"before": before or {}, "after": {} if changed else before or {}})
    except rl.LeaseHeld as exc:
        module.fail_json(msg=str(exc), lease=exc.lease, live=True)
    except (rl.LeaseLost, ValueError, OSError) as exc:
        module.fail_json(msg=str(exc))


def _line(path, lease, now):
    if lease is None:
        return f"{path}: no lease"
    state = "live" if rl.live(lease, now) else "expired"
    return (f"{path}: {state} lease of run {lease['run_id']} by {lease.get('owner')} "
            f"({lease.get('image')} -> {lease.get('version')}), expires "
            f"{rl.iso(lease.get('expires', 0))}")


if __name__ == "__main__":
    main()
