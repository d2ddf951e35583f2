"""Helpers for the lab's integration tests: run lab/lab, talk to its VMs and BMCs."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LAB_CMD = [sys.executable, str(REPO / "lab" / "lab")]
sys.path.insert(0, str(REPO / "lab"))

from jylab import bmc, config, host, vm  # noqa: E402


def lab_cli(*args: str, env: dict | None = None, timeout: float = 1800,
            log: Path | None = None) -> subprocess.CompletedProcess:
    """Run lab/lab with args; output captured (and copied to log if given)."""
    res = subprocess.run([*LAB_CMD, *args], capture_output=True, text=True, timeout=timeout,
                         env={**os.environ, **(env or {})}, cwd=REPO, check=False)
    if log:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("a") as f:
            f.write(f"$ lab {' '.join(args)}  (exit {res.returncode})\n{res.stdout}{res.stderr}\n")
    return res


def lab_prerequisites() -> str | None:
    if os.geteuid() != 0:
        return "the lab needs root"
    missing = [t for t in ("qemu-system-x86_64", "ipmi_sim", "ipmitool", "debootstrap")
               if shutil.which(t) is None]
    return f"missing host tools: {', '.join(missing)}" if missing else None


class LabHandle:
    """The running lab, as the tests see it."""

    def __init__(self, up: subprocess.CompletedProcess, took: float):
        self.cfg = config.load()
        self.up_result = up
        self.up_seconds = took

    @property
    def nodes(self) -> list[config.Node]:
        return self.cfg.nodes

    def ssh(self, command: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["ssh", "-i", str(self.cfg.ssh_key), "-p", str(self.cfg.ssh_port),
             "-o", "BatchMode=yes", "-o", "UserKnownHostsFile=/dev/null",
             "-o", "StrictHostKeyChecking=no", "-o", "LogLevel=ERROR",
             *self.cfg.ssh_mux(), "root@127.0.0.1", command],
            capture_output=True, text=True, timeout=timeout, check=False,
            stdin=subprocess.DEVNULL)

    def node_ssh(self, node: str | config.Node, command: str,
                 timeout: float = 120) -> subprocess.CompletedProcess:
        """Run command as root on a node, over its management address, through the head.

        Commands to a node share one connection to it while its qemu process runs (an SSH
        handshake costs the emulated node and head about 1.7 s; a shared connection 0.4 s):
        the control socket is named after that process, so a power-cycled node gets a new
        connection.  A command that fails on a connection shared since before it (the node
        rebooted inside the same process, or went down) closes it and runs once more on a
        connection of its own, so the result is the node's, not the old connection's."""
        node = self.cfg.node(node) if isinstance(node, str) else node
        mgmt = next(n.ip for n in node.nics if n.net == "mgmt")
        opts = ["-i", str(self.cfg.ssh_key), "-o", "BatchMode=yes",
                "-o", "UserKnownHostsFile=/dev/null", "-o", "StrictHostKeyChecking=no",
                "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=30"]
        jump = " ".join(["ssh", "-W", "%h:%p", *opts, *self.cfg.ssh_mux(in_proxy_command=True),
                         "-p", str(self.cfg.ssh_port), "root@127.0.0.1"])
        base = ["ssh", *opts, "-o", f"ProxyCommand={jump}"]
        pid = self.qemu_pid(node)
        if pid is None:  # powered off: nothing to share
            return self._run(base, mgmt, command, timeout)
        path = f"/tmp/jylab-node-{node.name}-{pid}"
        shared = [*base, "-o", "ControlMaster=auto", "-o", f"ControlPath={path}",
                  "-o", "ControlPersist=300", "-o", "ServerAliveInterval=5",
                  "-o", "ServerAliveCountMax=2"]
        had = Path(path).exists()
        res = self._run(shared, mgmt, command, timeout)
        if res.returncode == 255 and had:
            subprocess.run([*shared, "-O", "exit", f"root@{mgmt}"], capture_output=True,
                           timeout=30, check=False, stdin=subprocess.DEVNULL)
            Path(path).unlink(missing_ok=True)
            res = self._run(base, mgmt, command, timeout)
        return res

    @staticmethod
    def _run(argv: list[str], address: str, command: str,
             timeout: float) -> subprocess.CompletedProcess:
        return subprocess.run([*argv, f"root@{address}", command], capture_output=True,
                              text=True, timeout=timeout, check=False, stdin=subprocess.DEVNULL)

    def wait_login(self, node: str | config.Node, timeout: float = 900,
                   poll: float = 2) -> float | None:
        """Wait until a node (power-cycled or booting) takes an SSH login; return the
        monotonic time it did, or None after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self.node_ssh(node, "true", timeout=40).returncode == 0:
                    return time.monotonic()
            except subprocess.TimeoutExpired:  # ssh while the node boots
                pass
            time.sleep(poll)
        return None

    def ipmitool(self, node: config.Node, *args: str) -> subprocess.CompletedProcess:
        """ipmitool -I lanplus -C 3 to node's BMC on 127.0.0.1."""
        return subprocess.run(
            ["ipmitool", "-I", "lanplus", "-C", "3", "-H", "127.0.0.1",
             "-p", str(node.bmc_port), "-U", node.bmc_user, "-P", self.cfg.bmc_password,
             *args],
            capture_output=True, text=True, timeout=60, check=False)

    def qemu_pid(self, node: config.Node) -> int | None:
        """The pid of node's qemu process, if one runs."""
        try:
            pid = int(vm.pid_path(self.cfg, node.name).read_text())
        except (OSError, ValueError):
            pid = None
        if pid and host.alive(pid) and "qemu-system" in host.cmdline(pid):
            return pid
        for proc in Path("/proc").iterdir():  # pidfile gone, process still there?
            if proc.name.isdigit():
                cmd = host.cmdline(int(proc.name))
                if cmd.startswith("qemu-system") and f"-name {node.name} " in cmd \
                        and str(self.cfg.state) in cmd and host.alive(int(proc.name)):
                    return int(proc.name)
        return None

    def wait_qemu(self, node: config.Node, running: bool, timeout: float = 30) -> int | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid = self.qemu_pid(node)
            if bool(pid) == running:
                return pid
            time.sleep(0.25)
        raise AssertionError(f"{node.name}'s qemu is {'not ' if running else ''}running "
                             f"{timeout:.0f}s after the power change")

    def console(self, name: str) -> str:
        return vm.console_log(self.cfg, name).read_text(errors="replace")

    def bmc_dir(self, node: config.Node) -> Path:
        return bmc.bmc_dir(self.cfg, node)

    def bmc_sim(self, node: config.Node):
        """node's running BMC simulator, attached (bmc_sim.simctl.BmcSim: sensors,
        fan tachometers, the OEM command log); close() it after use."""
        from bmc_sim import simctl  # lab/jylab/bmc.py put the repository on sys.path
        sim = simctl.BmcSim(self.bmc_dir(node), simctl.SimOptions(
            name=node.name, user=node.bmc_user, password=self.cfg.bmc_password))
        return sim.attach(node.bmc_port, bmc.console_port(self.cfg, node))


def mount_on(lab, node: str, source: str, then: str) -> subprocess.CompletedProcess:
    """Mount the NFS export source on node at a scratch point, run then, unmount; the
    result of it all (soft mount: a refusal is an error, never a hang)."""
    cmd = (f"set -e; d=$(mktemp -d); "
           f"trap 'cd /; umount $d 2>/dev/null || true; rmdir $d' EXIT; "
           f"mount -t nfs -o vers=3,tcp,nolock,soft,timeo=50,retrans=1 {source} $d; "
           f"cd $d; {then}")
    return lab.node_ssh(node, cmd)


def recap(output: str) -> dict[str, dict[str, int]]:
    """PLAY RECAP of an ansible-playbook run: host -> {ok, changed, failed, ...}."""
    out = {}
    for line in output.split("PLAY RECAP", 1)[-1].splitlines()[1:]:
        m = re.match(r"^(\S+)\s+:\s+(ok=\d+.*)$", line.strip())
        if m:
            out[m.group(1)] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m.group(2))}
    return out


def run_site(lab_log: Path, *extra: str) -> subprocess.CompletedProcess:
    """site.yml against the lab (through `lab run`), its time on stderr."""
    start = time.monotonic()
    res = lab_cli("run", "site.yml", *extra, log=lab_log, timeout=3600)
    sys.stderr.write(f"\n[site.yml {' '.join(extra)} took {time.monotonic() - start:.0f}s]\n")
    return res
