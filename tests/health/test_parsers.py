"""Parsers of node health data: EDAC sysfs, rasdaemon's database, Prometheus text."""

from __future__ import annotations

import math

import pytest
from ansible_collections.junkyard.cluster.plugins.module_utils import health_assess as ha
from ansible_collections.junkyard.cluster.plugins.module_utils import health_labels as hl
from ansible_collections.junkyard.cluster.plugins.module_utils import health_parsers as hp
from junkyard_fan import metrics as fan_metrics
from rasdaemon_fixtures import (
    DAY,
    HOUR,
    NOW,
    create_db,
    csrow_tree,
    edac_tree,
    mc_event,
    umc_mce,
    write,
)

LABELS = ["DIMM_P0_A0", "DIMM_P0_B0", "DIMM_P0_C0", "DIMM_P0_D0"]


# --- EDAC sysfs ------------------------------------------------------------


def test_edac_dimm_layout(tmp_path):
    root = edac_tree(tmp_path / "mc", [
        (0, 0, "DIMM_P0_A0", "csrow 0 channel 0", 0, 0),
        (1, 0, "DIMM_P0_B0", "csrow 0 channel 0", 17, 0),
        (2, 0, "DIMM_P0_C0", "csrow 0 channel 0", 0, 2),
        (10, 0, "", "csrow 1 channel 0", 3, 0),
    ])
    edac = hp.read_edac(str(root))
    assert edac["present"]
    # mc10 sorts after mc2 (numeric order, not string order).
    assert [c["mc"] for c in edac["controllers"]] == [0, 1, 2, 10]
    by = {(d["mc"], d["index"]): d for d in edac["dimms"]}
    assert by[(1, 0)]["label"] == "DIMM_P0_B0"
    assert by[(1, 0)]["ce"] == 17
    assert by[(2, 0)]["ue"] == 2
    assert by[(10, 0)]["location"] == "10.1.0"
    assert edac["controllers"][1]["ce"] == 17


def test_edac_csrow_layout(tmp_path):
    root = csrow_tree(tmp_path / "mc", [
        (0, 0, {0: ("DIMM_A1", 4), 1: ("DIMM_B1", 0)}, 1),
        (0, 1, {0: ("DIMM_A1", 2), 1: ("DIMM_B1", 0)}, 0),
    ])
    edac = hp.read_edac(str(root))
    assert {(d["label"], d["location"], d["ce"]) for d in edac["dimms"]} == {
        ("DIMM_A1", "0.0.0", 4), ("DIMM_B1", "0.0.1", 0),
        ("DIMM_A1", "0.1.0", 2), ("DIMM_B1", "0.1.1", 0)}
    summary = hp.ecc_summary(edac, {"events": []}, now=NOW)
    a1 = next(d for d in summary["dimms"] if d["label"] == "DIMM_A1")
    # Both ranks of the DIMM add up under its label; the row's UE counts once.
    assert a1["edac"] == {"ce_boot": 6, "ue_boot": 1}
    assert a1["ce_total"] == 6


def test_edac_absent(tmp_path):
    edac = hp.read_edac(str(tmp_path / "none"))
    assert edac == {"present": False, "root": str(tmp_path / "none"), "controllers": [],
                    "dimms": []}


def test_edac_garbage_counter_is_a_clear_error(tmp_path):
    root = edac_tree(tmp_path / "mc", [(0, 0, "DIMM_P0_A0", "csrow 0 channel 0", 0, 0)])
    write(root / "mc0" / "dimm0" / "dimm_ce_count", "lots\n")
    with pytest.raises(hp.HealthError, match=r"dimm0/dimm_ce_count holds 'lots'"):
        hp.read_edac(str(root))


# --- rasdaemon's database ----------------------------------------------------


def test_rasdaemon_windows_per_label(tmp_path):
    db = create_db(tmp_path / "ras-mc_event.db", mc_events=[
        mc_event(30 * DAY, "DIMM_P0_B0", count=100),        # total only
        mc_event(3 * DAY, "DIMM_P0_B0", count=5),           # 7 d
        mc_event(2 * HOUR, "DIMM_P0_B0", count=2),          # 24 h
        mc_event(2 * HOUR, "DIMM_P0_B0", count=1, offset_hours=1),  # same instant, +0100
        mc_event(23 * HOUR, "DIMM_P0_C0", kind="Uncorrected"),
        mc_event(1 * HOUR, "DIMM_P0_D0", kind="Info"),     # not an error count
    ])
    rd = hp.read_rasdaemon_db(str(db))
    assert rd["present"]
    s = hp.ecc_summary({"dimms": []}, rd, now=NOW, expected_labels=LABELS)
    rows = {d["label"]: d for d in s["dimms"]}
    assert [d["label"] for d in s["dimms"]] == LABELS  # inventory order, all present
    b = rows["DIMM_P0_B0"]
    assert (b["ce_24h"], b["ce_7d"], b["ce_total"]) == (3, 8, 108)
    c = rows["DIMM_P0_C0"]
    assert (c["ue_24h"], c["ue_7d"], c["ue_total"], c["ce_total"]) == (1, 1, 1, 0)
    assert rows["DIMM_P0_D0"]["ce_total"] == 0
    assert rows["DIMM_P0_A0"]["ce_total"] == 0


def test_window_edges(tmp_path):
    db = create_db(tmp_path / "db", mc_events=[
        mc_event(DAY, "X"), mc_event(DAY + 1, "X"), mc_event(7 * DAY, "X"),
        mc_event(7 * DAY + 1, "X")])
    s = hp.ecc_summary({}, hp.read_rasdaemon_db(str(db)), now=NOW)
    x = s["dimms"][0]
    assert (x["ce_24h"], x["ce_7d"], x["ce_total"]) == (1, 3, 4)


def test_amd_umc_machine_checks_count(tmp_path):
    db = create_db(tmp_path / "db", mce_records=[
        umc_mce(HOUR, channel=3),
        umc_mce(2 * HOUR, channel=3),
        umc_mce(2 * DAY, channel=3),
        umc_mce(HOUR, channel=5, uncorrected=True),
        # A cache error is no memory error.
        {**umc_mce(HOUR, channel=0), "bank_name": "L3 Cache", "error_msg": "L3 data error",
         "mc_location": ""},
    ])
    rd = hp.read_rasdaemon_db(str(db))
    assert {e["source"] for e in rd["events"]} == {"mce"}
    s = hp.ecc_summary({}, rd, now=NOW)
    rows = {d["label"]: d for d in s["dimms"]}
    assert set(rows) == {"cpu0-umc3", "cpu0-umc5"}
    assert (rows["cpu0-umc3"]["ce_24h"], rows["cpu0-umc3"]["ce_7d"]) == (2, 3)
    assert rows["cpu0-umc3"]["mce"]["ce_total"] == 3
    assert rows["cpu0-umc5"]["ue_total"] == 1
    assert rows["cpu0-umc5"]["ce_total"] == 0


def test_uc_bit_decides_without_a_status_message(tmp_path):
    db = create_db(tmp_path / "db", mce_records=[
        {**umc_mce(HOUR, channel=1), "mcistatus_msg": ""},
        {**umc_mce(HOUR, channel=2, uncorrected=True), "mcistatus_msg": ""}])
    rows = {d["label"]: d for d in
            hp.ecc_summary({}, hp.read_rasdaemon_db(str(db)), now=NOW)["dimms"]}
    assert rows["cpu0-umc1"]["ce_total"] == 1
    assert rows["cpu0-umc2"]["ue_total"] == 1


def test_same_error_from_both_sources_counts_once(tmp_path):
    """An EDAC event and an MCE for one label: the larger, not the sum."""
    events = [{"source": "mc_event", "id": 1, "time": NOW - 10, "kind": "ce", "count": 4,
               "label": "DIMM_P0_A0", "location": "0.0.0"},
              {"source": "mce", "id": 1, "time": NOW - 10, "kind": "ce", "count": 1,
               "label": "DIMM_P0_A0", "location": ""}]
    s = hp.ecc_summary({}, {"events": events, "present": True}, now=NOW)
    assert s["dimms"][0]["ce_24h"] == 4


def test_unlabelled_event_takes_the_edac_label_of_its_location(tmp_path):
    edac = hp.read_edac(str(edac_tree(tmp_path / "mc", [
        (1, 0, "DIMM_P0_B0", "csrow 0 channel 0", 0, 0)])))
    db = create_db(tmp_path / "db", mc_events=[
        mc_event(HOUR, "unknown memory", mc=1, top=0, mid=0)])
    ev = hp.read_rasdaemon_db(str(db))
    assert ev["events"][0]["location"] == "1.0.0"
    s = hp.ecc_summary(edac, ev, now=NOW)
    assert {d["label"]: d["ce_24h"] for d in s["dimms"]} == {"DIMM_P0_B0": 1}


def test_edac_boot_counter_raises_the_total(tmp_path):
    edac = hp.read_edac(str(edac_tree(tmp_path / "mc", [
        (0, 0, "DIMM_P0_A0", "csrow 0 channel 0", 12, 0)])))
    s = hp.ecc_summary(edac, {"present": False, "events": []}, now=NOW)
    assert s["dimms"][0]["ce_total"] == 12
    assert s["controllers_ce"] == 12
    assert not s["db_present"]


def test_missing_db_is_no_events(tmp_path):
    rd = hp.read_rasdaemon_db(str(tmp_path / "nothing.db"))
    assert rd == {"present": False, "path": str(tmp_path / "nothing.db"), "events": []}


def test_db_that_is_not_sqlite(tmp_path):
    bad = tmp_path / "ras-mc_event.db"
    bad.write_bytes(b"this is not a database at all, just some text" * 50)
    with pytest.raises(hp.HealthError, match="is not an sqlite database"):
        hp.read_rasdaemon_db(str(bad))


def test_db_with_a_foreign_mc_event_table(tmp_path):
    import sqlite3
    p = tmp_path / "db"
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE mc_event (id INTEGER, timestamp TEXT)")
    con.commit()
    con.close()
    with pytest.raises(hp.HealthError, match=r"mc_event lacks columns .*err_count"):
        hp.read_rasdaemon_db(str(p))


def test_db_with_a_bad_timestamp(tmp_path):
    db = create_db(tmp_path / "db", mc_events=[{**mc_event(HOUR, "X"), "timestamp": "soon"}])
    with pytest.raises(hp.HealthError, match="timestamp 'soon'"):
        hp.read_rasdaemon_db(str(db))


@pytest.mark.parametrize(("text", "epoch"), [
    ("2026-11-29 12:00:00 +0000", NOW),
    ("2026-11-29 13:00:00 +0100", NOW),
    ("2026-11-29 07:00:00 -0500", NOW),
    ("2026-11-29 12:00:00", NOW),
])
def test_timestamps(text, epoch):
    assert hp.parse_timestamp(text) == epoch


# --- Prometheus text and the fan daemon's names -----------------------------


def daemon_text():
    """What the fan daemon writes, rendered by the daemon's own code."""
    samples = [
        ("sensor_reading", {"sensor": "GPU0_TEMP", "role": "gpu_temp"}, 71.0),
        ("sensor_reading", {"sensor": "GPU4_TEMP", "role": "gpu_temp"}, 88.5),
        ("sensor_reading", {"sensor": "CPU0_TEMP", "role": "cpu_temp"}, 55.0),
        ("sensor_reading", {"sensor": "GPU0_12V_I", "role": "current"}, 20.0),
        ("gpu_power_watts", {"gpu": "0"}, 240.0),
        ("gpu_power_watts", {"gpu": "4"}, 290.0),
        ("zone_duty_percent", {"zone": "gpu-front"}, 55.0),
        ("zone_duty_percent", {"zone": "gpu-rear"}, 80.0),
        *[("zone_state", {"zone": "gpu-front", "state": s}, 1.0 if s == "ok" else 0.0)
          for s in ("ok", "hold", "failsafe", "override", "bmc_lost")],
        *[("zone_state", {"zone": "gpu-rear", "state": s}, 1.0 if s == "failsafe" else 0.0)
          for s in ("ok", "hold", "failsafe", "override", "bmc_lost")],
        ("bmc_reachable", {}, 1.0),
        ("psu_failed", {"psu": "1"}, 0.0),
        ("psu_failed", {"psu": "2"}, 1.0),
        ("power_cap_active", {}, 1.0),
        ("power_cap_watts", {}, 198.0),
        ("cycles_total", {}, 1234.0),
    ]
    return fan_metrics.render(samples)


def test_fan_daemon_metrics():
    fan = hp.fan_summary(hp.parse_prometheus(daemon_text()))
    assert fan["gpu_temp_c"] == {"GPU0_TEMP": 71.0, "GPU4_TEMP": 88.5}
    assert fan["cpu_temp_c"] == {"CPU0_TEMP": 55.0}
    assert fan["gpu_power_w"] == {"0": 240.0, "4": 290.0}
    assert fan["fan_duty_percent"] == {"gpu-front": 55.0, "gpu-rear": 80.0}
    assert fan["zone_state"] == {"gpu-front": "ok", "gpu-rear": "failsafe"}
    assert fan["psu_failed"] == {"1": False, "2": True}
    assert fan["power_cap_active"] is True
    assert fan["alarms"] == ["fan zone gpu-rear is in state failsafe"]


def test_every_mapped_name_is_one_the_daemon_declares():
    declared = {fan_metrics.PREFIX + name for name in fan_metrics.HELP}
    assert set(hp.FAN_METRICS.values()) <= declared


def test_prometheus_general_text():
    text = (
        "# HELP x_total a counter\n# TYPE x_total counter\n"
        'x_total{path="C:\\\\dir",msg="say \\"hi\\"\\n",} 3 1700000000000\n'
        "y NaN\nz +Inf\nw -1.5e3\n"
        'empty{} 0\n'
    )
    s = hp.parse_prometheus(text)
    assert s[0] == ("x_total", {"path": "C:\\dir", "msg": 'say "hi"\n'}, 3.0)
    assert math.isnan(s[1][2])
    assert s[2][2] == math.inf
    assert s[3][2] == -1500.0
    assert s[4] == ("empty", {}, 0.0)


@pytest.mark.parametrize(("text", "message"), [
    ("metric_without_value\n", "line 1: 'metric_without_value' needs a value"),
    ("# ok\nm{a=\"1\" 3\n", r"line 2: expected , or \} after label a"),
    ('m{a="1} 3\n', "unterminated value of label a"),
    ("m 12 x\n", "timestamp 'x' is not an integer"),
    ("m twelve\n", "value 'twelve' is not a number"),
    ('m{a="1",a="2"} 3\n', "label a repeated"),
    ("{} 3\n", "does not start with a metric name"),
    ('m{a="\\q"} 1\n', r"bad escape \\q"),
])
def test_prometheus_malformed(text, message):
    with pytest.raises(hp.HealthError, match=message):
        hp.parse_prometheus(text, "fan.prom")


def test_fan_metrics_file(tmp_path):
    p = tmp_path / "fan.prom"
    p.write_text(daemon_text())
    fan = hp.read_fan_metrics(str(p), now=p.stat().st_mtime + 5, stale_after=30)
    assert fan["present"] and not fan["stale"] and fan["age_s"] == 5.0
    fan = hp.read_fan_metrics(str(p), now=p.stat().st_mtime + 60, stale_after=30)
    assert fan["stale"]
    p.write_text("junkyard_fan_bmc_reachable maybe\n")
    fan = hp.read_fan_metrics(str(p))
    assert "value 'maybe' is not a number" in fan["error"]
    assert not hp.read_fan_metrics(str(tmp_path / "gone.prom"))["present"]


# --- small readers, label files ----------------------------------------------


def test_cmdline_uptime_mounts():
    c = hp.parse_cmdline("BOOT_IMAGE=/vmlinuz root=/dev/nfs ro junkyard.node=node01 "
                         "junkyard.image=bookworm-rocm/2026.11.1 iommu=pt\n")
    assert c == {"node": "node01", "image": "bookworm-rocm/2026.11.1",
                 "image_name": "bookworm-rocm", "image_version": "2026.11.1"}
    assert hp.parse_cmdline("root=/dev/sda1")["image"] is None
    assert hp.parse_uptime("12345.67 999.00\n") == 12345.67
    with pytest.raises(hp.HealthError, match="not seconds"):
        hp.parse_uptime("")
    m = hp.parse_mounts("10.77.0.1:/tank/images/bookworm/v1 / nfs ro,vers=3 0 0\n"
                        "tmpfs /tmp tmpfs rw 0 0\nbad line\n"
                        "10.77.0.1:/tank/nodes/n1/x /var/lib/my\\040dir nfs rw 0 0\n")
    assert m["/"]["fstype"] == "nfs"
    assert "/var/lib/my dir" in m


def test_mount_table_check():
    table = hp.parse_mounts("h:/r / nfs ro 0 0\ntmpfs /tmp tmpfs rw 0 0\n"
                            "tmpfs /var/log tmpfs rw 0 0\n")
    rows = ha.check_mount_table([
        {"path": "/", "kind": "root", "source": "h:/r"},
        {"path": "/tmp", "kind": "tmpfs"},
        {"path": "/var/log", "kind": "persistent"},
        {"path": "/data/scratch", "kind": "data"},
    ], table)
    by = {r["path"]: r for r in rows}
    assert by["/"]["mounted"] and by["/tmp"]["mounted"]
    assert not by["/var/log"]["mounted"]
    assert "mounted as tmpfs" in by["/var/log"]["error"]
    assert by["/data/scratch"]["error"] == "not a mount point"


def test_dimm_label_entries():
    e = hl.dimm_label_entries(["DIMM_P0_A0", {"label": "DIMM_P0_B0", "location": "3.0.1"},
                              {"label": "X", "location": ["4.0.0", "4.1.0"]}])
    assert e == [{"label": "DIMM_P0_A0", "locations": ["0.0.0", "0.1.0"]},
                 {"label": "DIMM_P0_B0", "locations": ["3.0.1"]},
                 {"label": "X", "locations": ["4.0.0", "4.1.0"]}]


@pytest.mark.parametrize(("labels", "message"), [
    ("DIMM_A", "must be a list"),
    (["A", "A"], r"dimm_labels\[1\] label A is repeated"),
    (["A B"], "without spaces"),
    ([{"label": "A", "location": "x.y"}], r"dimm_labels\[0\] location x.y is not mc.top"),
    ([{"label": "A"}], r"dimm_labels\[0\].location None"),
    ([3], r"dimm_labels\[0\] 3 must be a label"),
])
def test_dimm_label_entries_refused(labels, message):
    with pytest.raises(hp.HealthError, match=message):
        hl.dimm_label_entries(labels)


def test_label_files_per_profile():
    profiles = {
        "lab-vm": {"memory": {"dimm_labels": []}},
        "g292-z20": {"description": "Gigabyte\n G292-Z20",
                     "memory": {"dimm_labels": ["DIMM_P0_A0", "DIMM_P0_B0"]}},
        "g292-z45": {"memory": {"board": {"vendor": "GIGABYTE", "product": "G292-Z45-00"},
                                "dimm_labels": [{"label": "DIMM_P1_A0", "location": "8.0.0"}]}},
    }
    files = hl.label_files(profiles, {"g292-z20": {"vendor": "GIGABYTE", "model": "MZ52"}})
    assert [f["profile"] for f in files] == ["g292-z20", "g292-z45"]  # none for lab-vm
    assert files[0]["board"] == {"vendor": "GIGABYTE", "model": "MZ52"}
    assert files[0]["description"] == "Gigabyte G292-Z20"
    assert files[0]["entries"][1] == {"label": "DIMM_P0_B0", "locations": ["1.0.0", "1.1.0"]}
    assert files[1]["board"]["product"] == "G292-Z45-00"
    # No board anywhere: listed with an empty board, which the role refuses.
    assert hl.label_files({"odd": {"memory": {"dimm_labels": ["A"]}}})[0]["board"] == {}
    with pytest.raises(hp.HealthError,
                       match=r"cluster_hardware_profiles.odd.memory.dimm_labels\[1\] label A"):
        hl.label_files({"odd": {"memory": {"dimm_labels": ["A", "A"]}}})
