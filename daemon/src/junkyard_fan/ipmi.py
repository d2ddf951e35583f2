"""The one IPMI wrapper: every BMC call goes through :class:`Bmc`.

Two access tools are supported, each used so that one control cycle costs one
IPMI session for all sensor readings and one for all fan commands:

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
import logging
import os
import re
import subprocess
import tempfile
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


def _run(argv: list[str], timeout: float, env: dict[str, str] | None = None
         ) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              env=env, check=False, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as err:
        raise BmcNoAnswer(f"{Path(argv[0]).name}: no answer within {timeout:g} s") from err
    except FileNotFoundError as err:
        raise BmcToolError(f"{argv[0]} not found") from err


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
    """freeipmi tools; credentials go through a private config file, not argv."""

    name = "freeipmi"

    def __init__(self, access: BmcAccess, timings: Timings, run: Runner = _run) -> None:
        self.access = access
        self.timeout = timings.bmc_timeout
        self.run = run
        self.cache_dir = access.cache_dir / "freeipmi"
        self.cache_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self.cache_dir, 0o700)
        self.base = self._base_args()
        self.sdr_changed = False  # a record id answered with another sensor's name

    def _base_args(self) -> list[str]:
        a = self.access
        # The tool gets the whole timeout as its session timeout and
        # retransmits inside it: a dropped packet costs a retransmission, not
        # a new session.
        ms = int(self.timeout * 1000)
        rt = min(int(a.retransmit_timeout * 1000), ms)
        args = [f"--session-timeout={ms}", f"--retransmission-timeout={rt}"]
        if a.access == "lan":
            conf = self.cache_dir / "freeipmi.conf"
            fd = os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(f"username {a.username}\npassword {a.password}\n")
            host = f"{a.host}:{a.port}" if a.port != 623 else str(a.host)
            args += [f"--config-file={conf}", "-h", host, "-D", "LAN_2_0",
                     "-I", str(a.cipher_suite), "-l", a.privilege]
        else:
            args += ["-D", "OPENIPMI"]
            if a.device:
                args += [f"--driver-device={a.device}"]
        if a.workarounds:
            args += ["-W", ",".join(a.workarounds)]
        return args

    def _sensor_args(self) -> list[str]:
        return [f"--sdr-cache-directory={self.cache_dir}", "--quiet-cache",
                "--sdr-cache-recreate"]

    def discover(self) -> list[SensorInfo]:
        argv = ["ipmi-sensors", *self.base, *self._sensor_args(), "-vv"]
        proc = self.run(argv, timeout=self.timeout * 5)
        if proc.returncode != 0:
            raise _failure("ipmi-sensors", proc)
        return parse_freeipmi_verbose(proc.stdout)

    def read(self, sensors: Sequence[SensorInfo]) -> dict[str, Reading]:
        ids = ",".join(str(s.record_id) for s in sensors)
        argv = ["ipmi-sensors", *self.base, *self._sensor_args(), "-r", ids,
                "--comma-separated-output", "--no-header-output", "--output-event-bitmask"]
        proc = self.run(argv, timeout=self.timeout + 1)
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

    def raw(self, requests: Sequence[RawRequest]) -> list[tuple[int, bytes] | None]:
        with tempfile.NamedTemporaryFile("w", dir=self.cache_dir, suffix=".raw") as f:
            for r in requests:
                f.write(" ".join(f"{b:02x}" for b in (0, r.netfn, r.cmd, *r.data)) + "\n")
            f.flush()
            proc = self.run(["ipmi-raw", *self.base, f"--file={f.name}"],
                            timeout=self.timeout + 1)
        answers = [ln.split(":", 1)[1].split() for ln in proc.stdout.splitlines()
                   if ln.startswith("rcvd:")]
        if not answers:
            raise _failure("ipmi-raw", proc)
        out: list[tuple[int, bytes] | None] = []
        for i in range(len(requests)):
            if i < len(answers) and len(answers[i]) >= 2:
                b = bytes(int(x, 16) for x in answers[i])
                out.append((b[1], b[2:]))
            else:
                out.append(None)
        return out


class IpmitoolTransport:
    """ipmitool; the password goes through the environment (-E), not argv."""

    name = "ipmitool"

    def __init__(self, access: BmcAccess, timings: Timings, run: Runner = _run) -> None:
        self.access = access
        self.timeout = timings.bmc_timeout
        self.run = run
        self.cache_dir = access.cache_dir / "ipmitool"
        self.cache_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.env = dict(os.environ)
        a = access
        if a.access == "lan":
            self.env["IPMI_PASSWORD"] = str(a.password)
            priv = {"ADMIN": "ADMINISTRATOR"}.get(a.privilege, a.privilege)
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
        dump.unlink(missing_ok=True)
        proc = self.run([*self.base, "sdr", "dump", str(dump)], timeout=self.timeout * 5,
                        env=self.env)
        if proc.returncode != 0 or not dump.exists():
            raise _failure("ipmitool", proc)
        return parse_sdr_dump(dump.read_bytes())

    def _exec(self, requests: Sequence[RawRequest]) -> list[tuple[int, bytes] | None]:
        with tempfile.NamedTemporaryFile("w", dir=self.cache_dir, suffix=".exec") as f:
            for r in requests:
                f.write(" ".join(["raw", *(f"0x{b:02x}" for b in (r.netfn, r.cmd, *r.data))])
                        + "\n")
            f.flush()
            argv = [*self.base, "exec", f.name]
            try:
                proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, timeout=self.timeout * 2 + 1, env=self.env,
                                      check=False, stdin=subprocess.DEVNULL)
            except subprocess.TimeoutExpired as err:
                raise BmcNoAnswer(f"ipmitool: no answer within {self.timeout * 2 + 1:g} s"
                                  ) from err
            except FileNotFoundError as err:
                raise BmcToolError(f"{argv[0]} not found") from err
        return parse_ipmitool_exec(proc.stdout, len(requests), proc.returncode)

    def read(self, sensors: Sequence[SensorInfo]) -> dict[str, Reading]:
        answers = self._exec([RawRequest(SENSOR_NETFN, GET_SENSOR_READING, bytes([s.number]))
                              for s in sensors])
        out: dict[str, Reading] = {}
        for info, ans in zip(sensors, answers, strict=True):
            if ans is not None and ans[0] == 0:
                out[info.name] = decode_sensor_reading(info, ans[1])
        if not out:
            raise BmcBadResponse("ipmitool returned no readings")
        return out

    def raw(self, requests: Sequence[RawRequest]) -> list[tuple[int, bytes] | None]:
        return self._exec(requests)


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
        """Read all sensors; retry the ones without a valid reading, up to ``retries`` tries.

        Raises BmcNoAnswer only if no try got any answer at all.
        """
        got: dict[str, Reading] = {}
        pending = list(sensors)
        answered = False
        silent = 0
        last: BmcError | None = None
        for _attempt in range(self.timings.retries):
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
