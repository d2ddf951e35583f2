"""Unit tests of configuration validation: every problem names its key."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from fan_fixtures import G292_Z20, FakeTransport, raw_config
from junkyard_fan.config import ConfigError, load_config, parse_config
from junkyard_fan.daemon import Daemon
from junkyard_fan.ipmi import Bmc

from tests.inventory_files import EXAMPLE, LAB, group_vars


def problems(raw, env=None) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        parse_config(raw, env=env or {})
    return exc.value.problems


@pytest.mark.parametrize("inventory", [EXAMPLE, LAB], ids=["example", "lab"])
def test_every_inventory_profile_with_fans_is_accepted_as_written(inventory):
    # the role renders the inventory's profile verbatim: keys of other layers
    # (kernel command line, initramfs, memory) must not stop the daemon
    hardware = group_vars(inventory, "all")
    profiles = {name: prof for name, prof in hardware["cluster_hardware_profiles"].items()
                if prof.get("fan_zones")}
    # both regulate their fans (the lab in-band from its simulated BMCs)
    assert sorted(profiles) == ["g292-z20", "g292-z45"]
    for name, prof in profiles.items():
        cfg = parse_config(raw_config(profile=copy.deepcopy(prof)), env={})
        assert [z.name for z in cfg.profile.fan_zones] == \
            [z["name"] for z in prof["fan_zones"]], name


def test_the_example_profile_is_valid_and_derives_the_cap():
    cfg = parse_config(raw_config(), env={})
    assert [z.name for z in cfg.profile.fan_zones] == ["gpu-front", "gpu-rear", "cpu"]
    assert cfg.profile.fan_zones[2].kind == "cpu"
    assert cfg.profile.set_duty.render(fan_id=2, duty=0x40) == (
        0x2E, 0x10, bytes([0x0A, 0x3C, 0x00, 2, 1, 0x40]))
    # (2200 W * 0.95 - 500 W) / 8 GPUs = 198.75 -> 198 W each
    assert cfg.gpu_cap_w() == 198


def test_unknown_keys_are_named_with_their_path():
    raw = raw_config(timings={"interval": 1, "intervall": 2})
    raw["profile"]["bmc"]["gpu_curent_sensors"] = []
    raw["colour"] = "red"
    found = problems(raw)
    assert any(p.startswith("timings.intervall: unknown key") for p in found)
    assert any(p.startswith("profile.bmc.gpu_curent_sensors: unknown key") for p in found)
    assert any(p.startswith("colour: unknown key") for p in found)


def test_all_problems_are_reported_at_once():
    raw = raw_config(timings={"interval": -1, "retries": "five"})
    found = problems(raw)
    assert "timings.interval: must be > 0, got -1" in found
    assert "timings.retries: must be an integer, got 'five'" in found


def test_zone_with_a_gpu_that_does_not_exist():
    raw = raw_config()
    raw["profile"]["fan_zones"][1]["gpus"] = [4, 5, 6, 9]
    assert "profile.fan_zones[1].gpus[3]: GPU 9 does not exist (profile.gpu.count is 8)" \
        in problems(raw)


def test_gpu_in_two_zones_and_gpu_in_none():
    raw = raw_config()
    raw["profile"]["fan_zones"][1]["gpus"] = [3, 5, 6, 7]
    found = problems(raw)
    assert "profile.fan_zones[1].gpus[0]: GPU 3 is already cooled by zone 'gpu-front'" in found
    assert "profile.fan_zones: GPUs [4] are in no fan zone" in found


def test_duplicate_zone_names_and_fan_ids():
    raw = raw_config()
    raw["profile"]["fan_zones"][1]["name"] = "gpu-front"
    raw["profile"]["fan_zones"][2]["fan_id"] = 1
    found = problems(raw)
    assert ("profile.fan_zones[1].name: zone 'gpu-front' is already defined at "
            "profile.fan_zones[0]") in found
    assert "profile.fan_zones[2].fan_id: fan_id 1 is already used by profile.fan_zones[0]" \
        in found


def test_cpu_zone_without_cpu_sensors():
    raw = raw_config()
    raw["profile"]["bmc"]["cpu_temp_sensors"] = []
    assert ("profile.fan_zones[2]: is a CPU zone but profile.bmc.cpu_temp_sensors is empty"
            in problems(raw))


def test_missing_current_sensors_key():
    raw = raw_config()
    del raw["profile"]["bmc"]["gpu_current_sensors"]
    assert "profile.bmc.gpu_current_sensors: is required" in problems(raw)


def test_one_current_sensor_per_gpu():
    raw = raw_config()
    raw["profile"]["bmc"]["gpu_current_sensors"] = raw["profile"]["bmc"][
        "gpu_current_sensors"][:7]
    assert ("profile.bmc.gpu_current_sensors: lists 7 sensors but profile.gpu.count is 8: "
            "one current sensor per GPU, in GPU order") in problems(raw)


def test_sensor_used_twice_and_bad_sensor_number():
    raw = raw_config()
    raw["profile"]["bmc"]["gpu_temp_sensors"][0] = "CPU0_TEMP"
    raw["profile"]["bmc"]["psu_status_sensors"] = ["PSU1_STATUS", 300]
    found = problems(raw)
    assert ("profile.bmc.cpu_temp_sensors[0]: sensor 'CPU0_TEMP' is also in "
            "profile.bmc.gpu_temp_sensors") in found
    assert "profile.bmc.psu_status_sensors[1]: sensor number must be 0-255, got 300" in found


def test_fan_command_template_errors():
    raw = raw_config()
    raw["profile"]["fan_commands"]["set_duty"] = "0x2e 0x10 {fan} {duty}"
    assert any(p.startswith("profile.fan_commands.set_duty: unknown placeholder {fan}")
               for p in problems(raw))
    raw["profile"]["fan_commands"]["set_duty"] = "0x2e 0x10 {fan_id}"
    assert "profile.fan_commands.set_duty: must contain the {duty} placeholder" in problems(raw)
    raw["profile"]["fan_commands"]["set_duty"] = "0x2e 0x10 0x1ff {duty}"
    assert "profile.fan_commands.set_duty: 0x1ff is not a byte value" in problems(raw)


def test_law_parameters_are_checked_against_each_other():
    raw = raw_config(control={"gpu": {"power_low_w": 200, "power_high_w": 100},
                              "cpu": {"duty_floor": 80, "duty_ceiling": 60,
                                      "curve": [[50, 30], [40, 60]]}})
    found = problems(raw)
    assert "control.gpu.power_high_w: must be above control.gpu.power_low_w (200)" in found
    assert "control.cpu.duty_floor: must not exceed control.cpu.duty_ceiling (60)" in found
    assert "control.cpu.curve[1]: temperatures must rise from point to point" in found


def test_lan_access_needs_a_password_source(tmp_path):
    raw = raw_config(bmc={"access": "lan", "host": "10.0.3.11", "username": "admin"})
    assert "bmc.password_file: LAN access needs password_file or password_env" in problems(raw)
    raw["bmc"]["password_env"] = "BMC_PW"
    assert "bmc.password_env: environment variable 'BMC_PW' is not set" in problems(raw)
    cfg = parse_config(raw, env={"BMC_PW": "s3cret"})
    assert cfg.bmc.password == "s3cret"
    assert "s3cret" not in repr(cfg.bmc)
    del raw["bmc"]["password_env"]
    raw["bmc"]["password_file"] = str(tmp_path / "nope")
    assert any(p.startswith(f"bmc.password_file: cannot read {tmp_path / 'nope'}")
               for p in problems(raw))


def test_inband_rejects_lan_only_keys():
    raw = raw_config(bmc={"access": "inband", "host": "10.0.3.11"})
    assert "bmc.host: only used with access: lan" in problems(raw)


def test_power_guard_that_cannot_fit_one_psu():
    raw = raw_config(power_guard={"non_gpu_power_w": 1500, "command": ["x", "{watts}"],
                                  "reset_command": ["y"]})
    assert any(p.startswith("power_guard.non_gpu_power_w: leaves 590 W of one 2200 W PSU "
                            "for 8 GPUs") for p in problems(raw))
    raw["power_guard"] = {"command": ["rocm-smi", "--setpoweroverdrive"]}
    assert "power_guard.command: must contain the {watts} placeholder" in problems(raw)


def test_informational_profile_keys_are_accepted_but_others_are_not():
    raw = raw_config()
    raw["profile"]["kernel_cmdline"] = ["iommu=pt"]
    raw["profile"]["memory"] = {"dimm_labels": []}
    parse_config(raw, env={})
    raw["profile"]["gpu"]["wattage"] = 300
    assert any(p.startswith("profile.gpu.wattage: unknown key") for p in problems(raw))


def test_yaml_syntax_error_names_the_file(tmp_path):
    f = tmp_path / "c.yml"
    f.write_text("profile: [unclosed\n")
    with pytest.raises(ConfigError) as exc:
        load_config(f)
    assert exc.value.problems[0].startswith(f"{f}: not valid YAML")


def test_sensors_missing_from_the_bmc_are_named_with_their_key():
    """The second validation step, against the SDR, before the loop starts."""
    raw = raw_config()
    raw["profile"]["bmc"]["gpu_current_sensors"][6] = "GPU6_12V_AMPS"
    raw["profile"]["bmc"]["cpu_temp_sensors"] = [0x77]
    cfg = parse_config(raw, env={})
    daemon = Daemon(cfg, Bmc(cfg.bmc, cfg.timings, transport=FakeTransport()))
    with pytest.raises(ConfigError) as exc:
        daemon.setup()
    found = exc.value.problems
    assert len(found) == 2
    assert found[0].startswith("profile.bmc.gpu_current_sensors[6]: sensor 'GPU6_12V_AMPS' "
                               "is not in the BMC's SDR (it has: CPU0_TEMP, GPU0_12V_I,")
    assert found[1].startswith("profile.bmc.cpu_temp_sensors[0]: sensor number 119 is not in "
                               "the BMC's SDR")


def test_profile_is_not_modified_by_validation():
    raw = raw_config()
    before = copy.deepcopy(raw)
    parse_config(raw, env={})
    assert raw == before
    assert G292_Z20["fan_zones"][0]["gpus"] == [0, 1, 2, 3]


def test_the_documented_example_is_valid_and_check_config_says_so(capsys):
    from junkyard_fan.cli import main

    example = Path(__file__).resolve().parents[2] / "daemon" / "examples" / "g292-z20.yml"
    cfg = load_config(example)
    assert cfg.bmc.access == "inband" and cfg.profile.gpu_count == 8
    assert main(["--config", str(example), "--check-config"]) == 0
    assert "configuration OK" in capsys.readouterr().out


def test_check_config_reports_problems_with_exit_code_2(tmp_path, capsys):
    from junkyard_fan.cli import main

    bad = tmp_path / "bad.yml"
    bad.write_text("profile: {}\ntimings: {interval: 0}\n")
    assert main(["--config", str(bad), "--check-config"]) == 2
    err = capsys.readouterr().err
    assert "timings.interval: must be > 0, got 0" in err
    assert "profile.bmc: is required" in err


def test_settings_that_would_leave_fans_low_are_refused(tmp_path, capsys):
    from junkyard_fan.cli import main

    found = problems(raw_config(timings={"stale_after": 12, "deadline": 10},
                                control={"gpu": {"duty_floor": 0},
                                         "cpu": {"duty_floor": 5}}))
    assert "timings.stale_after: must not exceed timings.deadline (10)" in found
    assert "control.gpu.duty_floor: must be >= 10, got 0" in found
    assert "control.cpu.duty_floor: must be >= 10, got 5" in found
    assert ("control.gpu.temp_target_c: must be below control.gpu.temp_limit_c (85)"
            in problems(raw_config(control={"gpu": {"temp_target_c": 90}})))
    bad = tmp_path / "latin1.yml"
    bad.write_bytes("log_level: info  # r\xe9glage\n".encode("latin-1"))
    assert main(["--config", str(bad), "--check-config"]) == 2
    err = capsys.readouterr().err
    assert f"{bad}: not UTF-8 text (byte 0xe9 at offset 20)" in err
