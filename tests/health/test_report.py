"""The health report: flags fire at their thresholds and not below; an
unreachable node is reported unreachable, never healthy; the burn-in verdict."""

from __future__ import annotations

import copy
import json

import pytest
from ansible_collections.junkyard.cluster.plugins.filter import health as hf
from ansible_collections.junkyard.cluster.plugins.module_utils import health_assess as ha
from ansible_collections.junkyard.cluster.plugins.module_utils import health_parsers as hp
from ansible_collections.junkyard.cluster.plugins.module_utils import health_render as hr

NOW = 1795953600.0

MODEL = {
    "images": {"bookworm-rocm": {"name": "bookworm-rocm", "current_version": "2026.11.2"}},
    "nodes": [
        {"name": "gpu01", "image": "bookworm-rocm", "image_version": "2026.11.2",
         "gpu_count": 8, "root_path": "/tank/images/bookworm-rocm/2026.11.2",
         "writable": [{"path": "/var/log", "kind": "persistent",
                       "source": "10.20.0.1:/tank/nodes/gpu01/var-log"},
                      {"path": "/tmp", "kind": "tmpfs", "source": ""}]},
        {"name": "gpu02", "image": "bookworm-rocm", "image_version": "2026.11.1",
         "gpu_count": 8, "writable": []},
    ],
    "data_datasets": [{"name": "scratch", "properties": {}, "mount": "/data/scratch"}],
}


def dimm(label, ce24=0, ce7=0, cetot=0, ue=0):
    return {"label": label, "locations": [], "ce_24h": ce24, "ce_7d": ce7, "ce_total": cetot,
            "ue_24h": ue, "ue_7d": ue, "ue_total": ue}


def healthy(image="bookworm-rocm/2026.11.2", temps=None, psu_failed=None, dimms=None,
            mounts=None, fan_extra=None):
    fan = {"present": True, "age_s": 2.0, "stale": False,
           "gpu_temp_c": temps if temps is not None else {"GPU0_TEMP": 60.0},
           "gpu_power_w": {"0": 200.0}, "fan_duty_percent": {"gpu-front": 40.0},
           "zone_state": {"gpu-front": "ok"},
           "psu_failed": psu_failed if psu_failed is not None else {"1": False, "2": False},
           "alarms": [], **(fan_extra or {})}
    return {
        "health": {"changed": False, "health": {
            "cmdline": hp.parse_cmdline(f"ro junkyard.image={image}"),
            "uptime_s": 90061.0,
            "mounts": mounts if mounts is not None else [
                {"path": "/", "kind": "root", "mounted": True, "responsive": True}],
            "fan": fan}},
        "ecc": {"changed": False, "ecc": {
            "edac_present": True, "db_present": True,
            "dimms": dimms if dimms is not None else [dimm("DIMM_P0_A0")]}},
    }


def report(hosts, **thresholds):
    return ha.build_report(hosts, MODEL, thresholds or None, now=NOW)


def node(rep, name="gpu01"):
    return next(n for n in rep["nodes"] if n["name"] == name)


def messages(n):
    return [f["message"] for f in n["flags"]]


def test_healthy_node_is_ok():
    r = report({"gpu01": healthy()})
    n = node(r)
    assert n["status"] == "ok", n["flags"]
    assert n["psu"] == "all PSUs"
    assert r["summary"] == {"ok": 1, "warn": 0, "fail": 0, "unreachable": 0}
    json.dumps(r)  # the report is JSON as it is


@pytest.mark.parametrize(("ce24", "ce7", "flagged"), [
    (9, 9, False),     # below 10/day
    (10, 10, True),    # at the limit in 24 h
    (0, 69, False),    # below 7 x 10 over the week
    (0, 70, True),     # at the weekly equivalent
])
def test_corrected_error_rate_threshold(ce24, ce7, flagged):
    r = report({"gpu01": healthy(dimms=[dimm("DIMM_P0_B0", ce24, ce7, ce7)])},
               ce_per_day_limit=10)
    n = node(r)
    assert n["memory"][0]["flagged"] is flagged
    assert any("DIMM DIMM_P0_B0: corrected errors at or over 10/day" in m
               for m in messages(n)) is flagged
    assert n["status"] == ("warn" if flagged else "ok")


def test_uncorrected_error_fails():
    n = node(report({"gpu01": healthy(dimms=[dimm("DIMM_P0_C0", ue=1)])}))
    assert n["status"] == "fail"
    assert "DIMM DIMM_P0_C0: 1 uncorrected errors" in messages(n)[0]


@pytest.mark.parametrize(("temp", "flagged"), [(94.9, False), (95.0, True), (101.0, True)])
def test_gpu_temperature_limit(temp, flagged):
    n = node(report({"gpu01": healthy(temps={"GPU0_TEMP": 60.0, "GPU6_TEMP": temp})},
                    gpu_temp_limit_c=95))
    assert any(m.startswith("GPU6_TEMP at") for m in messages(n)) is flagged
    assert n["status"] == ("fail" if flagged else "ok")


def test_one_psu():
    n = node(report({"gpu01": healthy(psu_failed={"1": False, "2": True})}))
    assert n["psu"] == "one PSU"
    assert "running on one PSU: PSU 2 reports failure or AC loss" in messages(n)
    assert n["status"] == "fail"


def test_stale_image():
    r = report({"gpu01": healthy(image="bookworm-rocm/2026.11.1"),
                "gpu02": healthy(image="bookworm-rocm/2026.11.1")})
    assert any("stale image: booted bookworm-rocm/2026.11.1, current is "
               "bookworm-rocm/2026.11.2" in m for m in messages(node(r, "gpu01")))
    # gpu01's boot entry names the current version: a reboot is pending.
    assert any("reboot pending" in m for m in messages(node(r, "gpu01")))
    # gpu02 is pinned to the old version: stale, but booted as assigned.
    assert not any("reboot pending" in m for m in messages(node(r, "gpu02")))
    assert node(r, "gpu02")["status"] == "warn"


def test_unknown_image():
    hosts = {"gpu01": healthy()}
    hosts["gpu01"]["health"]["health"]["cmdline"] = hp.parse_cmdline("root=/dev/sda1")
    n = node(report(hosts))
    assert any("booted image is unknown" in m for m in messages(n))


def test_mount_not_mounted_or_hung():
    n = node(report({"gpu01": healthy(mounts=[
        {"path": "/", "kind": "root", "mounted": True, "responsive": True},
        {"path": "/var/log", "kind": "persistent", "mounted": False, "error": "x"},
        {"path": "/data/scratch", "kind": "data", "mounted": True, "responsive": False,
         "error": "no answer within 5 s"}])}))
    assert "/var/log (persistent) is not mounted: x" in messages(n)
    assert "/data/scratch (data) does not answer: no answer within 5 s" in messages(n)
    assert n["status"] == "fail"


def test_fan_alarm_and_missing_metrics():
    n = node(report({"gpu01": healthy(fan_extra={"alarms": ["fan zone gpu-rear is in state "
                                                            "failsafe"]})}))
    assert "fan zone gpu-rear is in state failsafe" in messages(n)
    hosts = {"gpu01": healthy()}
    hosts["gpu01"]["health"]["health"]["fan"] = {
        "present": False, "error": f"{hp.FAN_TEXTFILE} does not exist"}
    n = node(report(hosts))
    assert n["status"] == "warn"
    assert any("fan daemon metrics missing" in m for m in messages(n))


def test_unreachable_node_is_unreachable_never_healthy():
    unreachable = {"unreachable": True, "changed": False,
                   "msg": "Failed to connect to the host via ssh: Connection refused"}
    r = report({"gpu01": healthy(), "gpu02": {"health": unreachable, "ecc": unreachable}})
    n = node(r, "gpu02")
    assert n["status"] == "unreachable"
    assert n["reachable"] is False
    assert "Connection refused" in n["flags"][0]["message"]
    assert r["unreachable"] == ["gpu02"]
    assert r["summary"]["unreachable"] == 1 and r["summary"]["ok"] == 1
    md = hr.report_markdown(r)
    assert "| gpu02 | **unreachable** |" in md
    assert any(line.startswith("gpu02: fail: unreachable") for line in hr.report_summary(r))


def test_node_without_any_result_is_unreachable():
    r = report({"gpu02": {}})
    assert node(r, "gpu02")["status"] == "unreachable"


def test_node_unreachable_only_for_the_second_task():
    hosts = {"gpu01": healthy()}
    hosts["gpu01"]["ecc"] = {"unreachable": True, "msg": "timed out"}
    assert node(report(hosts))["status"] == "unreachable"


def test_failed_gathering_is_a_failure():
    hosts = {"gpu01": healthy()}
    hosts["gpu01"]["ecc"] = {"failed": True, "msg": "rasdaemon: x is not an sqlite database"}
    n = node(report(hosts))
    assert n["status"] == "fail"
    assert "ecc gathering failed: rasdaemon: x is not an sqlite database" in messages(n)


SINFO = ("gpu01|idle|none\n"
         "gpu02|drained|junkyard-health: fan daemon not regulating\n"
         "gpu03|down*|Not responding\n"
         "gpu01|idle|none\n")  # a second partition's line for gpu01


def test_slurm_states_and_reasons_sit_beside_the_findings():
    unreachable = {"unreachable": True, "msg": "timed out"}
    hosts = {"gpu01": healthy(), "gpu02": healthy(), "gpu03": {"health": unreachable},
             "gpu04": healthy()}
    r = ha.build_report(hosts, MODEL, None, now=NOW, slurm=SINFO)
    assert node(r, "gpu01")["slurm"] == {"state": "idle", "reason": ""}
    assert node(r, "gpu01")["status"] == "ok"
    gpu02 = node(r, "gpu02")
    assert gpu02["status"] == "warn"
    assert ("Slurm has the node drained: junkyard-health: fan daemon not regulating"
            in messages(gpu02))
    gpu03 = node(r, "gpu03")
    assert gpu03["status"] == "unreachable"
    assert "Slurm has the node down*: Not responding" in messages(gpu03)
    # a node the controller does not know: no Slurm state, no flag
    assert node(r, "gpu04")["slurm"] is None and node(r, "gpu04")["status"] == "ok"
    md = hr.report_markdown(r)
    assert "| gpu02 | **warn** | drained (junkyard-health: fan daemon not regulating) |" in md
    assert "| gpu03 | **unreachable** | down* (Not responding) |" in md
    assert "| gpu01 | ok | idle |" in md


def test_without_the_controllers_answer_there_is_no_slurm_column_value():
    r = report({"gpu01": healthy()})
    assert node(r)["slurm"] is None
    assert "| gpu01 | ok | - |" in hr.report_markdown(r)


def test_markdown_lists_dimms_with_errors():
    r = report({"gpu01": healthy(dimms=[dimm("DIMM_P0_A0"), dimm("DIMM_P0_B0", 12, 30, 40)])})
    md = hr.report_markdown(r)
    assert "| gpu01 | DIMM_P0_B0 | 12 | 30 | 40 | 0 | 0 | 0 | yes |" in md
    assert "DIMM_P0_A0 |" not in md.split("## DIMMs with errors")[1].split("## Flags")[0]


@pytest.mark.parametrize(("thresholds", "message"), [
    ({"ce_per_day": 3}, "unknown key 'ce_per_day'"),
    ({"gpu_temp_limit_c": "hot"}, "gpu_temp_limit_c 'hot' must be a number > 0"),
    ({"ce_per_day_limit": 0}, "must be a number > 0"),
])
def test_bad_thresholds(thresholds, message):
    with pytest.raises(hp.HealthError, match=message):
        ha.build_report({}, MODEL, thresholds)


def test_filters():
    f = hf.FilterModule().filters()
    mounts = f["health_expected_mounts"](MODEL, "gpu01")
    assert [m["path"] for m in mounts] == ["/", "/var/log", "/tmp", "/data/scratch"]
    assert mounts[1]["source"] == "10.20.0.1:/tank/nodes/gpu01/var-log"
    from ansible.errors import AnsibleFilterError
    with pytest.raises(AnsibleFilterError, match="nodeX is not a node of cluster_model"):
        f["health_expected_mounts"](MODEL, "nodeX")
    assert f["health_parse_prometheus"]("a 1\n") == [{"name": "a", "labels": {}, "value": 1.0}]


# --- burn-in -----------------------------------------------------------------


def ecc(rows, ce=0, ue=0):
    return {"dimms": rows, "controllers_ce": ce, "controllers_ue": ue}


def row(label, ce=0, ue=0, ce_boot=0):
    return {"label": label, "ce_total": ce, "ue_total": ue,
            "edac": {"ce_boot": ce_boot, "ue_boot": 0}}


def sample(temps=None, alarms=(), psu=None, duty=None):
    return {"health": {"fan": {"gpu_temp_c": temps or {}, "alarms": list(alarms),
                               "psu_failed": psu or {}, "fan_duty_percent": duty or {}}}}


def test_burn_in_passes():
    v = ha.burn_in_verdict(ecc([row("A", ce=5)]), ecc([row("A", ce=5)]),
                           [sample({"GPU0_TEMP": 80.0}, duty={"gpu-front": 70}),
                           sample({"GPU0_TEMP": 85.0}, duty={"gpu-front": 90})],
                           gpu_temp_limit_c=95, gpu_expected=True,
                           stress={"memory": {"rc": 0}, "gpu": {"rc": 0}})
    assert v["passed"], v["problems"]
    assert v["max_gpu_temp_c"] == {"GPU0_TEMP": 85.0}
    assert v["max_fan_duty_percent"] == {"gpu-front": 90}


def test_burn_in_new_ecc_errors_fail():
    v = ha.burn_in_verdict(ecc([row("A", ce=5), row("B")]),
                           ecc([row("A", ce=7), row("B", ce_boot=1)]), [sample()])
    assert not v["passed"]
    assert "DIMM A: 2 corrected new error(s) during the burn-in" in v["problems"]
    assert "DIMM B: 1 corrected new error(s) during the burn-in" in v["problems"]


def test_burn_in_unattributed_errors_fail():
    v = ha.burn_in_verdict(ecc([], ce=1), ecc([], ce=3), [])
    assert v["problems"] == ["EDAC counted 2 corrected and 0 uncorrected new errors not "
                             "attributed to a DIMM"]


@pytest.mark.parametrize(("temp", "passed"), [(94.0, True), (95.0, False)])
def test_burn_in_gpu_limit(temp, passed):
    v = ha.burn_in_verdict(ecc([]), ecc([]), [sample({"GPU3_TEMP": temp})],
                           gpu_temp_limit_c=95, gpu_expected=True)
    assert v["passed"] is passed


def test_burn_in_fan_alarm_psu_and_stress_failure():
    v = ha.burn_in_verdict(ecc([]), ecc([]),
                           [sample({"GPU0_TEMP": 50.0}),
                           sample({"GPU0_TEMP": 50.0}, alarms=["fan zone cpu is in state "
                                                               "bmc_lost"],
                                  psu={"2": True})],
                           stress={"memory": {"rc": 2, "stderr": "stress-ng: oom\n"}})
    assert "sample 2: fan zone cpu is in state bmc_lost" in v["problems"]
    assert "PSU 2 reported failure or AC loss" in v["problems"]
    assert "memory stress failed (rc 2): stress-ng: oom" in v["problems"]


def test_burn_in_without_gpus_notes_the_skip():
    v = ha.burn_in_verdict(ecc([]), ecc([]), [sample()],
                           stress={"memory": {"rc": 0},
                                   "gpu": {"skipped": True, "reason": "the profile has no GPU"}})
    assert v["passed"]
    assert v["notes"] == ["gpu stress skipped: the profile has no GPU"]


def test_burn_in_gpu_node_without_temperatures_fails():
    v = ha.burn_in_verdict(ecc([]), ecc([]), [sample()], gpu_expected=True)
    assert not v["passed"]
    assert "no GPU temperature was seen" in v["problems"][0]


def test_report_does_not_change_its_input():
    hosts = {"gpu01": healthy()}
    before = copy.deepcopy(hosts)
    report(hosts)
    assert hosts == before


def test_error_count_grows_with_any_source(tmp_path):
    from rasdaemon_fixtures import edac_tree
    tree = [(0, 0, "DIMM_P0_A0", "csrow 0 channel 0", 12, 0)]
    events = {"present": True, "events": [
        {"source": "mc_event", "id": 1, "time": NOW - 10, "kind": "ce", "count": 16,
         "label": "DIMM_P0_A0", "location": ""}]}
    before = hp.ecc_summary(hp.read_edac(str(edac_tree(tmp_path / "a", tree))), events, now=NOW)
    tree[0] = (0, 0, "DIMM_P0_A0", "csrow 0 channel 0", 13, 0)
    after = hp.ecc_summary(hp.read_edac(str(edac_tree(tmp_path / "b", tree))), events, now=NOW)
    # The headline total stays at 16 (the database knows more), the count moves.
    assert before["dimms"][0]["ce_total"] == after["dimms"][0]["ce_total"] == 16
    assert ha.error_count(after) == ha.error_count(before) + 1
    assert ha.burn_in_stop_reasons({"errors_total": ha.error_count(after)}, 95,
                                   ha.error_count(before)) == ["1 new memory error(s)"]
