#!/usr/bin/python
# Copyright (c) 2026, junkyard.cluster developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: rollout_drain
short_description: Take a rollout wave's nodes out of Slurm service, and give them back
version_added: 0.1.0
description:
  - Runs where C(scontrol) reaches the controller (the storage head).
  - V(drained) drains the nodes of O(nodes) that are not drained yet with O(reason) (a
    reason starting C(junkyard rollout ), the mark by which later steps know the rollout
    drained them), then waits until no job runs on them, up to O(timeout) seconds.  A node
    still busy then is handled by O(busy_policy) - V(skip) (the default) gives it back to
    Slurm if the rollout drained it and reports it as skipped, V(wait) keeps waiting,
    V(kill) cancels its jobs (C(scancel --nodelist)) and waits until they are gone.  A node
    an operator or the health check drained (another reason) is moved too, and stays drained.
  - V(resumed) resumes the nodes of O(nodes) that carry the rollout's mark; a node drained
    for another reason is left drained and reported.
  - V(query) reads each node's state, reason and running jobs; changes nothing.
  - While it waits it renews the rollout lease O(lease), so a long drain does not let it
    lapse.
attributes:
  check_mode:
    support: full
    description: >-
      Reads the nodes and their jobs and reports what it would drain or resume, and which
      nodes are busy now; drains, resumes, cancels and waits for nothing.
  diff_mode:
    support: none
    description: The changes are in RV(drained), RV(resumed) and RV(skipped).
author:
  - junkyard.cluster developers (!UNKNOWN)
options:
  nodes:
    description: Slurm node names (the inventory's node names).
    type: list
    elements: str
    required: true
  state:
    description: What to do with them.
    type: str
    choices: [drained, resumed, query]
    default: drained
  reason:
    description: >-
      The drain reason (V(drained)); a node the rollout drained before gets it as its new
      reason (for instance with C(: verify failed) added).  Must start with C(junkyard rollout ).
    type: str
    default: junkyard rollout
  timeout:
    description: Seconds to wait for the jobs on the nodes to end before O(busy_policy).
    type: int
    default: 3600
  poll:
    description: Seconds between two looks at the jobs.
    type: int
    default: 10
  busy_policy:
    description: What happens to a node still running jobs after O(timeout).
    type: str
    choices: [skip, wait, kill]
    default: skip
  lease:
    description: The rollout lease to renew while waiting (rollout_lease's file).
    type: dict
    suboptions:
      path:
        description: The lease file.
        type: path
        required: true
      run_id:
        description: This run's id.
        type: str
        required: true
      ttl:
        description: Seconds each renewal gives.
        type: int
        default: 3600
"""

EXAMPLES = r"""
- name: Drain the wave and wait for its jobs (skip a node still busy after an hour)
  junkyard.cluster.rollout_drain:
    nodes: [gpu02, gpu03]
    reason: junkyard rollout bookworm-rocm/2026.12.1 (run 20261206T213000-1a2b)
    timeout: 3600
  register: drain

- name: Resume the nodes that passed verification
  junkyard.cluster.rollout_drain:
    nodes: "{{ drain.ready }}"
    state: resumed
"""

RETURN = r"""
ready:
  description: V(drained) - the nodes without jobs now, ready to move.
  returned: always
  type: list
  elements: str
skipped:
  description: V(drained) - node -> its jobs (C(<id> (<user>))), busy after the timeout with
    O(busy_policy=skip); not moved, given back to Slurm if the rollout drained it.
  returned: always
  type: dict
busy:
  description: Node -> its running jobs, at the last look (for V(query) and check mode, now).
  returned: always
  type: dict
drained:
  description: The nodes this call drained.
  returned: always
  type: list
  elements: str
resumed:
  description: The nodes this call resumed (V(resumed), or skipped nodes given back).
  returned: always
  type: list
  elements: str
left_drained:
  description: Node -> reason, for nodes drained by someone else (never resumed by a rollout).
  returned: always
  type: dict
killed:
  description: Node -> the jobs cancelled there (O(busy_policy=kill) only).
  returned: always
  type: dict
prior:
  description: Node -> its Slurm state (C(state), C(flags), C(reason)) before this call.
  returned: always
  type: dict
waited:
  description: Seconds spent waiting for jobs.
  returned: always
  type: int
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.junkyard.cluster.plugins.module_utils import rollout_lease as rl
from ansible_collections.junkyard.cluster.plugins.module_utils import rollout_slurm as rs


class Slurm:
    def __init__(self, module):
        self.module = module
        self.scontrol = module.get_bin_path("scontrol", required=True)
        self.squeue = module.get_bin_path("squeue", required=True)
        self.scancel = module.get_bin_path("scancel",
                                           required=module.params["busy_policy"] == "kill")

    def run(self, argv, what):
        rc, out, err = self.module.run_command(argv)
        if rc != 0:
            self.module.fail_json(msg=f"{what} failed (exit {rc}): {' '.join(argv)}: "
                                      f"{(err or out).strip()}", rc=rc)
        return out

    def nodes(self, wanted):
        infos = rs.parse_nodes(self.run(rs.scontrol_show_nodes(self.scontrol),
                                        "reading the Slurm nodes"))
        unknown = [n for n in wanted if n not in infos]
        if unknown:
            self.module.fail_json(msg=f"nodes {', '.join(unknown)} are not Slurm nodes of "
                                      f"this controller (scontrol show node knows "
                                      f"{', '.join(sorted(infos)) or 'none'})")
        return {n: infos[n] for n in wanted}

    def jobs(self, nodes):
        if not nodes:
            return {}
        return rs.parse_jobs(self.run(rs.squeue_busy(self.squeue, nodes),
                                      "listing the jobs on the nodes"), nodes)


def main():
    module = AnsibleModule(
        argument_spec={
            "nodes": {"type": "list", "elements": "str", "required": True},
            "state": {"type": "str", "default": "drained",
                      "choices": ["drained", "resumed", "query"]},
            "reason": {"type": "str", "default": rs.OWN_PREFIX.strip()},
            "timeout": {"type": "int", "default": 3600},
            "poll": {"type": "int", "default": 10},
            "busy_policy": {"type": "str", "default": "skip", "choices": ["skip", "wait", "kill"]},
            "lease": {"type": "dict", "options": {
                "path": {"type": "path", "required": True},
                "run_id": {"type": "str", "required": True},
                "ttl": {"type": "int", "default": 3600},
            }},
        },
        supports_check_mode=True,
    )
    p = module.params
    if not (p["reason"] + " ").startswith(rs.OWN_PREFIX):
        module.fail_json(msg=f"reason {p['reason']!r} must start with {rs.OWN_PREFIX!r} "
                             "(the mark by which the rollout finds the nodes it drained)")
    if p["timeout"] < 0 or p["poll"] < 1:
        module.fail_json(msg=f"timeout {p['timeout']} must be >= 0 and poll {p['poll']} >= 1")
    nodes = list(dict.fromkeys(p["nodes"]))
    result = {"changed": False, "ready": [], "skipped": {}, "busy": {}, "drained": [],
              "resumed": [], "left_drained": {}, "killed": {}, "prior": {}, "waited": 0}
    if not nodes:
        module.exit_json(**result)
    slurm = Slurm(module)
    infos = slurm.nodes(nodes)
    result["prior"] = infos
    if p["state"] == "query":
        result["busy"] = slurm.jobs(nodes)
        result["left_drained"] = {n: i["reason"] for n, i in infos.items()
                                  if rs.drained(i) and not rs.ours(i)}
        module.exit_json(**result)
    if p["state"] == "resumed":
        mine = [n for n in nodes if rs.ours(infos[n])]
        result["left_drained"] = {n: i["reason"] for n, i in infos.items()
                                  if rs.drained(i) and not rs.ours(i)}
        if mine and not module.check_mode:
            slurm.run(rs.scontrol_resume(slurm.scontrol, mine), "resuming the nodes")
        result.update(changed=bool(mine), resumed=mine)
        module.exit_json(**result)
    drain(module, slurm, nodes, infos, result)


def drain(module, slurm, nodes, infos, result):
    p = module.params
    to_drain, earlier, admin = rs.plan_drain(infos, nodes)
    relabel = [n for n in earlier if infos[n]["reason"] != p["reason"]]
    result.update(left_drained=admin, drained=to_drain, changed=bool(to_drain or relabel))
    if module.check_mode:
        result["busy"] = slurm.jobs(nodes)
        result["ready"] = [n for n in nodes if n not in result["busy"]]
        module.exit_json(**result)
    if to_drain or relabel:
        slurm.run(rs.scontrol_drain(slurm.scontrol, to_drain + relabel, p["reason"]),
                  "draining the nodes")
    start = time.monotonic()
    killed = {}
    while True:
        busy = slurm.jobs(nodes)
        waited = time.monotonic() - start
        if not busy or (waited >= p["timeout"] and p["busy_policy"] == "skip"):
            break
        if waited >= p["timeout"] and p["busy_policy"] == "kill":
            fresh = [n for n in busy if n not in killed]
            if fresh:
                killed.update({n: busy[n] for n in fresh})
                slurm.run(rs.scancel_on(slurm.scancel, fresh), "cancelling the jobs")
        if p["lease"]:
            try:
                rl.renew(p["lease"]["path"], p["lease"]["run_id"], p["lease"]["ttl"])
            except (rl.LeaseLost, ValueError, OSError) as exc:
                module.fail_json(msg=f"while waiting for jobs on {', '.join(sorted(busy))}: "
                                     f"{exc}", **dict(result, busy=busy))
        time.sleep(p["poll"])
    result.update(busy=busy, killed=killed, waited=int(waited), skipped=busy,
                  ready=[n for n in nodes if n not in busy])
    give_back = [n for n in busy if n in to_drain or n in earlier]
    if give_back:
        slurm.run(rs.scontrol_resume(slurm.scontrol, give_back),
                  "giving the skipped nodes back to Slurm")
        result["resumed"] = give_back
    module.exit_json(**result)


if __name__ == "__main__":
    main()
