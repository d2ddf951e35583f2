"""Shared builders for the fan daemon tests: a G292-Z20 configuration, fakes."""

from __future__ import annotations

import copy
from typing import Any

from junkyard_fan.config import Config, parse_config
from junkyard_fan.ipmi import BmcNoAnswer, RawRequest, Reading, SensorInfo

GPU_CURRENTS = [f"GPU{i}_12V_I" for i in range(8)]
GPU_TEMPS = [f"GPU{i}_TEMP" for i in range(8)]
SET_DUTY = "0x2e 0x10 0x0a 0x3c 0x00 {fan_id} 0x01 {duty}"

G292_Z20: dict[str, Any] = {
    # Shaped like inventories/example/group_vars/all/hardware.yml, so the role
    # can render the inventory's hardware profile into it verbatim.
    "description": "Gigabyte G292-Z20",
    "cpu_sockets": 1,
    "gpu": {"model": "MI100", "count": 8, "gfx_target": "gfx908", "max_power_w": 300},
    "bmc": {
        "supply_voltage": 12.0,
        "current_calibration": 1.0,
        "gpu_current_sensors": GPU_CURRENTS,
        "gpu_temp_sensors": GPU_TEMPS,
        "cpu_temp_sensors": ["CPU0_TEMP"],
        "psu_status_sensors": ["PSU1_STATUS", "PSU2_STATUS"],
    },
    "psu": {"count": 2, "rating_w": 2200},
    "fan_zones": [
        {"name": "gpu-front", "fan_id": 1, "gpus": [0, 1, 2, 3]},
        {"name": "gpu-rear", "fan_id": 2, "gpus": [4, 5, 6, 7]},
        {"name": "cpu", "fan_id": 0, "gpus": []},
    ],
    "fan_commands": {"set_duty": SET_DUTY,
                     "auto": "0x2e 0x10 0x0a 0x3c 0x00 {fan_id} 0x00 0x00"},
}


def raw_config(**sections: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "profile": copy.deepcopy(G292_Z20),
        "bmc": {"access": "inband", "cache_dir": "/tmp/junkyard-fan-test-cache"},
        "power_guard": {"command": ["true", "{watts}"], "reset_command": ["true"]},
    }
    for key, value in sections.items():
        cfg[key] = value
    return cfg


def config(**sections: Any) -> Config:
    return parse_config(raw_config(**sections), env={})


class FakeClock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, dt: float) -> None:
        self.t += dt


class FakeTransport:
    """A stand-in transport for UNIT tests of the loop (the real peer is ipmi_sim)."""

    def __init__(self) -> None:
        names = [*GPU_CURRENTS, *GPU_TEMPS, "CPU0_TEMP"]
        self.infos = [SensorInfo(name=n, number=i + 1, record_id=i + 2, discrete=False)
                      for i, n in enumerate(names)]
        self.infos += [SensorInfo(name=f"PSU{p}_STATUS", number=0x41 + p - 1,
                                  record_id=40 + p, discrete=True) for p in (1, 2)]
        self.values: dict[str, Reading] = {n: Reading(value=4.0) for n in GPU_CURRENTS}
        self.values.update({n: Reading(value=40.0) for n in GPU_TEMPS})
        self.values["CPU0_TEMP"] = Reading(value=45.0)
        self.values["PSU1_STATUS"] = Reading(states=1)
        self.values["PSU2_STATUS"] = Reading(states=1)
        self.silent = False
        self.read_fails_left = 0
        self.sent: list[RawRequest] = []

    def discover(self) -> list[SensorInfo]:
        return self.infos

    def read(self, sensors):
        if self.silent:
            raise BmcNoAnswer("fake: silent")
        if self.read_fails_left:
            self.read_fails_left -= 1
            raise BmcNoAnswer("fake: dropped")
        return {s.name: self.values[s.name] for s in sensors if s.name in self.values}

    def raw(self, requests):
        if self.silent:
            raise BmcNoAnswer("fake: silent")
        self.sent.extend(requests)
        return [(0, b"") for _req in requests]

    def duties(self) -> dict[int, int]:
        """fan_id -> last duty byte sent (Gigabyte set_duty layout)."""
        out: dict[int, int] = {}
        for r in self.sent:
            if r.netfn == 0x2E:
                out[r.data[3]] = r.data[5]
        return out
