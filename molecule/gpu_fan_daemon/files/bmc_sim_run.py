"""The shared simulated BMC (bmc_sim/) inside the test container.

``serve WORKDIR FANMOD``: start ipmi_sim on the container's 127.0.0.1 through
``bmc_sim.simctl`` (SDR compiled here by sdrcomp), write ``WORKDIR/sim.json``
(ports, user, password), run until SIGTERM.  ``fanmod.so`` is compiled on the
test host against the same Debian OpenIPMI: the container has no compiler.

``console WORKDIR COMMAND...``: send emulator commands (ipmi_sim_cmd(5)) to
the running simulator's console, e.g. ``sensor_set_value 0x20 0 0x01 100 0``.
"""

from __future__ import annotations

import json
import signal
import socket
import sys
from pathlib import Path

from bmc_sim import simctl


def serve(workdir: Path, fanmod: Path) -> int:
    simctl.build_fanmod = lambda _cache_dir: fanmod  # prebuilt on the host
    sim = simctl.BmcSim(workdir, cache_dir=workdir / "cache")
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    with sim:
        state = {"port": sim.port, "console_port": sim.console_port,
                 "user": sim.options.user, "password": sim.options.password,
                 "log": str(sim.log_path), "pid": sim.pid}
        tmp = workdir / "sim.json.tmp"
        tmp.write_text(json.dumps(state))
        tmp.replace(workdir / "sim.json")
        print(json.dumps(state), flush=True)
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
    return 0


def _until_prompt(sock: socket.socket, after: bytes) -> str:
    buf = b""
    while not (after in buf and buf.endswith(b"> ")):
        chunk = sock.recv(4096)
        if not chunk:
            raise SystemExit("console closed")
        buf += chunk
    return buf[buf.index(after) + len(after):].decode("latin-1")


def console(workdir: Path, commands: list[str]) -> int:
    state = json.loads((workdir / "sim.json").read_text())
    with socket.create_connection(("127.0.0.1", state["console_port"]), timeout=5) as sock:
        _until_prompt(sock, b"")
        for command in commands:
            sock.sendall(command.encode() + b"\n")
            reply = _until_prompt(sock, command.encode() + b"\n")
            if "**" in reply:
                print(f"{command}: {reply.strip()}", file=sys.stderr)
                return 1
    return 0


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "serve":
        sys.exit(serve(Path(sys.argv[2]), Path(sys.argv[3])))
    if len(sys.argv) >= 4 and sys.argv[1] == "console":
        sys.exit(console(Path(sys.argv[2]), sys.argv[3:]))
    sys.exit(__doc__)
