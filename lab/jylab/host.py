"""Host-side plumbing: tools, ports, processes, the network namespace and its taps."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import shutil
import signal
import socket
import struct
import subprocess
import time
from pathlib import Path

from .config import LabError

# tool -> Debian package that provides it
TOOLS = {
    "qemu-system-x86_64": "qemu-system-x86",
    "qemu-img": "qemu-utils",
    "debootstrap": "debootstrap",
    "mkfs.ext4": "e2fsprogs",
    "ip": "iproute2",
    "ipmi_sim": "openipmi",
    "sdrcomp": "openipmi",
    "ipmitool": "ipmitool",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
    "chroot": "coreutils",
    "radvd": "radvd",
}
FILES = {
    "/usr/lib/ipxe/qemu/efi-virtio.rom": "ipxe-qemu",
    "/usr/share/keyrings/debian-archive-keyring.gpg": "debian-archive-keyring",
}


def check_tools(tools: dict[str, str] | None = None, files: dict[str, str] | None = None) -> None:
    missing = []
    for tool, pkg in (tools or TOOLS).items():
        if shutil.which(tool) is None and not Path("/usr/sbin", tool).exists():
            missing.append(f"  {tool}  (Debian package {pkg})")
    for path, pkg in (files or FILES).items():
        if not Path(path).exists():
            missing.append(f"  {path}  (Debian package {pkg})")
    if missing:
        pkgs = sorted({line.rsplit("package ", 1)[1].rstrip(")") for line in missing})
        raise LabError(
            "missing host tools:\n" + "\n".join(missing)
            + f"\ninstall them with: apt-get install {' '.join(pkgs)}"
        )
    if os.geteuid() != 0:
        raise LabError("the lab needs root (network namespace, bridges, taps, chroot builds)")


def kvm_note() -> str:
    return (
        "accelerator: TCG (software emulation); KVM is not used"
        + (" although /dev/kvm exists: this host's KVM cannot run a Debian kernel"
           if Path("/dev/kvm").exists() else " (no /dev/kvm)")
    )


def port_in_use(port: int, kind: int = socket.SOCK_STREAM) -> bool:
    with socket.socket(socket.AF_INET, kind) as s:
        if kind == socket.SOCK_STREAM:  # as servers do: TIME_WAIT leftovers are no conflict
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            if kind == socket.SOCK_STREAM:
                s.listen()
        except OSError:
            return True
    return False


def check_ports(ports: dict[str, tuple[int, int]]) -> None:
    """ports: purpose -> (port, SOCK_STREAM or SOCK_DGRAM)."""
    busy = []
    for what, (port, kind) in ports.items():
        if port_in_use(port, kind):
            proto = "tcp" if kind == socket.SOCK_STREAM else "udp"
            busy.append(f"  127.0.0.1:{port}/{proto} ({what})")
    if busy:
        raise LabError(
            "ports the lab needs are already in use:\n" + "\n".join(busy)
            + "\n(another lab? `lab status`; or choose others with JUNKYARD_LAB_SSH_PORT, "
            "JUNKYARD_LAB_PROXY_PORT)"
        )


def run(cmd: list[str], check: bool = True, **kw) -> subprocess.CompletedProcess:
    res = subprocess.run(cmd, capture_output=True, text=True, check=False, **kw)
    if check and res.returncode != 0:
        raise LabError(f"{' '.join(cmd)} failed ({res.returncode}): {res.stderr.strip()}")
    return res


def spawn(cmd: list[str], log: Path, env: dict | None = None) -> int:
    """Start a detached background process (own session), output appended to log."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True, env=env, close_fds=True,
        )
    return proc.pid


def alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is not alive
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def stop_group(proc: subprocess.Popen, grace: float = 30.0) -> None:
    """Stop a child started with start_new_session=True together with its whole process
    group (a build's debootstrap, dkms or ansible workers), if it still runs."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=grace)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def stop_pid(pid: int, marker: str, grace: float = 5.0) -> bool:
    """SIGTERM then SIGKILL one process, only if its command line contains marker."""
    if not alive(pid) or marker not in cmdline(pid):
        return False
    try:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 5
            while alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
    except ProcessLookupError:
        pass
    with contextlib.suppress(ChildProcessError):  # reap it if it is our child
        os.waitpid(pid, os.WNOHANG)
    return True


def wait_port(port: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            s.settimeout(1)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return True
        time.sleep(0.2)
    return False


class Lock:
    """An exclusive lock on a file, so two lab commands never change the lab at once."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)

    def acquire(self, what: str) -> None:
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise LabError(f"another lab command is running in this checkout ({what} waits for "
                           "nothing: try again when it has finished)") from None

    def release(self) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


# --- network namespace -----------------------------------------------------

def netns_exists(name: str) -> bool:
    return Path("/run/netns", name).exists()


def netns_stale(name: str, root: str = "/run/netns") -> bool:
    """A name under /run/netns that pins no namespace: `ip netns add` bind-mounts the
    namespace onto that file, so a file that is not a mount point is what is left of a
    namespace when /run is not a tmpfs (as on this machine) and the host went down with
    a lab running: no process or interface can be in it."""
    path = Path(root, name)
    return path.is_file() and not os.path.ismount(path)


def ns(name: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return run(["ip", "-n", name, *args], check=check)


def create_netns(name: str, bridges: list[str], taps: dict[str, str]) -> None:
    """Namespace with bridges and persistent taps (tap -> bridge); nothing routes out."""
    run(["ip", "netns", "add", name])
    ns(name, "link", "set", "lo", "up")
    for br in bridges:
        ns(name, "link", "add", br, "type", "bridge", "stp_state", "0", "forward_delay", "0")
        ns(name, "link", "set", br, "up")
    for tap, br in taps.items():
        ns(name, "tuntap", "add", "dev", tap, "mode", "tap")
        ns(name, "link", "set", tap, "master", br)
        ns(name, "link", "set", tap, "up")


def is_lab_netns(name: str) -> bool:
    """Does namespace name look like one a lab made (bridges mgmt and data)?"""
    res = run(["ip", "-n", name, "-o", "link", "show", "type", "bridge"], check=False)
    names = {line.split(":")[1].strip().split("@")[0] for line in res.stdout.splitlines()
             if line.count(":") >= 2}
    return {"mgmt", "data"} <= names


def delete_netns(name: str) -> None:
    if netns_exists(name):
        run(["ip", "netns", "delete", name], check=False)


_libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNET = 0x40000000
TUNSETIFF = 0x400454CA
IFF_TAP = 0x0002
IFF_NO_PI = 0x1000


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def open_taps(netns: str, taps: list[str]) -> list[int]:
    """Open tap devices that live in netns; the fds stay usable from this namespace.

    qemu then runs in the host's network namespace (so its loopback forwards,
    its guestfwd and the BMC sockets are the host's 127.0.0.1) while every
    frame of its NICs goes to the lab's bridges inside netns.
    """
    own = os.open("/proc/self/ns/net", os.O_RDONLY)
    target = os.open(f"/run/netns/{netns}", os.O_RDONLY)
    fds = []
    try:
        _setns(target)
        try:
            for tap in taps:
                fd = os.open("/dev/net/tun", os.O_RDWR)
                ifr = struct.pack("16sH22x", tap.encode(), IFF_TAP | IFF_NO_PI)
                try:
                    fcntl.ioctl(fd, TUNSETIFF, ifr)
                except OSError as exc:
                    os.close(fd)
                    if exc.errno == errno.EBUSY:
                        raise LabError(f"tap {tap} in {netns} is already used by a VM") from None
                    raise
                os.set_inheritable(fd, True)
                fds.append(fd)
        finally:
            _setns(own)
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    finally:
        os.close(own)
        os.close(target)
    return fds
