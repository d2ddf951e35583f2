"""Power guard: when a PSU fails, cap the GPUs so the node fits one PSU.

The cap is judged by reading it back (``read_command``), never by the exit
status of the command that set it: a tool that exits 1 after capping seven
GPUs of eight, or 0 after capping none, is common. The cap is read back at
start-up too, so a daemon restarted while a cap is in place (a PSU failed,
the daemon was restarted, the PSU came back) still lifts it.

The cap, lift and read commands (rocm-smi, amd-smi, ...) can be slow or
hang; they run in a worker thread so the control loop keeps regulating the
fans. The loop waits up to ``wait`` seconds for a job, then collects its
result in a later cycle; a command is killed after ``command_timeout``.
"""

from __future__ import annotations

import json
import logging
import re
import subprocess
import threading
from collections.abc import Callable, Sequence
from typing import Any

from .config import Config

log = logging.getLogger("junkyard_fan.power")

Runner = Callable[..., subprocess.CompletedProcess[str]]
TOLERANCE_W = 1.0  # a read-back cap within this of ours is ours
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def psu_failed(states: int, offsets: Sequence[int], require_presence: bool) -> bool:
    """Sensor-specific offsets of a Power Supply sensor (type 0x08): 0 presence,
    1 failure, 2 predictive failure, 3 AC lost, 4 AC lost or out of range, ..."""
    if require_presence and not states & 1:
        return True
    return any(states >> off & 1 for off in offsets)


def parse_caps(text: str) -> list[float]:
    """Per-GPU power caps (W) from the read command's output.

    JSON (``rocm-smi --showmaxpower --json``): every value under a key that
    mentions power. Text: the last number of every line that has one
    (``GPU[0] : Max Graphics Package Power (W): 290.0``, ``card0: 198``).
    """
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    out: list[float] = []
    if isinstance(doc, dict | list):
        def walk(node: Any, key: str = "") -> None:
            if isinstance(node, dict):
                for k, v in node.items():
                    walk(v, str(k))
            elif isinstance(node, list):
                for v in node:
                    walk(v, key)
            elif "power" in key.lower():
                m = _NUMBER.search(str(node))
                if m:
                    out.append(float(m.group()))
        walk(doc)
        return out
    for line in text.splitlines():
        numbers = _NUMBER.findall(line)
        if numbers:
            out.append(float(numbers[-1]))
    return out


class PowerGuard:
    def __init__(self, cfg: Config, run: Runner = subprocess.run, wait: float = 0.5) -> None:
        self.cfg = cfg
        self.pg = cfg.power_guard
        self.run = run
        self.wait = wait
        self._job: tuple[threading.Thread, dict[str, Any], str] | None = None
        self.cap_w = cfg.gpu_cap_w()
        # Whether our cap is in place on the GPUs, as last read back; None:
        # not known (not read yet, or the read command failed).
        self.capped: bool | None = None
        self.caps_w: list[float] | None = None  # the last read-back
        self.failed: tuple[int, ...] = ()
        self.healthy_since: float | None = None
        self.errors = 0
        self._checked = False
        self._last_error: str | None = None
        self._lift_not_before = 0.0

    # ------------------------------------------------------------ commands
    def _commands(self, template: Sequence[str], watts: float | None) -> list[list[str]]:
        values = {"watts": str(int(watts)) if watts is not None else ""}
        if any("{gpu}" in a for a in template):
            return [[a.format(gpu=g, **values) for a in template]
                    for g in range(self.cfg.profile.gpu_count)]
        return [[a.format(**values) for a in template]]

    def _run_one(self, argv: list[str], what: str) -> subprocess.CompletedProcess[str] | None:
        """Run one command; None (noted) if it could not run or timed out."""
        try:
            return self.run(argv, capture_output=True, text=True,
                            timeout=self.pg.command_timeout, check=False)
        except (OSError, subprocess.TimeoutExpired) as err:
            self._note(f"{what}: {' '.join(argv)}: {err}")
            return None

    def _execute(self, template: Sequence[str], watts: float | None, what: str) -> bool:
        ok = True
        for argv in self._commands(template, watts):
            proc = self._run_one(argv, what)
            if proc is None:
                return False
            if proc.returncode != 0:
                out = (proc.stderr or proc.stdout).strip().splitlines()
                self._note(f"{what}: {' '.join(argv)} exited {proc.returncode}"
                           f"{': ' + out[-1] if out else ''}")
                ok = False
        return ok

    def read_back(self) -> list[float] | None:
        """The GPUs' power caps now, or None if they cannot be read."""
        outputs = []
        for argv in self._commands(self.pg.read_command, None):
            proc = self._run_one(argv, "read the cap back")
            if proc is None:
                return None
            outputs.append(proc.stdout)
        caps = parse_caps("\n".join(outputs))
        if not caps:
            self._note(f"read the cap back: no power cap in the output of "
                       f"{' '.join(self.pg.read_command)}")
            return None
        return caps

    def _note(self, msg: str) -> None:
        if msg != self._last_error:  # once per change, not per cycle
            log.warning("power guard: %s", msg)
        self._last_error = msg

    def _error(self, msg: str) -> None:
        """A cap or lift that did not take effect: counted once per try."""
        self.errors += 1
        if msg != self._last_error:
            log.error("power cap not applied, will retry: %s", msg)
        self._last_error = msg

    # ---------------------------------------------------------------- jobs
    def _start(self, what: str) -> None:
        result: dict[str, Any] = {}

        def work() -> None:
            if what == "cap":
                result["ran"] = self._execute(self.pg.command, self.cap_w, what)
            elif what == "lift":
                result["ran"] = self._execute(self.pg.reset_command, None, what)
            result["caps"] = self.read_back()

        thread = threading.Thread(target=work, name=f"power-{what}", daemon=True)
        thread.start()
        self._job = (thread, result, what)
        self._collect(self.wait)

    def _collect(self, wait: float = 0.0) -> None:
        if self._job is None:
            return
        thread, result, what = self._job
        thread.join(wait)
        if thread.is_alive():
            return  # still running: the loop goes on regulating the fans
        self._job = None
        caps: list[float] | None = result.get("caps")
        ran = result.get("ran", True)
        self.caps_w = caps
        in_place: bool | None
        if caps is not None:
            ours = [c <= self.cap_w + TOLERANCE_W for c in caps]
            in_place, complete = any(ours), all(ours)
        elif what == "cap":  # not readable: the exit status is all there is
            in_place = complete = ran
        elif what == "lift":
            in_place = complete = False if ran else None
        else:
            in_place = complete = None
        if what == "check":
            self.capped = in_place
            if in_place:
                log.warning("a GPU power cap is in place (read back: %s W): lifted once every "
                            "PSU has been healthy for %.0f s", _show(caps), self.pg.lift_after)
            return
        if what == "cap":
            self.capped = in_place
            if complete:
                self._last_error = None
                log.warning("GPU power capped at %.0f W each (%d GPUs, %.0f W for the rest, "
                            "PSU rating %.0f W)%s", self.cap_w, self.cfg.profile.gpu_count,
                            self.pg.non_gpu_power_w, self.cfg.profile.psu_rating_w,
                            "" if ran else "; the command failed, but the read-back shows "
                                           "the cap in place")
            else:
                self._error(f"cap: not in place after the command (read back: {_show(caps)} W)"
                            if caps is not None else f"cap: command failed ({self._last_error})")
            return
        # lift
        if in_place is False:
            self.capped = False
            self.healthy_since = None
            self._last_error = None
            log.warning("GPU power cap lifted: every PSU healthy for %.0f s%s",
                        self.pg.lift_after, "" if caps is None else
                        f" (read back: {_show(caps)} W)")
        else:
            self.capped = in_place
            self._error(f"lift: cap still in place after the command (read back: "
                        f"{_show(caps)} W)" if caps is not None
                        else f"lift: command failed ({self._last_error})")

    @property
    def busy(self) -> bool:
        return self._job is not None

    @property
    def active(self) -> bool:
        """Our cap is in place (read back), for the metric."""
        return self.capped is True

    def update(self, states: Sequence[int | None], now: float) -> None:
        """``states``: the event bitmask of each PSU sensor, None if unreadable."""
        if not self.pg.enabled:
            return
        self._collect()
        if not self._checked and not self.busy:
            self._checked = True
            self._start("check")  # a cap from before this start?
        failed = tuple(i + 1 for i, s in enumerate(states)
                       if s is not None and psu_failed(s, self.pg.failure_offsets,
                                                       self.pg.require_presence))
        all_known = all(s is not None for s in states)
        if failed:
            self.healthy_since = None
            if failed != self.failed:
                log.warning("PSU %s reports failure or AC loss: the node must fit one %.0f W "
                            "PSU", ", ".join(map(str, failed)), self.cfg.profile.psu_rating_w)
            self.failed = failed
            if self.capped is not True and not self.busy:
                self._start("cap")
            return
        if not all_known:
            return  # unknown is not healthy: keep whatever state we are in
        if self.failed:
            log.warning("all PSUs report healthy again")
            self.failed = ()
        if self.capped is False or (self.capped is None and not self._checked):
            return
        # Capped, or not known (the read-back failed): lift, to be sure.
        if self.healthy_since is None:
            self.healthy_since = now
        if (now - self.healthy_since >= self.pg.lift_after and not self.busy
                and now >= self._lift_not_before):
            # A lift that fails is tried again, but not every cycle.
            self._lift_not_before = now + max(self.pg.lift_after, 10.0)
            self._start("lift")


def _show(caps: list[float] | None) -> str:
    if not caps:
        return "none"
    values = sorted(set(caps))
    return "/".join(f"{c:g}" for c in values)
