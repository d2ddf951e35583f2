"""file_set: a directory made to hold exactly a set of files, on real temporary
directories: create, idempotence, content/mode/owner changes, prune by pattern
only, check mode, bounded diff, refusals."""

from __future__ import annotations

import os
import stat

import pytest
from ansible_collections.junkyard.cluster.plugins.modules import file_set
from storage_harness import run_module

FILES = {
    "grub.cfg-01-52-54-00-77-00-11": "set junkyard_node=node01\n",
    "grub.cfg-01-52-54-00-77-00-12": "set junkyard_node=node02\n",
}


def run(tmp_path, check_mode=False, diff=True, **kw):
    args = {"path": str(tmp_path), "files": FILES, "prune_pattern": "grub.cfg-01-*"}
    args.update(kw)
    result, _table = run_module(file_set.main, args, [], check_mode=check_mode, diff=diff)
    return result


def listing(path):
    """name -> (content, mode) of every entry."""
    out = {}
    for name in sorted(os.listdir(path)):
        p = path / name
        if p.is_symlink():
            out[name] = ("symlink", os.readlink(p))
        elif p.is_dir():
            out[name] = ("dir", None)
        else:
            out[name] = (p.read_text(), oct(stat.S_IMODE(p.stat().st_mode)))
    return out


def test_creates_every_file_with_its_mode(tmp_path):
    res = run(tmp_path)
    assert res["failed"] is False
    assert res["changed"] is True
    assert res["written"] == sorted(FILES)
    assert res["removed"] == []
    assert listing(tmp_path) == {n: (c, "0o644") for n, c in FILES.items()}
    assert [d["before_header"] for d in res["diff"]] == [
        f"{tmp_path}/{n} (absent)" for n in sorted(FILES)]
    assert [d["after"] for d in res["diff"]] == [FILES[n] for n in sorted(FILES)]


def test_second_run_changes_nothing_and_keeps_inodes(tmp_path):
    run(tmp_path)
    inodes = {n: (tmp_path / n).stat().st_ino for n in FILES}
    res = run(tmp_path)
    assert res["changed"] is False
    assert res["written"] == [] and res["removed"] == []
    assert res["unchanged"] == 2
    assert "diff" not in res
    assert {n: (tmp_path / n).stat().st_ino for n in FILES} == inodes


def test_content_change_rewrites_only_that_file_atomically(tmp_path):
    run(tmp_path)
    untouched = (tmp_path / "grub.cfg-01-52-54-00-77-00-12").stat().st_ino
    old_inode = (tmp_path / "grub.cfg-01-52-54-00-77-00-11").stat().st_ino
    files = dict(FILES, **{"grub.cfg-01-52-54-00-77-00-11": "set junkyard_node=node01\nx\n"})
    res = run(tmp_path, files=files)
    assert res["changed"] is True
    assert res["written"] == ["grub.cfg-01-52-54-00-77-00-11"]
    assert (tmp_path / "grub.cfg-01-52-54-00-77-00-11").read_text() == files[
        "grub.cfg-01-52-54-00-77-00-11"]
    # replaced by rename (new inode), the other file not rewritten
    assert (tmp_path / "grub.cfg-01-52-54-00-77-00-11").stat().st_ino != old_inode
    assert (tmp_path / "grub.cfg-01-52-54-00-77-00-12").stat().st_ino == untouched
    assert res["diff"] == [{
        "before_header": f"{tmp_path}/grub.cfg-01-52-54-00-77-00-11 (file, mode 0644, owner "
                         f"{os.getuid()}:{os.getgid()})",
        "after_header": f"{tmp_path}/grub.cfg-01-52-54-00-77-00-11 (file, mode 0644, owner "
                        f"{os.getuid()}:{os.getgid()})",
        "before": "set junkyard_node=node01\n",
        "after": "set junkyard_node=node01\nx\n",
    }]
    # no temporary file left behind
    assert sorted(os.listdir(tmp_path)) == sorted(FILES)


@pytest.mark.parametrize("mode", ["0600", 0o600, "600"])
def test_mode_change_is_a_change_with_a_diff_line(tmp_path, mode):
    run(tmp_path)
    res = run(tmp_path, mode=mode)
    assert res["changed"] is True
    assert res["written"] == sorted(FILES)
    assert {v[1] for v in listing(tmp_path).values()} == {"0o600"}
    assert res["diff"][0]["prepared"] == (
        f"{tmp_path}/grub.cfg-01-52-54-00-77-00-11: mode 0644 -> 0600\n")
    assert run(tmp_path, mode=mode)["changed"] is False


def test_owner_and_group_are_compared_and_set(tmp_path):
    if os.getuid() != 0:
        pytest.skip("chown to another user needs root")
    run(tmp_path)
    res = run(tmp_path, owner="1234", group="4321")
    assert res["written"] == sorted(FILES)
    st = (tmp_path / "grub.cfg-01-52-54-00-77-00-11").stat()
    assert (st.st_uid, st.st_gid) == (1234, 4321)
    assert "owner 0 -> 1234, group 0 -> 4321" in res["diff"][0]["prepared"]
    assert run(tmp_path, owner="1234", group="4321")["changed"] is False


def test_prunes_stale_matching_files_and_keeps_everything_else(tmp_path):
    run(tmp_path)
    (tmp_path / "grub.cfg-01-52-54-00-77-00-99").write_text("set junkyard_node=gone\n")
    target = tmp_path.parent / f"{tmp_path.name}-target"
    target.write_text("kept\n")
    (tmp_path / "grub.cfg-01-link").symlink_to(target)
    (tmp_path / "grub.cfg").write_text("top\n")  # does not match the pattern
    (tmp_path / "boot.ipxe").write_text("#!ipxe\n")
    (tmp_path / "i386-pc").mkdir()
    (tmp_path / "grub.cfg-01-dir").mkdir()  # matches, but a directory: left alone
    res = run(tmp_path)
    assert res["changed"] is True
    assert res["written"] == []
    assert res["removed"] == ["grub.cfg-01-52-54-00-77-00-99", "grub.cfg-01-link"]
    assert res["skipped"] == ["grub.cfg-01-dir"]
    assert any("grub.cfg-01-dir" in w for w in res["warnings"])
    assert listing(tmp_path) == {
        **{n: (c, "0o644") for n, c in FILES.items()},
        "grub.cfg": ("top\n", "0o644"), "boot.ipxe": ("#!ipxe\n", "0o644"),
        "i386-pc": ("dir", None), "grub.cfg-01-dir": ("dir", None)}
    assert target.read_text() == "kept\n"  # the link is removed, never its target
    assert res["diff"][0] == {
        "before_header": f"{tmp_path}/grub.cfg-01-52-54-00-77-00-99 (file, mode 0644, owner "
                         f"{os.getuid()}:{os.getgid()})",
        "after_header": f"{tmp_path}/grub.cfg-01-52-54-00-77-00-99 (absent)",
        "before": "set junkyard_node=gone\n", "after": ""}
    assert res["diff"][1]["before_header"].startswith(f"{tmp_path}/grub.cfg-01-link (symlink,")


def test_without_prune_pattern_nothing_is_removed(tmp_path):
    (tmp_path / "grub.cfg-01-52-54-00-77-00-99").write_text("stale\n")
    res = run(tmp_path, prune_pattern=None)
    assert res["removed"] == []
    assert (tmp_path / "grub.cfg-01-52-54-00-77-00-99").read_text() == "stale\n"


def test_empty_set_with_pattern_removes_every_match(tmp_path):
    run(tmp_path)
    (tmp_path / "keep.txt").write_text("x")
    res = run(tmp_path, files={})
    assert res["removed"] == sorted(FILES)
    assert os.listdir(tmp_path) == ["keep.txt"]


def test_symlink_in_the_set_is_replaced_by_a_file_not_followed(tmp_path):
    target = tmp_path.parent / f"{tmp_path.name}-target"
    target.write_text("outside\n")
    (tmp_path / "grub.cfg-01-52-54-00-77-00-11").symlink_to(target)
    res = run(tmp_path)
    assert "grub.cfg-01-52-54-00-77-00-11" in res["written"]
    assert not (tmp_path / "grub.cfg-01-52-54-00-77-00-11").is_symlink()
    assert target.read_text() == "outside\n"


def test_list_form_is_the_same_set(tmp_path):
    res = run(tmp_path, files=[{"name": n, "content": c} for n, c in FILES.items()])
    assert res["written"] == sorted(FILES)
    assert run(tmp_path)["changed"] is False


def test_check_mode_reports_and_writes_nothing(tmp_path):
    (tmp_path / "grub.cfg-01-52-54-00-77-00-11").write_text("old\n")
    (tmp_path / "grub.cfg-01-52-54-00-77-00-99").write_text("stale\n")
    os.chmod(tmp_path / "grub.cfg-01-52-54-00-77-00-11", 0o600)
    before = listing(tmp_path)
    res = run(tmp_path, check_mode=True)
    assert res["changed"] is True
    assert res["written"] == sorted(FILES)
    assert res["removed"] == ["grub.cfg-01-52-54-00-77-00-99"]
    assert listing(tmp_path) == before
    assert [(d["before"], d["after"]) for d in res["diff"]] == [
        ("old\n", FILES["grub.cfg-01-52-54-00-77-00-11"]),
        ("", FILES["grub.cfg-01-52-54-00-77-00-12"]),
        ("stale\n", "")]
    assert "(file, mode 0600," in res["diff"][0]["before_header"]
    assert "(file, mode 0644," in res["diff"][0]["after_header"]


def test_check_mode_on_a_missing_directory_reports_every_file(tmp_path):
    missing = tmp_path / "grub"
    res = run(missing, check_mode=True)
    assert res["failed"] is False
    assert res["written"] == sorted(FILES)
    assert not missing.exists()


def test_diff_is_bounded_for_hundreds_of_files(tmp_path):
    files = {f"grub.cfg-01-{i:04d}": f"node {i}\n" for i in range(600)}
    (tmp_path / "grub.cfg-01-stale").write_text("stale\n")
    res = run(tmp_path, files=files, diff_max_files=3)
    assert len(res["diff"]) == 4
    assert [d["after"] for d in res["diff"][:3]] == ["node 0\n", "node 1\n", "node 2\n"]
    assert res["diff"][3] == {"prepared": (
        f"... and 598 more files in {tmp_path} not shown (597 to write, 1 to remove; "
        "diff_max_files=3)\n")}
    assert len(res["written"]) == 600
    assert res["removed"] == ["grub.cfg-01-stale"]
    # the invocation names the files and sizes, it does not echo 600 contents back
    assert res["invocation"]["module_args"]["files"]["grub.cfg-01-0007"] == "(7 characters)"
    assert run(tmp_path, files=files)["changed"] is False


def test_no_diff_unless_asked(tmp_path):
    assert "diff" not in run(tmp_path, diff=False)


@pytest.mark.parametrize(("files", "message"), [
    ({"../grub.cfg": "x"}, "files['../grub.cfg']: file name '../grub.cfg' contains a slash"),
    ({"sub/file": "x"}, "file name 'sub/file' contains a slash"),
    ({"..": "x"}, "files['..']: '..' is not a file name"),
    ({".": "x"}, "'.' is not a file name"),
    ({"": "x"}, "'' is not a file name"),
    ([{"name": "a", "content": "x"}, {"name": "a", "content": "y"}],
     "files[1] (a): a is listed twice"),
    ([{"name": "a"}], "files[0]: expected a mapping with the keys name and content"),
    ({"a": 3}, "files['a']: the content must be a string, got int"),
    ("a=b", "files must be a mapping of file name to content or a list"),
])
def test_refuses_bad_names_and_contents_before_writing(tmp_path, files, message):
    res = run(tmp_path, files=files)
    assert res["failed"] is True
    assert message in res["msg"]
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(("kw", "message"), [
    ({"mode": "u=rw"}, "mode 'u=rw' is not an octal mode such as '0644'"),
    ({"mode": "0999"}, "is not an octal mode"),
    ({"prune_pattern": "../grub*"}, "prune_pattern '../grub*' must be a non-empty glob"),
    ({"owner": "no-such-user-here"}, "owner no-such-user-here is not a user of this host"),
    ({"group": "no-such-group-here"}, "group no-such-group-here is not a group of this host"),
])
def test_refuses_bad_options(tmp_path, kw, message):
    res = run(tmp_path, **kw)
    assert res["failed"] is True
    assert message in res["msg"]
    assert os.listdir(tmp_path) == []


def test_refuses_a_path_that_is_not_a_directory(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    res = run(f)
    assert res["failed"] is True
    assert res["msg"] == f"path {f} is not a directory"
    missing = tmp_path / "missing"
    res = run(missing)
    assert res["msg"] == f"path {missing} does not exist; create the directory first"
    assert not missing.exists()


def test_refuses_a_set_member_that_exists_as_a_directory(tmp_path):
    (tmp_path / "grub.cfg-01-52-54-00-77-00-12").mkdir()
    res = run(tmp_path)
    assert res["failed"] is True
    assert res["msg"] == (f"{tmp_path}/grub.cfg-01-52-54-00-77-00-12 is a directory; "
                          "file_set replaces only regular files and symbolic links")
    # refused before anything was written
    assert sorted(os.listdir(tmp_path)) == ["grub.cfg-01-52-54-00-77-00-12"]
