#!/usr/bin/python
# Copyright (c) 2026, junkyard.cluster developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

DOCUMENTATION = r"""
module: zfs_pool
short_description: Create a ZFS pool (dRAID, raidz, mirror, special/log/cache) exactly once
version_added: 0.1.0
description:
  - Creates a ZFS pool from a declared layout with C(zpool create), with an ashift and pool
    (C(-o)) and root dataset (C(-O)) properties.
  - If the pool exists it is compared with the layout read from C(zpool status -P). An identical
    pool is C(ok). A pool whose vdevs differ makes the module B(fail) with a message naming every
    difference and a before/after diff; the module never adds, removes or recreates vdevs, and
    never destroys a pool.
  - Pool properties of an existing pool that differ are set with C(zpool set) (reported as a
    change). A differing ashift fails (it is fixed at creation). Root dataset properties are only
    applied at creation; on an existing pool differences are reported in RV(filesystem_drift)
    and as a warning, to be managed with M(community.general.zfs).
  - Before creating, every disk is inspected with C(lsblk), C(wipefs --no-act --json) and
    C(zdb -l) (the disk and each of its partitions). Disks carrying a partition table, a
    filesystem or RAID signature, or a ZFS label are refused unless listed in O(wipe_disks);
    only those are erased, with C(zpool labelclear -f) and C(wipefs -a), right before creation.
  - A disk in O(wipe_disks) whose ZFS label names a pool (read with C(zdb -l), the pool's name,
    guid, state and last host; an exported pool is not in C(zpool status) but C(zpool import)
    brings it back) is wiped only if that pool is named in O(wipe_pools). A disk of a pool that is
    imported (under any name, found by guid in C(zpool list)) is never wiped. The refusal names
    each disk, the pool's name, guid and state, how to import it and the option that would allow
    the wipe.
  - C(zpool create) partitions each whole disk and opens the new partition at once; when the
    partition is not there yet (udev or the kernel slow, many disks) it fails with "one or more
    devices is currently unavailable" before writing any label.  The module then checks that
    the pool still does not exist, waits for C(udevadm settle), and runs the same command
    again, three times in all, with a warning for each retry.
  - Written for the gap left by M(community.general.zpool), which has no dRAID, changes layouts
    of existing pools and has no blank-disk guard.
attributes:
  check_mode:
    support: full
    description:
      - Reads pool state and inspects disks (read-only commands), then reports the wipe, create
        and set commands it would run in RV(commands) without running them. A refused disk or
        pool fails in check mode as it would for real.
  diff_mode:
    support: full
    description: Before/after layout and pool properties, one vdev per line.
author:
  - junkyard.cluster developers (!UNKNOWN)
options:
  name:
    description: Pool name.
    type: str
    required: true
  vdevs:
    description: Data vdevs, in order.
    type: list
    elements: dict
    required: true
    suboptions: &vdev_suboptions
      type:
        description:
          - V(disk) (each listed disk is its own top-level vdev), V(mirror), V(raidz1),
            V(raidz2), V(raidz3) (V(raidz) means V(raidz1)), or a dRAID
            V(draid<P>[:<D>d][:<C>c][:<S>s]). Omitted dRAID fields take C(zpool)'s defaults
            (1 parity, 8 data or fewer, children = listed disks, 0 spares).
        type: str
        default: disk
      parity:
        description:
          - "With V(type=draid) or V(type=raidz), the parity level (the inventory's form):
            type draid with parity 2, data 8 and spares 1 equals type V(draid2:8d:1s)."
        type: int
      data:
        description: With V(type=draid), data disks per redundancy group.
        type: int
      spares:
        description: With V(type=draid), distributed spares.
        type: int
      children:
        description: With V(type=draid), children (defaults to the number of disks).
        type: int
      disks:
        description:
          - Devices, preferably C(/dev/disk/by-id/...) paths. Whole disks are partitioned by
            C(zpool create); the pool then shows their C(-part1) / C(1) / C(p1) partition,
            which counts as the same device when comparing.
        type: list
        elements: str
        required: true
  special:
    description: Special allocation class vdevs (same form as O(vdevs); no dRAID).
    type: list
    elements: dict
    default: []
    suboptions: *vdev_suboptions
  dedup:
    description: Dedup class vdevs (same form as O(vdevs); dRAID not allowed).
    type: list
    elements: dict
    default: []
    suboptions: *vdev_suboptions
  log:
    description: Log (SLOG) vdevs (same form as O(vdevs); dRAID not allowed).
    type: list
    elements: dict
    default: []
    suboptions: *vdev_suboptions
  cache:
    description: L2ARC devices.
    type: list
    elements: str
    default: []
  spares:
    description: Hot spare devices (dRAID distributed spares come from the dRAID type).
    type: list
    elements: str
    default: []
  ashift:
    description: Pool ashift (C(-o ashift=N)), compared with C(zpool get ashift) on a pool.
    type: int
  pool_properties:
    description: Pool properties (C(-o)), for example C(autotrim) or C(comment).
    type: dict
    default: {}
  filesystem_properties:
    description: Root dataset properties given at creation (C(-O)), for example C(compression).
    type: dict
    default: {}
  wipe_disks:
    description:
      - Disks from the layout that may be erased if they carry a partition table, signatures or a
        ZFS label. Every entry must be a disk of the layout.
      - Erasing happens only when the pool does not exist yet.
      - A disk whose ZFS label names a pool is erased only if that pool is also named in
        O(wipe_pools).
    type: list
    elements: str
    default: []
  wipe_pools:
    description:
      - Pools, by name or by guid (as C(zpool import) and C(zdb -l) show them), whose labels may
        be cleared from the disks of O(wipe_disks). Nothing that belongs to a pool is erased
        unless its pool is named here; default none.
      - A pool with the name of the pool being created (an exported or not imported earlier
        incarnation) must be named by its guid, so that naming the new pool never destroys the
        old one.
      - A pool that is imported is never destroyed, named or not.
      - An entry that matches no label on the disks only gives a warning.
    type: list
    elements: str
    default: []
notes:
  - Vdev order and disk order within a vdev do not matter when comparing.
  - A disk stood in for by a spare or being replaced (C(spare-N), C(replacing-N)) counts as its
    original device; the pairs are returned in RV(substituted).
seealso:
  - module: junkyard.cluster.draid_plan
  - module: community.general.zfs
"""

EXAMPLES = r"""
- name: Create the storage pool on 45 disks
  junkyard.cluster.zfs_pool:
    name: tank
    ashift: 12
    vdevs:
      - type: draid2:8d:45c:1s
        disks: "{{ zfs_storage_disks }}"
    special:
      - type: mirror
        disks: [/dev/disk/by-id/nvme-a, /dev/disk/by-id/nvme-b]
    pool_properties:
      autotrim: "on"
    filesystem_properties:
      compression: lz4
      atime: "off"
      xattr: sa
    wipe_disks: "{{ zfs_storage_disks_to_wipe | default([]) }}"

- name: Reuse disks of an old, exported pool (zpool import shows its guid), destroying it
  junkyard.cluster.zfs_pool:
    name: tank
    vdevs:
      - type: raidz2
        disks: [/dev/disk/by-id/wwn-0x1, /dev/disk/by-id/wwn-0x2, /dev/disk/by-id/wwn-0x3]
    wipe_disks: [/dev/disk/by-id/wwn-0x1, /dev/disk/by-id/wwn-0x2, /dev/disk/by-id/wwn-0x3]
    wipe_pools: ["6570127532718532416"]
"""

RETURN = r"""
created:
  description: Whether the pool was created (or would be, in check mode).
  returned: always
  type: bool
layout:
  description: The pool's layout (after creation), or the wanted layout in check mode.
  returned: always
  type: list
  elements: dict
  sample:
    - {class: data, type: draid2:8d:45c:1s, disks: [/dev/disk/by-id/wwn-0x5000c500a1-part1]}
    - {class: special, type: mirror, disks: [/dev/nvme0n1p1, /dev/nvme1n1p1]}
commands:
  description: The changing commands run (or that would run in check mode), as argument lists.
  returned: always
  type: list
  elements: list
wiped:
  description: Disks erased (or that would be) before creation.
  returned: always
  type: list
  elements: str
substituted:
  description: Devices currently replaced or spared, as C({device, by}) pairs.
  returned: when the pool exists
  type: list
  elements: dict
filesystem_drift:
  description: Root dataset properties whose value differs from O(filesystem_properties).
  returned: when the pool exists
  type: dict
  sample: {compression: {want: zstd, have: lz4}}
"""


import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.formatters import human_to_bytes
from ansible_collections.junkyard.cluster.plugins.module_utils.zfs_pool import (
    CLASSES,
    LayoutError,
    create_argv,
    describe_pool,
    desired_layout,
    layout_as_list,
    layout_differences,
    parse_get,
    parse_lsblk_partitions,
    parse_pool_guids,
    parse_status,
    parse_wipefs,
    parse_wipefs_zfs,
    parse_zdb_label,
    prop_value,
    render_layout,
)

# zpool create's message when a disk it has just partitioned cannot be opened
# yet (ENXIO), and how often the create is tried in all.
RACE_MESSAGE = "one or more devices is currently unavailable"
CREATE_ATTEMPTS = 3
SETTLE_SECONDS = 60


class ZfsPool:
    def __init__(self, module):
        self.module = module
        self.p = module.params
        self.name = self.p["name"]
        self.zpool = module.get_bin_path("zpool", required=True)
        self.commands = []

    def fail(self, msg, **kw):
        self.module.fail_json(msg=msg, commands=self.commands, **kw)

    def run(self, argv, check_rc=True):
        rc, out, err = self.module.run_command(argv)
        if check_rc and rc != 0:
            self.fail(f"{' '.join(argv)} failed (rc={rc}): {(err or out).strip()}")
        return rc, out, err

    def change(self, argv):
        """Run a changing command, or only record it in check mode."""
        self.commands.append(argv)
        if not self.module.check_mode:
            self.run(argv)

    # -- existing pool ---------------------------------------------------------

    def props_diff(self, props, have):
        out = {}
        for key, value in props.items():
            want = prop_value(value)
            cur = have.get(key)
            if cur == want:
                continue
            try:
                if cur is not None and cur.isdigit() and int(cur) == human_to_bytes(want):
                    continue
            except ValueError:
                pass
            out[key] = {"want": want, "have": cur}
        return out

    def existing(self, want, status_out):
        parsed = parse_status(status_out)
        have = parsed["layout"]
        before = render_layout(have)
        diffs = layout_differences(want, have)
        if diffs:
            self.fail(f"pool {self.name} exists with a different layout; zfs_pool never adds, "
                      f"removes or recreates vdevs: " + "; ".join(diffs),
                      diff={"before": before, "after": render_layout(want)},
                      layout=layout_as_list(have))
        pool_props = dict(self.p["pool_properties"])
        keys = sorted(pool_props) + (["ashift"] if self.p["ashift"] is not None else [])
        props = {}
        if keys:
            _rc, out, _err = self.run([self.zpool, "get", "-H", "-p", "-o", "property,value",
                                       ",".join(keys), self.name])
            props = parse_get(out)
        if self.p["ashift"] is not None and props.get("ashift") != str(self.p["ashift"]):
            self.fail(f"pool {self.name} has ashift {props.get('ashift')}, wanted "
                      f"{self.p['ashift']}; ashift is fixed when a pool is created")
        changes = self.props_diff(pool_props, props)
        drift = {}
        fs_props = self.p["filesystem_properties"]
        if fs_props:
            zfs = self.module.get_bin_path("zfs", required=True)
            _rc, out, _err = self.run([zfs, "get", "-H", "-p", "-o", "property,value",
                                       ",".join(sorted(fs_props)), self.name])
            drift = self.props_diff(fs_props, parse_get(out))
            if drift:
                what = ", ".join(f"{k}={v['have']} (want {v['want']})"
                                 for k, v in sorted(drift.items()))
                self.module.warn(f"root dataset {self.name} differs from filesystem_properties: "
                                 f"{what}; zfs_pool applies them only at creation, use "
                                 "community.general.zfs to change them")
        for key in sorted(changes):
            self.change([self.zpool, "set", f"{key}={changes[key]['want']}", self.name])

        def prop_lines(pick):
            return "".join(f"property: {k}={changes[k][pick]}\n" for k in sorted(changes))

        self.module.exit_json(
            changed=bool(self.commands), created=False, layout=layout_as_list(have),
            commands=self.commands, wiped=[], substituted=parsed["substituted"],
            filesystem_drift=drift,
            diff={"before": before + prop_lines("have"), "after": before + prop_lines("want")})

    # -- new pool --------------------------------------------------------------

    def inspect(self, disk, tools):
        """[(device, signature types, pools named by its ZFS label)] for the
        disk and each of its partitions that is not blank."""
        devices = []
        if not os.path.isfile(disk):
            _rc, out, _err = self.run([tools["lsblk"], "--json", "--paths", "--output",
                                       "NAME,TYPE", disk])
            devices = parse_lsblk_partitions(out)
        found = []
        for dev in [*devices, disk]:
            _rc, wipefs_out, _err = self.run([tools["wipefs"], "--no-act", "--json", dev])
            sigs = parse_wipefs(wipefs_out)
            rc, out, _err = self.run([tools["zdb"], "-l", dev], check_rc=False)
            label = parse_zdb_label(rc, out)
            pools = [label] if label else []
            # a zfs_member signature whose label zdb could not unpack
            pools += [p for p in parse_wipefs_zfs(wipefs_out)
                      if p["guid"] not in {q["guid"] for q in pools}]
            if sigs or pools:
                found.append((dev, sigs, pools))
        return found

    def imported_pools(self, dirty):
        """guid -> name of the imported pools, read only when a disk carries a pool's label."""
        if not any(p["guid"] for found in dirty.values() for _d, _s, pools in found
                   for p in pools):
            return {}
        _rc, out, _err = self.run([self.zpool, "list", "-H", "-p", "-o", "name,guid"])
        return parse_pool_guids(out)

    def pool_refusals(self, dirty, imported):
        """Why the pools on the disks to wipe may not be destroyed: one line per
        pool, and the disks refused for it."""
        named = set(self.p["wipe_pools"])
        by_pool = {}
        for disk in self.p["wipe_disks"]:
            for dev, _sigs, pools in dirty.get(disk, []):
                for pool in pools:
                    if pool["guid"]:
                        entry = by_pool.setdefault(pool["guid"], (pool, [], []))
                        entry[1].append(dev)
                        if disk not in entry[2]:
                            entry[2].append(disk)
        lines = []
        disks = []
        for guid, (pool, devs, pool_disks) in by_pool.items():
            verb = "carries" if len(devs) == 1 else "carry"
            what = f"{', '.join(devs)} {verb} the ZFS label of {describe_pool(pool, imported)}"
            if guid in imported:
                disks += [d for d in pool_disks if d not in disks]
                lines.append(f"{what}: zfs_pool never wipes a disk of an imported pool "
                             f"(naming it in wipe_pools does not change that); export or "
                             f"destroy {imported[guid]} by hand first if it is really to go")
                continue
            same = pool["name"] == self.name
            if guid in named or (pool["name"] in named and not same):
                continue
            how = (f"its guid {guid} (the name {pool['name']} is also the name of the pool "
                   f"being created, so only the guid names the old one)" if same
                   else f"{pool['name']} or its guid {guid}")
            disks += [d for d in pool_disks if d not in disks]
            lines.append(f"{what}; it may hold data: `zpool import` lists it and "
                         f"`zpool import {guid}` brings it back. Nothing is wiped unless the "
                         f"pool is named: to destroy it, add {how} to wipe_pools "
                         f"(zfs_storage_wipe_pools in the zfs_storage role)")
        return lines, disks

    def create(self, want):
        wipe = list(self.p["wipe_disks"])
        disks = [d for cls in CLASSES for _k, ds in want[cls] for d in ds]
        tools = {t: self.module.get_bin_path(t, required=True) for t in ("lsblk", "wipefs", "zdb")}
        dirty = {}
        for disk in disks:
            found = self.inspect(disk, tools)
            if found:
                dirty[disk] = found
        imported = self.imported_pools(dirty)
        problems = []
        refused = [d for d in disks if d in dirty and d not in wipe]
        if refused:
            detail = "; ".join(
                f"{d}: " + ", ".join(
                    f"{dev} " + "+".join(sigs + [f"zfs label of {describe_pool(p, imported)}"
                                                 if p["guid"] else "zfs label of no pool"
                                                 for p in pools])
                    for dev, sigs, pools in dirty[d])
                for d in refused)
            problems.append(f"{len(refused)} disk(s) are not blank (list them in wipe_disks to "
                            f"erase them): {detail}")
        pool_lines, pool_disks = self.pool_refusals(dirty, imported)
        problems += pool_lines
        if problems:
            hint = ""
            if any(p["name"] == self.name and p["guid"] not in imported
                   for found in dirty.values() for _d, _s, pools in found for p in pools):
                hint = (f"; pool {self.name} is not imported but its disks are here: "
                        f"`zpool import {self.name}` brings it back")
            self.fail(f"refusing to create pool {self.name}: " + "; ".join(problems) + hint,
                      refused=refused + pool_disks)
        found_guids = {p["guid"] for found in dirty.values() for _d, _s, pools in found
                       for p in pools}
        found_names = {p["name"] for found in dirty.values() for _d, _s, pools in found
                       for p in pools}
        for entry in self.p["wipe_pools"]:
            if entry not in found_guids | found_names:
                self.module.warn(f"wipe_pools names {entry}, which no disk of pool {self.name} "
                                 f"carries a label of; nothing was wiped for it")
        wiped = [d for d in disks if d in dirty]
        for disk in wiped:
            for dev, sigs, pools in dirty[disk]:
                if pools:
                    self.change([self.zpool, "labelclear", "-f", dev])
                if [s for s in sigs if s != "zfs_member"] or (sigs and not pools):
                    self.change([tools["wipefs"], "-a", dev])
        self.create_pool(create_argv(self.zpool, self.name, want, self.p["ashift"],
                                     self.p["pool_properties"], self.p["filesystem_properties"]))
        after = render_layout(want)
        layout = layout_as_list(want)
        if not self.module.check_mode:
            _rc, out, _err = self.run([self.zpool, "status", "-P", self.name])
            have = parse_status(out)["layout"]
            layout = layout_as_list(have)
            after = render_layout(have)
            diffs = layout_differences(want, have)
            if diffs:
                self.module.warn(f"pool {self.name} was created but reads back differently, "
                                 f"so the next run will fail: {'; '.join(diffs)}")
        self.module.exit_json(changed=True, created=True, layout=layout, commands=self.commands,
                              wiped=wiped, diff={"before": "", "after": after})

    def create_pool(self, argv):
        """zpool create, tried again while it fails because a disk it has just
        partitioned is not there yet.  zpool labels each whole disk and opens
        its new partition at once; when udev or the kernel is slow to show the
        partition (many disks, a loaded machine) the open fails with ENXIO and
        zpool says "one or more devices is currently unavailable" before it has
        written any label (openzfs/zfs#1646, #4077).  Nothing was created then:
        the pool must still be missing, udev is let settle, and the same command
        runs again; it checks the disks for data again itself."""
        self.commands.append(argv)
        if self.module.check_mode:
            return
        udevadm = self.module.get_bin_path("udevadm")
        for attempt in range(1, CREATE_ATTEMPTS + 1):
            rc, out, err = self.run(argv, check_rc=False)
            if rc == 0:
                return
            text = (err or out).strip()
            if RACE_MESSAGE not in text or attempt == CREATE_ATTEMPTS:
                break
            if self.run([self.zpool, "status", "-P", self.name], check_rc=False)[0] == 0:
                self.fail(f"{' '.join(argv)} failed (rc={rc}): {text}; yet pool {self.name} "
                          f"exists now, so it was not run again")
            self.module.warn(f"zpool create {self.name}, attempt {attempt} of "
                             f"{CREATE_ATTEMPTS}: {text}; a freshly partitioned disk was not "
                             f"there yet, running it again after udev settles")
            if udevadm:
                self.run([udevadm, "settle", f"--timeout={SETTLE_SECONDS}"], check_rc=False)
        self.fail(f"{' '.join(argv)} failed (rc={rc}): {text}")

    def main(self):
        try:
            want = desired_layout(self.p)
        except LayoutError as exc:
            self.fail(str(exc))
        disks = {d for cls in CLASSES for _k, ds in want[cls] for d in ds}
        stray = [d for d in self.p["wipe_disks"] if d not in disks]
        if stray:
            self.fail(f"wipe_disks names {', '.join(stray)}, not in the layout of pool "
                      f"{self.name}; only disks of the layout may be wiped")
        rc, out, err = self.run([self.zpool, "status", "-P", self.name], check_rc=False)
        if rc == 0:
            self.existing(want, out)
        elif "no such pool" in err + out:
            self.create(want)
        else:
            self.fail(f"zpool status -P {self.name} failed (rc={rc}): {(err or out).strip()}")


def main():
    def vdev_list(**kw):
        return dict(type="list", elements="dict", options=dict(
            type=dict(type="str", default="disk"),
            disks=dict(type="list", elements="str", required=True),
            parity=dict(type="int"),
            data=dict(type="int"),
            spares=dict(type="int"),
            children=dict(type="int"),
        ), **kw)

    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            vdevs=vdev_list(required=True),
            special=vdev_list(default=[]),
            dedup=vdev_list(default=[]),
            log=vdev_list(default=[]),
            cache=dict(type="list", elements="str", default=[]),
            spares=dict(type="list", elements="str", default=[]),
            ashift=dict(type="int"),
            pool_properties=dict(type="dict", default={}),
            filesystem_properties=dict(type="dict", default={}),
            wipe_disks=dict(type="list", elements="str", default=[]),
            wipe_pools=dict(type="list", elements="str", default=[]),
        ),
        supports_check_mode=True,
    )
    ZfsPool(module).main()


if __name__ == "__main__":
    main()
