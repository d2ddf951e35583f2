"""lab: bring the junkyard lab (a virtual cluster of qemu VMs) up and down, and use it."""

from __future__ import annotations

import argparse
import base64
import concurrent.futures
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

from . import bmc, build, host, seed, vm
from .config import LAB_DIR, Lab, LabError, load

PHASES: list[tuple[str, float]] = []


class Phase:
    def __init__(self, name: str):
        self.name = name

    def __enter__(self):
        print(f"== {self.name}", flush=True)
        self.start = time.monotonic()
        return self

    def __exit__(self, *exc):
        took = time.monotonic() - self.start
        PHASES.append((self.name, took))
        if exc[0] is None:
            print(f"   {self.name}: {took:.1f}s", flush=True)


# --- state ------------------------------------------------------------------

def state_file(lab: Lab) -> Path:
    return lab.state / "state.json"


def read_state(lab: Lab) -> dict:
    try:
        return json.loads(state_file(lab).read_text())
    except (OSError, ValueError):
        return {}


def write_state(lab: Lab, state: dict) -> None:
    lab.state.mkdir(parents=True, exist_ok=True)
    tmp = state_file(lab).with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=1))
    tmp.replace(state_file(lab))


def vm_pid(lab: Lab, name: str) -> int | None:
    """The pid of VM name's qemu if it runs (from its pidfile, checked against /proc)."""
    try:
        pid = int(vm.pid_path(lab, name).read_text().strip())
    except (OSError, ValueError):
        return None
    if host.alive(pid) and str(vm.spec_path(lab, name).parent) in host.cmdline(pid):
        return pid
    if host.alive(pid) and f"-name {name} " in host.cmdline(pid):
        return pid
    return None


def running(lab: Lab) -> bool:
    st = read_state(lab)
    pids = list(st.get("pids", {}).values())
    return any(host.alive(p) for p in pids) or (
        bool(st) and host.netns_exists(st.get("netns", lab.netns)))


# --- up ---------------------------------------------------------------------

def _key_pair(key: Path) -> bool:
    return key.exists() and key.with_suffix(".pub").exists()


def ensure_ssh_key(lab: Lab) -> None:
    """The lab's SSH key in the state directory (where the inventory reads it).

    A new state directory gets a copy of the key kept in the lab's cache (made
    there once): the node image seed holds the public key (authorized_keys), so
    with a key of its own every fresh checkout, every CI run, built the seed
    again (a few minutes of `lab up`) although nothing else in it changed.  The
    key only opens the lab's own VMs, on loopback and in the lab's namespace.
    """
    if _key_pair(lab.ssh_key):
        return
    shared = lab.cache / "ssh" / "id_ed25519"
    if not _key_pair(shared):
        shared.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        # made beside it and renamed, public half first: a `lab up` of another
        # checkout never copies half a pair
        tmp = shared.parent / f".new-{os.getpid()}"
        for f in (tmp, tmp.with_suffix(".pub")):
            f.unlink(missing_ok=True)
        host.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "junkyard-lab",
                  "-f", str(tmp)])
        os.replace(tmp.with_suffix(".pub"), shared.with_suffix(".pub"))
        os.replace(tmp, shared)
    lab.ssh_key.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    for src, dst, mode in ((shared, lab.ssh_key, 0o600),
                           (shared.with_suffix(".pub"), lab.ssh_key.with_suffix(".pub"), 0o644)):
        dst.unlink(missing_ok=True)
        shutil.copyfile(src, dst)
        dst.chmod(mode)


def ssh_base(lab: Lab) -> list[str]:
    return ["ssh", "-i", str(lab.ssh_key), "-p", str(lab.ssh_port), "-o", "BatchMode=yes",
            "-o", "UserKnownHostsFile=/dev/null", "-o", "StrictHostKeyChecking=no",
            "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=10", *lab.ssh_mux(),
            "root@127.0.0.1"]


def ssh(lab: Lab, command: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*ssh_base(lab), command], capture_output=True, text=True,
                          timeout=timeout, check=False, stdin=subprocess.DEVNULL)


def wait_head(lab: Lab, pid: int) -> None:
    deadline = time.monotonic() + lab.head_timeout
    log = vm.console_log(lab, "head")
    while time.monotonic() < deadline:
        if not host.alive(pid):
            raise LabError(f"the head VM's qemu exited; see {lab.state / 'vms' / 'head.log'} "
                           f"and its console log {log}")
        if host.wait_port(lab.ssh_port, 1):
            try:
                res = ssh(lab, "true", timeout=20)
            except subprocess.TimeoutExpired:
                continue
            if res.returncode == 0:
                return
        time.sleep(2)
    raise LabError(f"the head VM did not answer SSH on 127.0.0.1:{lab.ssh_port} within "
                   f"{lab.head_timeout:.0f}s; its console log is {log}")


HEAD_PROXY_UNITS = """\
cat >/etc/systemd/system/jylab-aptproxy.socket <<'UNIT'
[Unit]
Description=The lab's package proxy on 127.0.0.1:{port} (relayed to the lab machine)

[Socket]
ListenStream=127.0.0.1:{port}
Accept=yes

[Install]
WantedBy=sockets.target
UNIT
cat >/etc/systemd/system/jylab-aptproxy@.service <<'UNIT'
[Unit]
Description=One connection to the lab's package proxy

[Service]
ExecStart=/usr/bin/python3 -I -S /usr/local/lib/jylab/relay.py {addr} {port}
StandardInput=socket
StandardOutput=socket
StandardError=journal
UNIT
"""


def install_head_proxy(lab: Lab) -> None:
    """The package proxy on the head's own 127.0.0.1, as on the lab machine: the
    inventory's cluster_apt_proxy (http://127.0.0.1:<port>) is then one URL for
    the seed built here and for the image plays on the head, and the seed's
    recorded inputs are the head's (docs/lab.md, "The node image seed")."""
    relay = (LAB_DIR / "jylab" / "relay.py").read_bytes()
    script = (
        "set -e; install -d -m 0755 /usr/local/lib/jylab; "
        f"echo {base64.b64encode(relay).decode()} | base64 -d >/usr/local/lib/jylab/relay.py; "
        + HEAD_PROXY_UNITS.format(port=lab.proxy_port, addr=vm.GUESTFWD_ADDR)
        + "systemctl daemon-reload; systemctl enable --now jylab-aptproxy.socket; "
        f"python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {lab.proxy_port}), "
        "10).close()'"
    )
    res = ssh(lab, script, timeout=120)
    if res.returncode != 0:
        raise LabError(f"the package proxy relay on the head did not start: "
                       f"{(res.stderr or res.stdout).strip()[-800:]}")
    print(f"   head: package proxy relayed on 127.0.0.1:{lab.proxy_port}")


def wait_vm_started(lab: Lab, name: str, timeout: float = 20) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pid = vm_pid(lab, name)
        if pid:
            return pid
        time.sleep(0.2)
    raise LabError(f"{name}'s qemu did not start after power on; see "
                   f"{bmc.bmc_dir(lab, lab.node(name)) / 'ipmi_sim.log'}")


def preflight(lab: Lab) -> None:
    host.check_tools()
    if running(lab):
        raise LabError(f"the lab is already running (state {state_file(lab)}): "
                       "`lab status` shows it, `lab down` stops it")
    if host.netns_stale(lab.netns):
        # left by a host that stopped with a lab running (/run survives here): it names
        # no namespace, and `ip netns add` would refuse the name
        Path("/run/netns", lab.netns).unlink()
        print(f"   removed /run/netns/{lab.netns}: a leftover file that pins no namespace")
    if host.netns_exists(lab.netns):
        raise LabError(f"network namespace {lab.netns} already exists but this lab's state does "
                       "not know it: `lab down` removes a lab's leftover namespace, `ip netns "
                       f"delete {lab.netns}` any; or choose another name with JUNKYARD_LAB_NETNS")
    ports = {
        "SSH forward to the head": (lab.ssh_port, socket.SOCK_STREAM),
        "package proxy": (lab.proxy_port, socket.SOCK_STREAM),
    }
    for node in lab.nodes:
        ports[f"BMC of {node.name}"] = (node.bmc_port, socket.SOCK_DGRAM)
        ports[f"in-band KCS link of {node.name}"] = (node.kcs_port, socket.SOCK_STREAM)
        ports[f"BMC console of {node.name}"] = (bmc.console_port(lab, node), socket.SOCK_STREAM)
    seen: dict[tuple[int, int], str] = {}
    for what, key in ports.items():
        if key in seen:
            raise LabError(f"port {key[0]} is configured twice ({seen[key]} and {what})")
        seen[key] = what
    host.check_ports(ports)


def mirror_hosts() -> list[str]:
    """The Debian mirrors the head's sources.list names: the only hosts the proxy serves."""
    hosts = ["deb.debian.org", "security.debian.org"]
    for var in ("JUNKYARD_LAB_MIRROR", "JUNKYARD_LAB_SECURITY_MIRROR"):
        host_ = urllib.parse.urlsplit(os.environ.get(var, "")).hostname
        if host_ and host_ not in hosts:
            hosts.append(host_)
    return hosts


def _terminated(signum, frame):
    raise SystemExit(f"terminated by signal {signum}")


def up(lab: Lab, args) -> int:
    total = time.monotonic()
    signal.signal(signal.SIGTERM, _terminated)  # clean up as for Ctrl-C
    signal.signal(signal.SIGHUP, _terminated)
    preflight(lab)
    print(host.kvm_note())
    state: dict = {"netns": lab.netns, "pids": {}, "started": time.time()}
    try:
        with Phase("package proxy"):
            proxy_log = lab.state / "aptproxy.log"
            pid = host.spawn([sys.executable, "-I", str(LAB_DIR / "jylab" / "aptproxy.py"),
                              "--port", str(lab.proxy_port),
                              "--cache", str(lab.cache / "apt"),
                              "--pidfile", str(lab.state / "aptproxy.pid"),
                              *(f"--allow={h}" for h in mirror_hosts())], proxy_log)
            state["pids"]["aptproxy"] = pid
            write_state(lab, state)
            if not host.wait_port(lab.proxy_port, 10):
                raise LabError(f"the package proxy did not start; see {proxy_log}")
            print(f"   127.0.0.1:{lab.proxy_port} (head: http://{vm.GUESTFWD_ADDR}:"
                  f"{lab.proxy_port})")
        # The two cached builds are independent and each spends much of its time
        # waiting (downloads, one core of dpkg or the compiler): side by side.
        with Phase("head image and node image seed (cached builds, side by side)"):
            ensure_ssh_key(lab)
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                seeding = pool.submit(seed.ensure, lab)
                try:
                    head_dir, built = build.ensure_head(lab)
                    info = build.manifest(head_dir)
                    print(f"   head image {'built' if built else 'cached'}: {head_dir.name}, "
                          f"kernel {info.get('kernel')}, zfs {info.get('zfs')}")
                    seed_tar, seed_built = seeding.result()
                except BaseException:
                    seed.stop_all()
                    raise
            print(f"   seed {'built' if seed_built else 'cached'}: {seed_tar.name} "
                  f"({seed_tar.stat().st_size / 2**20:.0f} MiB), head disk "
                  f"virtio-{seed.SEED_DISK_SERIAL}")
        write_state(lab, state)
        with Phase("network namespace and bridges"):
            taps = {vm.tap_name("head", n.net): n.net for n in lab.head_nics}
            for node in lab.nodes:
                taps.update({vm.tap_name(node.name, n.net): n.net for n in node.nics})
            host.create_netns(lab.netns, ["mgmt", "data"], taps)
            print(f"   netns {lab.netns}: bridges mgmt, data; taps {', '.join(taps)}")
            state["pids"]["radvd"] = start_radvd(lab)
            write_state(lab, state)
        with Phase("head VM boot (until SSH answers)"):
            ensure_ssh_key(lab)
            overlay, disks = build.make_run_disks(lab, head_dir)
            spec = vm.write_spec(lab, vm.head_spec(lab, head_dir / "vmlinuz",
                                                   head_dir / "initrd.img", overlay, disks,
                                                   seed_tar))
            vm.console_log(lab, "head").parent.mkdir(parents=True, exist_ok=True)
            pid = host.spawn(vm.launcher(spec), vm.vm_dir(lab) / "head.log")
            state["pids"]["head"] = pid
            write_state(lab, state)
            wait_head(lab, pid)
            install_head_proxy(lab)
            res = ssh(lab, "modprobe zfs && cat /sys/module/zfs/version; "
                      "ls /dev/disk/by-id/ | grep -c '^virtio-jydisk'")
            print(f"   ssh root@127.0.0.1 -p {lab.ssh_port}: zfs "
                  f"{res.stdout.split()[0] if res.stdout else '?'}, "
                  f"{res.stdout.split()[-1] if res.stdout else '?'} data disks")
        with Phase("BMCs (ipmi_sim on 127.0.0.1)"):
            for node in lab.nodes:
                spec = vm.write_spec(lab, vm.node_spec(lab, node))
                startcmd = " ".join(vm.launcher(spec))
                state["pids"][f"bmc-{node.name}"] = bmc.start(lab, node, startcmd)
                write_state(lab, state)
                print(f"   {node.name}: 127.0.0.1:{node.bmc_port}/udp (lanplus), KCS link "
                      f":{node.kcs_port}, console :{bmc.console_port(lab, node)}")
        if not args.no_nodes:
            with Phase("nodes powered on through their BMCs"):
                for node in lab.nodes:
                    bmc.power(lab, node, "on")
                for node in lab.nodes:
                    pid = wait_vm_started(lab, node.name)
                    print(f"   {node.name}: qemu pid {pid}, console "
                          f"{vm.console_log(lab, node.name)}")
    except BaseException as exc:
        print(f"lab up failed: {exc}" if isinstance(exc, LabError) else
              f"lab up interrupted ({type(exc).__name__}): stopping what it started",
              file=sys.stderr)
        teardown(lab, quiet=True)
        raise
    print("== timings")
    for name, took in PHASES:
        print(f"   {took:7.1f}s  {name}")
    print(f"   {time.monotonic() - total:7.1f}s  total")
    print("the lab is up: `lab/lab status`, `lab/lab console node01`, "
          "`lab/lab run site.yml`, `lab/lab down`")
    return 0


def start_radvd(lab: Lab) -> int:
    """Router advertisements on the mgmt bridge, inside the lab's namespace: the node
    firmware (iPXE) solicits an IPv6 router before every network boot and waits about
    13 s when none answers.  The advertisement names no prefix and no default router
    (lifetime 0), so nothing on the lab's networks gets an IPv6 address or route from it;
    it only tells iPXE that there is nothing to configure.  Real nodes' firmware is not
    the lab's: the product's head sends no advertisements."""
    conf = lab.state / "radvd.conf"
    conf.write_text("interface mgmt {\n  AdvSendAdvert on;\n  AdvDefaultLifetime 0;\n"
                    "  MinRtrAdvInterval 30;\n  MaxRtrAdvInterval 60;\n};\n")
    pid = host.spawn(["ip", "netns", "exec", lab.netns, "radvd", "--nodaemon",
                      "-C", str(conf), "-p", str(lab.state / "radvd.pid"), "-m", "stderr"],
                     lab.state / "radvd.log")
    time.sleep(0.5)
    if not host.alive(pid):
        raise LabError(f"radvd did not start; see {lab.state / 'radvd.log'}")
    print(f"   radvd on mgmt (router advertisements for the node firmware), pid {pid}")
    return pid


# --- down -------------------------------------------------------------------

def lab_pids(lab: Lab) -> list[tuple[int, str]]:
    """Processes this lab started: from the state file and from /proc (our paths only)."""
    st = read_state(lab)
    found = {pid: name for name, pid in st.get("pids", {}).items()}
    marker = str(lab.state) + "/"
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            cmd = host.cmdline(int(proc.name))
            if marker in cmd and ("qemu-system" in cmd or "ipmi_sim" in cmd or "radvd" in cmd
                                  or "aptproxy" in cmd or "lab _exec" in cmd):
                found.setdefault(int(proc.name), cmd.split()[0])
    return sorted(found.items(), key=lambda item: _stop_order(item[1]))


def _stop_order(name: str) -> int:
    # BMCs first (so nothing restarts a node), then VMs, then the proxy
    if name.startswith("bmc-") or "ipmi_sim" in name:
        return 0
    if "aptproxy" in name:
        return 2
    return 1


def teardown(lab: Lab, quiet: bool = False) -> list[str]:
    stopped = []
    st = read_state(lab)
    for pid, name in lab_pids(lab):
        if host.stop_pid(pid, str(lab.state)):  # only processes naming our state dir
            stopped.append(f"{name} (pid {pid})")
    # node qemus started by the BMCs
    for node in lab.nodes:
        pid = vm_pid(lab, node.name)
        if pid and host.stop_pid(pid, "qemu-system"):
            stopped.append(f"{node.name} (pid {pid})")
    netns = st.get("netns", lab.netns)
    if host.netns_exists(netns) and (st or host.is_lab_netns(netns)):
        host.delete_netns(netns)
        stopped.append(f"network namespace {netns}")
    shutil.rmtree(lab.state / "disks", ignore_errors=True)
    for f in vm.vm_dir(lab).glob("*.pid"):
        f.unlink(missing_ok=True)
    state_file(lab).unlink(missing_ok=True)
    if not quiet:
        print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
    return stopped


def down(lab: Lab, args) -> int:
    teardown(lab)
    left = [f"pid {pid} ({name})" for pid, name in lab_pids(lab) if host.alive(pid)]
    if host.netns_exists(lab.netns) and host.is_lab_netns(lab.netns):
        left.append(f"network namespace {lab.netns}")
    if left:
        raise LabError("still there after lab down: " + ", ".join(left))
    return 0


# --- status / console / run -------------------------------------------------

BOOT_MARKS = [  # (regex on the serial log, state) - the last match in the log wins
    (r"SeaBIOS", "firmware (SeaBIOS)"),
    (r"iPXE initialising devices", "firmware: iPXE"),
    (r"Configuring \(net0", "iPXE: DHCP on the mgmt NIC"),
    (r"No configuration methods succeeded", "iPXE: no DHCP answer yet (retries)"),
    (r"No bootable device", "firmware: no bootable device (retries)"),
    (r"tftp://|TFTP|http://\S+\.\.\.", "iPXE: loading the boot files"),
    (r"Linux version", "kernel booting"),
    (r"Run /init|Loading, please wait", "initramfs"),
    (r"Welcome to|INIT: version|OpenRC", "init system starting"),
    (r"login:", "login prompt"),
]


def boot_state(log: Path) -> str:
    try:
        with log.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 200_000))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return "no console log"
    best, where = "no output yet", -1
    for pattern, name in BOOT_MARKS:
        for m in re.finditer(pattern, text):
            if m.start() > where:
                best, where = name, m.start()
    return best


def status(lab: Lab, args) -> int:
    st = read_state(lab)
    if not st:
        print("the lab is down")
        return 3 if args.check else 0
    netns = st.get("netns", lab.netns)
    print(f"network namespace {netns}: {'present' if host.netns_exists(netns) else 'MISSING'}")
    proxy = st.get("pids", {}).get("aptproxy")
    print(f"package proxy: {'running' if host.alive(proxy) else 'stopped'} "
          f"(127.0.0.1:{lab.proxy_port})")
    bad = 0
    pid = vm_pid(lab, "head")
    line = f"head    {'running' if pid else 'stopped':8}"
    reach: dict[str, str] = {}
    if pid:
        ips = [n.ip for node in lab.nodes for n in node.nics if n.net == "mgmt" and n.ip]
        pings = "".join(f"ping -c1 -W1 {ip} >/dev/null 2>&1 && echo 'ping {ip} up' "
                        f"|| echo 'ping {ip} down'; " for ip in ips)
        try:
            res = ssh(lab, "systemctl is-system-running; zpool list -H -o name,health "
                           "2>/dev/null | tr '\\t\\n' ' '; echo; " + pings, timeout=30)
            out = res.stdout.split("\n")
            pools = out[1].strip() if len(out) > 1 else ""
            ssh_state = f"ssh: {out[0] or 'no answer'}" + (f"; pools: {pools}" if pools else "")
            reach = {w[1]: w[2] for w in (x.split() for x in out) if len(w) == 3
                     and w[0] == "ping"}
        except subprocess.TimeoutExpired:
            ssh_state = "ssh: timeout"
        line += f" {ssh_state}; console: {boot_state(vm.console_log(lab, 'head'))}"
    else:
        bad += 1
    print(line)
    for node in lab.nodes:
        pid = vm_pid(lab, node.name)
        power = bmc.power_status(lab, node, timeout=10)
        power_s = {True: "on", False: "off", None: "BMC not answering"}[power]
        mgmt = next((n.ip for n in node.nics if n.net == "mgmt" and n.ip), None)
        ping = f"; mgmt {mgmt} from head: {reach[mgmt]}" if mgmt in reach else ""
        print(f"{node.name:7} {'running' if pid else 'stopped':8} BMC power {power_s}; "
              f"console: {boot_state(vm.console_log(lab, node.name))}{ping}")
        if power is None:
            bad += 1
    return 1 if bad and args.check else 0


def console(lab: Lab, args) -> int:
    if args.name != "head":
        lab.node(args.name)
    log = vm.console_log(lab, args.name)
    if not log.exists():
        raise LabError(f"no console log for {args.name} yet ({log})")
    if args.no_follow:
        sys.stdout.write(log.read_text(errors="replace"))
        return 0
    print(f"(serial console of {args.name}: {log}; Ctrl-C leaves)", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        os.execvp("tail", ["tail", "-n", str(args.lines), "-F", str(log)])
    return 0


def tool(name: str) -> str:
    venv = lab_repo_venv() / name
    return str(venv) if venv.exists() else (shutil.which(name) or name)


def lab_repo_venv() -> Path:
    return LAB_DIR.parent / ".venv" / "bin"


def run_playbook(lab: Lab, args) -> int:
    if not read_state(lab):
        print("note: the lab is not running (`lab up` first)", file=sys.stderr)
    cmd = [tool(args.program), "-i", str(lab.inventory), *args.args]
    env = lab.env()
    env["PATH"] = f"{lab_repo_venv()}:{env.get('PATH', '')}"
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    os.chdir(lab.repo)
    os.execvpe(cmd[0], cmd, env)
    return 0


def deploy(lab: Lab, args) -> int:
    """lab up (unless it runs), site.yml against it, then the state of every VM."""
    if not running(lab):
        lock = host.Lock(lab.state / "lock")
        lock.acquire("up")
        try:
            # the nodes stay off: site.yml powers them on through their BMCs
            up(lab, argparse.Namespace(no_nodes=True))
        finally:
            lock.release()
    cmd = [tool("ansible-playbook"), "-i", str(lab.inventory), "site.yml", *args.args]
    env = lab.env()
    env["PATH"] = f"{lab_repo_venv()}:{env.get('PATH', '')}"
    print("+ " + " ".join(cmd), flush=True)
    start = time.monotonic()
    rc = subprocess.run(cmd, env=env, cwd=lab.repo, check=False).returncode
    print(f"== site.yml: exit {rc} after {time.monotonic() - start:.0f}s", flush=True)
    status(lab, argparse.Namespace(check=False))
    return rc


def ssh_cmd(lab: Lab, args) -> int:
    os.execvp("ssh", [*ssh_base(lab)[:-1], "-t" if sys.stdin.isatty() else "-T",
                      "root@127.0.0.1", *args.command])
    return 0


def power_cmd(lab: Lab, args) -> int:
    node = lab.node(args.name)
    if args.action == "status":
        p = bmc.power_status(lab, node)
        print({True: "on", False: "off", None: "BMC not answering"}[p])
        return 0 if p is not None else 1
    bmc.power(lab, node, args.action)
    return 0


def inband_check(lab: Lab, args) -> int:
    """Boot node's qemu from a copy of the head disk and read the BMC through /dev/ipmi0."""
    if not read_state(lab):
        raise LabError("the lab is not running (`lab up` first)")
    node = lab.node(args.name)
    head_dir = build.head_dir(lab)
    was_on = bmc.power_status(lab, node)
    if was_on:
        bmc.power(lab, node, "off")
        deadline = time.monotonic() + 20
        while vm_pid(lab, node.name) and time.monotonic() < deadline:
            time.sleep(0.2)
    overlay = lab.state / "disks" / f"{node.name}-probe.qcow2"
    host.run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", str(head_dir / "head.img"),
              "-F", "raw", str(overlay)])
    port = free_tcp_port()
    spec = vm.write_spec(lab, vm.probe_spec(lab, node, head_dir / "vmlinuz",
                                            head_dir / "initrd.img", overlay, port))
    pid = host.spawn(vm.launcher(spec), vm.vm_dir(lab) / f"{node.name}-probe.log")
    start = time.monotonic()
    try:
        probe = Lab(**{**lab.__dict__, "ssh_port": port, "head_timeout": 300})
        wait_head(probe, pid)
        print(f"{node.name}'s qemu booted from a copy of the head disk in "
              f"{time.monotonic() - start:.0f}s; reading its BMC in-band:")
        res = ssh(probe, "modprobe ipmi_si 2>/dev/null; modprobe ipmi_devintf; "
                  "for i in 1 2 3 4 5 6 7 8 9 10; do [ -e /dev/ipmi0 ] && break; sleep 1; done; "
                  "ls -l /dev/ipmi0 && ipmitool -I open mc info | head -n 3 && "
                  "ipmitool -I open sdr list | head -n 4", timeout=120)
        print(res.stdout + res.stderr)
        ok = res.returncode == 0 and "/dev/ipmi0" in res.stdout and "Device ID" in res.stdout
        print(f"in-band IPMI on {node.name}: {'works' if ok else 'FAILED'}")
        return 0 if ok else 1
    finally:
        host.stop_pid(pid, str(lab.state))
        overlay.unlink(missing_ok=True)
        if was_on:
            bmc.power(lab, node, "on")


def free_tcp_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["_exec"]:  # internal: the VM launcher (BMC startcmd)
        vm.exec_vm(Path(argv[1]))
        return 1
    ap = argparse.ArgumentParser(prog="lab", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("up", help="build what is missing, start the lab, power on the nodes")
    p.add_argument("--no-nodes", action="store_true", help="leave the nodes powered off")
    p.set_defaults(func=up, lock=True)
    p = sub.add_parser("deploy", help="lab up if needed, run site.yml, show every VM's state",
                       prefix_chars="\0")
    p.add_argument("args", nargs=argparse.REMAINDER)
    p.set_defaults(func=deploy, lock=False)
    p = sub.add_parser("down", help="stop everything the lab started")
    p.set_defaults(func=down, lock=True)
    p = sub.add_parser("status", help="every VM: running or not, boot state")
    p.add_argument("--check", action="store_true", help="exit non-zero unless all is up")
    p.set_defaults(func=status, lock=False)
    p = sub.add_parser("console", help="follow a VM's serial console log")
    p.add_argument("name")
    p.add_argument("--no-follow", action="store_true", help="print the log and exit")
    p.add_argument("-n", "--lines", type=int, default=40)
    p.set_defaults(func=console, lock=False)
    p = sub.add_parser("power", help="IPMI chassis power of a node through its BMC")
    p.add_argument("name")
    p.add_argument("action", choices=["on", "off", "cycle", "reset", "status"])
    p.set_defaults(func=power_cmd, lock=False)
    p = sub.add_parser("inband-check", help="check that a node's BMC answers on /dev/ipmi0")
    p.add_argument("name")
    p.set_defaults(func=inband_check, lock=False)
    p = sub.add_parser("ssh", help="ssh to the head (optionally run a command)")
    p.add_argument("command", nargs=argparse.REMAINDER)
    p.set_defaults(func=ssh_cmd, lock=False)
    for name, prog in (("run", "ansible-playbook"), ("ansible-playbook", "ansible-playbook"),
                       ("ansible", "ansible")):
        p = sub.add_parser(name, help=f"{prog} -i inventories/lab ... with the lab's environment",
                           prefix_chars="\0")
        p.add_argument("args", nargs=argparse.REMAINDER)
        p.set_defaults(func=run_playbook, lock=False, program=prog)
    args = ap.parse_args(argv)
    try:
        lab = load()
        if args.lock:
            lock = host.Lock(lab.state / "lock")
            lock.acquire(args.cmd)
        return args.func(lab, args)
    except LabError as exc:
        print(f"lab {args.cmd}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
