"""The shared BMC simulator itself: lan.conf rendering, console, fault injection, power hooks."""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest

from bmc_sim.simctl import BmcSim, SimConsoleError, SimOptions, parse_log_line


def test_lan_conf_renders_power_hooks_for_the_lab(tmp_path):
    sim = BmcSim(tmp_path, SimOptions(fanmod=False, startcmd="qemu-system-x86_64 -m 512",
                                      startnow=True, poweroff_wait=5, kill_wait=3,
                                      serial_port=9002, chassis_control="/bin/ctl 0x20"))
    sim.port, sim.console_port = 40001, 40002
    conf = sim.render_lan_conf()
    assert "    addr 127.0.0.1 40001\n" in conf
    assert "console 127.0.0.1 40002\n" in conf
    assert '  startcmd "qemu-system-x86_64 -m 512"\n  startnow true\n' in conf
    assert "  serial 15 127.0.0.1 9002 codec VM\n" in conf
    assert '  chassis_control "/bin/ctl 0x20"\n' in conf
    assert "  poweroff_wait 5\n  kill_wait 3\n" in conf
    assert "loadlib" not in conf


def test_log_line_parsing():
    rec = parse_log_line("1795979704.744064 oem netfn=0x2e cmd=0x10 data=0a 3c 00 01 40 "
                         "result=cc=0xc3")
    assert (rec.kind, rec.netfn, rec.cmd, rec.data, rec.result) == (
        "oem", 0x2E, 0x10, (0x0A, 0x3C, 0, 1, 0x40), "cc=0xc3")
    assert not rec.answered_ok


pytestmark_bmc = pytest.mark.skipif(shutil.which("ipmi_sim") is None,
                                    reason="needs ipmi_sim (openipmi)")


@pytest.fixture
def sim(tmp_path):
    with BmcSim(tmp_path / "bmc") as bmc:
        yield bmc


def raw(sim: BmcSim, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ipmi-raw", *sim.freeipmi_args(), "0x00", *args],
                          capture_output=True, text=True, timeout=30, check=False)


def ipmitool(sim: BmcSim, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ipmitool", *sim.ipmitool_args(), *args], capture_output=True,
                          text=True, timeout=30, check=False)


@pytest.mark.bmc
@pytestmark_bmc
def test_oem_commands_are_answered_and_logged(sim):
    assert raw(sim, "0x30", "0x70", "0x66", "0x01", "0x01", "0x40").stdout.split() == [
        "rcvd:", "70", "00"]
    assert raw(sim, "0x2e", "0x10", "0x0a", "0x3c", "0x00", "0x02", "0x01",
               "0x20").stdout.split() == ["rcvd:", "10", "00", "0A", "3C", "00"]
    cmds = sim.fan_commands()
    assert [(c.netfn, c.cmd, c.data) for c in cmds] == [
        (0x30, 0x70, (0x66, 1, 1, 0x40)), (0x2E, 0x10, (0x0A, 0x3C, 0, 2, 1, 0x20))]


@pytest.mark.bmc
@pytestmark_bmc
def test_console_sets_sensors_and_reports_errors(sim):
    sim.set_gpu_current(3, 22.5)
    sim.set_psu_failed(2, True)
    out = ipmitool(sim, "raw", "0x04", "0x2d", "0x04").stdout.split()
    assert out[0] == "5a"  # 90 counts = 22.5 A
    out = ipmitool(sim, "raw", "0x04", "0x2d", "0x42").stdout.split()
    assert int(out[2], 16) == 0b11  # presence + failure
    with pytest.raises(SimConsoleError, match="Unable to set sensor value"):
        sim.set_sensor_raw(0x99, 1)


@pytest.mark.bmc
@pytestmark_bmc
def test_fault_completion_code_and_empty_answers(sim):
    sim.set_faults(scope="oem", cc=0xC3)
    assert raw(sim, "0x30", "0x70", "0x66", "0x01", "0x01", "0x40").stdout.split() == [
        "rcvd:", "70", "C3"]
    assert sim.oem_log()[-1].result == "cc=0xc3"
    assert sim.fan_commands() == []
    sim.set_faults(scope="sensor", empty=True)
    out = ipmitool(sim, "raw", "0x04", "0x2d", "0x01")
    assert out.returncode == 0 and out.stdout.strip() == ""  # completion code 0, no data
    sim.clear_faults()
    assert ipmitool(sim, "raw", "0x04", "0x2d", "0x01").stdout.split()[0] == "10"


@pytest.mark.bmc
@pytestmark_bmc
def test_fault_drop_and_delay(sim):
    sim.set_faults(scope="sensor", drop_count=1, drop_every=2)
    out = subprocess.run(["ipmi-sensors", *sim.freeipmi_args(), "--session-timeout=5000",
                          "--retransmission-timeout=100", "--sdr-cache-directory",
                          str(sim.workdir), "--quiet-cache", "-r", "2,3,4"],
                         capture_output=True, text=True, timeout=60, env=os.environ, check=False)
    assert out.returncode == 0, out.stderr
    drops = [r for r in sim.oem_log() if r.result == "drop"]
    assert len(drops) == 3  # every other sensor read dropped, then retransmitted
    sim.set_faults(scope="oem", delay_ms=400)
    t0 = time.monotonic()
    raw(sim, "0x30", "0x70", "0x66", "0x01", "0x01", "0x40")
    assert time.monotonic() - t0 >= 0.4  # the injected stall (a lower bound, not a speed goal)


@pytest.mark.bmc
@pytestmark_bmc
def test_chassis_power_runs_the_startcmd(tmp_path):
    marker = tmp_path / "powered"
    opts = SimOptions(startcmd=f"sh -c 'echo {{serial_port}} > {marker}; exec sleep 300'",
                      kill_wait=2, poweroff_wait=0)
    with BmcSim(tmp_path / "bmc", opts) as sim:
        assert sim.serial_port is not None  # startcmd needs the VM serial interface
        assert "Chassis Power is off" in ipmitool(sim, "chassis", "power", "status").stdout
        ipmitool(sim, "chassis", "power", "on")
        deadline = time.monotonic() + 10
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert marker.read_text() == f"{sim.serial_port}\n"
        assert "Chassis Power is on" in ipmitool(sim, "chassis", "power", "status").stdout
        ipmitool(sim, "chassis", "power", "off")
        deadline = time.monotonic() + 10
        while ("Chassis Power is on" in ipmitool(sim, "chassis", "power", "status").stdout
               and time.monotonic() < deadline):
            time.sleep(0.2)
        assert "Chassis Power is off" in ipmitool(sim, "chassis", "power", "status").stdout


def wait_rpm(sim: BmcSim, fans: list[int], pred, timeout: float = 15.0) -> list[int]:
    end = time.monotonic() + timeout
    rpms = [sim.fan_rpm(f) for f in fans]
    while not pred(rpms) and time.monotonic() < end:
        time.sleep(0.2)
        rpms = [sim.fan_rpm(f) for f in fans]
    return rpms


@pytest.mark.bmc
@pytestmark_bmc
def test_tachometers_follow_the_commanded_duty_of_their_zone(sim):
    # automatic at the start: 30 % of 16,500 RPM, 49.5 counts rounded
    assert [sim.fan_rpm(f) for f in range(1, 9)] == [5000] * 8
    assert raw(sim, "0x2e", "0x10", "0x0a", "0x3c", "0x00", "0x02", "0x01", "0x64").returncode == 0
    # zone 2 (FAN4-6) rises toward 100 % x 16,500 RPM, with a lag, not at once
    first = [sim.fan_rpm(f) for f in (4, 5, 6)]
    assert all(r < 16500 for r in first)
    rpms = wait_rpm(sim, [4, 5, 6], lambda r: all(x == 16500 for x in r))
    assert rpms == [16500] * 3
    # the other zones did not move
    assert [sim.fan_rpm(f) for f in (1, 2, 3, 7, 8)] == [5000] * 5
    # a lower duty brings them down; automatic mode back to 30 %
    raw(sim, "0x2e", "0x10", "0x0a", "0x3c", "0x00", "0x02", "0x01", "0x28")
    assert wait_rpm(sim, [4], lambda r: r[0] == 6600) == [6600]
    raw(sim, "0x2e", "0x10", "0x0a", "0x3c", "0x00", "0x02", "0x00", "0x00")
    assert wait_rpm(sim, [4], lambda r: r[0] == 5000) == [5000]


@pytest.mark.bmc
@pytestmark_bmc
def test_a_board_that_ignores_the_fan_command(tmp_path):
    with BmcSim(tmp_path / "bmc", SimOptions(ignores_fan_commands=True)) as sim:
        out = raw(sim, "0x2e", "0x10", "0x0a", "0x3c", "0x00", "0x01", "0x01", "0x64")
        assert out.stdout.split()[2] == "00"  # accepted, completion code 0
        assert [c.data for c in sim.fan_commands()] == [(0x0A, 0x3C, 0, 1, 1, 0x64)]
        time.sleep(2.0)  # two time constants: a following fan would be near 100 % by now
        assert [sim.fan_rpm(f) for f in (1, 2, 3)] == [5000] * 3


@pytest.mark.bmc
@pytestmark_bmc
def test_supermicro_style_zone_command_moves_the_tachometers(tmp_path):
    opts = SimOptions(fans={0: (0x31, 0x32), 1: (0x33, 0x34)}, tach_tau_ms=200)
    with BmcSim(tmp_path / "bmc", opts) as sim:
        raw(sim, "0x30", "0x70", "0x66", "0x01", "0x01", "0x64")
        assert wait_rpm(sim, [3, 4], lambda r: r == [16500, 16500]) == [16500, 16500]
        assert [sim.fan_rpm(f) for f in (1, 2)] == [5000, 5000]
