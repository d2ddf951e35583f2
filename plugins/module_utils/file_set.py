# Copyright: junkyard.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Make one directory hold exactly a given set of files: validate, plan, apply, diff.

The plan is computed from one scan of the directory; only files whose content,
mode or owner differ are rewritten (temporary file in the same directory, then
``rename``), and only entries matching the prune pattern are ever removed.
"""

from __future__ import annotations

import contextlib
import fnmatch
import grp
import os
import pwd
import re
import stat
import tempfile
from dataclasses import dataclass, field

MODE_RE = re.compile(r"^0?[0-7]{3,4}$")
TMP_PREFIX = ".file_set-"


class FileSetError(ValueError):
    """A request the module refuses; the message names the offending value."""


def check_name(name, where: str) -> str:
    """A plain file name: no directory part, not '.' or '..', no NUL."""
    if not isinstance(name, str):
        raise FileSetError(f"{where}: the file name must be a string, got {name!r}")
    if name in ("", ".", ".."):
        raise FileSetError(f"{where}: {name!r} is not a file name")
    if "/" in name or "\0" in name:
        raise FileSetError(f"{where}: file name {name!r} contains a slash or a NUL; "
                           "files are written directly in path, never in a subdirectory")
    return name


def normalise_files(files) -> dict[str, bytes]:
    """``files`` as {name: UTF-8 bytes}, from a dict name -> content or a list of
    {name, content}; names are checked, a name given twice is refused."""
    if isinstance(files, dict):
        pairs = [(f"files[{name!r}]", name, content) for name, content in files.items()]
    elif isinstance(files, list):
        pairs = []
        for index, entry in enumerate(files):
            if not isinstance(entry, dict) or set(entry) != {"name", "content"}:
                raise FileSetError(f"files[{index}]: expected a mapping with the keys name "
                                   f"and content, got {entry!r}"[:300])
            pairs.append((f"files[{index}] ({entry['name']})", entry["name"], entry["content"]))
    else:
        raise FileSetError("files must be a mapping of file name to content or a list of "
                           f"{{name, content}}, got {type(files).__name__}")
    out: dict[str, bytes] = {}
    for where, name, content in pairs:
        check_name(name, where)
        if not isinstance(content, str):
            raise FileSetError(f"{where}: the content must be a string, got "
                               f"{type(content).__name__}")
        if name in out:
            raise FileSetError(f"{where}: {name} is listed twice")
        out[name] = content.encode("utf-8")
    return out


def parse_mode(mode) -> int:
    """An octal mode given as a string (``"0644"``) or as the integer YAML reads from
    an unquoted ``0644``; symbolic modes are refused."""
    if isinstance(mode, bool):
        raise FileSetError(f"mode {mode!r} is not an octal mode such as '0644'")
    if isinstance(mode, int):
        value = mode
    elif isinstance(mode, str) and MODE_RE.match(mode.strip()):
        value = int(mode.strip(), 8)
    else:
        raise FileSetError(f"mode {mode!r} is not an octal mode such as '0644' "
                           "(symbolic modes are not supported)")
    if not 0 <= value <= 0o7777:
        raise FileSetError(f"mode {mode!r} is out of range (0000-7777)")
    return value


def _resolve_id(name, lookup, field: str, kind: str) -> int | None:
    """A numeric id as it is, a name through ``lookup``; None when not given."""
    if name is None or name == "":
        return None
    if str(name).isdigit():
        return int(name)
    try:
        return lookup(name)
    except KeyError:
        raise FileSetError(f"{field} {name} is not a {kind} of this host") from None


def resolve_user(owner) -> int | None:
    return _resolve_id(owner, lambda n: pwd.getpwnam(n).pw_uid, "owner", "user")


def resolve_group(group) -> int | None:
    return _resolve_id(group, lambda n: grp.getgrnam(n).gr_gid, "group", "group")


def check_pattern(pattern) -> str | None:
    if pattern is None:
        return None
    if not pattern or "/" in pattern:
        raise FileSetError(f"prune_pattern {pattern!r} must be a non-empty glob of file "
                           "names without a slash, such as 'grub.cfg-01-*'")
    return pattern


@dataclass
class Change:
    """One file to write (``new`` set) or to remove (``new`` None)."""

    name: str
    new: bytes | None
    old: bytes | None = None  # None: absent, or not a regular file
    old_kind: str = "absent"  # absent, file, symlink
    old_mode: int | None = None
    old_uid: int | None = None
    old_gid: int | None = None
    reasons: list[str] = field(default_factory=list)


@dataclass
class Plan:
    path: str
    mode: int
    uid: int | None
    gid: int | None
    writes: list[Change] = field(default_factory=list)
    removes: list[Change] = field(default_factory=list)
    unchanged: int = 0
    skipped: list[str] = field(default_factory=list)  # matching the pattern, but directories

    @property
    def changed(self) -> bool:
        return bool(self.writes or self.removes)


def _read_regular(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        return f.read()


def plan(path: str, files: dict[str, bytes], mode: int, uid: int | None, gid: int | None,
         prune_pattern: str | None, missing_ok: bool = False) -> Plan:
    """What to write and remove so that ``path`` holds ``files`` with ``mode``/owner.

    ``missing_ok``: a missing directory counts as empty (check mode, where the task
    that would create it did not); otherwise it is refused like any non-directory."""
    result = Plan(path=path, mode=mode, uid=uid, gid=gid)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if not missing_ok:
            raise FileSetError(f"path {path} does not exist; create the directory first") from None
        st = None
    if st is not None and not stat.S_ISDIR(st.st_mode):
        raise FileSetError(f"path {path} is not a directory")
    entries = {e.name: e for e in os.scandir(path)} if st is not None else {}

    for name in sorted(files):
        change = Change(name=name, new=files[name])
        entry = entries.get(name)
        if entry is not None:
            est = entry.stat(follow_symlinks=False)
            change.old_mode, change.old_uid, change.old_gid = (
                stat.S_IMODE(est.st_mode), est.st_uid, est.st_gid)
            if stat.S_ISREG(est.st_mode):
                change.old_kind = "file"
                change.old = _read_regular(entry.path)
            elif stat.S_ISLNK(est.st_mode):
                change.old_kind = "symlink"
            else:
                kind = "a directory" if stat.S_ISDIR(est.st_mode) else "not a regular file"
                raise FileSetError(f"{entry.path} is {kind}; file_set replaces only regular "
                                   "files and symbolic links")
        if change.old_kind == "absent":
            change.reasons.append("created")
        elif change.old_kind == "symlink":
            change.reasons.append("symbolic link replaced by a file")
        else:
            if change.old != change.new:
                change.reasons.append("content")
            if change.old_mode != mode:
                change.reasons.append(f"mode {change.old_mode:04o} -> {mode:04o}")
            if uid is not None and change.old_uid != uid:
                change.reasons.append(f"owner {change.old_uid} -> {uid}")
            if gid is not None and change.old_gid != gid:
                change.reasons.append(f"group {change.old_gid} -> {gid}")
        if change.reasons:
            result.writes.append(change)
        else:
            result.unchanged += 1

    if prune_pattern is not None:
        for name in sorted(entries):
            if name in files or not fnmatch.fnmatchcase(name, prune_pattern):
                continue
            entry = entries[name]
            if entry.is_dir(follow_symlinks=False):
                result.skipped.append(name)
                continue
            est = entry.stat(follow_symlinks=False)
            change = Change(name=name, new=None, reasons=["removed"],
                            old_mode=stat.S_IMODE(est.st_mode), old_uid=est.st_uid,
                            old_gid=est.st_gid)
            if entry.is_file(follow_symlinks=False):
                change.old_kind = "file"
                change.old = _read_regular(entry.path)
            else:
                change.old_kind = "symlink" if entry.is_symlink() else "other"
            result.removes.append(change)
    return result


def _write(p: Plan, change: Change) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f"{TMP_PREFIX}{change.name[:40]}.", suffix=".tmp",
                               dir=p.path)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(change.new)
            f.flush()
            if p.uid is not None or p.gid is not None:
                os.fchown(f.fileno(), -1 if p.uid is None else p.uid,
                          -1 if p.gid is None else p.gid)
            # after chown, which clears set-id bits
            os.fchmod(f.fileno(), p.mode)
            os.fsync(f.fileno())
        os.rename(tmp, os.path.join(p.path, change.name))
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def apply(p: Plan) -> None:
    """Write and remove what the plan says; the directory is synced once at the end."""
    for change in p.writes:
        _write(p, change)
    for change in p.removes:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(p.path, change.name))
    if p.changed:
        fd = os.open(p.path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _text(data: bytes | None) -> str:
    return "" if data is None else data.decode("utf-8", errors="replace")


def _state(path: str, kind: str, mode: int | None, uid: int | None, gid: int | None) -> str:
    if kind == "absent":
        return f"{path} (absent)"
    owner = f", owner {uid}:{gid}" if uid is not None else ""
    mode_text = f"mode {mode:04o}" if mode is not None else "mode ?"
    return f"{path} ({kind}, {mode_text}{owner})"


def diff(p: Plan, max_files: int) -> list[dict]:
    """One before/after entry per changed file, in name order, for the first
    ``max_files``; one line counting the rest."""
    changes = sorted(p.writes + p.removes, key=lambda c: c.name)
    out = []
    for change in changes[:max(max_files, 0)]:
        target = os.path.join(p.path, change.name)
        before = _state(target, change.old_kind, change.old_mode, change.old_uid, change.old_gid)
        if change.new is None:
            after = f"{target} (absent)"
        else:
            uid = change.old_uid if p.uid is None else p.uid
            gid = change.old_gid if p.gid is None else p.gid
            after = _state(target, "file", p.mode, uid, gid)
        entry = {"before_header": before, "after_header": after,
                 "before": _text(change.old), "after": _text(change.new)}
        if change.old == change.new:
            # the content is the same: say what else changes (the diff would be empty)
            entry["prepared"] = f"{target}: {', '.join(change.reasons)}\n"
        out.append(entry)
    rest = changes[max(max_files, 0):]
    if rest:
        writes = sum(1 for c in rest if c.new is not None)
        out.append({"prepared": (
            f"... and {len(rest)} more files in {p.path} not shown ({writes} to write, "
            f"{len(rest) - writes} to remove; diff_max_files={max_files})\n")})
    return out
