"""The lab's BMCs: one OpenIPMI ipmi_sim per node on 127.0.0.1.

The simulator configuration (G292-Z20-like sensors and SDRs, the fanmod OEM
module) is the fan daemon's, from bmc_sim/; this adapter only renders it for a
detached simulator whose chassis power control starts and stops the node's
qemu (startcmd), and whose VM serial listener is the node's in-band KCS
interface (qemu ipmi-bmc-extern + isa-ipmi-kcs).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

from . import host
from .config import REPO, Lab, LabError, Node

if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

POWEROFF_WAIT = 3  # seconds for a graceful (ACPI) power-off before SIGTERM
KILL_WAIT = 5


def bmc_dir(lab: Lab, node: Node) -> Path:
    return lab.state / "bmc" / node.name


def console_port(lab: Lab, node: Node) -> int:
    return node.kcs_port + 100


def start(lab: Lab, node: Node, startcmd: str) -> int:
    """Render lan.conf for node's BMC, start ipmi_sim detached; returns its pid."""
    try:
        from bmc_sim import simctl
    except ImportError as exc:
        raise LabError(f"bmc_sim/ (the shared BMC configuration) is missing: {exc}") from None
    work = bmc_dir(lab, node)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    cache = lab.repo / ".cache" / "bmc_sim"
    if node.profile not in simctl.BOARDS:
        raise LabError(f"{node.name}: no simulated BMC models the hardware profile "
                       f"{node.profile!r} (bmc_sim.simctl.BOARDS: "
                       f"{', '.join(sorted(simctl.BOARDS))})")
    opts = simctl.SimOptions(
        name=node.name,
        user=node.bmc_user,
        password=lab.bmc_password,
        startcmd=startcmd,
        startnow=False,
        poweroff_wait=POWEROFF_WAIT,
        kill_wait=KILL_WAIT,
        serial_port=node.kcs_port,
        **simctl.BOARDS[node.profile],
    )
    sim = simctl.BmcSim(work, opts, cache_dir=cache)
    sim.port = node.bmc_port
    sim.console_port = console_port(lab, node)
    try:
        sdr = simctl.build_sdr(opts.sdr_source, cache, opts.extra_sdr_sources)
        emu = simctl.compose_emu(opts, work)
        try:
            conf = sim.render_lan_conf()
        except simctl.SimError as exc:  # no compiler or OpenIPMI headers: no OEM module
            print(f"  {node.name}: BMC without the fanmod OEM module ({exc})")
            opts.fanmod = False
            conf = sim.render_lan_conf()
    except simctl.SimError as exc:
        raise LabError(f"BMC of {node.name}: {exc}") from None
    (work / "lan.conf").write_text(conf)
    (work / "lan.conf").chmod(0o600)
    sim.password_file.write_text(lab.bmc_password)
    sim.password_file.chmod(0o600)
    state = work / "state"
    (state / "ipmi_sim" / node.name).mkdir(parents=True)
    shutil.copyfile(sdr, state / "ipmi_sim" / node.name / "sdr.20.main")
    cmd = ["ipmi_sim", "-c", str(work / "lan.conf"), "-f", str(emu),
           "-s", str(state), "-n"]
    pid = host.spawn(cmd, work / "ipmi_sim.log")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if not host.alive(pid):
            raise LabError(f"ipmi_sim for {node.name} exited; see {work / 'ipmi_sim.log'}")
        if host.port_in_use(sim.console_port) and power_status(lab, node, timeout=2) is not None:
            return pid
        time.sleep(0.2)
    raise LabError(f"BMC of {node.name} did not answer on 127.0.0.1:{node.bmc_port}/udp; "
                   f"see {work / 'ipmi_sim.log'}")


def ipmitool(lab: Lab, node: Node, *args: str, timeout: float = 20) -> subprocess.CompletedProcess:
    """ipmitool over IPMI 2.0 LAN (lanplus, cipher suite 3) to node's BMC."""
    pwfile = bmc_dir(lab, node) / "bmc.password"
    if not pwfile.exists():
        pwfile.parent.mkdir(parents=True, exist_ok=True)
        pwfile.write_text(lab.bmc_password)
        pwfile.chmod(0o600)
    cmd = ["ipmitool", "-I", "lanplus", "-C", "3", "-H", "127.0.0.1", "-p", str(node.bmc_port),
           "-U", node.bmc_user, "-f", str(pwfile), "-N", "1", "-R", "2", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)


def power(lab: Lab, node: Node, action: str) -> None:
    res = ipmitool(lab, node, "chassis", "power", action)
    if res.returncode != 0:
        raise LabError(f"ipmitool chassis power {action} to {node.name}'s BMC "
                       f"(127.0.0.1:{node.bmc_port}) failed: {res.stderr.strip()}")


def power_status(lab: Lab, node: Node, timeout: float = 20) -> bool | None:
    """True (on), False (off) or None (BMC does not answer)."""
    try:
        res = ipmitool(lab, node, "chassis", "power", "status", timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    if res.returncode != 0:
        return None
    return "is on" in res.stdout
