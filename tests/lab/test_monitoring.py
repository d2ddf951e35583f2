"""Issue 17, "monitoring": Prometheus on the lab head as site.yml set it up, the
node exporters of the booted nodes, the cluster page, and the node-down alert
when a node is powered off through its BMC.

Runs after the fan tests (node01's fan daemon is running again) and just
before test_health.py, which wants node02 powered off: the last test here
leaves it off (test_health powers it on again when it is done).
"""

from __future__ import annotations

import json
import shlex
import time

import pytest

pytestmark = pytest.mark.lab

PROM_PORT = 9090
EXPORTER_PORT = 9100
# the rule's for: 2m, plus a scrape (15 s) that times out, an evaluation (15 s)
# and a busy emulated head
ALERT_WAIT = 420


def mgmt_ip(nics) -> str:
    return next(n.ip for n in nics if n.net == "mgmt")


def data_ip(nics) -> str:
    return next(n.ip for n in nics if n.net == "data")


def head_python(lab, program: str, *args: str, timeout: float = 120):
    """Run a Python program on the head (it has python3; curl is not there)."""
    cmd = "python3 -c " + shlex.quote(program) + "".join(" " + shlex.quote(a) for a in args)
    return lab.ssh(cmd, timeout=timeout)


QUERY = """
import json, sys, urllib.parse, urllib.request
url = sys.argv[1] + "/api/v1/query?" + urllib.parse.urlencode({"query": sys.argv[2]})
with urllib.request.urlopen(url, timeout=20) as r:
    print(json.dumps(json.load(r)["data"]["result"]))
"""

FETCH = """
import sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=20) as r:
    sys.stdout.write(r.read().decode())
"""

CONNECT = """
import socket, sys
for target in sys.argv[1:]:
    host, port = target.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
        print(target, "open")
    except OSError as err:
        print(target, "closed", type(err).__name__)
"""


def query(lab, expr: str) -> list[dict]:
    res = head_python(lab, QUERY, f"http://{mgmt_ip(lab.cfg.head_nics)}:{PROM_PORT}", expr)
    assert res.returncode == 0, res.stdout + res.stderr
    return json.loads(res.stdout)


def by_node(results: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in results:
        out.setdefault(r["metric"].get("node", "?"), []).append(r)
    return out


def current(metric: str) -> str:
    """The timestamps of a state metric's series at 1 (of a selector: its samples')."""
    return f"timestamp({metric}) and {metric} == 1"


def newest(results: list[dict]) -> dict[str, list[dict]]:
    """by_node of a ``timestamp(x) and x == 1`` query, each node's newest series only (a
    state Prometheus did not mark stale, after its restart, lingers up to 5 min)."""
    out = {}
    for node, series in by_node(results).items():
        top = max(float(s["value"][1]) for s in series)
        out[node] = [s for s in series if float(s["value"][1]) == top]
    return out


def wait_query(lab, expr: str, ok, what: str, timeout: float = 180) -> list[dict]:
    end = time.monotonic() + timeout
    got: list[dict] = []
    while time.monotonic() < end:
        got = query(lab, expr)
        if ok(got):
            return got
        time.sleep(5)
    pytest.fail(f"{what}: {expr} gave {got} for {timeout:.0f} s")


def names(lab) -> set[str]:
    return {n.name for n in lab.nodes}


def test_prometheus_scrapes_every_node_and_the_head(lab, site):
    nodes = names(lab)
    wait_query(lab, 'up{job="junkyard-nodes"} == 1',
               lambda r: set(by_node(r)) == nodes, "every node's exporter up")
    assert [r["metric"]["node"] for r in query(lab, 'up{job="junkyard-head"} == 1')] == ["head"]
    # the targets are the nodes' management addresses, from the model
    targets = {r["metric"]["node"]: r["metric"]["instance"]
               for r in query(lab, 'up{job="junkyard-nodes"}')}
    assert targets == {n.name: f"{mgmt_ip(n.nics)}:{EXPORTER_PORT}" for n in lab.nodes}

    # the fan daemon's textfile, per node and zone
    fans = by_node(wait_query(lab, "junkyard_fan_zone_duty_percent",
                              lambda r: set(by_node(r)) == nodes, "fan metrics of every node"))
    for node, series in fans.items():
        assert {s["metric"]["zone"] for s in series} >= {"cpu"}, (node, series)
    # the node's own textfile: the image version it booted
    images = newest(query(lab, current("junkyard_node_image_info")))
    assert {n: [(s["metric"]["image"], s["metric"]["version"]) for s in v]
            for n, v in images.items()} == {n: [("bookworm", "v1")] for n in nodes}
    # the head's textfiles: Slurm's state of every node, the pool's health
    slurm = newest(wait_query(lab, current("junkyard_slurm_node_state"),
                              lambda r: set(by_node(r)) == nodes, "Slurm state of every node"))
    assert {n: len(v) for n, v in slurm.items()} == {n: 1 for n in nodes}, slurm
    pools = query(lab, 'junkyard_zfs_pool_state{state="online"} == 1')
    assert [p["metric"]["pool"] for p in pools] == ["tank"]
    # the head's services, each running
    services = {r["metric"]["service"]: r["value"][1]
                for r in query(lab, "junkyard_head_service_up")}
    assert services == {s: "1" for s in ("dnsmasq", "nginx", "nfsd", "rpc.mountd",
                                         "slurmctld", "munged")}, services
    # the edac and hwmon collectors run on the nodes
    edac = by_node(query(lab, 'node_scrape_collector_success{job="junkyard-nodes",'
                              'collector=~"edac|hwmon|textfile|drm"}'))
    assert set(edac) == nodes and all(len(v) == 4 for v in edac.values()), edac
    # the head's exporter runs its textfile collector but not Debian's systemd one
    # (monitoring_head_exporter_disabled_collectors' default: nothing reads it)
    head = {r["metric"]["collector"] for r in query(
        lab, 'node_scrape_collector_success{job="junkyard-head"}')}
    assert "textfile" in head and "zfs" in head and "systemd" not in head, sorted(head)
    # no alert fires on a healthy lab but the ones a lab cannot avoid
    firing = query(lab, 'ALERTS{alertstate="firing"}')
    assert not [a for a in firing if a["metric"]["alertname"] in
                ("JunkyardNodeDown", "JunkyardTextfileStale", "JunkyardTextfileUnreadable",
                 "JunkyardPoolDegraded", "JunkyardHeadServiceDown")], firing


def test_nothing_answers_on_the_data_network(lab, site):
    head = lab.cfg.head_nics
    # from the head: the nodes' exporters on their data addresses
    targets = [f"{data_ip(n.nics)}:{EXPORTER_PORT}" for n in lab.nodes]
    res = head_python(lab, CONNECT, *targets,
                      *(f"{mgmt_ip(n.nics)}:{EXPORTER_PORT}" for n in lab.nodes))
    assert res.returncode == 0, res.stderr
    seen = dict(line.split(" ", 2)[:2] for line in res.stdout.splitlines())
    assert {t: seen[t] for t in targets} == {t: "closed" for t in targets}, res.stdout
    assert {n.name: seen[f"{mgmt_ip(n.nics)}:{EXPORTER_PORT}"] for n in lab.nodes} == \
        {n.name: "open" for n in lab.nodes}, res.stdout
    # from a node: the head's Prometheus and exporter on its data address
    node = lab.nodes[0]
    res = lab.node_ssh(node, "python3 -c " + shlex.quote(CONNECT) + " " + " ".join(
        f"{data_ip(head)}:{p}" for p in (PROM_PORT, EXPORTER_PORT)) + " " + " ".join(
        f"{mgmt_ip(head)}:{p}" for p in (PROM_PORT, EXPORTER_PORT)))
    assert res.returncode == 0, res.stderr
    assert [line.split()[1] for line in res.stdout.splitlines()] == \
        ["closed", "closed", "open", "open"], res.stdout
    # and what listens on the node: the exporter on its management address only
    res = lab.node_ssh(node, "ss -Hltn")
    assert res.returncode == 0, res.stderr
    local = [line.split()[3] for line in res.stdout.splitlines()
             if line.split()[3].endswith(f":{EXPORTER_PORT}")]
    assert local == [f"{mgmt_ip(node.nics)}:{EXPORTER_PORT}"], res.stdout


def test_cluster_page_is_served_by_prometheus_with_every_node(lab, site):
    url = f"http://{mgmt_ip(lab.cfg.head_nics)}:{PROM_PORT}/user/cluster.html"
    end = time.monotonic() + 180  # cron renders it every minute
    page = ""
    while time.monotonic() < end:
        res = head_python(lab, FETCH, url)
        page = res.stdout
        if res.returncode == 0 and all(f'data-node="{n}"' in page for n in names(lab)):
            break
        time.sleep(10)
    for node in names(lab):
        assert f'data-node="{node}"' in page, page[-3000:]
    assert "bookworm" in page


def test_powering_a_node_off_fires_the_node_down_alert(lab, site):
    off = lab.cfg.node("node02")
    assert lab.ipmitool(off, "chassis", "power", "off").returncode == 0
    lab.wait_qemu(off, running=False, timeout=60)
    # left off: test_health.py reports it unreachable and powers it on again
    alerts = wait_query(
        lab, 'ALERTS{alertname="JunkyardNodeDown",alertstate="firing"}',
        bool, "the node-down alert", timeout=ALERT_WAIT)
    assert [a["metric"]["node"] for a in alerts] == ["node02"], alerts
    assert alerts[0]["metric"]["severity"] == "critical"
