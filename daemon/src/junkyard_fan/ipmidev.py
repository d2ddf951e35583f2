"""In-band IPMI through the kernel's device interface (``/dev/ipmi0``), no tool.

The ``kernel`` transport sends each request with the ``IPMICTL_SEND_COMMAND``
ioctl and collects the answers with ``IPMICTL_RECEIVE_MSG_TRUNC``, on one open
file kept between cycles.  A cycle costs no process: on a node that is what
the fan daemon spends most of its CPU on with a tool (a run of ``ipmi-sensors``
every second), and under software emulation a process start is far dearer
still.  The kernel's message handler queues the requests, talks to the BMC one
at a time (KCS) and retries on its own; this module only bounds the wait.

The SDR is read once at start-up with Reserve SDR Repository and Get SDR in
small pieces (some BMCs refuse whole records), and decoded as the ipmitool
transport decodes ``ipmitool sdr dump``.  Readings are Get Sensor Reading per
sensor, as the ipmitool transport reads them (:func:`read_by_number`).
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import itertools
import os
import select
import struct
import time
from collections.abc import Sequence

from .config import BmcAccess, Timings
from .ipmi import (
    BmcBadResponse,
    BmcCommandError,
    BmcLocalError,
    BmcNoAnswer,
    BmcToolError,
    RawRequest,
    Reading,
    SensorInfo,
    call_limit,
    discover_limit,
    parse_sdr_dump,
    read_by_number,
)

DEFAULT_DEVICE = "/dev/ipmi0"

# <linux/ipmi.h>
IPMI_SYSTEM_INTERFACE_ADDR_TYPE = 0x0C
IPMI_BMC_CHANNEL = 0x0F
IPMI_RESPONSE_RECV_TYPE = 1
IPMI_MAX_MSG_LENGTH = 272


class IpmiMsg(ctypes.Structure):
    _fields_ = [("netfn", ctypes.c_ubyte), ("cmd", ctypes.c_ubyte),
                ("data_len", ctypes.c_ushort), ("data", ctypes.c_void_p)]


class IpmiReq(ctypes.Structure):
    _fields_ = [("addr", ctypes.c_void_p), ("addr_len", ctypes.c_uint),
                ("msgid", ctypes.c_long), ("msg", IpmiMsg)]


class IpmiRecv(ctypes.Structure):
    _fields_ = [("recv_type", ctypes.c_int), ("addr", ctypes.c_void_p),
                ("addr_len", ctypes.c_uint), ("msgid", ctypes.c_long), ("msg", IpmiMsg)]


class IpmiSystemInterfaceAddr(ctypes.Structure):
    _fields_ = [("addr_type", ctypes.c_int), ("channel", ctypes.c_short),
                ("lun", ctypes.c_ubyte)]


def _ioc(direction: int, nr: int, size: int) -> int:
    """Linux's _IOC for the IPMI magic 'i' (asm-generic layout: x86, arm64)."""
    return (direction << 30) | (size << 16) | (ord("i") << 8) | nr


_IOC_WRITE, _IOC_READ = 1, 2
IPMICTL_RECEIVE_MSG_TRUNC = _ioc(_IOC_READ | _IOC_WRITE, 11, ctypes.sizeof(IpmiRecv))
IPMICTL_SEND_COMMAND = _ioc(_IOC_READ, 13, ctypes.sizeof(IpmiReq))

STORAGE_NETFN = 0x0A
RESERVE_SDR_REPOSITORY = 0x22
GET_SDR = 0x23
SDR_CHUNK = 16  # bytes per Get SDR: what every BMC serves
CC_RESERVATION_CANCELLED = 0xC5
SDR_RECORDS_MAX = 1024  # a BMC that never ends its list is a bad answer, not a hang


class KernelTransport:
    """The kernel's IPMI device interface, used directly (``tool: kernel``)."""

    name = "kernel"

    def __init__(self, access: BmcAccess, timings: Timings) -> None:
        self.timings = timings
        self.device = access.device or DEFAULT_DEVICE
        self.fd: int | None = None
        self.msgids = itertools.count(1)
        self.sdr_changed = False  # sensors are read by number: nothing to compare

    # ----------------------------------------------------------- the device
    def _open(self) -> int:
        try:
            return os.open(self.device, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError as err:
            raise BmcToolError(f"{self.device} does not exist (are ipmi_si and ipmi_devintf "
                               "loaded?)") from err
        except OSError as err:
            raise BmcLocalError(f"cannot open {self.device}: {err.strerror}") from err

    def _device(self) -> int:
        if self.fd is None:
            self.fd = self._open()
        return self.fd

    def close(self) -> None:
        if self.fd is not None:
            fd, self.fd = self.fd, None
            os.close(fd)

    def _exchange(self, fd: int, requests: Sequence[RawRequest], limit: float
                  ) -> list[tuple[int, bytes] | None]:
        """Send every request, then collect the answers until all came or ``limit``
        seconds passed.  An answer is (completion code, data); None: none came."""
        addr = IpmiSystemInterfaceAddr(IPMI_SYSTEM_INTERFACE_ADDR_TYPE, IPMI_BMC_CHANNEL, 0)
        pending: dict[int, int] = {}
        keep = []  # the request buffers live until the ioctl has copied them
        for i, r in enumerate(requests):
            data = ctypes.create_string_buffer(bytes(r.data), max(1, len(r.data)))
            keep.append(data)
            msgid = next(self.msgids)
            req = IpmiReq(ctypes.addressof(addr), ctypes.sizeof(addr), msgid,
                          IpmiMsg(r.netfn, r.cmd, len(r.data), ctypes.addressof(data)))
            try:
                fcntl.ioctl(fd, IPMICTL_SEND_COMMAND, req)
            except OSError as err:
                raise BmcLocalError(f"{self.device}: send: {err.strerror}") from err
            pending[msgid] = i
        answers: list[tuple[int, bytes] | None] = [None] * len(requests)
        buf = ctypes.create_string_buffer(IPMI_MAX_MSG_LENGTH)
        raddr = IpmiSystemInterfaceAddr()
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        deadline = time.monotonic() + limit
        while pending:
            left = deadline - time.monotonic()
            if left <= 0 or not poller.poll(max(1, int(left * 1000))):
                break
            recv = IpmiRecv(0, ctypes.addressof(raddr), ctypes.sizeof(raddr), 0,
                            IpmiMsg(0, 0, IPMI_MAX_MSG_LENGTH, ctypes.addressof(buf)))
            try:
                fcntl.ioctl(fd, IPMICTL_RECEIVE_MSG_TRUNC, recv)
            except OSError as err:
                if err.errno == errno.EMSGSIZE:  # an answer longer than any we ask for
                    pending.pop(recv.msgid, None)
                    continue
                if err.errno == errno.EAGAIN:  # nothing queued after all
                    continue
                raise BmcLocalError(f"{self.device}: receive: {err.strerror}") from err
            if recv.recv_type != IPMI_RESPONSE_RECV_TYPE or recv.msgid not in pending:
                continue  # an event, or the late answer of an earlier call
            raw = ctypes.string_at(buf, min(recv.msg.data_len, IPMI_MAX_MSG_LENGTH))
            answers[pending.pop(recv.msgid)] = (raw[0], raw[1:]) if raw else None
        return answers

    def _call(self, requests: Sequence[RawRequest], limit: float, fresh: bool = False
              ) -> list[tuple[int, bytes] | None]:
        """One batch on the kept device (or, ``fresh``, on a device opened for it).
        No answer at all: BmcNoAnswer."""
        fd = self._open() if fresh else self._device()
        try:
            answers = self._exchange(fd, requests, limit)
        except BmcLocalError:
            if not fresh:
                self.close()  # open it again next time
            raise
        finally:
            if fresh:
                os.close(fd)
        if all(a is None for a in answers):
            raise BmcNoAnswer(f"{self.device}: no answer within {limit:g} s")
        return answers

    def _one(self, request: RawRequest, fresh: bool = False) -> tuple[int, bytes]:
        """One request; its answer (no answer: BmcNoAnswer from :meth:`_call`)."""
        ans = self._call([request], call_limit(self.timings, 1), fresh)[0]
        assert ans is not None  # the only request, and _call raises when none answered
        return ans

    # ------------------------------------------------------------- the SDR
    def _sdr_request(self, reservation: int, record: int, offset: int, count: int
                     ) -> tuple[int, bytes]:
        return self._one(RawRequest(STORAGE_NETFN, GET_SDR,
                                    struct.pack("<HHBB", reservation, record, offset, count)))

    def _reserve(self) -> int:
        cc, data = self._one(RawRequest(STORAGE_NETFN, RESERVE_SDR_REPOSITORY))
        if cc != 0 or len(data) < 2:
            raise BmcCommandError(f"Reserve SDR Repository: completion code {cc:#04x}", cc)
        return int.from_bytes(data[:2], "little")

    def read_sdr(self) -> bytes:
        """Every SDR record, header included, one after another (as ``sdr dump``)."""
        started = time.monotonic()
        limit = discover_limit(self.timings)
        reservation = self._reserve()
        blob = bytearray()
        record = 0
        for _record in range(SDR_RECORDS_MAX):
            if time.monotonic() - started > limit:
                raise BmcNoAnswer(f"{self.device}: the SDR read takes over {limit:g} s")
            for _attempt in range(3):
                try:
                    nxt, rec = self._read_record(reservation, record)
                    break
                except BmcCommandError as err:
                    if err.cc != CC_RESERVATION_CANCELLED:
                        raise
                    reservation = self._reserve()  # the SDR changed under us: again
            else:
                raise BmcBadResponse("the SDR reservation is cancelled again and again")
            blob += rec
            if nxt == 0xFFFF:
                return bytes(blob)
            record = nxt
        raise BmcBadResponse(f"the SDR lists more than {SDR_RECORDS_MAX} records")

    def _read_record(self, reservation: int, record: int) -> tuple[int, bytes]:
        cc, data = self._sdr_request(reservation, record, 0, 5)
        if cc != 0:
            raise BmcCommandError(f"Get SDR {record:#06x}: completion code {cc:#04x}", cc)
        if len(data) < 7:
            raise BmcBadResponse(f"Get SDR {record:#06x}: {len(data)} bytes, want 7")
        nxt = int.from_bytes(data[:2], "little")
        header = data[2:7]
        body = bytearray()
        while len(body) < header[4]:
            want = min(SDR_CHUNK, header[4] - len(body))
            cc, data = self._sdr_request(reservation, record, 5 + len(body), want)
            if cc != 0:
                raise BmcCommandError(f"Get SDR {record:#06x}+{5 + len(body)}: "
                                      f"completion code {cc:#04x}", cc)
            if len(data) <= 2:
                raise BmcBadResponse(f"Get SDR {record:#06x}: no record bytes")
            body += data[2:2 + want]
        return nxt, bytes(header) + bytes(body)

    # ------------------------------------------------------- the transport
    def discover(self) -> list[SensorInfo]:
        return parse_sdr_dump(self.read_sdr())

    def read(self, sensors: Sequence[SensorInfo]) -> dict[str, Reading]:
        return read_by_number(sensors, self.raw, self.device)

    def raw(self, requests: Sequence[RawRequest]) -> list[tuple[int, bytes] | None]:
        return self._call(requests, call_limit(self.timings, len(requests)))

    def raw_one(self, request: RawRequest) -> tuple[int, bytes] | None:
        """The fail-safe's other way: one request on a device opened for it alone."""
        return self._one(request, fresh=True)
