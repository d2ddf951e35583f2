"""In-band GPU sensors: amdgpu's hwmon files, against a sysfs tree laid out as the
kernel lays it out (tests/daemon/amdgpu_sysfs.py). The BMC side of the loop is the
fake transport of the unit tests here; test_fan_bmc_hwmon.py runs the daemon
against ipmi_sim."""

from __future__ import annotations

import dataclasses
import logging
import shutil
import time

import amdgpu_sysfs
import pytest
import yaml
from ansible_collections.junkyard.cluster.plugins.module_utils.health_parsers import (
    fan_summary,
    parse_prometheus,
)
from bmc_helpers import duty, settled, wait_for, write_config
from fan_fixtures import FakeClock, FakeTransport, raw_config
from junkyard_fan import hwmon
from junkyard_fan.config import ConfigError, Metrics, parse_config
from junkyard_fan.daemon import Daemon
from junkyard_fan.ipmi import Bmc, Reading
from junkyard_fan.powerguard import PowerGuard

FRONT, REAR, CPU = 1, 2, 0
TIMINGS = {"interval": 1, "stale_after": 2.5, "deadline": 6, "rewrite_every": 30,
           "retries": 3, "exit_budget": 1}


def make(root, *, pci=None, calibration=1.0, temps=False, **hw):
    raw = raw_config(timings=TIMINGS, hwmon={"sysfs_root": str(root), **hw},
                     power_guard={"command": ["true", "{watts}"], "reset_command": ["true"],
                                  "read_command": ["true"]})
    if not temps:
        del raw["profile"]["bmc"]["gpu_temp_sensors"]  # as the example's profiles
    raw["profile"]["bmc"]["current_calibration"] = calibration
    if pci is not None:
        raw["profile"]["gpu"]["pci_addresses"] = pci
    cfg = parse_config(raw, env={})
    clock = FakeClock()
    fake = FakeTransport()
    bmc = Bmc(cfg.bmc, cfg.timings, transport=fake, sleep=lambda s: None)
    d = Daemon(cfg, bmc, guard=PowerGuard(cfg, run=lambda *a, **k: None), clock=clock)
    d.setup()
    return d, fake, clock


def tick(d, clock, n=1):
    for _round in range(n):
        d.cycle()
        clock.advance(1.0)


# ------------------------------------------------------------------ discovery
def test_discovery_finds_the_amdgpu_cards_in_pci_order_and_nothing_else(tmp_path):
    # cards made in an order that is not the PCI order: the address decides
    shuffled = [amdgpu_sysfs.PCI[i] for i in (5, 0, 7, 2, 1, 6, 3, 4)]
    amdgpu_sysfs.build(tmp_path, shuffled)
    gpus = hwmon.discover(tmp_path)
    assert [g.pci for g in gpus] == amdgpu_sysfs.PCI  # not the ASPEED card0, not k10temp
    first = gpus[0]
    assert first.card == "card2"  # card0 is the BMC's VGA
    assert sorted(first.temps) == ["edge", "junction", "mem"]
    assert first.temps["junction"].name == "temp2_input"
    assert first.power is not None and first.power.name == "power1_average"
    assert hwmon.read_temp_c(first.temps["edge"]) == 40.0  # millidegrees -> C
    assert hwmon.read_power_w(first.power) == 35.0  # microwatts -> W


def test_channels_are_picked_by_label_not_number(tmp_path):
    gpu = amdgpu_sysfs.build(tmp_path, amdgpu_sysfs.PCI[:1])[0]
    # an ASIC without the edge sensor: junction is its only channel, as temp1
    for n in (1, 2, 3):
        gpu.remove(f"temp{n}_input")
        gpu.remove(f"temp{n}_label")
    (gpu.hwmon / "temp1_label").write_text("junction\n")
    (gpu.hwmon / "temp1_input").write_text("71000\n")
    found = hwmon.discover(tmp_path)[0]
    assert list(found.temps) == ["junction"]
    assert hwmon.read_temp_c(found.temps["junction"]) == 71.0


def test_a_missing_system_gives_no_gpus(tmp_path):
    assert hwmon.discover(tmp_path / "nothing") == []


def test_pci_addresses_set_the_gpu_order_and_name_what_is_missing(tmp_path):
    amdgpu_sysfs.build(tmp_path, amdgpu_sysfs.PCI[:7])  # one GPU did not come up
    gpus = hwmon.discover(tmp_path)
    order = tuple(reversed(amdgpu_sysfs.PCI))
    mapping, problems = hwmon.assign(gpus, 8, order)
    assert mapping[1].pci == "0000:63:00.0"
    assert 0 not in mapping
    assert problems == ["GPU 0 (0000:67:00.0): no amdgpu device with hwmon at this address"]
    # without the list, a missing GPU would shift the order: none is used
    mapping, problems = hwmon.assign(gpus, 8, ())
    assert mapping == {}
    assert "found 7 amdgpu devices" in problems[0] and "profile.gpu.count is 8" in problems[0]


@pytest.mark.parametrize(("value", "problem"), [
    (["0000:03:00.0"] * 8, "profile.gpu.pci_addresses[1]: PCI address 0000:03:00.0 is listed "
                           "twice"),
    (amdgpu_sysfs.PCI[:7], "profile.gpu.pci_addresses: lists 7 addresses but profile.gpu.count "
                           "is 8"),
    ([*amdgpu_sysfs.PCI[:7], "slot 8"], "profile.gpu.pci_addresses[7]: is not a PCI address "
                                        "like 0000:03:00.0, got 'slot 8'"),
])
def test_bad_pci_addresses_are_refused(value, problem):
    raw = raw_config()
    raw["profile"]["gpu"]["pci_addresses"] = value
    with pytest.raises(ConfigError) as err:
        parse_config(raw, env={})
    assert any(p.startswith(problem) for p in err.value.problems), err.value.problems


def test_short_pci_addresses_are_normalised():
    raw = raw_config()
    raw["profile"]["gpu"]["pci_addresses"] = [a[5:].upper() for a in amdgpu_sysfs.PCI]
    assert parse_config(raw, env={}).profile.gpu_pci_addresses == tuple(amdgpu_sysfs.PCI)


# ---------------------------------------------------------------- the daemon
def test_a_hot_gpu_on_hwmon_fires_its_zones_override(tmp_path):
    gpus = amdgpu_sysfs.build(tmp_path)
    d, fake, clock = make(tmp_path)
    assert d.zones[1].sensors[-4:] == [f"hwmon.gpu[{g}].temp" for g in (4, 5, 6, 7)]
    tick(d, clock)
    assert fake.duties() == {FRONT: 25, REAR: 25, CPU: 29}
    gpus[6].set_temp("edge", 88)  # above temp_limit_c (85)
    tick(d, clock)
    assert fake.duties()[REAR] == 100
    assert d.zones[1].state == "override"
    assert d.zones[0].state == "ok" and fake.duties()[FRONT] == 25
    gpus[6].set_temp("edge", 79)  # 6 C below the limit: override released, feedback stays
    tick(d, clock)
    assert d.zones[1].state == "ok"


def test_the_configured_channel_is_followed(tmp_path):
    gpus = amdgpu_sysfs.build(tmp_path)
    d, fake, clock = make(tmp_path, temperature="junction")
    tick(d, clock)
    gpus[1].set_temp("edge", 99)  # not the followed channel
    tick(d, clock)
    assert d.zones[0].state == "ok"
    gpus[1].set_temp("junction", 90)
    tick(d, clock)
    assert d.zones[0].state == "override" and fake.duties()[FRONT] == 100


def test_temperature_feedback_raises_the_duty_from_hwmon(tmp_path):
    gpus = amdgpu_sysfs.build(tmp_path)
    d, fake, clock = make(tmp_path)
    tick(d, clock)
    gpus[0].set_temp("edge", 75)  # 5 C above temp_target_c (70): + 4 % per C
    tick(d, clock, 2)
    assert fake.duties()[FRONT] == 45


def test_gpu_order_follows_pci_addresses(tmp_path):
    gpus = amdgpu_sysfs.build(tmp_path)
    # GPU 0 of the profile is the card at the last address: heating that card
    # must move the zone of GPU 0 (front), not the zone of the 8th card (rear)
    d, _fake, clock = make(tmp_path, pci=list(reversed(amdgpu_sysfs.PCI)))
    tick(d, clock)
    gpus[7].set_temp("edge", 90)
    tick(d, clock)
    assert d.zones[0].state == "override" and d.zones[1].state == "ok"


def test_an_unreadable_hwmon_file_holds_then_fails_safe(tmp_path):
    gpus = amdgpu_sysfs.build(tmp_path)
    d, fake, clock = make(tmp_path)
    tick(d, clock)
    gpus[5].remove("temp1_input")  # the GPU went away (reset, fell off the bus)
    tick(d, clock, 3)
    assert d.zones[1].state == "hold"
    tick(d, clock, 4)
    assert d.zones[1].state == "failsafe" and fake.duties()[REAR] == 100
    assert d.zones[0].state == "ok"


def test_bmc_temperatures_win_over_hwmon(tmp_path):
    gpus = amdgpu_sysfs.build(tmp_path)
    d, _fake, clock = make(tmp_path, temps=True)
    assert not any(k.endswith(".temp") for k in d.sensors if k.startswith("hwmon"))
    gpus[0].set_temp("edge", 95)
    tick(d, clock, 2)
    assert d.zones[0].state == "ok"


def test_without_gpus_the_zones_run_on_power_alone_and_say_why(tmp_path, caplog):
    amdgpu_sysfs.build(tmp_path, amdgpu_sysfs.PCI[:6])  # two GPUs missing (no firmware)
    with caplog.at_level(logging.ERROR, logger="junkyard_fan"):
        d, _fake, clock = make(tmp_path)
    assert "found 6 amdgpu devices" in caplog.text
    tick(d, clock)
    assert [z.state for z in d.zones] == ["ok", "ok", "ok"]
    assert ("hwmon_problems", {}, 1) in d.samples()


def test_power_cross_check_flags_an_uncalibrated_current(tmp_path):
    gpus = amdgpu_sysfs.build(tmp_path)
    for g in gpus:
        g.set_power(200)
    # a G292-Z45: its BMC reports twice the current (2 x 200 W / 12 V)
    d, fake, clock = make(tmp_path)
    for i in range(8):
        fake.values[f"GPU{i}_12V_I"] = Reading(value=2 * 200 / 12)
    tick(d, clock)
    assert d.power_mismatch == dict.fromkeys(range(8), True)
    assert ("gpu_power_mismatch", {"gpu": "3"}, 1.0) in d.samples()
    fixed, fake2, clock2 = make(tmp_path, calibration=0.5)
    for i in range(8):
        fake2.values[f"GPU{i}_12V_I"] = Reading(value=2 * 200 / 12)
    tick(fixed, clock2)
    assert fixed.power_mismatch == dict.fromkeys(range(8), False)


def test_health_report_reads_the_hwmon_temperatures_from_the_metrics(tmp_path):
    gpus = amdgpu_sysfs.build(tmp_path / "sys")
    prom = tmp_path / "fan.prom"
    d, _fake, clock = make(tmp_path / "sys")
    d.cfg = dataclasses.replace(d.cfg, metrics=Metrics(textfile=prom))
    gpus[2].set_temp("edge", 63.5)
    tick(d, clock)
    summary = fan_summary(parse_prometheus(prom.read_text(), str(prom)))
    temps = summary["gpu_temp_c"]
    assert len(temps) == 8
    assert temps["GPU2 edge (amdgpu 0000:23:00.0)"] == 63.5


# ------------------------------------------------ the daemon process, ipmi_sim
@pytest.mark.bmc
@pytest.mark.skipif(shutil.which("ipmi_sim") is None or shutil.which("ipmi-sensors") is None,
                    reason="needs ipmi_sim (openipmi) and freeipmi-tools")
def test_daemon_against_the_simulator_overrides_from_hwmon(tmp_path, sim, run_daemon):
    gpus = amdgpu_sysfs.build(tmp_path / "sys")
    path = write_config(tmp_path, sim, hwmon={"sysfs_root": str(tmp_path / "sys")})
    cfg = yaml.safe_load(path.read_text())
    del cfg["profile"]["bmc"]["gpu_temp_sensors"]  # the example's profiles have none
    path.write_text(yaml.safe_dump(cfg))
    d = run_daemon(path)
    first = wait_for(lambda: settled(sim), 30, "initial duties", d)
    assert first == {FRONT: 25, REAR: 25, CPU: 29}
    hot_at = time.time()
    gpus[7].set_temp("edge", 91)
    moved = wait_for(lambda: [r for r in sim.fan_commands(hot_at) if duty(r)[0] == REAR],
                     15, "rear zone command", d)
    assert duty(moved[0]) == (REAR, 100)
    assert "zone gpu-rear: temperature limit reached" in d.text()
    assert d.stop() == 0
