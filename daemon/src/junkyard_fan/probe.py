"""``junkyard-fan --probe``: does the fan command move this node's fans?

The OEM fan command of a profile is a guess until a board has answered it
with moving fans: a BMC may accept the command (completion code 0) and
change nothing. The probe sets every zone to the high duty, then for each
zone in turn sets the low duty, reads the zone's tachometers after
``probe.settle`` seconds, sets the high duty again and reads them again. A
zone passes when every one of its fans turns faster at the high duty by at
least ``probe.min_change`` of its high-duty speed. At the end every zone is
set to 100 % (or, when the probe failed and the profile has an ``auto``
command, handed back to the BMC).

The result goes to ``probe.result_file`` (JSON), with a fingerprint of the
fan part of the configuration: the daemon reads it at start and does not
take over the fans of a node whose probe failed for this configuration.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .config import Config
from .ipmi import Bmc, BmcError, RawRequest, Reading, SensorInfo

log = logging.getLogger("junkyard_fan")

PASSED, FAILED, UNTESTED = "passed", "failed", "untested"


def fingerprint(cfg: Config) -> str:
    """What the probe tested: the fan commands and the zones with their fans."""
    p = cfg.profile
    what = {
        "set_duty": [p.set_duty.netfn, p.set_duty.cmd, list(p.set_duty.data)],
        "manual": [p.manual.netfn, p.manual.cmd, list(p.manual.data)] if p.manual else None,
        "duty_scale": p.duty_scale,
        "zones": [[z.name, z.fan_id, list(z.tach_sensors)] for z in p.fan_zones],
    }
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]


def _byte(cfg: Config, duty: float) -> int:
    return round(duty * cfg.profile.duty_scale / 100.0)


def _set(cfg: Config, bmc: Bmc, zones: list, duty: float) -> None:
    reqs = [RawRequest(*cfg.profile.set_duty.render(fan_id=z.fan_id, duty=_byte(cfg, duty)))
            for z in zones]
    ok = bmc.raw(reqs, op="probe")
    rejected = [z.name for z, good in zip(zones, ok, strict=True) if not good]
    if rejected:
        raise BmcError(f"the BMC rejected the fan command for {', '.join(rejected)}")


def _rpm(bmc: Bmc, infos: list[SensorInfo]) -> dict[str, float | None]:
    got = bmc.read(infos, lambda _info, r: r.value is not None)
    return {i.name: got.get(i.name, Reading()).value for i in infos}


def run(cfg: Config, bmc: Bmc, sleep: Callable[[float], None] = time.sleep
        ) -> dict[str, Any]:
    """Probe every zone; returns the result (also written to ``probe.result_file``)."""
    pr, p = cfg.probe, cfg.profile
    low, high = pr.duties
    bmc.discover()
    infos: dict[str, list[SensorInfo]] = {}
    refs = {f"profile.fan_zones[{i}].tach_sensors[{j}]": ref
            for i, z in enumerate(p.fan_zones) for j, ref in enumerate(z.tach_sensors)}
    resolved = bmc.resolve(refs)
    for i, z in enumerate(p.fan_zones):
        infos[z.name] = [resolved[f"profile.fan_zones[{i}].tach_sensors[{j}]"]
                         for j in range(len(z.tach_sensors))]
    if p.manual is not None:
        bmc.raw([RawRequest(*p.manual.render(fan_id=z.fan_id)) for z in p.fan_zones],
                op="probe")
    zones: dict[str, dict[str, Any]] = {}
    tested = [z for z in p.fan_zones if z.tach_sensors]
    _set(cfg, bmc, list(p.fan_zones), high)
    sleep(pr.settle)
    for z in p.fan_zones:
        if not z.tach_sensors:
            zones[z.name] = {"status": UNTESTED, "fan_id": z.fan_id, "rpm": {},
                             "problem": "no tach_sensors in its profile entry"}
            log.warning("probe: zone %s has no tach_sensors: not tested", z.name)
            continue
        _set(cfg, bmc, [z], low)
        sleep(pr.settle)
        at_low = _rpm(bmc, infos[z.name])
        _set(cfg, bmc, [z], high)
        sleep(pr.settle)
        at_high = _rpm(bmc, infos[z.name])
        problems = []
        for name in at_low:
            lo, hi = at_low[name], at_high[name]
            if lo is None or hi is None:
                problems.append(f"{name} gave no reading")
            elif hi <= 0 or hi - lo < pr.min_change * hi:
                problems.append(f"{name} {lo:.0f} RPM at {low:g} %, {hi:.0f} RPM at {high:g} %")
        status = FAILED if problems else PASSED
        zones[z.name] = {"status": status, "fan_id": z.fan_id,
                         "rpm": {n: [at_low[n], at_high[n]] for n in at_low},
                         "problem": "; ".join(problems)}
        log.log(logging.INFO if status == PASSED else logging.ERROR,
                "probe: zone %s (fan_id %d): %s%s", z.name, z.fan_id, status,
                f": {'; '.join(problems)}" if problems else "")
    if any(zr["status"] == FAILED for zr in zones.values()):
        status = FAILED
    elif len(tested) < len(p.fan_zones):
        status = UNTESTED
    else:
        status = PASSED
    result = {"status": status, "fingerprint": fingerprint(cfg), "node": socket.gethostname(),
              "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "duties": [low, high],
              "settle_s": pr.settle, "zones": zones}
    write(pr.result_file, result)
    return result


def finish(cfg: Config, bmc: Bmc, result: dict[str, Any] | None) -> None:
    """Leave the fans at 100 %; after a failed probe, hand them back to the BMC."""
    p = cfg.profile
    try:
        _set(cfg, bmc, list(p.fan_zones), 100.0)
    except BmcError as err:
        log.error("probe: could not set the fans to 100 %%: %s", err)
    if result is not None and result["status"] == FAILED and p.auto is not None:
        try:
            bmc.raw([RawRequest(*p.auto.render(fan_id=z.fan_id)) for z in p.fan_zones],
                    op="probe")
            log.warning("probe failed: the fans are handed back to the BMC (auto command)")
        except BmcError as err:
            log.error("probe: could not hand the fans back to the BMC: %s", err)


def write(path: Path, result: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def verdict(cfg: Config) -> tuple[str, str]:
    """What the daemon makes of the probe result at start: (status, why).

    ``failed`` only for a result of this fan configuration; a result of
    another configuration, an unreadable one or none is ``unknown``."""
    path = cfg.probe.result_file
    try:
        result = json.loads(path.read_text())
    except FileNotFoundError:
        return "unknown", f"no probe result at {path} (run junkyard-fan --probe)"
    except (OSError, ValueError) as err:
        return "unknown", f"cannot read the probe result {path}: {err}"
    if not isinstance(result, dict) or result.get("fingerprint") != fingerprint(cfg):
        return "unknown", (f"the probe result {path} is for another fan configuration "
                           "(run junkyard-fan --probe again)")
    status = result.get("status")
    zones = result.get("zones") if isinstance(result.get("zones"), dict) else {}
    failed = [f"{name}: {z.get('problem')}" for name, z in sorted(zones.items())
              if isinstance(z, dict) and z.get("status") == FAILED]
    if status == FAILED:
        return FAILED, (f"junkyard-fan --probe of {result.get('time')} found that the fan "
                        f"command does not move the fans ({'; '.join(failed)})")
    return str(status), f"probe {status} ({result.get('time')})"
