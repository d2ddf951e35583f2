"""Power guard: when a PSU fails, cap the GPUs so the node fits one PSU.

The cap and lift commands (rocm-smi, amd-smi, ...) can be slow or hang; they
run in a worker thread so the control loop keeps regulating the fans. The loop
waits up to ``wait`` seconds for a command, then collects its result in a
later cycle; a command is killed after ``command_timeout``.
"""

from __future__ import annotations

import logging
import subprocess
import threading
from collections.abc import Callable, Sequence

from .config import Config

log = logging.getLogger("junkyard_fan.power")

Runner = Callable[..., subprocess.CompletedProcess[str]]


def psu_failed(states: int, offsets: Sequence[int], require_presence: bool) -> bool:
    """Sensor-specific offsets of a Power Supply sensor (type 0x08): 0 presence,
    1 failure, 2 predictive failure, 3 AC lost, 4 AC lost or out of range, ..."""
    if require_presence and not states & 1:
        return True
    return any(states >> off & 1 for off in offsets)


class PowerGuard:
    def __init__(self, cfg: Config, run: Runner = subprocess.run, wait: float = 0.5) -> None:
        self.cfg = cfg
        self.pg = cfg.power_guard
        self.run = run
        self.wait = wait
        self._job: tuple[threading.Thread, dict[str, bool], str] | None = None
        self.cap_w = cfg.gpu_cap_w()
        self.capped = False
        self.failed: tuple[int, ...] = ()
        self.healthy_since: float | None = None
        self.errors = 0
        self._last_error: str | None = None

    def _commands(self, template: Sequence[str], watts: float | None) -> list[list[str]]:
        values = {"watts": str(int(watts)) if watts is not None else ""}
        if any("{gpu}" in a for a in template):
            return [[a.format(gpu=g, **values) for a in template]
                    for g in range(self.cfg.profile.gpu_count)]
        return [[a.format(**values) for a in template]]

    def _execute(self, template: Sequence[str], watts: float | None, what: str) -> bool:
        for argv in self._commands(template, watts):
            try:
                proc = self.run(argv, capture_output=True, text=True,
                                timeout=self.pg.command_timeout, check=False)
            except (OSError, subprocess.TimeoutExpired) as err:
                self._error(f"{what}: {' '.join(argv)}: {err}")
                return False
            if proc.returncode != 0:
                out = (proc.stderr or proc.stdout).strip().splitlines()
                self._error(f"{what}: {' '.join(argv)} exited {proc.returncode}"
                            f"{': ' + out[-1] if out else ''}")
                return False
        self._last_error = None
        return True

    def _error(self, msg: str) -> None:
        self.errors += 1
        if msg != self._last_error:  # once per change, not per cycle
            log.error("power cap command failed, will retry: %s", msg)
        self._last_error = msg

    def _start(self, template: Sequence[str], watts: float | None, what: str) -> None:
        result: dict[str, bool] = {}

        def work() -> None:
            result["ok"] = self._execute(template, watts, what)

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
        if not result.get("ok"):
            return  # logged by _execute; retried next cycle
        if what == "cap":
            self.capped = True
            log.warning("GPU power capped at %.0f W each (%d GPUs, %.0f W for the rest, "
                        "PSU rating %.0f W)", self.cap_w, self.cfg.profile.gpu_count,
                        self.pg.non_gpu_power_w, self.cfg.profile.psu_rating_w)
        else:
            self.capped = False
            self.healthy_since = None
            log.warning("GPU power cap lifted: both PSUs healthy for %.0f s", self.pg.lift_after)

    @property
    def busy(self) -> bool:
        return self._job is not None

    def update(self, states: Sequence[int | None], now: float) -> None:
        """``states``: the event bitmask of each PSU sensor, None if unreadable."""
        if not self.pg.enabled:
            return
        self._collect()
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
            if not self.capped and not self.busy:
                self._start(self.pg.command, self.cap_w, "cap")
            return
        if not all_known:
            return  # unknown is not healthy: keep whatever state we are in
        if self.failed:
            log.warning("all PSUs report healthy again")
            self.failed = ()
        if not self.capped:
            return
        if self.healthy_since is None:
            self.healthy_since = now
        if now - self.healthy_since >= self.pg.lift_after and not self.busy:
            self._start(self.pg.reset_command, None, "lift")
