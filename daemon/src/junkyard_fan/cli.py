"""Command line: ``python -m junkyard_fan --config FILE [--once | --check]``."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import time
from pathlib import Path

from . import probe
from .config import Config, ConfigError, load_config
from .control import CpuZoneController, GpuZoneController
from .daemon import Daemon, Shutdown
from .ipmi import Bmc, BmcError
from .powerguard import psu_failed

DEFAULT_CONFIG = Path("/etc/junkyard-fan/config.yml")
EXIT_CONFIG = 2
EXIT_BMC = 3
EXIT_ERROR = 1
EXIT_PROBE = 4  # --probe: a zone's fans did not follow the command, or were not tested


def _raise_shutdown(signum: int, _frame: object) -> None:
    # Further signals must not interrupt the fail-safe write that follows.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    raise Shutdown(signum)


def one_shot(cfg: Config, daemon: Daemon) -> str:
    """Read once and describe what the daemon would do; change nothing."""
    now = daemon.clock()
    if not daemon.read(now):
        raise BmcError("the BMC does not answer")
    lines = ["sensors:"]
    for key, st in daemon.sensors.items():
        fresh = st.fresh(now, cfg.timings.stale_after)
        if st.role == "psu":
            shown = f"states {st.states:#06x}" if st.states is not None else "no reading"
        elif st.value is None or not fresh:
            shown = "no reading"
        elif st.role == "current":
            shown = f"{st.value:.2f} A -> {daemon.gpu_power_w(key):.0f} W"
        elif st.role == "gpu_power_hwmon":
            shown = f"{st.value:.0f} W"
        else:
            shown = f"{st.value:.1f} C"
        lines.append(f"  {st.info.name:<20} {key:<40} {shown}")
    lines.append("zones (duty it would set now, from a cold start):")
    for zs in daemon.zones:
        ctl = zs.controller
        if not all(daemon.sensors[k].fresh(now, cfg.timings.stale_after) for k in zs.sensors):
            lines.append(f"  {zs.zone.name:<12} fan_id {zs.zone.fan_id}: inputs missing "
                         f"-> would hold, then 100 % after {cfg.timings.deadline:g} s")
            continue
        if isinstance(ctl, GpuZoneController):
            powers = [daemon.gpu_power_w(k) for k in zs.sensors
                      if daemon.sensors[k].role == "current"]
            temps = [daemon.sensors[k].value or 0.0 for k in zs.sensors
                     if daemon.sensors[k].role == "gpu_temp"]
            duty = ctl.update(powers, temps, now)
            total = sum(powers) if cfg.gpu_law.aggregate == "sum" else max(powers)
            what = f"GPU power {cfg.gpu_law.aggregate} {total:.0f} W"
        else:
            assert isinstance(ctl, CpuZoneController)
            temps = [daemon.sensors[k].value or 0.0 for k in zs.sensors]
            duty = ctl.update(temps, now)
            what = f"CPU {max(temps):.1f} C"
        over = " (temperature override)" if ctl.out.overridden else ""
        lines.append(f"  {zs.zone.name:<12} fan_id {zs.zone.fan_id}: {what} -> {duty:.1f} %"
                     f"{over}")
    psus = [st for st in daemon.sensors.values() if st.role == "psu"]
    pg = cfg.power_guard
    failed = [i + 1 for i, st in enumerate(psus) if st.states is not None
              and psu_failed(st.states, pg.failure_offsets, pg.require_presence)]
    cap = cfg.gpu_cap_w()
    if failed:
        lines.append(f"power: PSU {', '.join(map(str, failed))} failed -> would cap each GPU "
                     f"at {cap:.0f} W")
    else:
        lines.append(f"power: PSUs healthy -> no cap (would cap at {cap:.0f} W per GPU)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="junkyard-fan", description=(
        "Fan and power daemon: fan zones follow GPU power read from the BMC."))
    parser.add_argument("-c", "--config", type=Path, default=DEFAULT_CONFIG)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--once", action="store_true",
                      help="print readings and the duties it would set; change nothing")
    mode.add_argument("--check", action="store_true",
                      help="validate the configuration and its sensors against the BMC")
    mode.add_argument("--check-config", action="store_true",
                      help="validate the configuration file only (no BMC access)")
    mode.add_argument("--probe", action="store_true",
                      help="set each zone to two duties, read its tachometers back, report "
                           "whether the command moves the fans, and write the result the "
                           "daemon reads at start (stop the daemon first)")
    args = parser.parse_args(argv)

    try:
        cfg = load_config(args.config)
    except ConfigError as err:
        print(f"junkyard-fan: {args.config}: {err}", file=sys.stderr)
        return EXIT_CONFIG
    if args.check_config:
        print(f"{args.config}: configuration OK")
        return 0
    logging.basicConfig(level=cfg.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log = logging.getLogger("junkyard_fan")
    changes = not (args.once or args.check)  # only the daemon itself touches the fans
    if changes:
        # From here on a signal leaves the loop through the fail-safe.
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, _raise_shutdown)
    daemon: Daemon | None = None
    try:
        daemon = Daemon(cfg, Bmc(cfg.bmc, cfg.timings))
        if args.probe:
            return _probe(cfg, daemon, log)
        if changes:
            status, why = probe.verdict(cfg)
            if status == probe.FAILED:
                daemon.hands_off = why
            else:
                log.info("fan probe: %s", why)
        return _serve(args, cfg, daemon, changes, log)
    except Shutdown as sig:
        if changes and daemon is not None and not daemon.ended_safe:
            daemon.failsafe(f"signal {sig.signum}")
        log.info("stopped by signal %d", sig.signum)
        return 0
    except BaseException as err:
        # Any error, anywhere: the fans go to 100 % before the process ends
        # (run() has done so already for errors inside the loop).
        if isinstance(err, Exception) and not (daemon is not None and daemon.ended_safe):
            log.exception("unhandled error")  # run() logged the ones from the loop
        if changes and daemon is not None and not daemon.ended_safe:
            daemon.failsafe(f"unhandled error {type(err).__name__}: {err}")
        if isinstance(err, Exception):
            log.critical("ending on an unhandled error: %s: %s", type(err).__name__, err)
            return EXIT_ERROR
        raise


def _rpm(value: float | None) -> str:
    return "none" if value is None else f"{value:.0f}"


def _probe(cfg: Config, daemon: Daemon, log: logging.Logger) -> int:
    result = None
    try:
        result = probe.run(cfg, daemon.bmc)
    except ConfigError as err:
        print(f"junkyard-fan: {err}", file=sys.stderr)
        return EXIT_CONFIG
    except BmcError as err:
        log.error("probe: %s", err)
        return EXIT_BMC
    finally:
        probe.finish(cfg, daemon.bmc, result)
        daemon.ended_safe = True
    for name, zone in result["zones"].items():
        line = f"zone {name} (fan_id {zone['fan_id']}): {zone['status']}"
        if zone["problem"]:
            line += f": {zone['problem']}"
        rpm = ", ".join(f"{n} {_rpm(lo)} -> {_rpm(hi)}" for n, (lo, hi) in zone["rpm"].items())
        print(f"{line} ({rpm} RPM)" if rpm else line)
    print(f"probe {result['status']}: written to {cfg.probe.result_file}")
    return 0 if result["status"] == probe.PASSED else EXIT_PROBE


def _serve(args: argparse.Namespace, cfg: Config, daemon: Daemon, changes: bool,
           log: logging.Logger) -> int:
    try:
        daemon.setup(touch_fans=changes)
    except ConfigError as err:
        print(f"junkyard-fan: {args.config}: {err}", file=sys.stderr)
        if changes:
            daemon.failsafe("the configuration does not match the BMC")
        return EXIT_CONFIG
    except BmcError as err:
        log.error("cannot read the BMC's sensor list: %s", err)
        if changes:
            # Without the SDR we cannot regulate: fans to 100 % and let the
            # supervisor restart us.
            daemon.failsafe(f"BMC unusable at start ({err})")
        return EXIT_BMC
    if args.check:
        print(f"{args.config}: configuration and sensors OK")
        return 0
    if args.once:
        try:
            print(one_shot(cfg, daemon))
        except BmcError as err:
            log.error("%s", err)
            return EXIT_BMC
        return 0
    log.info("regulating %d zones every %g s via %s (%s)", len(daemon.zones),
             cfg.timings.interval, cfg.bmc.tool, cfg.bmc.access)
    daemon.run(sleep=time.sleep)
    return EXIT_ERROR  # run() only returns through an exception


if __name__ == "__main__":
    sys.exit(main())
