"""The lab's parts that need no VM: inventory reading, boot states, proxy, relay."""

from __future__ import annotations

import http.server
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from jylab import aptproxy, cli, config, vm
from labtools import REPO

LAB = REPO / "lab" / "jylab"


def test_lab_inventory_gives_head_nodes_macs_and_bmc_ports(monkeypatch):
    monkeypatch.delenv("JUNKYARD_LAB_SSH_PORT", raising=False)
    lab = config.load(REPO / "inventories" / "lab")
    assert [n.mac for n in lab.head_nics] == ["52:54:00:77:00:01", "52:54:00:78:00:01"]
    assert [n.name for n in lab.nodes] == ["node01", "node02"]
    assert [n.bmc_port for n in lab.nodes] == [6231, 6232]
    assert lab.nodes[0].nics[0].net == "mgmt"
    assert lab.nodes[1].nics[0].mac == "52:54:00:77:00:12"
    assert lab.ssh_port == 2222
    assert len({n.kcs_port for n in lab.nodes}) == len(lab.nodes)


def _inventory(tmp_path: Path, mutate) -> Path:
    hosts = yaml.safe_load((REPO / "inventories/lab/hosts.yml").read_text())
    mutate(hosts["all"]["children"])
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(hosts))
    return tmp_path


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda g: g["gpu_nodes"]["hosts"]["node01"]["node_bmc"].pop("port"), "node_bmc.port"),
    (lambda g: g["gpu_nodes"]["hosts"]["node02"]["node_bmc"].update(address="10.0.0.9"),
     "127.0.0.1 only"),
    (lambda g: g["gpu_nodes"]["hosts"]["node01"].pop("node_interfaces"), "mgmt interface"),
    (lambda g: g.pop("storage_head"), "exactly one host in storage_head"),
])
def test_bad_lab_inventory_is_explained(tmp_path, mutate, message):
    with pytest.raises(config.LabError, match=message):
        config.load(_inventory(tmp_path, mutate))


def test_node_count_follows_the_inventory(tmp_path):
    def three(groups):
        hosts = groups["gpu_nodes"]["hosts"]
        hosts["node03"] = yaml.safe_load(yaml.safe_dump(hosts["node02"]))
        hosts["node03"]["node_bmc"]["port"] = 6233
    lab = config.load(_inventory(tmp_path, three))
    assert [n.name for n in lab.nodes] == ["node01", "node02", "node03"]


def _gpu_devices(argv: list[str]) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv[:-1])
            if a == "-device" and argv[i + 1].startswith("virtio-gpu-pci")]


def test_node_vms_have_their_profiles_gpus_and_cpus(tmp_path):
    """Each node VM gets a virtio GPU (a DRM render node) per GPU of its hardware profile
    and the profile's CPU topology, so that Slurm finds what the model declares."""
    inv = tmp_path / "lab"
    shutil.copytree(REPO / "inventories" / "lab", inv)
    hardware = inv / "group_vars" / "all" / "hardware.yml"
    data = yaml.safe_load(hardware.read_text())
    profiles = data["cluster_hardware_profiles"]
    assert [p["gpu"]["count"] for p in profiles.values()] == [8, 8]
    lab = config.load(inv)
    for node in lab.nodes:
        argv = vm.node_spec(lab, node)["argv"]
        assert _gpu_devices(argv) == [f"virtio-gpu-pci,id=gpu{i}" for i in range(8)], node.name
        assert argv[argv.index("-smp") + 1] == "2,sockets=1,cores=2,threads=1", node.name
    profiles["g292-z45"]["gpu"]["count"] = 3
    profiles["g292-z45"]["cpu_threads_per_core"] = 2
    hardware.write_text(yaml.safe_dump(data))
    lab = config.load(inv)
    argv = vm.node_spec(lab, lab.node("node02"))["argv"]
    assert len(_gpu_devices(argv)) == 3
    assert argv[argv.index("-smp") + 1] == "4,sockets=1,cores=2,threads=2"
    profiles["g292-z45"]["gpu"]["count"] = "eight"
    hardware.write_text(yaml.safe_dump(data))
    with pytest.raises(config.LabError, match=r"g292-z45\.gpu\.count 'eight'"):
        config.load(inv)


def test_every_vm_runs_the_labs_cpu_model_and_the_environment_can_change_it(monkeypatch):
    """max for the head and every node (see Lab.cpu_model); JUNKYARD_LAB_CPU changes it for
    all of them (bench/lab_cpu_model.py compares models), and a value that is no model name
    is refused before qemu sees it."""
    monkeypatch.delenv("JUNKYARD_LAB_CPU", raising=False)

    def models(lab):
        argvs = [vm.node_spec(lab, node)["argv"] for node in lab.nodes]
        argvs.append(vm.head_spec(lab, Path("k"), Path("i"), Path("o"), [])["argv"])
        return {argv[argv.index("-cpu") + 1] for argv in argvs}

    assert models(config.load(REPO / "inventories" / "lab")) == {"max"}
    monkeypatch.setenv("JUNKYARD_LAB_CPU", "qemu64")
    assert models(config.load(REPO / "inventories" / "lab")) == {"qemu64"}
    monkeypatch.setenv("JUNKYARD_LAB_CPU", "max -monitor stdio")
    with pytest.raises(config.LabError, match="JUNKYARD_LAB_CPU='max -monitor stdio'"):
        config.load(REPO / "inventories" / "lab")


@pytest.mark.parametrize("value", ["abc", "0", "70000"])
def test_bad_port_in_environment(monkeypatch, value):
    monkeypatch.setenv("JUNKYARD_LAB_SSH_PORT", value)
    with pytest.raises(config.LabError, match="JUNKYARD_LAB_SSH_PORT"):
        config.load(REPO / "inventories" / "lab")


@pytest.mark.parametrize(("log", "state"), [
    ("", "no output yet"),
    ("SeaBIOS (version 1.16)\r\niPXE initialising devices...ok\r\n"
     "Configuring (net0 52:54:00:77:00:11)......", "iPXE: DHCP on the mgmt NIC"),
    ("Configuring (net0 52:54:00:77:00:11).... No configuration methods succeeded",
     "iPXE: no DHCP answer yet (retries)"),
    ("Configuring (net0 x)\nLinux version 6.1.0\nLoading, please wait...\n", "initramfs"),
    ("Linux version 6.1\nWelcome to Debian\n\nhead login: ", "login prompt"),
])
def test_boot_state_from_serial_log(tmp_path, log, state):
    path = tmp_path / "console.log"
    path.write_text(log)
    assert cli.boot_state(path) == state


@pytest.fixture
def upstream(tmp_path):
    """A plain HTTP server on 127.0.0.1 standing in for a Debian mirror."""
    root = tmp_path / "mirror"
    (root / "debian/pool/main/h").mkdir(parents=True)
    (root / "debian/pool/main/h/hello.deb").write_bytes(b"DEB" * 1000)
    (root / "debian/dists").mkdir()
    (root / "debian/dists/InRelease").write_text("release 1")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=str(root), **kw)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield root, server.server_address[1]
    server.shutdown()


@pytest.fixture
def proxy(tmp_path):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    cache = tmp_path / "cache"
    proc = subprocess.Popen([sys.executable, str(LAB / "aptproxy.py"), "--port", str(port),
                             "--cache", str(cache), "--allow", "127.0.0.1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.05)
    yield port, cache
    proc.terminate()
    proc.wait(5)


def _get(proxy_port: int, url: str) -> tuple[int, bytes]:
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({"http": f"http://127.0.0.1:{proxy_port}"}))
    try:
        with opener.open(url, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def test_proxy_caches_packages_and_passes_indices_through(upstream, proxy):
    root, up_port = upstream
    port, cache = proxy
    deb = f"http://127.0.0.1:{up_port}/debian/pool/main/h/hello.deb"
    assert _get(port, deb) == (200, b"DEB" * 1000)
    cached = cache / "127.0.0.1" / "debian/pool/main/h/hello.deb"
    deadline = time.monotonic() + 5  # stored just after the last byte went out
    while not cached.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert cached.read_bytes() == b"DEB" * 1000
    (root / "debian/pool/main/h/hello.deb").unlink()  # now only the cache has it
    assert _get(port, deb) == (200, b"DEB" * 1000)
    release = f"http://127.0.0.1:{up_port}/debian/dists/InRelease"
    assert _get(port, release) == (200, b"release 1")
    (root / "debian/dists/InRelease").write_text("release 2")  # indices are never cached
    assert _get(port, release) == (200, b"release 2")


def test_proxy_serves_only_allowed_hosts(proxy):
    port, _unused = proxy
    status, body = _get(port, "http://localhost:9/anything")
    assert status == 403
    assert b"not a Debian mirror" in body


def test_proxy_module_is_imported_from_the_lab():
    assert aptproxy.is_immutable("/debian/pool/main/z/zfs/zfs-dkms_2.1.11_all.deb")
    assert not aptproxy.is_immutable("/debian/dists/bookworm/InRelease")


def test_relay_joins_stdio_to_a_loopback_port():
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        port = srv.getsockname()[1]

        def echo():
            conn, _unused = srv.accept()
            with conn:
                data = b""
                while not data.endswith(b"\n"):
                    data += conn.recv(100)
                conn.sendall(data.upper())

        t = threading.Thread(target=echo)
        t.start()
        res = subprocess.run([sys.executable, str(LAB / "relay.py"), "127.0.0.1", str(port)],
                             input=b"hello lab\n", capture_output=True, timeout=10, check=False)
        t.join(5)
    assert res.stdout == b"HELLO LAB\n"


def test_relay_refuses_anything_but_loopback():
    res = subprocess.run([sys.executable, str(LAB / "relay.py"), "192.0.2.1", "80"],
                         capture_output=True, timeout=10, check=False)
    assert res.returncode == 2


@pytest.mark.parametrize("stopper", ["seed.stop", "host.stop_group"])
def test_stopping_a_build_ends_its_whole_process_group(stopper):
    """lab up stops a build it gives up on (the seed's ansible-playbook and its workers; the
    head build's debootstrap and dkms, on failure or Ctrl-C) with its process group."""
    from jylab import host, seed
    stop = seed.stop if stopper == "seed.stop" else host.stop_group
    proc = subprocess.Popen(["sh", "-c", "sleep 600 & echo $!; wait"], stdout=subprocess.PIPE,
                            text=True, start_new_session=True)
    worker = int(proc.stdout.readline())
    stop(proc)
    assert proc.poll() is not None

    def alive() -> bool:  # a zombie left for init to reap counts as gone
        try:
            return Path(f"/proc/{worker}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and alive():
        time.sleep(0.1)
    assert not alive(), "the build's worker outlived the stop"


def test_a_stopped_lab_up_starts_no_seed_build(tmp_path, monkeypatch):
    from jylab import seed
    monkeypatch.setenv("JUNKYARD_LAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("JUNKYARD_LAB_SEED", raising=False)
    monkeypatch.setattr(seed, "STOPPED", threading.Event())
    lab = config.load(REPO / "inventories" / "lab")
    lab.state_dir = tmp_path / "state"
    lab.state_dir.mkdir()
    seed.stop_all()
    with pytest.raises(config.LabError, match="stopped"):
        seed.ensure(lab)
    assert not list((tmp_path / "cache").glob("seed-*.tar*"))
    assert not seed.BUILDS


def test_fresh_checkouts_share_the_cached_key_and_so_the_seed(tmp_path, monkeypatch):
    """Two state directories (two clones) over one cache get the same key pair,
    hence the same seed tar; a state directory's own key is kept."""
    from jylab import seed
    monkeypatch.setenv("JUNKYARD_LAB_CACHE", str(tmp_path / "cache"))
    labs = []
    for name in ("clone1", "clone2"):
        lab = config.load(REPO / "inventories" / "lab")
        lab.state_dir = tmp_path / name
        cli.ensure_ssh_key(lab)
        labs.append(lab)
    first, second = labs
    shared = tmp_path / "cache" / "ssh" / "id_ed25519"
    for lab in labs:
        assert lab.ssh_key.read_bytes() == shared.read_bytes()
        pub = lab.ssh_key.with_suffix(".pub").read_bytes()
        assert pub == shared.with_suffix(".pub").read_bytes()
        assert pub.startswith(b"ssh-ed25519 ")
        assert lab.ssh_key.stat().st_mode & 0o777 == 0o600
    assert shared.parent.stat().st_mode & 0o777 == 0o700
    assert seed.seed_path(first) == seed.seed_path(second)
    # the key is a real pair: the public half is derived from the private one
    derived = subprocess.run(["ssh-keygen", "-y", "-f", str(second.ssh_key)],
                             capture_output=True, text=True, check=True).stdout.split()[:2]
    assert derived == pub.decode().split()[:2]
    # a state directory that already has a key keeps it
    own = config.load(REPO / "inventories" / "lab")
    own.state_dir = tmp_path / "own"
    (own.state / "ssh").mkdir(parents=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(own.ssh_key)],
                   check=True)
    before = own.ssh_key.read_bytes()
    cli.ensure_ssh_key(own)
    assert own.ssh_key.read_bytes() == before != shared.read_bytes()
    assert seed.seed_path(own) != seed.seed_path(first)
    assert not list(shared.parent.glob(".new-*"))
