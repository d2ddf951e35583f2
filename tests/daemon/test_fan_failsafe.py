"""Unit tests of the main loop's fail-safe state machine, with a fake clock and fake BMC."""

from __future__ import annotations

import logging
import subprocess

import pytest
from fan_fixtures import FakeClock, FakeTransport, config, raw_config
from junkyard_fan.cli import one_shot
from junkyard_fan.config import parse_config
from junkyard_fan.daemon import Daemon, Shutdown
from junkyard_fan.ipmi import Bmc, BmcBadResponse, BmcNoAnswer, Reading, SensorInfo
from junkyard_fan.powerguard import PowerGuard

FRONT, REAR, CPU = 1, 2, 0
TIMINGS = {"interval": 1, "stale_after": 2.5, "deadline": 6, "rewrite_every": 30,
           "retries": 3, "exit_budget": 1}


READ = ["caps"]


class Recorder:
    """Eight fake GPUs behind the power guard's commands: cap and reset commands
    are recorded (``calls``) and change the caps, unless ``applies`` is false;
    ``caps`` (the read command) prints them."""

    def __init__(self, rc: int = 0, applies: bool = True) -> None:
        self.calls: list[list[str]] = []
        self.reads = 0
        self.rc = rc
        self.applies = applies
        self.caps = [300.0] * 8

    def __call__(self, argv, **kw):
        argv = list(argv)
        if argv == READ:
            self.reads += 1
            out = "".join(f"card{i}: {c:g}\n" for i, c in enumerate(self.caps))
            return subprocess.CompletedProcess(argv, 0, out, "")
        self.calls.append(argv)
        if self.applies:
            gpus = [int(argv[argv.index("-g") + 1])] if "-g" in argv else range(8)
            numbers = [float(a) for a in argv if a.isdigit()]
            for g in gpus:
                self.caps[g] = numbers[-1] if numbers and "reset" not in argv else 300.0
        return subprocess.CompletedProcess(argv, self.rc, "", "boom" if self.rc else "")


def make(timings=None, **sections):
    if "power_guard" in sections:
        sections["power_guard"] = {"read_command": READ, **sections["power_guard"]}
    else:
        sections["power_guard"] = {"command": ["true", "{watts}"], "reset_command": ["true"],
                                   "read_command": READ}
    cfg = config(timings=timings or TIMINGS, **sections)
    clock = FakeClock()
    fake = FakeTransport()
    bmc = Bmc(cfg.bmc, cfg.timings, transport=fake, sleep=lambda s: None)
    runner = Recorder()
    d = Daemon(cfg, bmc, guard=PowerGuard(cfg, run=runner), clock=clock)
    d.setup()
    return d, fake, clock, runner


def tick(d, clock, n=1):
    for _round in range(n):
        d.cycle()
        clock.advance(1.0)


def test_first_cycle_writes_every_zone():
    d, fake, clock, _unused = make()
    tick(d, clock)
    assert fake.duties() == {FRONT: 25, REAR: 25, CPU: 29}
    assert [z.state for z in d.zones] == ["ok", "ok", "ok"]


def test_unchanged_duties_are_not_rewritten_until_refresh_is_due():
    d, fake, clock, _unused = make(timings={**TIMINGS, "rewrite_every": 5})
    tick(d, clock)
    sent = len(fake.sent)
    tick(d, clock, 3)
    assert len(fake.sent) == sent
    tick(d, clock, 3)
    assert len(fake.sent) == sent + 3  # the refresh: every zone once


def test_missing_reading_holds_the_zone_then_fails_safe_after_the_deadline():
    d, fake, clock, _unused = make()
    fake.values["GPU5_12V_I"] = Reading(value=25.0)  # rear zone busy
    tick(d, clock)
    busy = fake.duties()[REAR]
    assert busy > 25
    # GPU5's current goes missing: its last reading serves for stale_after
    # (2.5 s), then the zone holds; it must not follow the incomplete inputs
    # down when the other GPUs go idle; past the deadline it goes to 100 %.
    fake.values["GPU5_12V_I"] = Reading()
    tick(d, clock, 3)
    assert d.zones[1].state == "hold"
    assert fake.duties()[REAR] == busy
    fake.values["GPU4_12V_I"] = Reading(value=1.0)
    tick(d, clock, 2)
    assert d.zones[1].state == "hold"
    assert fake.duties()[REAR] == busy
    tick(d, clock, 2)  # the last valid GPU5 reading is now 7 s old > deadline 6 s
    assert d.zones[1].state == "failsafe"
    assert fake.duties()[REAR] == 100
    # The other zones never noticed.
    assert d.zones[0].state == "ok" and fake.duties()[FRONT] == 25


def test_implausibly_high_reading_fails_towards_cooling_at_once():
    d, fake, clock, _unused = make()
    tick(d, clock)
    assert fake.duties()[FRONT] == 25
    fake.values["GPU0_12V_I"] = Reading(value=900.0)  # no 12 V rail carries 900 A
    tick(d, clock)  # one cycle, not the deadline
    assert d.zones[0].state == "failsafe"
    assert fake.duties()[FRONT] == 100
    fake.values["GPU0_12V_I"] = Reading(value=4.0)
    tick(d, clock)
    assert d.zones[0].state == "ok" and fake.duties()[FRONT] == 98  # ramps down from 100


def test_zero_current_after_load_is_no_reading():
    d, fake, clock, _unused = make()
    for g in (4, 5, 6, 7):
        fake.values[f"GPU{g}_12V_I"] = Reading(value=22.0)
    tick(d, clock)
    loaded = fake.duties()[REAR]
    assert loaded == 89  # 4 x 264 W
    for g in (4, 5, 6, 7):
        fake.values[f"GPU{g}_12V_I"] = Reading(value=0.0)  # the sensors dropped out
    seen = []
    for _round in range(8):
        tick(d, clock)
        seen.append(fake.duties()[REAR])
    assert min(seen) >= loaded  # never taken as "idle"
    assert d.zones[1].state == "failsafe" and seen[-1] == 100
    assert d.bmc.errors[("read", "invalid_reading")] > 0


def test_stale_reading_is_no_reading_even_if_retries_hide_it():
    d, fake, clock, _unused = make(timings={**TIMINGS, "stale_after": 2, "deadline": 4})
    tick(d, clock)
    fake.values["CPU0_TEMP"] = Reading()
    tick(d, clock, 2)
    assert d.zones[2].state == "ok"  # last reading 2 s old: still fresh
    tick(d, clock)
    assert d.zones[2].state == "hold"
    tick(d, clock, 3)
    assert d.zones[2].state == "failsafe"


def test_valid_input_after_failsafe_ramps_down_slowly():
    d, fake, clock, _unused = make(control={"gpu": {"ramp_down": 5}})
    tick(d, clock)
    fake.values["GPU0_12V_I"] = Reading()
    tick(d, clock, 8)
    assert fake.duties()[FRONT] == 100
    fake.values["GPU0_12V_I"] = Reading(value=4.0)
    tick(d, clock)
    assert fake.duties()[FRONT] == 95
    tick(d, clock)
    assert fake.duties()[FRONT] == 90


def test_silent_bmc_all_zones_full_as_soon_as_it_answers():
    d, fake, clock, _unused = make()
    tick(d, clock)
    before = len(fake.sent)
    fake.silent = True
    tick(d, clock, 3)
    assert not d.bmc_reachable
    assert [z.state for z in d.zones] == ["bmc_lost"] * 3
    assert len(fake.sent) == before  # nothing got through
    fake.silent = False
    tick(d, clock)
    # The first commands that get through set every zone to 100 %.
    first_back = fake.sent[before:before + 3]
    assert sorted(r.data[3] for r in first_back) == [CPU, FRONT, REAR]
    assert all(r.data[5] == 100 for r in first_back)
    assert d.bmc_reachable
    tick(d, clock)
    assert fake.duties()[FRONT] < 100  # regulating again, ramping down from 100


def test_retries_are_bounded_and_one_good_try_is_enough():
    d, fake, clock, _unused = make()
    fake.read_fails_left = 1
    tick(d, clock)
    assert d.bmc.tries["read"] == 2
    assert d.bmc_reachable
    fake.read_fails_left = 10
    tick(d, clock)
    assert d.bmc.tries["read"] == 4  # gave up after two silent tries in a row
    assert d.bmc.errors[("read", "timeout")] == 3
    assert not d.bmc_reachable


def test_bad_answers_are_retried_up_to_the_limit():
    d, fake, clock, _unused = make()

    def bad(_sensors):
        raise BmcBadResponse("empty")

    fake.read = bad
    tick(d, clock)
    assert d.bmc.tries["read"] == 3  # retries: 3
    assert d.bmc_reachable  # it answered, badly: not unreachable


def test_degraded_states_are_logged_once_per_change(caplog):
    d, fake, clock, _unused = make()
    tick(d, clock)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="junkyard_fan"):
        fake.silent = True
        tick(d, clock, 5)
        fake.silent = False
        tick(d, clock, 5)
    msgs = [r.getMessage() for r in caplog.records]
    assert sum("BMC does not answer" in m for m in msgs) == 1
    assert sum("zone gpu-front: BMC lost" in m for m in msgs) == 1
    assert sum("BMC answers again" in m for m in msgs) == 1
    assert sum("zone gpu-front: regulating" in m for m in msgs) == 1


def test_unhandled_error_sets_full_before_dying():
    d, fake, _clock, _unused = make()
    calls = []

    def sleep(_s):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("bug")

    with pytest.raises(RuntimeError, match="bug"):
        d.run(sleep=sleep)
    assert fake.duties() == {FRONT: 100, REAR: 100, CPU: 100}


def test_signal_sets_full_before_exit():
    d, fake, _clock, _unused = make()

    def sleep(_s):
        raise Shutdown(15)

    with pytest.raises(Shutdown):
        d.run(sleep=sleep)
    assert fake.duties() == {FRONT: 100, REAR: 100, CPU: 100}


def test_failsafe_gives_up_after_its_budget_when_the_bmc_is_gone():
    d, fake, clock, _unused = make()
    fake.silent = True

    def raw(_reqs):
        clock.advance(0.6)
        raise BmcNoAnswer("gone")

    fake.raw = raw
    assert d.failsafe("test") is False


def test_psu_failure_caps_gpu_power_and_recovery_lifts_it():
    d, fake, clock, runner = make(power_guard={
        "command": ["capper", "--watts", "{watts}"], "reset_command": ["capper", "--reset"],
        "lift_after": 3, "non_gpu_power_w": 500})
    tick(d, clock)
    assert runner.calls == []
    fake.values["PSU2_STATUS"] = Reading(states=0b11)  # present + failure
    tick(d, clock)
    assert runner.calls == [["capper", "--watts", "198"]]
    assert 8 * 198 + 500 <= 2200
    tick(d, clock, 3)
    assert len(runner.calls) == 1  # applied once, not per cycle
    fake.values["PSU2_STATUS"] = Reading(states=0b1)
    tick(d, clock, 3)
    assert len(runner.calls) == 1  # not before lift_after
    tick(d, clock)
    assert runner.calls[-1] == ["capper", "--reset"]


def test_ac_loss_and_missing_psu_count_as_failure_and_per_gpu_commands():
    d, fake, clock, runner = make(power_guard={
        "command": ["amd-smi", "set", "-g", "{gpu}", "--power-cap", "{watts}"],
        "reset_command": ["amd-smi", "reset", "-g", "{gpu}", "--power-cap"]})
    fake.values["PSU1_STATUS"] = Reading(states=0b1001)  # present + AC lost
    tick(d, clock)
    assert runner.calls == [["amd-smi", "set", "-g", str(g), "--power-cap", "198"]
                            for g in range(8)]
    runner.calls.clear()
    d2, fake2, clock2, runner2 = make()
    fake2.values["PSU1_STATUS"] = Reading(states=0)  # not present
    tick(d2, clock2)
    assert runner2.calls == [["true", "198"]]


def test_cap_that_did_not_take_is_retried_and_counted():
    d, fake, clock, runner = make()
    runner.applies = False  # the command exits 0, the GPUs keep 300 W
    fake.values["PSU2_STATUS"] = Reading(states=0b11)
    tick(d, clock, 3)
    assert len(runner.calls) == 3
    assert d.guard.errors == 3 and not d.guard.active
    runner.applies = True
    tick(d, clock)
    assert d.guard.active


def test_cap_is_judged_by_reading_it_back_not_by_the_exit_status():
    d, fake, clock, runner = make()
    runner.rc = 1  # capped all eight, but says it failed
    fake.values["PSU2_STATUS"] = Reading(states=0b11)
    tick(d, clock, 3)
    assert runner.calls == [["true", "198"]]  # once: the read-back shows it in place
    assert d.guard.active and d.guard.errors == 0
    assert ("power_cap_active", {}, 1.0) in d.samples()


def test_cap_from_before_a_restart_is_lifted_once_the_psus_are_healthy():
    d, _fake, clock, runner = make(power_guard={
        "command": ["capper", "--watts", "{watts}"], "reset_command": ["capper", "--reset"],
        "lift_after": 3})
    runner.caps = [198.0] * 8  # the previous daemon capped them, then was restarted
    tick(d, clock)
    assert d.guard.active
    assert ("power_cap_active", {}, 1.0) in d.samples()
    tick(d, clock, 3)
    assert runner.calls == [["capper", "--reset"]]
    assert not d.guard.active and runner.caps == [300.0] * 8
    assert ("power_cap_active", {}, 0.0) in d.samples()


def test_metrics_textfile(tmp_path):
    path = tmp_path / "fan.prom"
    d, fake, clock, _unused = make(metrics={"textfile": str(path)})
    fake.values["GPU1_12V_I"] = Reading(value=10.0)
    fake.values["PSU2_STATUS"] = Reading(states=0b11)
    tick(d, clock)
    text = path.read_text()
    assert 'junkyard_fan_gpu_power_watts{gpu="1"} 120' in text
    assert 'junkyard_fan_zone_duty_percent{zone="cpu"} 28.75' in text
    assert 'junkyard_fan_zone_state{state="ok",zone="gpu-rear"} 1' in text
    assert "junkyard_fan_power_cap_watts 198" in text
    assert 'junkyard_fan_psu_failed{psu="2"} 1' in text
    assert "junkyard_fan_bmc_reachable 1" in text
    assert "# TYPE junkyard_fan_bmc_errors_total counter" not in text  # no errors yet
    fake.silent = True
    tick(d, clock)
    text = path.read_text()
    assert "junkyard_fan_bmc_reachable 0" in text
    assert 'junkyard_fan_bmc_errors_total{kind="timeout",op="read"} 2' in text


def test_z45_calibration_halves_the_power():
    d, fake, clock, _unused = make()
    fake.values["GPU0_12V_I"] = Reading(value=20.0)
    tick(d, clock)
    z20 = d.gpu_power_w("profile.bmc.gpu_current_sensors[0]")
    raw_bmc = raw_config()
    raw_bmc["profile"]["bmc"]["current_calibration"] = 0.5
    cfg = parse_config(raw_bmc, env={})
    d45 = Daemon(cfg, Bmc(cfg.bmc, cfg.timings, transport=fake), clock=clock)
    d45.setup()
    d45.cycle()
    assert z20 == 240.0
    assert d45.gpu_power_w("profile.bmc.gpu_current_sensors[0]") == 120.0


def test_a_hanging_cap_command_does_not_stop_the_fans(tmp_path):
    hang = tmp_path / "hang"
    hang.write_text("#!/bin/sh\nsleep 30\n")
    hang.chmod(0o755)
    d, fake, clock, _unused = make(power_guard={"command": [str(hang), "{watts}"],
                                                "reset_command": ["true"], "command_timeout": 1})
    d.guard = PowerGuard(d.cfg, wait=0.05)  # real subprocesses
    tick(d, clock)
    fake.values["PSU2_STATUS"] = Reading(states=0b11)
    tick(d, clock)
    assert d.guard.busy and not d.guard.capped
    fake.values["GPU0_12V_I"] = Reading(value=25.0)
    tick(d, clock)
    assert fake.duties()[FRONT] > 25  # still regulating while the command hangs
    d.guard._job[0].join(5)  # the command is killed after command_timeout
    tick(d, clock)
    assert d.guard.errors == 1 and not d.guard.capped


def test_renumbered_sdr_is_read_again():
    d, fake, clock, _unused = make()
    tick(d, clock)
    # The BMC was reset and renumbered its sensors.
    fake.infos = [SensorInfo(i.name, i.number + 0x60, i.record_id + 100, i.discrete)
                  for i in fake.infos]
    fake.sdr_changed = True
    tick(d, clock)
    assert not fake.sdr_changed
    assert d.sensors["profile.bmc.gpu_current_sensors[0]"].info.record_id == 102
    assert d.bmc.tries["discover"] == 2


def test_manual_mode_is_reasserted_with_every_refresh():
    raw = raw_config(timings={**TIMINGS, "rewrite_every": 5})
    raw["profile"]["fan_commands"]["manual"] = "0x30 0x45 0x01 {fan_id}"
    cfg = parse_config(raw, env={})
    fake, clock = FakeTransport(), FakeClock()
    d = Daemon(cfg, Bmc(cfg.bmc, cfg.timings, transport=fake, sleep=lambda s: None),
               guard=PowerGuard(cfg, run=Recorder()), clock=clock)
    d.setup()
    assert [(r.netfn, r.cmd, r.data) for r in fake.sent] == [
        (0x30, 0x45, bytes([1, f])) for f in (1, 2, 0)]
    tick(d, clock, 6)
    manual = [r for r in fake.sent if r.netfn == 0x30]
    assert len(manual) == 9  # at start-up, with the first write, with the refresh


def test_one_shot_sends_nothing_even_with_a_manual_mode_command():
    raw = raw_config(timings=TIMINGS)
    raw["profile"]["fan_commands"]["manual"] = "0x30 0x45 0x01 {fan_id}"
    cfg = parse_config(raw, env={})
    fake, clock = FakeTransport(), FakeClock()
    fake.values["GPU6_12V_I"] = Reading(value=22.0)
    fake.values["PSU1_STATUS"] = Reading(states=0b1001)
    d = Daemon(cfg, Bmc(cfg.bmc, cfg.timings, transport=fake, sleep=lambda s: None),
               guard=PowerGuard(cfg, run=Recorder()), clock=clock)
    d.setup(touch_fans=False)
    text = one_shot(cfg, d)
    assert fake.sent == []
    assert "gpu-rear     fan_id 2: GPU power sum 408 W -> 38.1 %" in text
    assert "power: PSU 1 failed -> would cap each GPU at 198 W" in text


def test_power_caps_are_parsed_from_json_and_from_text():
    from junkyard_fan.powerguard import parse_caps

    js = ('{"card0": {"Max Graphics Package Power (W)": "198.0"}, '
          '"card1": {"Max Graphics Package Power (W)": "290.0", "GUID": "12345"}}')
    assert parse_caps(js) == [198.0, 290.0]
    text = ("============ ROCm System Management Interface ============\n"
            "GPU[0]\t\t: Max Graphics Package Power (W): 198.0\n"
            "GPU[1]\t\t: Max Graphics Package Power (W): 290.0\n"
            "================== End of ROCm SMI Log ===================\n")
    assert parse_caps(text) == [198.0, 290.0]
    assert parse_caps("") == []
