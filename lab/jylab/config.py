"""Where the lab keeps things, and what it is made of (read from inventories/lab)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
LAB_DIR = REPO / "lab"


class LabError(Exception):
    """A failure the lab explains to its user (no traceback)."""


@dataclass
class Nic:
    net: str  # "mgmt" or "data"
    mac: str
    ip: str | None = None


@dataclass
class Node:
    name: str
    nics: list[Nic]
    bmc_port: int
    bmc_user: str = "admin"
    kcs_port: int = 0  # ipmi_sim's VM serial listener for qemu's ipmi-bmc-extern
    profile: str = ""  # its hardware profile: the board its simulated BMC models
    gpus: int = 0  # its profile's GPU count: a virtio GPU (a DRM render node) for each
    # its profile's CPUs (sockets, cores per socket, threads per core): the VM's -smp
    cpu_topology: tuple[int, int, int] = (1, 1, 1)


@dataclass
class Lab:
    repo: Path = REPO
    netns: str = "jylab"
    ssh_port: int = 2222
    proxy_port: int = 3142
    bmc_password: str = "labpass"
    head_nics: list[Nic] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)
    disks: int = 15
    disk_size_mib: int = 512
    head_mem_mib: int = 2048
    head_cpus: int = 2
    # the emulated CPU of every VM (qemu -cpu); JUNKYARD_LAB_CPU changes it.  max: qemu64
    # sped up a quiet deploy (its glibc avoids AVX2, slow under TCG) but was slower in a
    # CI run (no TSC: the guests' clock is the HPET, an emulated device read per clock
    # call); see docs/lab.md, "KVM and the CPU model".
    cpu_model: str = "max"
    node_mem_mib: int = 1536
    head_timeout: float = 300.0
    inventory: Path = REPO / "inventories" / "lab"
    state_dir: Path | None = None

    @property
    def state(self) -> Path:
        return self.state_dir or self.repo / ".lab"

    @property
    def cache(self) -> Path:
        env = os.environ.get("JUNKYARD_LAB_CACHE")
        return Path(env).resolve() if env else self.repo / ".cache" / "lab"

    @property
    def ssh_key(self) -> Path:
        return self.state / "ssh" / "id_ed25519"

    @staticmethod
    def ssh_mux(in_proxy_command: bool = False) -> list[str]:
        """ssh options that share one connection to the head between commands.

        Every ssh through the head would otherwise make a connection of its own, and
        each costs the emulated head about a second of CPU: while a node boots, the
        controller asking for its SSH port every second (wait_for_connection, the
        tests' wait_login) keeps the head busy with handshakes instead of serving the
        booting nodes their root.  In a ProxyCommand the outer ssh expands % first,
        hence %%C there.  inventories/lab/group_vars/gpu_nodes.yml writes the same."""
        token = "%%C" if in_proxy_command else "%C"
        return ["-o", "ControlMaster=auto", "-o", f"ControlPath=/tmp/jylab-mux-{token}",
                "-o", "ControlPersist=600", "-o", "ServerAliveInterval=10",
                "-o", "ServerAliveCountMax=3"]

    def node(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        known = ", ".join(n.name for n in self.nodes) or "none"
        raise LabError(f"no node {name!r} in the lab (nodes: {known}; head is 'head')")

    def env(self) -> dict[str, str]:
        """Environment for playbooks and tools run against the lab."""
        env = dict(os.environ)
        env.update(
            JUNKYARD_LAB_NETNS=self.netns,
            JUNKYARD_LAB_SSH_PORT=str(self.ssh_port),
            JUNKYARD_LAB_PROXY_PORT=str(self.proxy_port),
            JUNKYARD_LAB_BMC_PASSWORD=self.bmc_password,
            JUNKYARD_LAB_SSH_KEY=str(self.ssh_key),
            JUNKYARD_LAB_STATE=str(self.state),
            ANSIBLE_CONFIG=str(self.repo / "ansible.cfg"),
        )
        # Host keys are checked (ansible.cfg): the nodes' against .lab/known_hosts, which
        # the storage play writes; the head's connection arguments skip its throw-away key.
        # per-task times at the end of every lab run (what TCG makes slow)
        env.setdefault("ANSIBLE_CALLBACKS_ENABLED", "ansible.posix.profile_tasks")
        env.setdefault("PROFILE_TASKS_TASK_OUTPUT_LIMIT", "25")
        return env


def _int_env(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise LabError(f"{name}={raw!r} is not a number") from None
    if not 0 < value < 65536:
        raise LabError(f"{name}={raw!r} is not a port number (1-65535)")
    return value


def _nics(interfaces: dict | None, what: str) -> list[Nic]:
    if not isinstance(interfaces, dict) or "mgmt" not in interfaces:
        raise LabError(f"{what}: the lab inventory gives no mgmt interface with a MAC address")
    nics = []
    for net in ("mgmt", "data"):
        spec = interfaces.get(net)
        if isinstance(spec, dict) and spec.get("mac"):
            nics.append(Nic(net, str(spec["mac"]).lower(), spec.get("ip")))
    return nics


def _vars_file(path: Path) -> dict:
    """The plain variables of one inventory YAML file ({} if there is none)."""
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        return {}
    except yaml.YAMLError as exc:
        raise LabError(f"lab inventory {path} is not valid YAML: {exc}") from None
    return data if isinstance(data, dict) else {}


def _group_vars(inv: Path, group: str) -> dict:
    """The plain variables of ``group_vars/<group>.yml`` next to the hosts file ({} if none)."""
    return _vars_file((inv if inv.is_dir() else inv.parent) / "group_vars" / f"{group}.yml")


def _profiles(inv: Path) -> dict:
    """The hardware profiles of ``group_vars/all/*.yml`` (or ``group_vars/all.yml``)."""
    base = (inv if inv.is_dir() else inv.parent) / "group_vars"
    files = sorted((base / "all").glob("*.yml")) if (base / "all").is_dir() else [base / "all.yml"]
    for path in files:
        profiles = _vars_file(path).get("cluster_hardware_profiles")
        if isinstance(profiles, dict):
            return profiles
    return {}


def _small_int(value, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _shape(profiles: dict, profile: str, where: str) -> tuple[int, tuple[int, int, int]]:
    """The GPU count and CPU topology of ``profile``: what the node's VM gets."""
    prof = profiles.get(profile) or {}
    count = (prof.get("gpu") or {}).get("count", 0)
    if not _small_int(count, 0, 16):
        raise LabError(f"{where}: cluster_hardware_profiles.{profile}.gpu.count {count!r}: "
                       "the lab gives a node 0 to 16 GPUs")
    topology = []
    for key in ("cpu_sockets", "cpu_cores_per_socket", "cpu_threads_per_core"):
        value = prof.get(key, 1)
        if not _small_int(value, 1, 4):
            raise LabError(f"{where}: cluster_hardware_profiles.{profile}.{key} {value!r}: "
                           "a lab VM has 1 to 4 of each")
        topology.append(value)
    return count, (topology[0], topology[1], topology[2])


def load(inventory: Path | None = None) -> Lab:
    """The lab as inventories/lab/hosts.yml describes it, with the environment's overrides."""
    inv = Path(inventory or os.environ.get("JUNKYARD_LAB_INVENTORY") or REPO / "inventories/lab")
    hosts_file = inv / "hosts.yml" if inv.is_dir() else inv
    try:
        data = yaml.safe_load(hosts_file.read_text())
    except FileNotFoundError:
        raise LabError(f"lab inventory {hosts_file} not found") from None
    except yaml.YAMLError as exc:
        raise LabError(f"lab inventory {hosts_file} is not valid YAML: {exc}") from None
    groups = (data or {}).get("all", {}).get("children", {})
    heads = (groups.get("storage_head") or {}).get("hosts") or {}
    if len(heads) != 1:
        raise LabError(f"{hosts_file}: the lab needs exactly one host in storage_head")
    head_name, head_vars = next(iter(heads.items()))
    lab = Lab(inventory=inv)
    lab.head_nics = _nics((head_vars or {}).get("head_interfaces"), f"{hosts_file}: {head_name}")
    node_hosts = (groups.get("gpu_nodes") or {}).get("hosts") or {}
    group = _group_vars(inv, "gpu_nodes")
    bmc_defaults = group.get("node_bmc_defaults") or {}
    profiles = _profiles(inv)
    for index, (name, hv) in enumerate(sorted(node_hosts.items())):
        hv = hv or {}
        profile = str(hv.get("node_profile") or group.get("node_profile") or "")
        gpus, cpus = _shape(profiles, profile, f"{hosts_file}: {name}")
        bmc = {**bmc_defaults, **(hv.get("node_bmc") or {})}
        if str(bmc.get("address", "127.0.0.1")) != "127.0.0.1":
            raise LabError(f"{hosts_file}: {name}: a lab BMC listens on 127.0.0.1 only")
        port = bmc.get("port")
        if not isinstance(port, int):
            raise LabError(f"{hosts_file}: {name}: node_bmc.port (the BMC's UDP port) is missing")
        lab.nodes.append(
            Node(
                name=name,
                nics=_nics(hv.get("node_interfaces"), f"{hosts_file}: {name}"),
                bmc_port=port,
                bmc_user=str(bmc.get("username", "admin")),
                kcs_port=_int_env("JUNKYARD_LAB_KCS_PORT_BASE", 9100) + index,
                profile=profile,
                gpus=gpus,
                cpu_topology=cpus,
            )
        )
    lab.netns = os.environ.get("JUNKYARD_LAB_NETNS") or "jylab"
    if not lab.netns.replace("-", "").replace("_", "").isalnum() or len(lab.netns) > 32:
        raise LabError(f"JUNKYARD_LAB_NETNS={lab.netns!r}: use letters, digits, - and _ only")
    lab.ssh_port = _int_env("JUNKYARD_LAB_SSH_PORT", 2222)
    lab.proxy_port = _int_env("JUNKYARD_LAB_PROXY_PORT", 3142)
    lab.bmc_password = os.environ.get("JUNKYARD_LAB_BMC_PASSWORD") or "labpass"
    lab.head_timeout = float(os.environ.get("JUNKYARD_LAB_HEAD_TIMEOUT") or 300)
    lab.cpu_model = os.environ.get("JUNKYARD_LAB_CPU") or lab.cpu_model
    if not all(c.isalnum() or c in "-_.,+=" for c in lab.cpu_model):
        raise LabError(f"JUNKYARD_LAB_CPU={lab.cpu_model!r}: a qemu -cpu model "
                       "(letters, digits and - _ . , + = only)")
    if os.environ.get("JUNKYARD_LAB_STATE"):
        lab.state_dir = Path(os.environ["JUNKYARD_LAB_STATE"]).resolve()
    return lab
