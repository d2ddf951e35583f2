"""qemu command lines for the lab's VMs, and the launcher that gives them their taps.

Every VM runs in the host's network namespace with its NICs' tap devices
opened inside the lab's namespace (see host.open_taps): frames only ever
reach the lab's bridges, while qemu's loopback endpoints (SSH forward,
package proxy, BMC sockets) are the host's 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from . import host
from .config import LAB_DIR, Lab, Node
from .seed import SEED_DISK_SERIAL

QEMU = "qemu-system-x86_64"
HEAD_USER_MAC = "52:54:00:77:ff:01"
GUESTFWD_ADDR = "10.0.2.100"


def tap_name(vm: str, net: str) -> str:
    return f"{vm}-{net}"[:15]


def vm_dir(lab: Lab) -> Path:
    return lab.state / "vms"


def spec_path(lab: Lab, name: str) -> Path:
    return vm_dir(lab) / f"{name}.json"


def pid_path(lab: Lab, name: str) -> Path:
    return vm_dir(lab) / f"{name}.pid"


def console_log(lab: Lab, name: str) -> Path:
    return lab.state / "console" / f"{name}.log"


def _common(lab: Lab, name: str, mem: int, cpus: int | tuple[int, int, int]) -> list[str]:
    log = console_log(lab, name)
    if isinstance(cpus, tuple):
        sockets, cores, threads = cpus
        smp = f"{sockets * cores * threads},sockets={sockets},cores={cores},threads={threads}"
    else:
        smp = str(cpus)
    return [
        QEMU, "-name", name, "-accel", "tcg", "-cpu", lab.cpu_model, "-smp", smp,
        "-m", str(mem), "-machine", "pc,graphics=off", "-nodefaults", "-no-user-config",
        "-display", "none", "-chardev", f"file,id=con,path={log},append=on",
        "-serial", "chardev:con", "-device", "virtio-rng-pci",
        "-pidfile", str(pid_path(lab, name)),
    ]


def _nic(index: int, net: str, mac: str, boot: bool) -> list[str]:
    dev = f"virtio-net-pci,netdev={net},mac={mac}"
    dev += ",bootindex=1" if boot else ",romfile="
    return ["-netdev", f"tap,id={net},fd=@TAP{index}@", "-device", dev]


def head_spec(lab: Lab, kernel: Path, initrd: Path, overlay: Path, disks: list[Path],
              seed: Path | None = None) -> dict:
    argv = _common(lab, "head", lab.head_mem_mib, lab.head_cpus)
    argv += [
        "-kernel", str(kernel), "-initrd", str(initrd),
        "-append", "root=LABEL=headroot rw console=ttyS0,115200 mitigations=off "
                   "systemd.show_status=1",
        "-drive", f"file={overlay},if=none,id=root,format=qcow2,cache=unsafe,discard=unmap",
        "-device", "virtio-blk-pci,drive=root,serial=jyroot",
    ]
    for i, disk in enumerate(disks, 1):
        argv += ["-drive", f"file={disk},if=none,id=d{i},format=raw,cache=unsafe",
                 "-device", f"virtio-blk-pci,drive=d{i},serial=jydisk{i:02d}"]
    if seed is not None:
        # the node image seed (seed.py): a tar read straight from the disk
        argv += ["-drive", f"file={seed},if=none,id=seed,format=raw,readonly=on",
                 "-device", f"virtio-blk-pci,drive=seed,serial={SEED_DISK_SERIAL}"]
    taps = []
    for i, nic in enumerate(lab.head_nics):
        argv += _nic(i, nic.net, nic.mac, boot=False)
        taps.append(tap_name("head", nic.net))
    relay = f"{sys.executable} -I -S {LAB_DIR / 'jylab' / 'relay.py'} 127.0.0.1 {lab.proxy_port}"
    argv += [
        "-netdev", f"user,id=lab,restrict=on,net=10.0.2.0/24,"
                   f"hostfwd=tcp:127.0.0.1:{lab.ssh_port}-:22,"
                   f"guestfwd=tcp:{GUESTFWD_ADDR}:{lab.proxy_port}-cmd:{relay}",
        "-device", f"virtio-net-pci,netdev=lab,mac={HEAD_USER_MAC},romfile=",
        "-fw_cfg", f"name=opt/junkyard/authorized_keys,file={lab.ssh_key}.pub",
    ]
    return {"name": "head", "argv": argv, "taps": taps}


def node_spec(lab: Lab, node: Node) -> dict:
    # the CPUs its hardware profile states (slurmd -C must find them)
    argv = _common(lab, node.name, lab.node_mem_mib, node.cpu_topology)
    # network boot only, and retry it every 10 s until a boot server answers
    argv += ["-boot", "order=n,strict=on,reboot-timeout=10000"]
    taps = []
    for i, nic in enumerate(node.nics):
        argv += _nic(i, nic.net, nic.mac, boot=nic.net == "mgmt")
        taps.append(tap_name(node.name, nic.net))
    # Its profile's GPUs: virtio GPUs, each a DRM render node (/dev/dri/renderD128
    # on, in PCI order like the real GPUs'), which Slurm's gres.conf names and
    # its device cgroups confine; no amdgpu, no ROCm (rocm_verify_gpus: false).
    for i in range(node.gpus):
        argv += ["-device", f"virtio-gpu-pci,id=gpu{i}"]
    argv += [
        "-chardev", f"socket,id=ipmi0,host=127.0.0.1,port={node.kcs_port},reconnect=2",
        "-device", "ipmi-bmc-extern,id=bmc0,chardev=ipmi0",
        "-device", "isa-ipmi-kcs,bmc=bmc0",
    ]
    return {"name": node.name, "argv": argv, "taps": taps}


def probe_spec(lab: Lab, node: Node, kernel: Path, initrd: Path, overlay: Path,
               ssh_port: int) -> dict:
    """node's own qemu (same NICs, same in-band KCS link to its BMC), booted from a copy of
    the head's disk instead of the network: to check /dev/ipmi0 before nodes have an OS."""
    spec = node_spec(lab, node)
    argv = spec["argv"]
    i = argv.index("-boot")
    del argv[i:i + 2]
    argv[argv.index("-pidfile") + 1] = str(pid_path(lab, f"{node.name}-probe"))
    argv[argv.index("-name") + 1] = f"{node.name}-probe"
    log = console_log(lab, f"{node.name}-probe")
    argv[argv.index("-chardev") + 1] = f"file,id=con,path={log},append=on"
    argv += [
        "-kernel", str(kernel), "-initrd", str(initrd),
        "-append", "root=LABEL=headroot rw console=ttyS0,115200 mitigations=off",
        "-drive", f"file={overlay},if=none,id=root,format=qcow2,cache=unsafe",
        "-device", "virtio-blk-pci,drive=root",
        "-netdev", f"user,id=lab,restrict=on,hostfwd=tcp:127.0.0.1:{ssh_port}-:22",
        "-device", f"virtio-net-pci,netdev=lab,mac={HEAD_USER_MAC},romfile=",
        "-fw_cfg", f"name=opt/junkyard/authorized_keys,file={lab.ssh_key}.pub",
    ]
    return dict(spec, name=f"{node.name}-probe", argv=argv)


def write_spec(lab: Lab, spec: dict) -> Path:
    path = spec_path(lab, spec["name"])
    path.parent.mkdir(parents=True, exist_ok=True)
    spec = dict(spec, netns=lab.netns)
    path.write_text(json.dumps(spec, indent=1))
    return path


def launcher(spec_file: Path) -> list[str]:
    """The command that starts a VM (used directly and as the BMC's startcmd)."""
    return [sys.executable, str(LAB_DIR / "lab"), "_exec", str(spec_file)]


def exec_vm(spec_file: Path) -> None:
    """Open the VM's taps in the lab namespace and exec qemu (keeps this pid)."""
    spec = json.loads(Path(spec_file).read_text())
    fds = host.open_taps(spec["netns"], spec["taps"])
    argv = []
    for arg in spec["argv"]:
        for i, fd in enumerate(fds):
            arg = arg.replace(f"@TAP{i}@", str(fd))
        argv.append(arg)
    os.execvp(argv[0], argv)
