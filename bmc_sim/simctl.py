"""Start and drive an OpenIPMI ``ipmi_sim`` BMC on 127.0.0.1 for tests and the lab.

One :class:`BmcSim` is one simulated G292-Z20-like BMC: its own temporary state
directory, a LAN channel on a free UDP port of 127.0.0.1, a console on a free
TCP port of 127.0.0.1 (sensor values and bits are changed through it), and the
``fanmod`` loadable module that answers and logs OEM fan commands and injects
faults. Build artefacts (compiled SDRs, ``fanmod.so``) are cached under
``.cache/bmc_sim/`` keyed by a hash of their inputs.

Typical use::

    with BmcSim(tmp_path) as bmc:
        bmc.set_gpu_current(0, 20.0)
        bmc.set_faults(drop_count=2, drop_every=3)
        ...
        bmc.oem_log()

The lab can pass ``startcmd``/``chassis_control``/``serial`` options (see
:class:`SimOptions`) so chassis power control drives a qemu VM.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_CACHE = REPO / ".cache" / "bmc_sim"
OPENIPMI_HEADERS = ("lanserv.h", "mcserv.h", "msg.h", "serv.h")

# Sensor numbers of the G292-Z20-like model (g292z20.sdrs / g292z20.emu).
GPU_CURRENT_BASE = 0x01
GPU_TEMP_BASE = 0x11
CPU_TEMP = 0x21
CPU_VR_TEMP = 0x22
FAN_BASE = 0x31
PSU_BASE = 0x41
AMPS_PER_COUNT = 0.25
RPM_PER_COUNT = 100
PSU_FAILURE_BIT = 1
PSU_AC_LOST_BIT = 3


class SimError(RuntimeError):
    """The simulator could not be built, started or driven."""


class SimConsoleError(SimError):
    """The simulator console rejected a command."""


@dataclass
class SimOptions:
    """What goes into the rendered lan.conf and which model is loaded."""

    name: str = "g292z20"
    user: str = "admin"
    password: str = "junkyard-test"
    emu_file: Path = HERE / "g292z20.emu"
    sdr_source: Path = HERE / "g292z20.sdrs"
    # A board that differs from the base model by a few sensors: its extra
    # records and their emulator commands (BOARDS; compose_emu, build_sdr).
    extra_sdr_sources: tuple[Path, ...] = ()
    extra_emu_files: tuple[Path, ...] = ()
    fanmod: bool = True
    ianas: tuple[int, ...] = (15370,)
    # The fans (fanmod): fan_id (zone) -> its tachometer sensor numbers. After
    # a fan command, a zone's tachometers move toward duty x tach_full (raw
    # counts; 165 x 100 RPM = 16,500 RPM, the G292's fans) with time constant
    # tach_tau_ms; automatic mode runs them at auto_duty %. A board that
    # ignores the fan command (answers it, changes nothing): ignores_fan_commands.
    # The G292-Z20 model: one side's three fans (zone 1), the other side's
    # three (zone 2), the CPU's two (zone 0).
    fans: dict[int, tuple[int, ...]] = field(default_factory=lambda: {
        1: (0x31, 0x32, 0x33), 2: (0x34, 0x35, 0x36), 0: (0x37, 0x38)})
    tach_full: int = 165
    tach_tau_ms: int = 1000
    auto_duty: int = 30
    ignores_fan_commands: bool = False
    # Chassis power hooks, for the lab (qemu): see ipmi_lan(5). ipmi_sim only
    # manages the startcmd process through the VM serial interface (channel
    # 15), so with a startcmd a serial port is always configured (a free one
    # unless given); "{serial_port}" in startcmd is replaced by it, for qemu's
    # "-chardev socket,id=ipmi0,host=127.0.0.1,port={serial_port},reconnect=10
    #  -device isa-ipmi-bt,bmc=..." style wiring.
    startcmd: str | None = None
    startnow: bool = False
    poweroff_wait: int | None = None
    kill_wait: int | None = None
    chassis_control: str | None = None
    # "serial 15 127.0.0.1 <port> codec VM" for a qemu isa-ipmi chardev.
    serial_port: int | None = None
    extra_lan_conf: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class OemRecord:
    """One line of the fanmod log: a request the module answered or faulted."""

    time: float
    kind: str  # "oem" (netfn 0x30/0x2e) or "req" (any other request)
    netfn: int
    cmd: int
    data: tuple[int, ...]
    result: str  # "ok", "drop", "empty" or "cc=0xNN"

    @property
    def answered_ok(self) -> bool:
        return self.result == "ok"


def _hash_inputs(*parts: bytes) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(len(part).to_bytes(8, "little"))
        digest.update(part)
    return digest.hexdigest()[:16]


def _atomic_build(target: Path, build) -> Path:
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        build(tmp)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def _run(cmd: list[str]) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SimError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()}")


def build_sdr(source: Path, cache_dir: Path = DEFAULT_CACHE,
              extra: tuple[Path, ...] = ()) -> Path:
    """Compile an SDR source, followed by ``extra`` sources, with ``sdrcomp -8``
    (8-bit ASCII id strings)."""
    sdrcomp = shutil.which("sdrcomp")
    if not sdrcomp:
        raise SimError("sdrcomp not found (Debian package openipmi)")
    texts = [p.read_bytes() for p in (source, *extra)]
    key = _hash_inputs(*texts, b"sdrcomp -8")
    target = cache_dir / f"{source.stem}-{key}.bsdr"

    def build(tmp: Path) -> None:
        src = tmp.with_suffix(".sdrs")
        src.write_bytes(b"\n".join(texts))
        try:
            _run([sdrcomp, "-8", "-o", str(tmp), str(src)])
        finally:
            src.unlink(missing_ok=True)
    return _atomic_build(target, build)


# The boards the simulator models, by the hardware profile names of the
# inventories: the base G292-Z20 model, and the G292-Z45 (a second CPU's
# temperature sensor; its doubled currents are the profile's calibration).
BOARDS: dict[str, dict] = {
    "g292-z20": {},
    "g292-z45": {"extra_sdr_sources": (HERE / "g292z45-cpu1.sdrs",),
                 "extra_emu_files": (HERE / "g292z45-cpu1.emu",)},
}


def compose_emu(options: SimOptions, workdir: Path) -> Path:
    """The emulator command file: the base model's, with the extra boards'
    commands before its final ``mc_enable`` (written to ``workdir`` if any)."""
    if not options.extra_emu_files:
        return options.emu_file
    base = options.emu_file.read_text()
    head, sep, tail = base.rpartition("\nmc_enable ")
    if not sep:
        raise SimError(f"{options.emu_file}: no mc_enable line to add sensors before")
    extra = "".join(p.read_text() for p in options.extra_emu_files)
    out = workdir / "board.emu"
    out.write_text(f"{head}\n{extra}{sep.lstrip()}{tail}")
    return out


def build_fanmod(cache_dir: Path = DEFAULT_CACHE) -> Path:
    """Compile fanmod.c against the installed OpenIPMI headers."""
    source = HERE / "fanmod.c"
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise SimError("no C compiler found (Debian package gcc)")
    include = Path("/usr/include/OpenIPMI")
    headers = [include / h for h in OPENIPMI_HEADERS]
    missing = [str(h) for h in headers if not h.exists()]
    if missing:
        raise SimError(f"OpenIPMI headers missing (Debian package libopenipmi-dev): {missing}")
    flags = ["-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Werror"]
    key = _hash_inputs(source.read_bytes(), " ".join(flags).encode(),
                       *(h.read_bytes() for h in headers))
    target = cache_dir / f"fanmod-{key}.so"
    return _atomic_build(target, lambda tmp: _run([cc, *flags, "-o", str(tmp), str(source),
                                                   "-lm"]))


def free_port(kind: int = socket.SOCK_DGRAM) -> int:
    """A port of 127.0.0.1 that nothing listens on right now (UDP or TCP)."""
    with socket.socket(socket.AF_INET, kind) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _quote(value: str) -> str:
    if '"' in value or "\n" in value:
        raise SimError(f"lan.conf strings cannot contain quotes or newlines: {value!r}")
    return f'"{value}"'


class BmcSim:
    """One running ipmi_sim on 127.0.0.1 with a private state directory."""

    def __init__(
        self,
        workdir: Path,
        options: SimOptions | None = None,
        cache_dir: Path = DEFAULT_CACHE,
    ) -> None:
        self.workdir = Path(workdir)
        self.options = options or SimOptions()
        self.cache_dir = cache_dir
        self.host = "127.0.0.1"
        self.port = 0
        self.console_port = 0
        self.serial_port: int | None = None
        self.log_path = self.workdir / "fanmod.log"
        self.faults_path = self.workdir / "fanmod.faults"
        self.password_file = self.workdir / "bmc.password"
        self.stdout_path = self.workdir / "ipmi_sim.out"
        self._proc: subprocess.Popen[bytes] | None = None
        self._console: socket.socket | None = None
        self._console_lock = threading.Lock()

    # ----------------------------------------------------------- lifecycle
    def render_lan_conf(self) -> str:
        opts = self.options
        lines = [
            f"name {_quote(opts.name)}",
            "set_working_mc 0x20",
            "  startlan 1",
            f"    addr {self.host} {self.port}",
            "    priv_limit admin",
            "    allowed_auths_callback none md2 md5 straight",
            "    allowed_auths_user none md2 md5 straight",
            "    allowed_auths_operator none md2 md5 straight",
            "    allowed_auths_admin none md2 md5 straight",
            "    guid a123456789abcdefa123456789abcdef",
            "  endlan",
            f"  user 2 true {_quote(opts.user)} {_quote(opts.password)} admin 10 "
            "none md2 md5 straight",
        ]
        serial = self.serial_port if self.serial_port is not None else opts.serial_port
        if serial is not None:
            lines.append(f"  serial 15 {self.host} {serial} codec VM")
        if opts.chassis_control:
            lines.append(f"  chassis_control {_quote(opts.chassis_control)}")
        if opts.startcmd:
            cmd = opts.startcmd.replace("{serial_port}", str(serial))
            lines.append(f"  startcmd {_quote(cmd)}")
            lines.append(f"  startnow {'true' if opts.startnow else 'false'}")
        if opts.poweroff_wait is not None:
            lines.append(f"  poweroff_wait {int(opts.poweroff_wait)}")
        if opts.kill_wait is not None:
            lines.append(f"  kill_wait {int(opts.kill_wait)}")
        lines.extend(f"  {line}" for line in opts.extra_lan_conf)
        lines.append(f"console {self.host} {self.console_port}")
        if opts.fanmod:
            mod = build_fanmod(self.cache_dir)
            args = [f"log={self.log_path}", f"faults={self.faults_path}"]
            args += [f"iana={iana}" for iana in opts.ianas]
            args += [f"tach={fan}:{','.join(f'{n:#x}' for n in sensors)}"
                     for fan, sensors in sorted(opts.fans.items())]
            if opts.fans:
                args += [f"tach_full={opts.tach_full}", f"tach_tau_ms={opts.tach_tau_ms}",
                         f"auto_duty={opts.auto_duty}",
                         f"ignore_fans={int(opts.ignores_fan_commands)}"]
            lines.append(f"loadlib {_quote(str(mod))} {_quote(' '.join(args))}")
        return "\n".join(lines) + "\n"

    def start(self, timeout: float = 10.0) -> BmcSim:
        if self._proc is not None:
            raise SimError("simulator already started")
        exe = shutil.which("ipmi_sim")
        if not exe:
            raise SimError("ipmi_sim not found (Debian package openipmi)")
        self.workdir.mkdir(parents=True, exist_ok=True)
        sdr = build_sdr(self.options.sdr_source, self.cache_dir,
                        self.options.extra_sdr_sources)
        emu = compose_emu(self.options, self.workdir)
        self.password_file.write_text(self.options.password)
        self.password_file.chmod(0o600)
        last_error = ""
        for _attempt in range(3):  # a free port can be taken between probe and bind
            self.port = free_port(socket.SOCK_DGRAM)
            self.console_port = free_port(socket.SOCK_STREAM)
            self.serial_port = self.options.serial_port
            if self.serial_port is None and self.options.startcmd:
                self.serial_port = free_port(socket.SOCK_STREAM)
            state = self.workdir / "state"
            shutil.rmtree(state, ignore_errors=True)
            (state / "ipmi_sim" / self.options.name).mkdir(parents=True)
            shutil.copyfile(sdr, state / "ipmi_sim" / self.options.name / "sdr.20.main")
            conf = self.workdir / "lan.conf"
            conf.write_text(self.render_lan_conf())
            with open(self.stdout_path, "wb") as out:
                self._proc = subprocess.Popen(
                    [exe, "-c", str(conf), "-f", str(emu),
                     "-s", str(state), "-n"],
                    cwd=self.workdir, stdin=subprocess.DEVNULL, stdout=out,
                    stderr=subprocess.STDOUT, start_new_session=True,
                )
            try:
                self._connect_console(timeout)
                return self
            except SimError as err:
                last_error = str(err)
                self._terminate()
        raise SimError(f"ipmi_sim did not start: {last_error}; see {self.stdout_path}")

    def attach(self, port: int, console_port: int, timeout: float = 5.0) -> BmcSim:
        """Talk to a simulator started elsewhere (the lab's, lab/jylab/bmc.py) on
        127.0.0.1: LAN ``port``, console ``console_port``; :meth:`close` leaves it running."""
        self.port, self.console_port = port, console_port
        deadline = time.monotonic() + timeout
        while self._console is None:
            try:
                self._console = socket.create_connection((self.host, console_port), timeout=5)
            except OSError as err:
                if time.monotonic() > deadline:
                    raise SimError(f"no simulator console on {self.host}:{console_port}: "
                                   f"{err}") from None
                time.sleep(0.2)
        self._read_prompt()
        return self

    def close(self) -> None:
        """Drop the console connection (an attached simulator keeps running)."""
        if self._console is not None:
            self._console.close()
            self._console = None

    def _connect_console(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                out = self.stdout_path.read_text(errors="replace")[-2000:]
                raise SimError(f"ipmi_sim exited with {self._proc.returncode}: {out}")
            try:
                sock = socket.create_connection((self.host, self.console_port), timeout=2)
            except OSError:
                time.sleep(0.05)
                continue
            self._console = sock
            self._read_prompt()
            return
        raise SimError("console did not come up")

    def _read_prompt(self, after: bytes = b"") -> str:
        """Read until a prompt that follows ``after`` (the echoed command).

        The console also carries asynchronous log lines (sessions opening and
        closing), so the reply is what comes between the echo and the prompt.
        """
        assert self._console is not None
        buf = b""
        while True:
            start = buf.find(after) if after else 0
            if start >= 0 and buf.endswith(b"> ") and len(buf) > start + len(after):
                return buf[start + len(after):].decode("latin-1")
            chunk = self._console.recv(4096)
            if not chunk:
                raise SimError("console closed")
            buf += chunk

    def _drain(self) -> None:
        assert self._console is not None
        self._console.setblocking(False)
        try:
            while self._console.recv(65536):
                pass
        except BlockingIOError:
            pass
        finally:
            self._console.setblocking(True)
            self._console.settimeout(5)

    def _terminate(self) -> None:
        if self._console is not None:
            with contextlib.suppress(OSError):
                self._console.close()
            self._console = None
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        # A startcmd (VM) the simulator left behind is in the session we made.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)

    def stop(self) -> None:
        self._terminate()

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def __enter__(self) -> BmcSim:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------- console
    def console(self, command: str) -> str:
        """Run one emulator command (ipmi_sim_cmd(5)); raise on an error reply."""
        if self._console is None:
            raise SimError("simulator not running")
        with self._console_lock:
            self._drain()
            self._console.sendall(command.encode() + b"\n")
            reply = self._read_prompt(after=command.encode() + b"\n")
        text = reply.replace("\r", "").removesuffix("> ").strip()
        if "**" in text:
            raise SimConsoleError(f"{command!r}: {text}")
        return text

    def set_sensor_raw(self, number: int, raw: int) -> None:
        if not 0 <= raw <= 255:
            raise SimError(f"raw sensor value out of range: {raw}")
        self.console(f"sensor_set_value 0x20 0 {number:#x} {raw} 0")

    def set_bit(self, number: int, bit: int, value: bool) -> None:
        self.console(f"sensor_set_bit 0x20 0 {number:#x} {bit} {int(value)} 0")

    # G292-Z20 model helpers
    def set_gpu_current(self, gpu: int, amps: float) -> None:
        """Set GPU ``gpu``'s 12 V current as the BMC reports it (0.25 A steps)."""
        self.set_sensor_raw(GPU_CURRENT_BASE + gpu, round(amps / AMPS_PER_COUNT))

    def set_gpu_temp(self, gpu: int, celsius: int) -> None:
        self.set_sensor_raw(GPU_TEMP_BASE + gpu, int(celsius))

    def read_sensor_raw(self, number: int) -> int:
        """The raw reading of sensor ``number``, read over IPMI (Get Sensor Reading):
        the console cannot read sensors."""
        proc = subprocess.run(["ipmitool", *self.ipmitool_args(), "raw", "0x04", "0x2d",
                               f"{number:#04x}"], capture_output=True, text=True, timeout=30,
                              check=False)
        if proc.returncode != 0 or not proc.stdout.split():
            raise SimError(f"cannot read sensor {number:#04x}: {proc.stderr.strip()}")
        return int(proc.stdout.split()[0], 16)

    def fan_rpm(self, fan: int) -> int:
        """FAN``fan``'s (1-8) tachometer in RPM (100 RPM per count)."""
        return self.read_sensor_raw(FAN_BASE + fan - 1) * RPM_PER_COUNT

    def set_cpu_temp(self, celsius: int) -> None:
        self.set_sensor_raw(CPU_TEMP, int(celsius))

    def set_psu_failed(self, psu: int, failed: bool, bit: int = PSU_FAILURE_BIT) -> None:
        """Set (or clear) PSU ``psu`` (1 or 2)'s failure (or AC lost) offset."""
        self.set_bit(PSU_BASE + psu - 1, bit, failed)

    # -------------------------------------------------------------- faults
    def set_faults(
        self,
        *,
        scope: str = "all",
        drop_count: int = 0,
        drop_every: int = 0,
        delay_ms: int = 0,
        cc: int | None = None,
        empty: bool = False,
        log_all: bool = False,
    ) -> None:
        """Replace the fault set; takes effect at the next request."""
        if scope not in ("all", "oem", "sensor"):
            raise SimError(f"unknown fault scope {scope!r}")
        lines = [
            f"scope={scope}",
            f"drop_count={drop_count}",
            f"drop_every={drop_every}",
            f"delay_ms={delay_ms}",
            f"empty={int(empty)}",
            f"log_all={int(log_all)}",
        ]
        if cc is not None:
            lines.append(f"cc={cc:#04x}")
        tmp = self.faults_path.with_suffix(".tmp")
        tmp.write_text("\n".join(lines) + "\n")
        os.replace(tmp, self.faults_path)

    def silence(self) -> None:
        """Answer nothing at all (a hung BMC)."""
        self.set_faults(drop_count=1, drop_every=1)

    def clear_faults(self) -> None:
        self.faults_path.unlink(missing_ok=True)

    # ----------------------------------------------------------------- log
    def oem_log(self, since: float = 0.0) -> list[OemRecord]:
        """Records the module logged (OEM commands, and faulted requests)."""
        if not self.log_path.exists():
            return []
        records = []
        for line in self.log_path.read_text().splitlines():
            records.append(parse_log_line(line))
        return [r for r in records if r.time >= since]

    def fan_commands(self, since: float = 0.0) -> list[OemRecord]:
        """OEM commands that the BMC answered successfully."""
        return [r for r in self.oem_log(since) if r.kind == "oem" and r.answered_ok]

    # -------------------------------------------------------------- client
    def freeipmi_args(self) -> list[str]:
        """Arguments for freeipmi tools (the password is in a file, see README)."""
        return [
            "-h", f"{self.host}:{self.port}", "-u", self.options.user,
            "-p", self.options.password, "-l", "ADMIN", "-D", "LAN_2_0", "-I", "3",
            "-W", "opensesspriv",
        ]

    def ipmitool_args(self) -> list[str]:
        return [
            "-I", "lanplus", "-C", "3", "-H", self.host, "-p", str(self.port),
            "-U", self.options.user, "-f", str(self.password_file),
        ]


def parse_log_line(line: str) -> OemRecord:
    head, rest = line.split(" data=", 1)
    stamp, kind, netfn, cmd = head.split()
    data_part, result = rest.rsplit(" result=", 1)
    data = tuple(int(b, 16) for b in data_part.split())
    return OemRecord(
        time=float(stamp), kind=kind, netfn=int(netfn.split("=")[1], 16),
        cmd=int(cmd.split("=")[1], 16), data=data, result=result,
    )


@contextlib.contextmanager
def running_sim(workdir: Path, options: SimOptions | None = None) -> Iterator[BmcSim]:
    sim = BmcSim(workdir, options)
    sim.start()
    try:
        yield sim
    finally:
        sim.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run a simulated G292-Z20 BMC on 127.0.0.1.")
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--startcmd", help="command ipmi_sim runs on chassis power on")
    parser.add_argument("--startnow", action="store_true")
    parser.add_argument("--serial-port", type=int, help="VM serial interface port (qemu)")
    args = parser.parse_args(argv)
    opts = SimOptions(startcmd=args.startcmd, startnow=args.startnow,
                      serial_port=args.serial_port)
    with running_sim(args.workdir, opts) as sim:
        print(f"lan 127.0.0.1:{sim.port} console 127.0.0.1:{sim.console_port} "
              f"user {opts.user} password-file {sim.password_file} pid {sim.pid}", flush=True)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
    return 0


if __name__ == "__main__":
    sys.exit(main())
