"""The monitoring role's alert rules and Prometheus configuration, checked by
Prometheus' own promtool (Debian's prometheus package, 2.42).

``promtool test rules`` runs tests/monitoring/junkyard-alerts.test.yml
against the role's rules and the per-profile limits rendered from the role's
template; every alert must have a case where it fires and one where it
does not, and a rule changed behind the tests' back makes them fail.
"""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path

import jinja2
import pytest
import yaml
from ansible.plugins.filter.core import to_bool, to_nice_yaml
from ansible_collections.junkyard.cluster.plugins.filter.monitoring import (
    gpu_temp_limits,
    prometheus_targets,
)
from ansible_collections.junkyard.cluster.plugins.module_utils.cluster_model import build_model

from tests.conftest import REPO
from tests.unit.test_cluster_model import lab_data

HERE = Path(__file__).resolve().parent
ROLE = REPO / "roles" / "monitoring"
ALERTS = ROLE / "files" / "etc" / "prometheus" / "rules" / "junkyard-alerts.yml"
TESTS = HERE / "junkyard-alerts.test.yml"
# The profiles of the test series: g292-z20 at the default limit, g292-z45 lower.
TEST_MODEL = {"nodes": [{"name": "node01", "profile": "g292-z20"},
                        {"name": "node02", "profile": "g292-z45"}]}
TEST_LIMITS = {"g292-z45": 80}


@pytest.fixture(scope="session")
def promtool():
    path = shutil.which("promtool")
    assert path, ("promtool is missing: apt-get install --no-install-recommends prometheus "
                  "(make setup does)")
    return path


def render(template: str, **variables) -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(ROLE / "templates"),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters["comment"] = lambda text: "\n".join(f"# {line}" for line in text.splitlines())
    env.filters["to_nice_yaml"] = to_nice_yaml
    env.filters["bool"] = to_bool
    return env.get_template(template).render(ansible_managed="Ansible managed", **variables)


def rules_dir(tmp_path: Path, alerts: str | None = None) -> Path:
    """<tmp>/rules/ with the rules and the rendered limits, the tests in <tmp>;
    returns <tmp>/rules."""
    d = tmp_path / "rules"
    d.mkdir()
    (d / "junkyard-alerts.yml").write_text(alerts if alerts is not None else ALERTS.read_text())
    (d / "junkyard-limits.yml").write_text(render(
        "etc/prometheus/rules/junkyard-limits.yml.j2",
        __monitoring_gpu_temp_limits=gpu_temp_limits(TEST_MODEL, 85, TEST_LIMITS)))
    shutil.copy(TESTS, tmp_path / TESTS.name)
    return d


def promtool_run(promtool, *args, cwd=None):
    return subprocess.run([promtool, *args], capture_output=True, text=True, cwd=cwd,
                          check=False, timeout=120)


def test_rules_pass_promtool_check(promtool, tmp_path):
    d = rules_dir(tmp_path)
    res = promtool_run(promtool, "check", "rules", "junkyard-alerts.yml", "junkyard-limits.yml",
                       cwd=d)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS: 14 rules found" in res.stdout, res.stdout
    assert "SUCCESS: 2 rules found" in res.stdout, res.stdout


def test_alert_rules_pass_their_unit_tests(promtool, tmp_path):
    rules_dir(tmp_path)
    res = promtool_run(promtool, "test", "rules", TESTS.name, cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout


def alert_names() -> list[str]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return [r["alert"] for g in groups for r in g["rules"] if "alert" in r]


def test_every_alert_has_a_case_that_fires_and_one_that_does_not():
    cases = [c for t in yaml.safe_load(TESTS.read_text())["tests"]
             for c in t.get("alert_rule_test", [])]
    fires = {c["alertname"] for c in cases if c.get("exp_alerts")}
    quiet = {c["alertname"] for c in cases if not c.get("exp_alerts")}
    names = alert_names()
    assert len(names) == len(set(names)), names
    assert sorted(set(names) - fires) == [], "alerts without a case where they fire"
    assert sorted(set(names) - quiet) == [], "alerts without a case where they stay quiet"
    assert sorted((fires | quiet) - set(names)) == [], "test cases of alerts that do not exist"


@pytest.mark.parametrize("old,new", [
    ("        for: 2m\n        labels:\n          severity: critical\n        annotations:\n"
     "          summary: \"{{ $labels.node }} does not answer scrapes\"",
     "        for: 10m\n        labels:\n          severity: critical\n        annotations:\n"
     "          summary: \"{{ $labels.node }} does not answer scrapes\""),
    ("> on(profile) group_left() junkyard:gpu_temp_limit_celsius", "> 85"),
    ("35 * 86400", "40 * 86400"),
])
def test_a_rule_changed_behind_the_tests_back_fails_them(promtool, tmp_path, old, new):
    text = ALERTS.read_text()
    assert old in text
    rules_dir(tmp_path, text.replace(old, new))
    res = promtool_run(promtool, "test", "rules", TESTS.name, cwd=tmp_path)
    assert res.returncode != 0, res.stdout
    assert "FAILED" in res.stdout + res.stderr


def lab_model():
    model, errors = build_model(copy.deepcopy(lab_data()))
    assert errors == []
    return model


def render_config(tmp_path, model):
    d = rules_dir(tmp_path)
    text = render("etc/prometheus/prometheus.yml.j2", cluster_model=model,
                  __monitoring_rules_dir=str(d), monitoring_scrape_interval="15s",
                  monitoring_listen_address=model["head"]["mgmt"]["ip"], monitoring_port=9090,
                  __monitoring_targets=prometheus_targets(model, 9100))
    path = tmp_path / "prometheus.yml"
    path.write_text(text)
    return path


def test_the_configuration_scrapes_every_node_on_its_management_address(promtool, tmp_path):
    model = lab_model()
    path = render_config(tmp_path, model)
    res = promtool_run(promtool, "check", "config", str(path))
    assert res.returncode == 0, res.stdout + res.stderr
    config = yaml.safe_load(path.read_text())
    jobs = {j["job_name"]: j["static_configs"] for j in config["scrape_configs"]}
    nodes = {g["labels"]["node"]: (g["targets"], g["labels"]["profile"])
             for g in jobs["junkyard-nodes"]}
    assert nodes == {n["name"]: ([f"{n['mgmt']['ip']}:9100"], n["profile"])
                     for n in model["nodes"]}
    head = model["head"]
    assert jobs["junkyard-head"] == [{"targets": [f"{head['mgmt']['ip']}:9100"],
                                      "labels": {"node": head["name"], "role": "head"}}]
    assert jobs["prometheus"][0]["targets"] == [f"{head['mgmt']['ip']}:9090"]
    assert config["rule_files"] == [f"{tmp_path / 'rules'}/*.yml"]


def test_the_service_listens_on_the_management_address_only():
    model = lab_model()
    text = render("etc/default/prometheus.j2", monitoring_data_dir="/tank/monitoring/prometheus",
                  monitoring_retention="30d",
                  monitoring_listen_address=model["head"]["mgmt"]["ip"], monitoring_port=9090,
                  monitoring_page=True, monitoring_page_dir="/var/lib/junkyard/cluster-page")
    args = text.split('ARGS="', 1)[1].split('"', 1)[0].split()
    assert f"--web.listen-address={model['head']['mgmt']['ip']}:9090" in args
    assert "--storage.tsdb.path=/tank/monitoring/prometheus" in args
    # the cluster page, served by Prometheus under /user
    assert "--web.user-assets=/var/lib/junkyard/cluster-page" in args
