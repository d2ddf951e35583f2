# Copyright: junkyard.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cluster's users: the people whose jobs run on the nodes.

``cluster_users`` lists them; each exists with the same name, uid and gid on
the storage head (where they log in and submit jobs) and in the node image
(where their jobs run).  A job's files belong to numbers, not names: a uid or
gid given twice, or a name the system already uses, would hand one user's
files to another, so the model refuses them.

Every user's home is ``/home/<name>`` on a data dataset mounted at ``/home``
(``cluster_data_datasets``): the nodes mount it over the data network, the
head sees the same dataset at the same path, so a job finds the home its user
left on the head.  Supplementary groups are ``render`` and ``video`` (the GPUs'
device files) unless the inventory says otherwise; a group must be one the
image and the head both have with the same number: ``render``, ``video`` or
another user's own group."""

from __future__ import annotations

import posixpath
import re

from .common import as_dict, as_list, is_int

HOME_MOUNT = "/home"
USER_RE = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
# Debian's range for ordinary users and their groups (/etc/adduser.conf).
UID_MIN, UID_MAX = 1000, 59999
DEFAULT_GROUPS = ["render", "video"]
SHARED_GROUPS = frozenset(DEFAULT_GROUPS)
DEFAULT_SHELL = "/bin/bash"
SSH_KEY_RE = re.compile(r"^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)"
                        r"|sk-ssh-ed25519@openssh\.com|sk-ecdsa-sha2-nistp256@openssh\.com)"
                        r" [A-Za-z0-9+/]+={0,3}( [^\n\r]*)?$")
# Accounts and groups of Debian, its packages in the image and on the head, and
# the daemons of this collection: a cluster user of that name would share them.
SYSTEM_NAMES = frozenset({
    "root", "daemon", "bin", "sys", "sync", "games", "man", "lp", "mail", "news", "uucp",
    "proxy", "www-data", "backup", "list", "irc", "gnats", "nobody", "nogroup", "_apt",
    "adm", "tty", "disk", "kmem", "dialout", "fax", "voice", "cdrom", "floppy", "tape",
    "sudo", "audio", "dip", "operator", "src", "shadow", "utmp", "plugdev", "staff",
    "users", "input", "sgx", "kvm", "render", "video", "netdev", "crontab", "messagebus",
    "sshd", "ssh", "statd", "_rpc", "munge", "slurm", "dnsmasq", "tftp", "systemd-journal",
    "systemd-network", "systemd-resolve", "systemd-timesync", "systemd-coredump",
    "prometheus", "ntp", "ntpsec", "chrony", "_chrony", "tss", "polkitd", "rdma",
})


def _check_ssh_keys(where, raw, err):
    keys = []
    for j, key in enumerate(as_list(raw)):
        if not isinstance(key, str) or not SSH_KEY_RE.fullmatch(key.strip()):
            shown = key if not isinstance(key, str) or len(key) < 60 else key[:57] + "..."
            err.add("cluster", f"{where}.ssh_keys[{j}]", shown,
                    "is not an SSH public key line (type, base64 key, optional comment; "
                    "the .pub file's one line)")
            continue
        keys.append(key.strip())
    return keys


def _check_user(i, raw, err):
    where = f"cluster_users[{i}]"
    user = as_dict(raw)
    name = user.get("name")
    if not isinstance(name, str) or not USER_RE.fullmatch(name):
        err.add("cluster", f"{where}.name", name,
                "is not a user name (lower-case letters, digits, _ and -, starting with a "
                "letter or _, at most 32 characters)")
        return None
    if name in SYSTEM_NAMES:
        err.add("cluster", f"{where}.name", name,
                "is an account or group of the system (Debian, its packages or this "
                "collection's daemons): choose another name")
        return None
    ids = {}
    for field in ("uid", "gid"):
        value = user.get(field, ids.get("uid")) if field == "gid" else user.get(field)
        if not is_int(value) or not UID_MIN <= value <= UID_MAX:
            err.add("cluster", f"{where}.{field}", value,
                    f"must be an integer from {UID_MIN} to {UID_MAX} (Debian's range for "
                    "ordinary users; below it are the system's accounts)"
                    + ("" if field == "uid" or "gid" in user else
                       ": gid defaults to the uid"))
            return None
        ids[field] = value
    groups = user.get("groups", DEFAULT_GROUPS)
    groups = [g for g in as_list(groups) if isinstance(g, str)]
    shell = user.get("shell", DEFAULT_SHELL)
    if not isinstance(shell, str) or not shell.startswith("/") \
            or posixpath.normpath(shell) != shell or any(c.isspace() for c in shell):
        err.add("cluster", f"{where}.shell", shell, "is not an absolute path")
        return None
    comment = user.get("comment", "")
    if not isinstance(comment, str) or any(c in comment for c in ":\n\r"):
        err.add("cluster", f"{where}.comment", comment,
                "must be text without ':' or a line break (it is a field of /etc/passwd)")
        return None
    return {"name": name, "uid": ids["uid"], "gid": ids["gid"], "groups": groups,
            "ssh_keys": _check_ssh_keys(where, user.get("ssh_keys", []), err),
            "shell": shell, "comment": comment,
            "home": posixpath.join(HOME_MOUNT, name)}


def _check_clashes(users, err):
    seen = {"name": {}, "uid": {}, "gid": {}}
    for i, user in users:
        for field in ("name", "uid", "gid"):
            first = seen[field].setdefault(user[field], i)
            if first != i:
                err.add("cluster", f"cluster_users[{i}].{field}", user[field],
                        f"is also cluster_users[{first}]'s {field}"
                        + (" (each user's own group has the user's number)"
                           if field == "gid" else ""))
    names = {u["name"] for _i, u in users}
    for i, user in users:
        for group in user["groups"]:
            if group not in SHARED_GROUPS and group not in names:
                err.add("cluster", f"cluster_users[{i}].groups", group,
                        "is neither render, video nor another user's own group: the head "
                        "and the image would not give it the same number")


def check_users(cluster, data_sets, err):
    """The checked ``cluster_users`` (in inventory order).  ``data_sets``: the
    checked data datasets, one of which must be mounted at /home."""
    raw = cluster.get("users", [])
    if raw is None:
        raw = []
    users = []
    for i, user in enumerate(as_list(raw)):
        checked = _check_user(i, user, err)
        if checked is not None:
            users.append((i, checked))
    _check_clashes(users, err)
    if users and not any(ds["mount"] == HOME_MOUNT for ds in data_sets):
        err.add("cluster", "cluster_data_datasets", HOME_MOUNT,
                f"has no dataset mounted there: the users' homes ({HOME_MOUNT}/<name>) "
                "must be on the data network, the same on the head and every node "
                "(add - name: home, mount: /home)")
    return [u for _i, u in users]


def derive(users, data_mounts):
    """The model's ``users`` section: the users, and where their homes are on
    the head (the exported directory the nodes mount at /home)."""
    home = None
    for mount in data_mounts:
        if mount["path"] == HOME_MOUNT:
            home = {"mount": HOME_MOUNT, "head_path": mount["source"].split(":", 1)[1]}
    return {"accounts": users, "homes": home}
