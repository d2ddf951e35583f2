#!/usr/bin/env python
"""How the cluster model's cost grows with the number of nodes.

Generates inventories of 6 and 600 nodes (the lab's schema, addresses in a
/20), runs playbooks/model.yml on each side by side (controller only, nothing
is contacted), and prints the wall time, the time inside build_model, and the
ratio.  Per-node data is derived in one pass, so the 600-node run should cost
a small multiple of the 6-node run, dominated by Ansible's per-host overhead.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "collections")]

from ansible_collections.junkyard.cluster.plugins.module_utils.cluster_model import (  # noqa: E402
    build_model,
)

from tests.inventory_files import LAB, group_vars  # noqa: E402


def inventory(n, root):
    # the lab's cluster_* variables (group_vars/all, every file); its apt proxy as templated
    # by default (build_model below reads the values as written)
    cluster = {k: v for k, v in group_vars(LAB, "all").items() if k.startswith("cluster_")}
    cluster["cluster_apt_proxy"] = "http://127.0.0.1:3142"
    cluster["cluster_networks"]["mgmt"]["subnet"] = "10.80.0.0/20"
    cluster["cluster_networks"]["data"]["subnet"] = "10.96.0.0/20"
    cluster["cluster_networks"]["bmc"]["subnet"] = "10.112.0.0/20"
    nodes = {}
    for i in range(n):
        hi, lo = divmod(i + 11, 250)
        nodes[f"n{i:04d}"] = {
            "node_profile": ("g292-z20", "g292-z45")[i % 2], "node_image": "bookworm",
            "node_interfaces": {
                "mgmt": {"mac": f"52:54:01:00:{hi:02x}:{lo:02x}", "ip": f"10.80.{hi}.{lo}"},
                "data": {"mac": f"52:54:02:00:{hi:02x}:{lo:02x}", "ip": f"10.96.{hi}.{lo}"}},
            "node_bmc": {"address": f"10.112.{hi}.{lo}", "username": "admin",
                         "password": "{{ lookup('ansible.builtin.env', 'BMC_PW') }}"},
        }
    hosts = {"all": {"children": {
        "storage_head": {"hosts": {"head": {"head_interfaces": {
            "mgmt": {"ip": "10.80.0.1"}, "data": {"ip": "10.96.0.1"}}}}},
        "gpu_nodes": {"hosts": nodes}}}}
    (root / "group_vars/all").mkdir(parents=True)
    (root / "hosts.yml").write_text(yaml.safe_dump(hosts))
    (root / "group_vars/all/cluster.yml").write_text(yaml.safe_dump(cluster))
    data = {"cluster": {k[8:]: v for k, v in cluster.items()},
            "head": {"name": "head", "vars": hosts["all"]["children"]["storage_head"]
                     ["hosts"]["head"]},
            "nodes": copy.deepcopy(nodes), "secrets": {k: "env" for k in nodes}}
    return root / "hosts.yml", data


def main():
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), BMC_PW="x")
    playbook = shutil_which("ansible-playbook")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in (6, 600):
            hosts, data = inventory(n, Path(tmp) / str(n))
            t0 = time.perf_counter()
            for _round in range(20):
                model, errors = build_model(data)
            pure = (time.perf_counter() - t0) / 20
            assert not errors, errors
            t0 = time.perf_counter()
            subprocess.run([playbook, "-i", str(hosts), str(REPO / "playbooks/model.yml"),
                            "-e", '{"cluster_image_state": {}}'],
                           env=env, check=True, stdout=subprocess.DEVNULL)
            wall = time.perf_counter() - t0
            rows.append((n, pure, wall, len(model["datasets"]), len(model["exports"])))
    print(f"{'nodes':>6} {'build_model':>12} {'model.yml':>10} {'datasets':>9} {'exports':>8}")
    for n, pure, wall, nds, nex in rows:
        print(f"{n:>6} {pure * 1000:>10.1f}ms {wall:>9.2f}s {nds:>9} {nex:>8}")
    print(f"ratio 600/6: build_model {rows[1][1] / rows[0][1]:.1f}x, "
          f"model.yml {rows[1][2] / rows[0][2]:.2f}x")


def shutil_which(name):
    here = Path(sys.executable).parent / name
    return str(here) if here.exists() else name


if __name__ == "__main__":
    main()
