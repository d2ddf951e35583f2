"""The one IPMI wrapper: every BMC call goes through :class:`Bmc`.

In-band, the default is no tool at all: the ``kernel`` transport
(:mod:`.ipmidev`) talks to ``/dev/ipmi0`` itself, so a cycle starts no process.
Two access tools are supported besides, each used so that one control cycle
costs one IPMI session for all sensor readings and one for all fan commands:

* ``freeipmi`` (default): ``ipmi-sensors -r <record ids>`` with its SDR cache
  (one session, one Get Sensor Reading per sensor, decoding done by freeipmi),
  and ``ipmi-raw --file`` for a batch of raw commands.
* ``ipmitool``: ``ipmitool exec <file>`` with one ``raw 0x04 0x2d <n>`` line per
  sensor (decoded here from the SDR, read once with ``ipmitool sdr dump``), and
  the same for raw fan commands.

Both work over LAN (RMCP+, ``lanplus``) and in-band (``/dev/ipmi0``). Every call
has a timeout and a bounded number of tries; errors are typed so the main loop
can tell "the BMC answered badly" from "the BMC did not answer".
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import re
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .config import BmcAccess, ConfigError, SensorRef, Timings

log = logging.getLogger("junkyard_fan.ipmi")

SENSOR_NETFN = 0x04
GET_SENSOR_READING = 0x2D


# ---------------------------------------------------------------------- errors
class BmcError(Exception):
    """A BMC call failed. ``kind`` is the metrics label."""

    kind = "error"


class BmcNoAnswer(BmcError):
    """The BMC did not answer at all (timeout, no session): it may be unreachable."""

    kind = "timeout"


class BmcCommandError(BmcError):
    """The BMC answered with a non-zero completion code."""

    kind = "completion_code"

    def __init__(self, message: str, cc: int) -> None:
        super().__init__(message)
        self.cc = cc


class BmcBadResponse(BmcError):
    """The BMC answered, but the answer is empty, short or unparsable."""

    kind = "bad_response"


class BmcToolError(BmcError):
    """The access tool itself is missing or unusable (not a BMC problem)."""

    kind = "tool"


class BmcLocalError(BmcError):
    """A local resource the call needs failed (its cache directory under a removed or
    full ``/run``, a pipe): the BMC may be fine, but this call got no answer."""

    kind = "local"


# -------------------------------------------------------------------- sensors
@dataclass(frozen=True)
class SensorInfo:
    """What the SDR says about one sensor."""

    name: str
    number: int
    record_id: int
    discrete: bool
    m: int = 1
    b: int = 0
    b_exp: int = 0
    r_exp: int = 0
    analog_format: int = 0  # 0 unsigned, 1 one's complement, 2 two's complement

    def convert(self, raw: int) -> float:
        if self.analog_format == 1 and raw & 0x80:
            raw = -((~raw) & 0x7F)
        elif self.analog_format == 2 and raw & 0x80:
            raw -= 0x100
        return (self.m * raw + self.b * 10.0**self.b_exp) * 10.0**self.r_exp


@dataclass(frozen=True)
class Reading:
    """One sensor reading as received; ``None`` fields mean "not available"."""

    value: float | None = None
    states: int | None = None  # discrete sensors: event state bitmask

    @property
    def available(self) -> bool:
        return self.value is not None or self.states is not None


@dataclass(frozen=True)
class RawRequest:
    netfn: int
    cmd: int
    data: bytes = b""


Runner = Callable[..., subprocess.CompletedProcess[str]]


def _run(argv: list[str], timeout: float, env: dict[str, str] | None = None,
         input: str | None = None, pass_fds: Sequence[int] = ()
         ) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              env=env, check=False, input=input, pass_fds=tuple(pass_fds),
                              stdin=None if input is not None else subprocess.DEVNULL)
    except subprocess.TimeoutExpired as err:
        raise BmcNoAnswer(f"{Path(argv[0]).name}: no answer within {timeout:g} s") from err
    except FileNotFoundError as err:
        raise BmcToolError(f"{argv[0]} not found") from err
    except OSError as err:  # fork failed, no file descriptors left
        raise BmcLocalError(f"cannot run {argv[0]}: {err}") from err


# Time a call may take: the tool's own timeout for one request (bmc_timeout),
# plus this much per request in the call, but never more than half the
# deadline, so the loop always comes round to the fail-safe in time.
PER_REQUEST_S = 0.25
# Requests of a LAN call counted besides the payload when the time per request
# is estimated. A session costs about seven more (RMCP+ open: 4, privilege,
# close, the SDR cache check); counting fewer over-estimates the time per
# request, which errs towards a longer retransmission timeout (harmless on a
# BMC that answers every request) rather than a shorter one (ruinous on a
# slow BMC).
LAN_OVERHEAD = 1
DISCOVER_S = 60.0  # a cold SDR read is ~220 requests: allow a slow BMC to finish


def discover_limit(timings: Timings) -> float:
    """Wall-clock limit of reading the whole SDR."""
    return max(DISCOVER_S, timings.bmc_timeout * 30)


def call_limit(timings: Timings, requests: int) -> float:
    """Wall-clock limit of one tool call carrying ``requests`` IPMI requests."""
    return min(timings.bmc_timeout + requests * PER_REQUEST_S,
               max(timings.deadline / 2, timings.bmc_timeout + 1.0))


class Retransmit:
    """The LAN retransmission timeout, adapted to the BMC between calls.

    A BMC that drops requests wants a short timeout (each lost request costs
    one timeout); a slow BMC needs one longer than its answer time, or every
    request is sent again while the BMC still works on it, and the copies
    queue up in it (at 150 ms per answer, a 50 ms timeout makes a read ten
    times slower). After each call the time per request tells which case it
    is: below the timeout, answers came without retransmissions and the
    timeout follows twice that time; well above it (1.5 times), requests were
    sent again, so a shorter timeout is tried, and kept only if it made the
    call faster; a call that overran its limit doubles the timeout.
    """

    def __init__(self, fixed: float | None, minimum: float, maximum: float,
                 start: float) -> None:
        self.fixed = fixed
        self.minimum, self.maximum = minimum, max(minimum, maximum)
        self.value = fixed if fixed is not None else min(max(start, minimum), self.maximum)
        # (previous value, its cost per request, the kind of call that measured it)
        self._probe: tuple[float, float, str] | None = None
        self._worse_below: float | None = None  # a shorter timeout was tried: slower
        self._calls = 0

    def _set(self, value: float) -> None:
        self.value = min(max(value, self.minimum), self.maximum)

    def done(self, elapsed: float, requests: int, kind: str = "") -> None:
        """A call of ``kind`` (calls of one kind compare) carried ``requests`` in
        ``elapsed`` seconds."""
        if self.fixed is not None or requests <= 0:
            return
        per = elapsed / requests
        self._calls += 1
        if self._calls % 120 == 0:
            self._worse_below = None  # conditions change: try shorter again now and then
        if self._probe is not None:
            before, cost, probe_kind = self._probe
            if probe_kind != kind:
                return  # judged by the next call of the same kind
            self._probe = None
            if per >= cost:  # the shorter timeout did not help: back, and remember
                self._worse_below = before
                self._set(before)
                return
        if per < self.value:
            self._set(2.0 * per)
            self._worse_below = None
        elif per >= 1.5 * self.value and self.value > self.minimum and (
                self._worse_below is None or self.value > self._worse_below):
            self._probe = (self.value, per, kind)
            self._set(self.value / 2.0)

    def overran(self) -> None:
        if self.fixed is None:
            self._probe = None
            self._worse_below = None
            self._set(self.value * 2.0)


_NO_ANSWER = re.compile(r"timeout|timed out|unable to establish|connection|not responding|"
                        r"session|busy", re.IGNORECASE)


def _failure(tool: str, proc: subprocess.CompletedProcess[str]) -> BmcError:
    text = (proc.stderr or proc.stdout).strip().splitlines()
    msg = f"{tool} exited {proc.returncode}: {text[-1] if text else 'no output'}"
    if any(_NO_ANSWER.search(line) for line in text):
        return BmcNoAnswer(msg)
    return BmcBadResponse(msg)


# ------------------------------------------------------------------ transports
class FreeIpmiTransport:
    """freeipmi tools. Nothing is written to disk but freeipmi's SDR cache: the
    LAN credentials reach the tool through a pipe (``--config-file=/dev/fd/N``),
    never argv, and a batch of raw requests through its standard input, so the
    fan commands (and the fail-safe) do not depend on a writable ``/run``."""

    name = "freeipmi"

    def __init__(self, access: BmcAccess, timings: Timings, run: Runner = _run) -> None:
        self.access = access
        self.timings = timings
        self.timeout = timings.bmc_timeout
        self.run = run
        self.cache_dir = access.cache_dir / "freeipmi"
        fixed = access.retransmit_timeout
        self.retransmit = Retransmit(fixed, minimum=0.05, maximum=timings.bmc_timeout / 3,
                                     start=0.2)
        self.sdr_changed = False  # a record id answered with another sensor's name

    @property
    def lan(self) -> bool:
        return self.access.access == "lan"

    def _base_args(self, conf_fd: int | None) -> list[str]:
        a = self.access
        # The session timeout is the time one request may take with its
        # retransmissions; a dropped packet costs a retransmission, not a
        # new session.
        ms = int(self.timeout * 1000)
        args = [f"--session-timeout={ms}"]
        if self.lan:
            rt = min(int(self.retransmit.value * 1000), ms)
            host = f"{a.host}:{a.port}" if a.port != 623 else str(a.host)
            args += [f"--retransmission-timeout={rt}", f"--config-file=/dev/fd/{conf_fd}",
                     "-h", host, "-D", "LAN_2_0", "-I", str(a.cipher_suite), "-l", a.privilege]
        else:
            args += ["-D", "OPENIPMI"]
            if a.device:
                args += [f"--driver-device={a.device}"]
        if a.workarounds:
            args += ["-W", ",".join(a.workarounds)]
        return args

    @property
    def base(self) -> list[str]:
        """The common arguments (for inspection; calls build their own)."""
        return self._base_args(0 if self.lan else None)

    def _call(self, tool: str, args: list[str], requests: int, limit: float,
              stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run one freeipmi tool; the retransmission timeout learns from its duration."""
        conf_fd = None
        write_fd = None
        try:
            if self.lan:
                a = self.access
                conf_fd, write_fd = os.pipe()
                os.write(write_fd, f"username {a.username}\npassword {a.password}\n".encode())
                os.close(write_fd)
                write_fd = None
            argv = [tool, *self._base_args(conf_fd), *args]
            n = requests + (LAN_OVERHEAD if self.lan else 0)
            t0 = time.monotonic()
            try:
                proc = self.run(argv, timeout=limit, input=stdin,
                                pass_fds=(conf_fd,) if conf_fd is not None else ())
            except BmcNoAnswer:
                self.retransmit.overran()
                raise
            if proc.returncode == 0:
                self.retransmit.done(time.monotonic() - t0, n, tool)
            return proc
        except OSError as err:
            raise BmcLocalError(f"{tool}: {err}") from err
        finally:
            for fd in (conf_fd, write_fd):
                if fd is not None:
                    with contextlib.suppress(OSError):
                        os.close(fd)

    def _sensor_args(self) -> list[str]:
        # The SDR cache is the one file freeipmi needs: a cache directory that
        # vanished (a removed /run) is made again, one that cannot be is a
        # local error, not a silent BMC.
        try:
            self.cache_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            os.chmod(self.cache_dir, 0o700)
        except OSError as err:
            raise BmcLocalError(f"SDR cache directory {self.cache_dir}: {err}") from err
        return [f"--sdr-cache-directory={self.cache_dir}", "--quiet-cache",
                "--sdr-cache-recreate"]

    def discover(self) -> list[SensorInfo]:
        if self.lan:
            # Learn the BMC's answer time on one small call before the SDR
            # read (hundreds of requests when the cache is cold).
            with contextlib.suppress(BmcError):
                self.raw([RawRequest(0x06, 0x01)])
        proc = self._call("ipmi-sensors", [*self._sensor_args(), "-vv"], 250,
                          discover_limit(self.timings))
        if proc.returncode != 0:
            raise _failure("ipmi-sensors", proc)
        return parse_freeipmi_verbose(proc.stdout)

    def read(self, sensors: Sequence[SensorInfo]) -> dict[str, Reading]:
        ids = ",".join(str(s.record_id) for s in sensors)
        args = [*self._sensor_args(), "-r", ids, "--comma-separated-output",
                "--no-header-output", "--output-event-bitmask"]
        proc = self._call("ipmi-sensors", args, len(sensors) + 1,
                          call_limit(self.timings, len(sensors) + 1))
        if proc.returncode != 0 and not proc.stdout.strip():
            raise _failure("ipmi-sensors", proc)
        by_id = {s.record_id: s for s in sensors}
        out: dict[str, Reading] = {}
        for line in proc.stdout.splitlines():
            parts = line.split(",")
            if len(parts) < 6 or not parts[0].isdigit():
                continue
            info = by_id.get(int(parts[0]))
            if info is None:
                continue
            if parts[1] != info.name:
                # The SDR was renumbered (BMC reset, firmware update): never
                # take another sensor's reading for this one.
                self.sdr_changed = True
                continue
            out[info.name] = parse_freeipmi_fields(parts[3], parts[5], info.discrete)
        if not out:
            raise BmcBadResponse("ipmi-sensors returned no readings")
        return out

    def raw_one(self, request: RawRequest) -> tuple[int, bytes] | None:
        """One request, its bytes on the command line: the fail-safe's other way."""
        r = request
        proc = self._call("ipmi-raw", ["00", *(f"{b:02x}" for b in (r.netfn, r.cmd, *r.data))],
                          1, call_limit(self.timings, 1))
        return _raw_answers("ipmi-raw", proc, 1)[0]

    def raw(self, requests: Sequence[RawRequest]) -> list[tuple[int, bytes] | None]:
        batch = "".join(" ".join(f"{b:02x}" for b in (0, r.netfn, r.cmd, *r.data)) + "\n"
                        for r in requests)
        proc = self._call("ipmi-raw", ["--file=/dev/stdin"], len(requests),
                          call_limit(self.timings, len(requests)), stdin=batch)
        return _raw_answers("ipmi-raw", proc, len(requests))


def _raw_answers(tool: str, proc: subprocess.CompletedProcess[str], count: int
                 ) -> list[tuple[int, bytes] | None]:
    answers = [ln.split(":", 1)[1].split() for ln in proc.stdout.splitlines()
               if ln.startswith("rcvd:")]
    if not answers:
        raise _failure(tool, proc)
    out: list[tuple[int, bytes] | None] = []
    for i in range(count):
        if i < len(answers) and len(answers[i]) >= 2:
            b = bytes(int(x, 16) for x in answers[i])
            out.append((b[1], b[2:]))
        else:
            out.append(None)
    return out


class IpmitoolTransport:
    """ipmitool; the password goes through the environment (-E), not argv, and a
    batch of requests through ``exec /dev/stdin``, not a file."""

    name = "ipmitool"

    def __init__(self, access: BmcAccess, timings: Timings, run: Runner = _run) -> None:
        self.access = access
        self.timings = timings
        self.timeout = timings.bmc_timeout
        self.run = run
        self.cache_dir = access.cache_dir / "ipmitool"
        self.env = dict(os.environ)
        a = access
        if a.access == "lan":
            self.env["IPMI_PASSWORD"] = str(a.password)
            priv = {"ADMIN": "ADMINISTRATOR"}.get(a.privilege, a.privilege)
            # ipmitool retransmits after whole seconds only (-N).
            self.base = ["ipmitool", "-I", "lanplus", "-C", str(a.cipher_suite),
                         "-H", str(a.host), "-p", str(a.port), "-U", str(a.username), "-E",
                         "-L", priv, "-N", f"{max(1, round(self.timeout / 2))}", "-R", "2"]
        else:
            self.base = ["ipmitool", "-I", "open"]
            if a.device:
                m = re.search(r"(\d+)$", a.device)
                if m:
                    self.base += ["-d", m.group(1)]
        # stdbuf: keep stdout and stderr in order, so each answer or error line
        # belongs to the request at the same position.
        self.base = ["stdbuf", "-o0", "-e0", *self.base]

    def discover(self) -> list[SensorInfo]:
        dump = self.cache_dir / "sdr.bin"
        try:
            self.cache_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            dump.unlink(missing_ok=True)
        except OSError as err:
            raise BmcLocalError(f"SDR dump directory {self.cache_dir}: {err}") from err
        proc = self.run([*self.base, "sdr", "dump", str(dump)],
                        timeout=discover_limit(self.timings), env=self.env)
        if proc.returncode != 0 or not dump.exists():
            raise _failure("ipmitool", proc)
        return parse_sdr_dump(dump.read_bytes())

    def _exec(self, requests: Sequence[RawRequest]) -> list[tuple[int, bytes] | None]:
        batch = "".join(" ".join(["raw", *(f"0x{b:02x}" for b in (r.netfn, r.cmd, *r.data))])
                        + "\n" for r in requests)
        argv = [*self.base, "exec", "/dev/stdin"]
        limit = call_limit(self.timings, len(requests))
        try:
            proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, timeout=limit, env=self.env, check=False,
                                  input=batch)
        except subprocess.TimeoutExpired as err:
            raise BmcNoAnswer(f"ipmitool: no answer within {limit:g} s") from err
        except FileNotFoundError as err:
            raise BmcToolError(f"{argv[0]} not found") from err
        except OSError as err:
            raise BmcLocalError(f"cannot run ipmitool: {err}") from err
        return parse_ipmitool_exec(proc.stdout, len(requests), proc.returncode)

    def read(self, sensors: Sequence[SensorInfo]) -> dict[str, Reading]:
        return read_by_number(sensors, self._exec, "ipmitool")

    def raw(self, requests: Sequence[RawRequest]) -> list[tuple[int, bytes] | None]:
        return self._exec(requests)

    def raw_one(self, request: RawRequest) -> tuple[int, bytes] | None:
        """One request, its bytes on the command line: the fail-safe's other way."""
        r = request
        argv = [*self.base, "raw", *(f"0x{b:02x}" for b in (r.netfn, r.cmd, *r.data))]
        proc = self.run(argv, timeout=call_limit(self.timings, 1), env=self.env)
        if proc.returncode != 0:
            raise _failure("ipmitool", proc)
        return 0, bytes(int(x, 16) for x in proc.stdout.split())


# -------------------------------------------------------------------- parsers
def parse_freeipmi_fields(reading: str, event: str, discrete: bool) -> Reading:
    if discrete:
        m = re.fullmatch(r"([0-9A-Fa-f]+)h", event.strip())
        return Reading(states=int(m.group(1), 16) if m else None)
    try:
        return Reading(value=float(reading))
    except ValueError:
        return Reading()  # "N/A"


def parse_freeipmi_verbose(text: str) -> list[SensorInfo]:
    out: list[SensorInfo] = []
    for block in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            key, sep, value = line.partition(":")
            if sep:
                fields.setdefault(key.strip(), value.strip())
        if "Sensor Number" not in fields or "ID String" not in fields:
            continue
        code = fields.get("Event/Reading Type Code", "1h").rstrip("h")
        out.append(SensorInfo(
            name=fields["ID String"], number=int(fields["Sensor Number"], 0),
            record_id=int(fields["Record ID"]), discrete=int(code, 16) != 1,
        ))
    if not out:
        raise BmcBadResponse("the BMC's SDR lists no sensors")
    return out


def _signed4(nibble: int) -> int:
    return nibble - 16 if nibble & 0x8 else nibble


def _id_string(rec: bytes, at: int) -> str:
    if len(rec) <= at:
        return ""
    length = rec[at] & 0x1F
    return rec[at + 1:at + 1 + length].decode("latin-1").rstrip("\0").strip()


def parse_sdr_dump(blob: bytes) -> list[SensorInfo]:
    """Parse raw SDR records (as written by ``ipmitool sdr dump``): types 1 and 2."""
    out: list[SensorInfo] = []
    pos = 0
    while pos + 5 <= len(blob):
        rec_id = blob[pos] | blob[pos + 1] << 8
        rtype, length = blob[pos + 3], blob[pos + 4]
        rec = blob[pos:pos + 5 + length]
        pos += 5 + length
        if rtype == 1 and len(rec) >= 48:
            m = rec[24] | (rec[25] & 0xC0) << 2
            b = rec[26] | (rec[27] & 0xC0) << 2
            m = m - 0x400 if m & 0x200 else m
            b = b - 0x400 if b & 0x200 else b
            out.append(SensorInfo(
                name=_id_string(rec, 47), number=rec[7], record_id=rec_id,
                discrete=rec[13] != 1, m=m, b=b, r_exp=_signed4(rec[29] >> 4),
                b_exp=_signed4(rec[29] & 0x0F), analog_format=rec[20] >> 6,
            ))
        elif rtype == 2 and len(rec) >= 32:
            out.append(SensorInfo(name=_id_string(rec, 31), number=rec[7], record_id=rec_id,
                                  discrete=rec[13] != 1))
    if not out:
        raise BmcBadResponse("the BMC's SDR lists no sensors")
    return out


def read_by_number(sensors: Sequence[SensorInfo],
                   exchange: Callable[[Sequence[RawRequest]], list[tuple[int, bytes] | None]],
                   source: str) -> dict[str, Reading]:
    """One Get Sensor Reading per sensor through ``exchange`` (a batch of raw
    requests in, an answer or None per request out), decoded from the SDR."""
    answers = exchange([RawRequest(SENSOR_NETFN, GET_SENSOR_READING, bytes([s.number]))
                        for s in sensors])
    out: dict[str, Reading] = {}
    for info, ans in zip(sensors, answers, strict=True):
        if ans is not None and ans[0] == 0:
            out[info.name] = decode_sensor_reading(info, ans[1])
    if not out:
        raise BmcBadResponse(f"{source} returned no readings")
    return out


def decode_sensor_reading(info: SensorInfo, data: bytes) -> Reading:
    """Decode a Get Sensor Reading answer (without completion code)."""
    if len(data) < 2:
        return Reading()
    flags = data[1]
    if flags & 0x20 or not flags & 0x40:  # reading unavailable / scanning disabled
        return Reading()
    if info.discrete:
        states = data[2] if len(data) > 2 else 0
        states |= (data[3] & 0x7F) << 8 if len(data) > 3 else 0
        return Reading(states=states)
    return Reading(value=info.convert(data[0]))


_IPMITOOL_ERR = re.compile(r"Unable to send RAW command .*rsp=0x([0-9a-fA-F]+)")


def parse_ipmitool_exec(text: str, count: int, returncode: int
                        ) -> list[tuple[int, bytes] | None]:
    """Split ``ipmitool exec`` output (stdout+stderr in order) into one answer per request.

    An answer is a line of hex bytes (possibly empty: a command with no data),
    an error is ``Unable to send RAW command (... rsp=0xNN)``; anything else
    (session errors) means no answer for the rest.
    """
    out: list[tuple[int, bytes] | None] = []
    for line in text.splitlines():
        if len(out) >= count:
            break
        err = _IPMITOOL_ERR.search(line)
        if err:
            out.append((int(err.group(1), 16), b""))
        elif re.fullmatch(r"\s*([0-9a-fA-F]{2}\s*)*", line):
            out.append((0, bytes(int(x, 16) for x in line.split())))
        elif "Unable to send RAW command" in line:
            out.append(None)
    if not out and returncode != 0:
        raise BmcNoAnswer(f"ipmitool exited {returncode}: "
                          f"{text.strip().splitlines()[-1] if text.strip() else 'no output'}")
    return out + [None] * (count - len(out))


# ------------------------------------------------------------------------ Bmc
class Bmc:
    """Retries, timeouts and error accounting around one transport."""

    def __init__(self, access: BmcAccess, timings: Timings, transport=None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.timings = timings
        if transport is None:
            if access.tool == "kernel":
                from .ipmidev import KernelTransport  # it builds on this module

                transport = KernelTransport(access, timings)
            else:
                cls = FreeIpmiTransport if access.tool == "freeipmi" else IpmitoolTransport
                transport = cls(access, timings)
        self.transport = transport
        self.sleep = sleep
        self.errors: collections.Counter[tuple[str, str]] = collections.Counter()
        self.tries: collections.Counter[str] = collections.Counter()
        self.sensors: dict[str | int, SensorInfo] = {}

    def _note(self, op: str, err: BmcError) -> None:
        self.errors[(op, err.kind)] += 1

    def discover(self) -> None:
        last: BmcError | None = None
        for attempt in range(self.timings.retries):
            self.tries["discover"] += 1
            try:
                infos = self.transport.discover()
                break
            except BmcToolError:
                raise
            except BmcError as err:
                self._note("discover", err)
                last = err
                self.sleep(min(0.2 * (attempt + 1), 1.0))
        else:
            assert last is not None
            raise last
        self.sensors = {}
        for info in infos:
            self.sensors.setdefault(info.name, info)
            self.sensors.setdefault(info.number, info)

    def resolve(self, refs: dict[str, SensorRef]) -> dict[str, SensorInfo]:
        """Map config keys to SDR entries; every missing sensor is a ConfigError."""
        problems = []
        out: dict[str, SensorInfo] = {}
        names = sorted(k for k in self.sensors if isinstance(k, str))
        for key, ref in refs.items():
            info = self.sensors.get(ref)
            if info is None:
                what = f"sensor {ref!r}" if isinstance(ref, str) else f"sensor number {ref}"
                problems.append(f"{key}: {what} is not in the BMC's SDR "
                                f"(it has: {', '.join(names)})")
            else:
                out[key] = info
        if problems:
            raise ConfigError(problems)
        return out

    def read(self, sensors: Sequence[SensorInfo], valid: Callable[[SensorInfo, Reading], bool]
             ) -> dict[str, Reading]:
        """Read all sensors; retry the ones without a valid reading, up to ``retries``
        tries and within the time one call may take (:func:`call_limit`).

        Raises BmcNoAnswer if no try got any answer at all, and the last error if
        no sensor got a valid reading.
        """
        got: dict[str, Reading] = {}
        pending = list(sensors)
        answered = False
        silent = 0
        last: BmcError | None = None
        start = time.monotonic()
        budget = call_limit(self.timings, len(sensors) + 1)
        for _attempt in range(self.timings.retries):
            if _attempt and time.monotonic() - start >= budget:
                break  # the cycle's time for reading is spent: decide with what we have
            self.tries["read"] += 1
            t0 = time.monotonic()
            try:
                readings = self.transport.read(pending)
                answered = True
                log.debug("read %d sensors: %d answers in %.3f s", len(pending), len(readings),
                          time.monotonic() - t0)
            except BmcToolError:
                raise
            except BmcError as err:
                log.debug("read failed after %.3f s: %s", time.monotonic() - t0, err)
                self._note("read", err)
                answered = answered or not isinstance(err, BmcNoAnswer)
                last = err
                silent = silent + 1 if isinstance(err, BmcNoAnswer) else 0
                if silent >= 2:
                    break  # two silent tries in a row: don't spend the cycle waiting
                self.sleep(0.05)
                continue
            silent = 0
            for info in pending:
                r = readings.get(info.name)
                if r is not None and valid(info, r):
                    got[info.name] = r
            pending = [s for s in pending if s.name not in got]
            if not pending:
                break
            self.errors[("read", "invalid_reading")] += len(pending)
        if not answered:
            assert last is not None
            raise last
        if not got and last is not None:
            raise last
        return got

    def raw(self, requests: Sequence[RawRequest], op: str = "write") -> list[bool]:
        """Send raw requests; retry the failed ones. Returns success per request."""
        ok = [False] * len(requests)
        answered = False
        silent = 0
        last: BmcError | None = None
        for _attempt in range(self.timings.retries):
            todo = [i for i, done in enumerate(ok) if not done]
            if not todo:
                break
            self.tries[op] += 1
            t0 = time.monotonic()
            try:
                answers = self.transport.raw([requests[i] for i in todo])
                answered = True
                log.debug("%s: %d raw requests in %.3f s", op, len(todo), time.monotonic() - t0)
            except BmcToolError:
                raise
            except BmcError as err:
                log.debug("%s failed after %.3f s: %s", op, time.monotonic() - t0, err)
                self._note(op, err)
                answered = answered or not isinstance(err, BmcNoAnswer)
                last = err
                silent = silent + 1 if isinstance(err, BmcNoAnswer) else 0
                if silent >= 2:
                    break
                self.sleep(0.05)
                continue
            silent = 0
            for i, ans in zip(todo, answers, strict=True):
                if ans is None:
                    self.errors[(op, "no_answer")] += 1
                elif ans[0] != 0:
                    self.errors[(op, "completion_code")] += 1
                else:
                    ok[i] = True
        if not answered:
            assert last is not None
            raise last
        return ok
