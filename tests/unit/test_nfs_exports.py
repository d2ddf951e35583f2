"""nfs_exports: rendered file, exportfs only on change, check mode, diff,
rollback when exportfs rejects the file, and validation messages."""

import pytest
from ansible_collections.junkyard.cluster.plugins.module_utils import nfs_exports as ne
from ansible_collections.junkyard.cluster.plugins.modules import nfs_exports
from storage_harness import Cmd, run_module

EXPORTFS = ["/usr/sbin/exportfs", "-ra"]

NODES = [("n01", "10.20.0.11"), ("n02", "10.20.0.12"), ("n03", "10.20.0.13")]

EXPORTS = [
    {"path": "/tank/images/rocm-6.2",
     "clients": [{"host": "10.20.0.0/24", "options": ["ro", "sync", "no_subtree_check"]}]},
    *[{"path": f"/tank/nodes/{n}/var-log",
       "clients": [{"host": ip, "options": "rw,sync,no_subtree_check,no_root_squash"}]}
      for n, ip in NODES],
    {"path": "/tank/data",
     "clients": [{"host": "10.30.0.0/24", "options": ["rw", "sync", "root_squash"]},
                 {"host": "head.data.lab", "options": ["rw", "no_root_squash"]}]},
]

EXPECTED = (
    "# Managed by Ansible (junkyard.cluster.nfs_exports); local changes are overwritten.\n"
    "/tank/images/rocm-6.2 10.20.0.0/24(ro,sync,no_subtree_check)\n"
    "/tank/nodes/n01/var-log 10.20.0.11(rw,sync,no_subtree_check,no_root_squash)\n"
    "/tank/nodes/n02/var-log 10.20.0.12(rw,sync,no_subtree_check,no_root_squash)\n"
    "/tank/nodes/n03/var-log 10.20.0.13(rw,sync,no_subtree_check,no_root_squash)\n"
    "/tank/data \\\n"
    "\t10.30.0.0/24(rw,sync,root_squash) \\\n"
    "\thead.data.lab(rw,no_root_squash)\n"
)


def args(tmp_path, **kw):
    a = {"name": "cluster", "exports": EXPORTS, "exports_dir": str(tmp_path / "exports.d")}
    a.update(kw)
    return a


def test_first_run_writes_and_reexports(tmp_path):
    res, table = run_module(nfs_exports.main, args(tmp_path), [Cmd(EXPORTFS)])
    target = tmp_path / "exports.d" / "cluster.exports"
    assert res["changed"] is True
    assert target.read_text() == EXPECTED
    assert oct(target.stat().st_mode & 0o777) == "0o644"
    assert res["diff"] == {"before": "", "after": EXPECTED, "before_header": str(target),
                           "after_header": str(target)}
    assert table.ran == [EXPORTFS]
    assert res["exports"][1]["clients"][0]["options"] == [
        "rw", "sync", "no_subtree_check", "no_root_squash"]


def test_unchanged_content_runs_nothing(tmp_path):
    (tmp_path / "exports.d").mkdir()
    (tmp_path / "exports.d" / "cluster.exports").write_text(EXPECTED)
    res, table = run_module(nfs_exports.main, args(tmp_path), [])
    assert res["changed"] is False
    assert table.ran == []


def test_changed_node_list_diff_and_single_exportfs(tmp_path):
    (tmp_path / "exports.d").mkdir()
    target = tmp_path / "exports.d" / "cluster.exports"
    target.write_text(EXPECTED)
    fewer = [e for e in EXPORTS if "n02" not in e["path"]]
    res, table = run_module(nfs_exports.main, args(tmp_path, exports=fewer), [Cmd(EXPORTFS)])
    assert res["changed"] is True
    assert res["diff"]["before"] == EXPECTED
    assert "n02" not in res["diff"]["after"]
    assert target.read_text() == res["diff"]["after"]
    assert table.ran == [EXPORTFS]


def test_check_mode_writes_nothing(tmp_path):
    res, table = run_module(nfs_exports.main, args(tmp_path), [], check_mode=True)
    assert res["changed"] is True
    assert res["diff"]["after"] == EXPECTED
    assert not (tmp_path / "exports.d").exists()
    assert table.ran == []


def test_exportfs_failure_restores_previous_file(tmp_path):
    (tmp_path / "exports.d").mkdir()
    target = tmp_path / "exports.d" / "cluster.exports"
    old = ne.HEADER + "/tank/old 10.20.0.0/24(ro)\n"
    target.write_text(old)
    err = "exportfs: Failed to stat /tank/images/rocm-6.2: No such file or directory\n"
    res, table = run_module(nfs_exports.main, args(tmp_path),
                            [Cmd(EXPORTFS, rc=1, err=err), Cmd(EXPORTFS)])
    assert res["failed"] is True
    assert res["msg"] == (
        f"exportfs -ra rejected {target} (rc=1): exportfs: Failed to stat "
        "/tank/images/rocm-6.2: No such file or directory; the previous file was restored")
    assert target.read_text() == old
    assert table.ran == [EXPORTFS, EXPORTFS]


def test_exportfs_failure_on_new_file_removes_it(tmp_path):
    res, _unused = run_module(nfs_exports.main, args(tmp_path),
                              [Cmd(EXPORTFS, rc=1, err="bad\n"),
                               Cmd(EXPORTFS, rc=1, err="worse\n")])
    assert res["failed"] is True
    assert res["msg"].endswith("the previous file was restored, but exportfs -ra failed "
                               "again: worse")
    assert not (tmp_path / "exports.d" / "cluster.exports").exists()


def test_missing_exportfs_fails_before_writing(tmp_path):
    res, _unused = run_module(nfs_exports.main, args(tmp_path), [], missing=("exportfs",))
    assert res["failed"] is True
    assert res["msg"] == "Failed to find required executable 'exportfs'"
    assert not (tmp_path / "exports.d").exists()


def test_exportfs_warnings_are_surfaced(tmp_path):
    warn = "exportfs: /tank/data does not support NFS export\n"
    res, _unused = run_module(nfs_exports.main, args(tmp_path), [Cmd(EXPORTFS, err=warn)])
    assert res["changed"] is True
    assert res["exportfs_stderr"] == warn
    assert res["warnings"] == ["exportfs -ra: exportfs: /tank/data does not support NFS export"]


def test_absent_removes_and_reexports(tmp_path):
    (tmp_path / "exports.d").mkdir()
    target = tmp_path / "exports.d" / "cluster.exports"
    target.write_text(EXPECTED)
    res, table = run_module(nfs_exports.main, args(tmp_path, state="absent", exports=[]),
                            [Cmd(EXPORTFS)])
    assert res["changed"] is True
    assert not target.exists()
    assert res["diff"]["after"] == ""
    assert table.ran == [EXPORTFS]
    res, table = run_module(nfs_exports.main, args(tmp_path, state="absent", exports=[]), [])
    assert res["changed"] is False


def test_path_with_space_is_quoted():
    out = ne.render(ne.normalise([{"path": "/srv/lab data",
                                   "clients": [{"host": "*", "options": ["ro"]}]}]))
    assert out.endswith('"/srv/lab data" *(ro)\n')


@pytest.mark.parametrize("host", [
    "10.20.0.11", "10.20.0.0/24", "10.20.0.0/255.255.255.0", "2001:db8::1", "2001:db8::/64",
    "n01.mgmt.lab", "*.mgmt.lab", "n0?.mgmt.lab", "@gpu_nodes", "*",
])
def test_valid_hosts(host):
    assert ne.check_host(host, "x") == host


@pytest.mark.parametrize("exports,msg", [
    ([{"path": "tank/x", "clients": [{"host": "*"}]}],
     "exports[0]: path 'tank/x' is not absolute"),
    ([{"path": "/tank//x", "clients": [{"host": "*"}]}],
     "exports[0]: path /tank//x is not normalised (no //, ., .. or trailing /)"),
    ([{"path": "/tank/x/", "clients": [{"host": "*"}]}],
     "exports[0]: path /tank/x/ is not normalised (no //, ., .. or trailing /)"),
    ([{"path": "/tank/../etc", "clients": [{"host": "*"}]}],
     "exports[0]: path /tank/../etc is not normalised (no //, ., .. or trailing /)"),
    ([{"path": '/tank/"x', "clients": [{"host": "*"}]}],
     "exports[0]: path '/tank/\"x' contains a control character, quote or backslash"),
    ([{"path": "/a", "clients": [{"host": "*"}]}, {"path": "/a", "clients": [{"host": "*"}]}],
     "exports[1]: path /a is already exported by exports[0]"),
    ([{"path": "/a", "clients": []}], "exports[0]: path /a has no clients"),
    ([{"path": "/a", "clients": [{"host": "10.0.0.1"}, {"host": "10.0.0.1"}]}],
     "exports[0].clients[1]: host 10.0.0.1 is already listed for /a (clients[0])"),
    ([{"path": "/a", "clients": [{"host": "10.20.0.0/33"}]}],
     "exports[0].clients[0]: host 10.20.0.0/33 is not a valid address or network"),
    ([{"path": "/a", "clients": [{"host": "10.20.0.300"}]}],
     "exports[0].clients[0]: host 10.20.0.300 is not a valid address or network"),
    ([{"path": "/a", "clients": [{"host": "bad_host!"}]}],
     "exports[0].clients[0]: host bad_host! is not a valid hostname, wildcard, @netgroup, "
     "address or network"),
    ([{"path": "/a", "clients": [{"host": "*", "options": ["rw", "ro"]}]}],
     "exports[0].clients[0]: options rw and ro contradict each other"),
    ([{"path": "/a", "clients": [{"host": "*", "options": "sync,async"}]}],
     "exports[0].clients[0]: options sync and async contradict each other"),
    ([{"path": "/a", "clients": [{"host": "*", "options": ["no_root_squash", "root_squash"]}]}],
     "exports[0].clients[0]: options no_root_squash and root_squash contradict each other"),
    ([{"path": "/a", "clients": [{"host": "*", "options": ["rw", "rw"]}]}],
     "exports[0].clients[0]: option rw is given twice"),
    ([{"path": "/a", "clients": [{"host": "*", "options": ["rw", "no_subtree"]}]}],
     "exports[0].clients[0]: unknown option no_subtree"),
    ([{"path": "/a", "clients": [{"host": "*", "options": ["anonuid=nobody"]}]}],
     "exports[0].clients[0]: option anonuid=nobody is invalid: expected an integer"),
    ([{"path": "/a", "clients": [{"host": "*", "options": ["sec=krb6"]}]}],
     "exports[0].clients[0]: option sec=krb6 is invalid: expected flavours from krb5, krb5i, "
     "krb5p, sys joined by ':'"),
    ([{"path": "/a", "clients": [{"host": "*", "options": ["fsid=abc"]}]}],
     "exports[0].clients[0]: option fsid=abc is invalid: expected root, a number or a UUID"),
    ([{"path": "/a", "clients": [{"host": "*", "options": ["rw sync"]}]}],
     "exports[0].clients[0]: option 'rw sync' contains whitespace or parentheses"),
    ([{"path": "/a", "clients": [{"host": "*", "options": ["colour=blue"]}]}],
     "exports[0].clients[0]: unknown option colour=blue"),
])
def test_validation_messages(tmp_path, exports, msg):
    res, table = run_module(nfs_exports.main, args(tmp_path, exports=exports), [])
    assert res["failed"] is True
    assert res["msg"] == msg
    assert table.ran == []
    assert not (tmp_path / "exports.d").exists()


@pytest.mark.parametrize("name", ["../etc/exports", "a b", "x.exports", ""])
def test_bad_names(tmp_path, name):
    res, _unused = run_module(nfs_exports.main, args(tmp_path, name=name), [])
    assert res["failed"] is True
    assert "must be letters, digits" in res["msg"]


def test_valued_options_accepted():
    opts = ne.normalise_options(
        ["rw", "sync", "fsid=root", "anonuid=65534", "anongid=65534", "sec=sys:krb5p",
         "mountpoint=/tank/images", "xprtsec=tls:mtls"], "x")
    assert opts[2] == "fsid=root"
    assert ne.normalise_options(["fsid=0c5c1a49-8bf2-4b0e-a3f4-6b1c2d3e4f50"], "x")
