"""Unit tests of the IPMI wrapper's parsers and decoding (no BMC needed)."""

from __future__ import annotations

import pytest
from junkyard_fan.ipmi import (
    BmcNoAnswer,
    RawRequest,
    Reading,
    SensorInfo,
    decode_sensor_reading,
    parse_freeipmi_fields,
    parse_freeipmi_verbose,
    parse_ipmitool_exec,
    parse_sdr_dump,
)


def full_record(rec_id: int, number: int, name: str, m: int, b: int, r_exp: int, b_exp: int,
                analog_format: int = 0) -> bytes:
    body = bytearray(43)  # bytes 5..47 of a type 1 record (48 with the id type/length)
    body[0], body[2] = 0x20, number  # owner, sensor number
    body[8] = 0x01  # event/reading type: threshold
    body[15] = analog_format << 6
    body[19] = m & 0xFF
    body[20] = (m >> 2) & 0xC0
    body[21] = b & 0xFF
    body[22] = (b >> 2) & 0xC0
    body[24] = ((r_exp & 0xF) << 4) | (b_exp & 0xF)
    ident = name.encode()
    rec = bytes(body[:42]) + bytes([0xC0 | len(ident)]) + ident
    return bytes([rec_id & 0xFF, rec_id >> 8, 0x51, 0x01, len(rec)]) + rec


def compact_record(rec_id: int, number: int, name: str) -> bytes:
    body = bytearray(26)
    body[2], body[8] = number, 0x6F
    ident = name.encode()
    rec = bytes(body) + bytes([0xC0 | len(ident)]) + ident
    return bytes([rec_id, 0, 0x51, 0x02, len(rec)]) + rec


def test_sdr_dump_parsing_and_linear_conversion():
    blob = (full_record(2, 0x01, "GPU0_12V_I", m=25, b=0, r_exp=-2, b_exp=0)
            + full_record(3, 0x21, "CPU0_TEMP", m=1, b=-5, r_exp=0, b_exp=1, analog_format=2)
            + compact_record(4, 0x42, "PSU2_STATUS"))
    cur, temp, psu = parse_sdr_dump(blob)
    assert (cur.name, cur.number, cur.record_id, cur.discrete) == ("GPU0_12V_I", 1, 2, False)
    assert cur.convert(88) == pytest.approx(22.0)  # 88 counts x 0.25 A
    assert temp.convert(0xF6) == pytest.approx(-10 - 50)  # two's complement, B = -5 x 10^1
    assert (psu.name, psu.number, psu.discrete) == ("PSU2_STATUS", 0x42, True)


def test_get_sensor_reading_decoding():
    cur = SensorInfo("GPU0_12V_I", 1, 2, discrete=False, m=25, r_exp=-2)
    psu = SensorInfo("PSU1_STATUS", 0x41, 3, discrete=True)
    assert decode_sensor_reading(cur, bytes([0x10, 0xC0, 0, 0])) == Reading(value=4.0)
    assert decode_sensor_reading(cur, bytes([0x10, 0xE0, 0, 0])) == Reading()  # unavailable
    assert decode_sensor_reading(cur, bytes([0x10, 0x80, 0, 0])) == Reading()  # not scanning
    assert decode_sensor_reading(cur, b"") == Reading()  # empty answer
    assert decode_sensor_reading(psu, bytes([0, 0xC0, 0x0B, 0x80])) == Reading(states=0x0B)


def test_ipmitool_exec_output_maps_to_requests_in_order():
    text = (" 10 c0 00 00\n"
            "Unable to send RAW command (channel=0x0 netfn=0x4 lun=0x0 cmd=0x2d rsp=0xcb): "
            "Requested sensor, data, or record not found\n"
            "\n"
            " 00 c0 01 00\n")
    out = parse_ipmitool_exec(text, 5, 1)
    assert out == [(0, bytes([0x10, 0xC0, 0, 0])), (0xCB, b""), (0, b""),
                   (0, bytes([0, 0xC0, 1, 0])), None]


def test_ipmitool_session_failure_is_no_answer():
    with pytest.raises(BmcNoAnswer):
        parse_ipmitool_exec("Error: Unable to establish IPMI v2 / RMCP+ session\n", 3, 1)


def test_freeipmi_fields():
    assert parse_freeipmi_fields("22.50", "0000h", False) == Reading(value=22.5)
    assert parse_freeipmi_fields("N/A", "N/A", False) == Reading()
    assert parse_freeipmi_fields("N/A", "0003h", True) == Reading(states=3)
    assert parse_freeipmi_fields("N/A", "N/A", True) == Reading()


def test_freeipmi_verbose_sdr_listing():
    text = ("Record ID: 1\nRecord Type: Management Controller Device Locator Record (12h)\n"
            "Device ID String: BMC\n\n"
            "Record ID: 2\nRecord Type: Full Sensor Record (1h)\nID String: GPU0_12V_I\n"
            "Sensor Type: Current (3h)\nSensor Number: 1\nEvent/Reading Type Code: 1h\n\n"
            "Record ID: 29\nRecord Type: Compact Sensor Record (2h)\nID String: PSU2_STATUS\n"
            "Sensor Type: Power Supply (8h)\nSensor Number: 66\n"
            "Event/Reading Type Code: 6Fh\n")
    cur, psu = parse_freeipmi_verbose(text)
    assert (cur.name, cur.number, cur.record_id, cur.discrete) == ("GPU0_12V_I", 1, 2, False)
    assert (psu.name, psu.number, psu.record_id, psu.discrete) == ("PSU2_STATUS", 66, 29, True)


def test_freeipmi_renumbered_sdr_is_never_misread(tmp_path):
    """A record id that now answers with another sensor's name is no reading."""
    import subprocess

    from fan_fixtures import config
    from junkyard_fan.ipmi import FreeIpmiTransport

    cfg = config(bmc={"access": "inband", "cache_dir": str(tmp_path)})
    out = "2,GPU0_12V_I,Current,4.00,A,0000h\n3,GPU1_TEMP,Temperature,40.00,C,0000h\n"

    def run(argv, timeout, env=None, **_kw):
        return subprocess.CompletedProcess(argv, 0, out, "")

    t = FreeIpmiTransport(cfg.bmc, cfg.timings, run=run)
    got = t.read([SensorInfo("GPU0_12V_I", 1, 2, False), SensorInfo("GPU1_12V_I", 2, 3, False)])
    assert got == {"GPU0_12V_I": Reading(value=4.0)}
    assert t.sdr_changed


def test_inband_and_lan_arguments_keep_the_password_off_the_command_line(tmp_path):
    import os
    import subprocess

    from fan_fixtures import config, raw_config
    from junkyard_fan.config import parse_config
    from junkyard_fan.ipmi import FreeIpmiTransport, IpmitoolTransport

    inband = config(bmc={"access": "inband", "device": "/dev/ipmi0",
                         "cache_dir": str(tmp_path / "a")})
    f = FreeIpmiTransport(inband.bmc, inband.timings)
    assert "-D" in f.base and f.base[f.base.index("-D") + 1] == "OPENIPMI"
    assert "--driver-device=/dev/ipmi0" in f.base and "-h" not in f.base
    t = IpmitoolTransport(inband.bmc, inband.timings)
    assert t.base[t.base.index("-I") + 1] == "open" and t.base[-2:] == ["-d", "0"]

    lan = parse_config(raw_config(bmc={"access": "lan", "host": "10.0.3.11",
                                       "username": "admin", "password_env": "PW",
                                       "cache_dir": str(tmp_path / "b")}),
                       env={"PW": "hunter2"})
    seen = {}

    def run(argv, timeout, env=None, input=None, pass_fds=()):
        seen["argv"] = argv
        (fd,) = pass_fds
        assert f"--config-file=/dev/fd/{fd}" in argv
        seen["conf"] = os.read(fd, 4096).decode()
        seen["input"] = input
        return subprocess.CompletedProcess(argv, 0, "rcvd: 10 00\n", "")

    f = FreeIpmiTransport(lan.bmc, lan.timings, run=run)
    assert f.raw([RawRequest(0x30, 0x70, b"\x01")]) == [(0, b"")]
    # The password reaches freeipmi through a pipe: not argv, not a file.
    assert "hunter2" not in " ".join(seen["argv"])
    assert seen["conf"] == "username admin\npassword hunter2\n"
    assert seen["input"] == "00 30 70 01\n"  # the batch on standard input
    assert not (tmp_path / "b").exists()  # nothing written to disk
    t = IpmitoolTransport(lan.bmc, lan.timings)
    assert "hunter2" not in " ".join(t.base) and "-E" in t.base
    assert t.env["IPMI_PASSWORD"] == "hunter2"


def test_retransmission_timeout_follows_the_bmc():
    from junkyard_fan.ipmi import Retransmit

    r = Retransmit(None, minimum=0.05, maximum=0.66, start=0.2)
    r.done(0.02, 20)  # 1 ms per request: a fast BMC
    assert r.value == 0.05
    for _round in range(3):
        r.done(2.2, 21)  # two of three dropped: ~2 timeouts per request, shortest stays
    assert r.value == 0.05
    r.overran()  # a slow BMC: the read overran its limit
    r.overran()
    assert r.value == 0.2
    r.done(3.3, 21)  # 157 ms per request, below the timeout: twice that
    assert r.value == pytest.approx(0.314, abs=0.001)
    r.done(3.3, 21)
    assert r.value == pytest.approx(0.314, abs=0.001)  # stable above the BMC's pace
    r = Retransmit(None, minimum=0.05, maximum=0.66, start=0.4)
    r.done(17.0, 21)  # drops at 400 ms: 0.8 s per request
    assert r.value == 0.2  # try shorter
    r.done(8.6, 21)
    assert r.value == 0.1
    r.done(9.0, 21)  # shorter was slower: back, and stay
    assert r.value == 0.2
    r.done(8.6, 21)
    assert r.value == 0.2
    assert Retransmit(0.25, minimum=0.05, maximum=0.66, start=0.2).value == 0.25  # fixed


def test_inband_call_limit_fits_a_bmc_answering_in_150_ms(tmp_path):
    """In-band at the default timings: 19 sensors at 150 ms each fit the call limit."""
    import subprocess

    from fan_fixtures import config
    from junkyard_fan.ipmi import Bmc, FreeIpmiTransport

    cfg = config(bmc={"access": "inband", "cache_dir": str(tmp_path)})
    sensors = [SensorInfo(f"S{i}", i + 1, i + 2, False) for i in range(19)]
    calls = []

    def run(argv, timeout, env=None, **_kw):
        ids = next(a for i, a in enumerate(argv) if argv[i - 1] == "-r").split(",")
        needed = (len(ids) + 2) * 0.150  # each request, the SDR check and the close
        calls.append((needed, timeout))
        if needed > timeout:
            raise BmcNoAnswer(f"no answer within {timeout} s")
        out = "".join(f"{i},S{int(i) - 2},Current,4.00,A,0000h\n" for i in ids)
        return subprocess.CompletedProcess(argv, 0, out, "")

    bmc = Bmc(cfg.bmc, cfg.timings, transport=FreeIpmiTransport(cfg.bmc, cfg.timings, run=run))
    got = bmc.read(sensors, lambda _i, r: r.value is not None)
    assert len(got) == 19
    assert calls[0][1] >= calls[0][0]
