"""The image filters: the tables the initramfs and the boot services read,
rendered from the lab's cluster model, and their refusals."""

from __future__ import annotations

import copy

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.junkyard.cluster.plugins.filter import image
from ansible_collections.junkyard.cluster.plugins.module_utils.cluster_model import build_model

from tests.unit.test_cluster_model import lab_data


def model(**cluster):
    data = lab_data()
    data["cluster"].update(copy.deepcopy(cluster))
    out, errors = build_model(data)
    assert errors == []
    return out


def test_writable_table_lab_exact():
    node_lines = "".join(
        f"{n} persistent {path} 10.77.0.1:/tank/nodes/{n}/{name} vers=3,tcp,nosuid,nodev\n"
        for n in ("node01", "node02")
        for path, name in (("/var/log", "var-log"), ("/var/lib/rasdaemon", "var-lib-rasdaemon"),
                           ("/var/lib/prometheus/node-exporter", "metrics"),
                           ("/var/lib/ssh-host-keys", "ssh-host-keys")))
    assert image.writable_table(model()) == (
        "policy stop\nattempts 3\ntimeout 60\nnode node01\nnode node02\n"
        "* persistent /var/log var-log -\n"
        "* persistent /var/lib/rasdaemon var-lib-rasdaemon -\n"
        "* persistent /var/lib/prometheus/node-exporter metrics -\n"
        "* tmpfs /tmp tmp size=256m\n"
        "* tmpfs /var/tmp var-tmp -\n"
        "* tmpfs /var/lib/dhcp var-lib-dhcp -\n"
        "* overlay /var/lib/nfs var-lib-nfs -\n"
        "* tmpfs /run/junkyard run-junkyard -\n"
        "* overlay /etc/ssh etc-ssh -\n"
        "* overlay /var/lib/sudo var-lib-sudo -\n"
        "* persistent /var/lib/ssh-host-keys ssh-host-keys -\n" + node_lines)


def test_writable_table_sizes_names_policy_and_limits():
    m = model(writable_paths=[{"path": "/tmp", "kind": "tmpfs", "size": "4g"},
                              {"path": "/var/lib/prometheus/node-exporter", "kind": "persistent",
                               "name": "metrics"}],
              writable_failure_policy="tmpfs")
    table = image.writable_table(m, attempts=5, timeout=10)
    assert table.splitlines()[:3] == ["policy tmpfs", "attempts 5", "timeout 10"]
    assert "* tmpfs /tmp tmp size=4g" in table
    assert "* persistent /var/lib/prometheus/node-exporter metrics -" in table
    assert ("node02 persistent /var/lib/prometheus/node-exporter "
            "10.77.0.1:/tank/nodes/node02/metrics vers=3,tcp,nosuid,nodev") in table


@pytest.mark.parametrize("path,flags", [
    ("/var/log", "nosuid,nodev"),
    ("/home", "nosuid,nodev"),
    ("/var/lib/optional", "nosuid,nodev"),  # not under /opt
    ("/opt", "nodev"),  # installed programs may need their setuid bit
    ("/opt/rocm-tools", "nodev"),
    ("/usr/local", "nodev"),
])
def test_persistent_mounts_are_nodev_and_nosuid_where_the_path_allows(path, flags):
    # (no users: their home dataset would be mounted at /home)
    m = model(writable_paths=[{"path": path, "kind": "persistent", "name": "p"}], users=[],
              data_datasets=[])
    line = next(x for x in image.writable_table(m).splitlines()
                if x.startswith("node01 persistent "))
    assert line == f"node01 persistent {path} 10.77.0.1:/tank/nodes/node01/p vers=3,tcp,{flags}"


@pytest.mark.parametrize("change,msg", [
    ({"nfs_version": 4},
     "cluster: cluster_nfs_version 4 cannot be used with persistent writable paths "
     "(/var/log, /var/lib/rasdaemon, /var/lib/prometheus/node-exporter, "
     "/var/lib/ssh-host-keys): the initramfs mounts them "
     "with klibc nfsmount"),
    ({"nfs_version": 5}, "cluster: cluster_nfs_version 5 is not an NFS version"),
    ({"writable_paths": [{"path": "/tmp", "kind": "tmpfs", "size": "4 g"}]},
     "cluster: cluster_writable_paths[0].size 4 g is not a tmpfs size"),
    ({"writable_paths": [{"path": "/var/my logs", "kind": "tmpfs", "name": "mylogs"}]},
     "cluster: cluster_writable_paths[0].path /var/my logs contains white space"),
    ({"data_datasets": [{"name": "scratch", "mount": "scratch"}]},
     "cluster: cluster_data_datasets[0].mount scratch is not an absolute path"),
])
def test_the_model_refuses_what_the_tables_cannot_hold(change, msg):
    """Refused when the inventory is read, not when the image is built."""
    data = lab_data()
    data["cluster"].update(copy.deepcopy(change))
    out, errors = build_model(data)
    assert out is None
    assert any(e.startswith(msg) for e in errors), errors


@pytest.mark.parametrize("kwargs,msg", [
    ({"attempts": 0}, "attempts 0 must be an integer >= 1"),
    ({"timeout": "x"}, "timeout 'x' must be an integer >= 1"),
])
def test_writable_table_refusals(kwargs, msg):
    with pytest.raises(AnsibleFilterError, match=msg):
        image.writable_table(model(), **kwargs)


def test_nfs4_is_refused_even_without_persistent_paths_of_the_inventory():
    """Every node's host keys are a persistent path the model adds, so an
    inventory with only tmpfs paths still needs NFSv3 for them."""
    data = lab_data()
    data["cluster"].update(nfs_version=4, writable_paths=[{"path": "/tmp", "kind": "tmpfs"}])
    out, errors = build_model(data)
    assert out is None
    assert errors == [
        "cluster: cluster_nfs_version 4 cannot be used with persistent writable paths "
        "(/var/lib/ssh-host-keys): the initramfs mounts them with klibc nfsmount, which "
        "speaks NFSv2/v3 only"]


def test_image_builds_include_versions_nodes_boot_and_current():
    data = lab_data()
    data["nodes"]["node02"]["node_image_version"] = "v2"
    m, errors = build_model(data)
    assert errors == []
    assert image.image_builds(m) == [
        {"image": "bookworm", "version": "v1", "suite": "bookworm",
         "dataset": "tank/images/bookworm/v1", "root_path": "/tank/images/bookworm/v1",
         "host": "image-bookworm-v1", "nodes": ["node01"]},
        {"image": "bookworm", "version": "v2", "suite": "bookworm",
         "dataset": "tank/images/bookworm/v2", "root_path": "/tank/images/bookworm/v2",
         "host": "image-bookworm-v2", "nodes": ["node02"]},
    ]
    # the builds agree with the boot entries of the model
    for build in image.image_builds(m):
        for node in m["nodes"]:
            if node["name"] in build["nodes"]:
                assert node["root_path"] == build["root_path"]
                assert node["image_dataset"] == build["dataset"]


def test_datanet_table_and_data_mounts():
    m = model(networks={"mgmt": {"subnet": "10.77.0.0/24"},
                        "data": {"subnet": "10.78.0.0/24", "mtu": 9000},
                        "bmc": {"subnet": "127.0.0.0/8"}},
              data_datasets=[{"name": "scratch"}, {"name": "projects", "mount": "/srv/projects"}],
              users=[])
    assert image.datanet_table(m) == ("node01 52:54:00:78:00:11 10.78.0.11/24 9000\n"
                                      "node02 52:54:00:78:00:12 10.78.0.12/24 9000\n")
    assert image.data_mounts(m) == [
        {"name": "scratch", "path": "/data/scratch", "source": "10.78.0.1:/tank/data/scratch"},
        {"name": "projects", "path": "/srv/projects",
         "source": "10.78.0.1:/tank/data/projects"},
    ]


@pytest.mark.parametrize("needed,expected", [
    (["/var/log", "/var/log/journal", "/var/lib/nfs", "/tmp", "/var/tmpx"],
     ["/var/lib/nfs", "/var/tmpx"]),
    ([], []),
])
def test_uncovered_paths(needed, expected):
    writable = [{"path": "/var/log"}, {"path": "/tmp"}, {"path": "/var/tmp"}]
    assert image.uncovered_paths(needed, writable) == expected


def test_image_builds_under_a_tree_prefix_keep_everything_but_the_path():
    m, errors = build_model(lab_data())
    assert errors == []
    plain = image.image_builds(m)
    seeded = image.image_builds(m, "/var/cache/seed/")
    assert [b["root_path"] for b in seeded] == ["/var/cache/seed/tank/images/bookworm/v1"]
    assert [dict(b, root_path=None) for b in seeded] == [dict(b, root_path=None) for b in plain]
    with pytest.raises(AnsibleFilterError, match="'relative' must be an absolute path"):
        image.image_builds(m, "relative")
