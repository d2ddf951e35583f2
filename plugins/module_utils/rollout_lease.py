# Copyright (c) 2026, junkyard.cluster developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rollout lease: one file on the storage head that says which rollout may take
nodes out of service now (docs/upgrades.md, "One rollout at a time").

The lease names its owner (user@controller), the run id, the image and version and
when it expires.  Expiry is a time written in the file, not a process id: the run
holding it lives on the controller, not on the head, so the head cannot see whether it
is still alive.  The holder renews the lease at every step; a lease past its expiry
counts as released (the run that held it died).

Every read-decide-write happens under an exclusive ``flock`` of ``<lease>.lock`` (all
writers run on the head, so the kernel serialises them), and the lease itself is
written to a temporary file then renamed over, so a reader never sees half a lease.
Stdlib only; used by the rollout_lease and rollout_drain modules."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time

SCHEMA = 1


class LeaseHeld(Exception):
    """Another live run holds the lease (``lease``: what the file says)."""

    def __init__(self, path, lease, now):
        self.lease = lease
        super().__init__(describe_refusal(path, lease, now))


class LeaseLost(Exception):
    """A renew or a release by a run that does not hold the lease any more."""


def iso(epoch):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def describe_refusal(path, lease, now):
    return (f"another rollout holds {path}: run {lease.get('run_id')} by {lease.get('owner')} "
            f"({lease.get('image')} -> {lease.get('version')}), started "
            f"{iso(lease.get('started', 0))}, expires {iso(lease.get('expires', 0))} "
            f"(in {max(0, int(lease.get('expires', 0) - now))} s; renewed at every step of "
            "that run).  Wait for it to end; if that run is dead, its lease lapses at expiry "
            "(or remove the file once you are sure)")


@contextlib.contextmanager
def _locked(path, check=False):
    """Hold the lease's lock.  In check mode nothing is created: the lock is taken only if
    its file exists (a reader needs no more: the lease is replaced by a rename)."""
    if check:
        try:
            fd = os.open(path + ".lock", os.O_RDONLY)
        except FileNotFoundError:
            yield
            return
    else:
        os.makedirs(os.path.dirname(path) or ".", mode=0o755, exist_ok=True)
        fd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing drops the flock


def read(path):
    """The lease in the file, or None.  A file that is not a lease is an error (never
    overwritten: someone else's file at that path)."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        return None
    try:
        lease = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{path} is not a rollout lease (not JSON: {exc}); "
                         "move it away by hand") from exc
    if not isinstance(lease, dict) or lease.get("schema") != SCHEMA or "run_id" not in lease:
        raise ValueError(f"{path} is not a rollout lease (schema {SCHEMA} with a run_id); "
                         "move it away by hand")
    return lease


def live(lease, now):
    return lease is not None and float(lease.get("expires", 0)) > now


def _write(path, lease):
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(lease, handle, indent=2, sort_keys=True)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.chmod(tmp, 0o644)
    os.rename(tmp, path)


def acquire(path, owner, run_id, image, version, ttl, now=None, check=False):
    """Take the lease for ``run_id``.  Returns (changed, lease, replaced): ``replaced`` is
    the expired lease of a dead run that this one took over (or None).  Raises LeaseHeld
    when another run's lease is live.  Acquiring again with the same run id renews."""
    now = time.time() if now is None else now
    with _locked(path, check):
        old = read(path)
        if old is not None and old["run_id"] != run_id and live(old, now):
            raise LeaseHeld(path, old, now)
        same = old is not None and old["run_id"] == run_id
        lease = {"schema": SCHEMA, "owner": owner, "run_id": run_id, "image": image,
                 "version": version, "ttl": int(ttl),
                 "started": old["started"] if same else now,
                 "expires": now + int(ttl), "nodes": old.get("nodes", []) if same else []}
        if not check:
            _write(path, lease)
        return True, lease, (None if same or old is None else old)


def renew(path, run_id, ttl, nodes=None, now=None, check=False):
    """Push the expiry of ``run_id``'s lease ``ttl`` seconds ahead (and record the nodes the
    run has out of service now).  Raises LeaseLost when another run holds it or it is gone:
    the run must stop (a second rollout may be moving nodes)."""
    now = time.time() if now is None else now
    with _locked(path, check):
        old = read(path)
        if old is None:
            raise LeaseLost(f"{path} is gone: run {run_id} no longer holds the rollout lease "
                            "(removed by hand?); stopping before another node moves")
        if old["run_id"] != run_id:
            raise LeaseLost(f"{path} is held by run {old['run_id']} of {old.get('owner')}, not "
                            f"by this run {run_id} (this run's lease expired and was taken "
                            "over); stopping before another node moves")
        lease = dict(old, expires=now + int(ttl), ttl=int(ttl))
        if nodes is not None:
            lease["nodes"] = list(nodes)
        if not check:
            _write(path, lease)
        return True, lease


def release(path, run_id, check=False):
    """Drop ``run_id``'s lease.  Returns (changed, lease): a lease of another run is left
    alone (changed False, that lease returned); no lease is no change."""
    with _locked(path, check):
        old = read(path)
        if old is None or old["run_id"] != run_id:
            return False, old
        if not check:
            os.unlink(path)
        return True, old
