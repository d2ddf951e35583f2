# Copyright (c) 2026, junkyard.cluster developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""dRAID layout arithmetic: padding, parity and the capacity `zfs list` reports.

Everything here is exact integer (or `fractions.Fraction`) arithmetic that
follows the OpenZFS code paths a fresh pool goes through, step by step:

1. Whole-disk partitioning (libzfs ``zpool_label_disk``): GPT with partition 1
   starting at LBA 2048, an 8 MiB reserved partition 9 (EFI_MIN_RESV_SIZE =
   16384 blocks) at the end, the partition size aligned down to 2048 blocks;
   the backup GPT takes ``16 KiB / lbsize + 1`` blocks.
2. Leaf vdev (``vdev_open``): size aligned down to ``sizeof(vdev_label_t)``
   (256 KiB), minus VDEV_LABEL_START_SIZE (4 MiB: two labels + 3.5 MiB boot
   region) and VDEV_LABEL_END_SIZE (512 KiB: two labels).
3. dRAID top-level vdev (``vdev_draid_open``): smallest child asize, minus the
   32 MiB reflow reserve (VDEV_DRAID_REFLOW_RESERVE), rounded down to the
   16 MiB row height (VDEV_DRAID_ROWHEIGHT); times (children - spares);
   rounded down to a whole group (group width x 16 MiB).
4. Metaslabs (``vdev_metaslab_set_size`` / ``vdev_metaslab_init``): 512 MiB
   metaslabs, at least 16 and at most ~200 per vdev, never above 16 GiB and
   never more than 2^17; each dRAID metaslab is aligned to and trimmed to a
   multiple of group width x sector (``vdev_draid_metaslab_init``).  Above 64
   metaslabs one of them becomes the embedded log metaslab (OpenZFS >= 2.1),
   which is not in the normal class.
5. Deflation (``vdev_set_deflate_ratio`` / ``vdev_deflated_space``): space is
   reported as ``(bytes >> 9) * ratio`` with ``ratio = 2^17 /
   (asize(128 KiB) >> 9)``: the 128 KiB block's dRAID allocation, integer
   division.
6. Slop (``spa_get_slop_space``): ``min(dspace >> 5, 128 GiB)``, minus the
   embedded log space (at most half of it), at least ``min(dspace / 2,
   128 MiB)``.  ``zfs list`` used+avail of the root dataset is
   ``dspace - slop`` (``dsl_pool_adjustedsize``).

Padding: a block of psize bytes on draid<P>:<D>d with sectors of 2^ashift
takes ``ceil(psize / (D * 2^ashift)) * (D + P) * 2^ashift`` bytes
(``vdev_draid_asize``): dRAID always writes whole rows.

Validation (tests/unit/test_draid.py):

* 24 x 1 TB (10^12 bytes, as ``truncate -s 1TB`` makes), ``draid2:6d:24c:0s``,
  ashift 12: the model gives 15835678638080 bytes, exactly what
  ``zfs list -p`` reported on OpenZFS 2.2.0 (openzfs/zfs#15467): tolerance 0
  bytes.  The figure is quantised by whole 16 GiB metaslabs, so any disk size
  that yields the same 1396 metaslabs gives the same number; a "1 TB" disk of
  1000204886016 bytes (1953525168 sectors) gives one metaslab more.
* 36 x 18 TB (18000207937536 bytes), ``draid1:16d:36c:2s``, ashift 12: the
  model's used+avail exceeds the reported ``available`` (574804246033080,
  OpenZFS 2.1.5, openzfs/zfs#13727) by 6279936 bytes, which is the root
  dataset's ``used`` on a new pool (the report gives only ``available``).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from math import gcd

KIB = 1 << 10
MIB = 1 << 20
GIB = 1 << 30
TIB = 1 << 40

SPA_MINBLOCKSHIFT = 9
SPA_MAXBLOCKSHIFT = 24
VDEV_DRAID_ROWHEIGHT = 1 << SPA_MAXBLOCKSHIFT
VDEV_DRAID_REFLOW_RESERVE = 2 * VDEV_DRAID_ROWHEIGHT
VDEV_DRAID_MAX_CHILDREN = 255
VDEV_DRAID_MAX_PARITY = 3
VDEV_DRAID_MAX_SPARES = 100
VDEV_LABEL_SIZE = 256 * KIB
VDEV_LABEL_START_SIZE = 2 * VDEV_LABEL_SIZE + 7 * 512 * KIB
VDEV_LABEL_END_SIZE = 2 * VDEV_LABEL_SIZE
SPA_MINDEVSIZE = 64 * MIB

EFI_NEW_START_BLOCK = 2048
EFI_MIN_RESV_SIZE = 16 * 1024
EFI_PARTITION_END_ALIGNMENT = 2048
EFI_MIN_ARRAY_SIZE = 16 * KIB

ZFS_VDEV_DEFAULT_MS_SHIFT = 29
ZFS_VDEV_MIN_MS_COUNT = 16
ZFS_VDEV_DEFAULT_MS_COUNT = 200
ZFS_VDEV_MAX_MS_SHIFT = 34
ZFS_VDEV_MS_COUNT_LIMIT = 1 << 17
ZFS_EMBEDDED_SLOG_MIN_MS = 64

SPA_SLOP_SHIFT = 5
SPA_MIN_SLOP = 128 * MIB
SPA_MAX_SLOP = 128 * GIB

DEFLATE_BLOCK = 1 << 17


class PlanError(ValueError):
    """An input the planner cannot work with; the message names it."""


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _highbit(x: int) -> int:
    return x.bit_length()


def whole_disk_partition_size(disk_bytes: int, logical_sector: int = 512) -> int:
    """Size of partition 1 that ``zpool create`` makes on a whole disk."""
    blocks = disk_bytes // logical_sector
    gpt_blocks = EFI_MIN_ARRAY_SIZE // logical_sector + 1
    last_usable = blocks - 1 - gpt_blocks
    size = last_usable + 1 - EFI_MIN_RESV_SIZE - EFI_NEW_START_BLOCK
    size = size // EFI_PARTITION_END_ALIGNMENT * EFI_PARTITION_END_ALIGNMENT
    return size * logical_sector


def leaf_asize(osize: int) -> int:
    """Allocatable size of a leaf vdev of ``osize`` bytes (labels removed)."""
    osize = osize // VDEV_LABEL_SIZE * VDEV_LABEL_SIZE
    if osize < SPA_MINDEVSIZE:
        raise PlanError(f"device of {osize} bytes is below the 64 MiB ZFS minimum")
    return osize - (VDEV_LABEL_START_SIZE + VDEV_LABEL_END_SIZE)


def draid_vdev_asize(child_asize: int, ndata: int, nparity: int, children: int,
                     nspares: int) -> int:
    """Allocatable size of one dRAID top-level vdev (``vdev_draid_open``)."""
    child = (child_asize - VDEV_DRAID_REFLOW_RESERVE) // VDEV_DRAID_ROWHEIGHT
    child *= VDEV_DRAID_ROWHEIGHT
    groupsz = (ndata + nparity) * VDEV_DRAID_ROWHEIGHT
    return child * (children - nspares) // groupsz * groupsz


def block_asize(psize: int, ndata: int, nparity: int, ashift: int) -> int:
    """Bytes a block of ``psize`` takes on draid<nparity>:<ndata>d."""
    rows = _ceil_div(psize, ndata << ashift)
    return (rows * (ndata + nparity)) << ashift


def deflate_ratio(ndata: int, nparity: int, ashift: int) -> int:
    return DEFLATE_BLOCK // (block_asize(DEFLATE_BLOCK, ndata, nparity, ashift)
                             >> SPA_MINBLOCKSHIFT)


def metaslab_shift(asize: int) -> int:
    count = asize >> ZFS_VDEV_DEFAULT_MS_SHIFT
    if count < ZFS_VDEV_MIN_MS_COUNT:
        shift = _highbit(asize // ZFS_VDEV_MIN_MS_COUNT)
    elif count > ZFS_VDEV_DEFAULT_MS_COUNT:
        shift = _highbit(asize // ZFS_VDEV_DEFAULT_MS_COUNT)
    else:
        shift = ZFS_VDEV_DEFAULT_MS_SHIFT
    if shift < SPA_MAXBLOCKSHIFT:
        shift = SPA_MAXBLOCKSHIFT
    elif shift > ZFS_VDEV_MAX_MS_SHIFT:
        shift = ZFS_VDEV_MAX_MS_SHIFT
        if (asize >> shift) > ZFS_VDEV_MS_COUNT_LIMIT:
            shift = _highbit(asize // ZFS_VDEV_MS_COUNT_LIMIT)
    return shift


def draid_metaslab_sizes(asize: int, group_width: int, ashift: int) -> list[int]:
    """Usable size of every metaslab of a dRAID vdev, in order."""
    shift = metaslab_shift(asize)
    unit = group_width << ashift
    sizes = []
    for m in range(asize >> shift):
        start = m << shift
        astart = _ceil_div(start, unit) * unit
        sizes.append(((1 << shift) - (astart - start)) // unit * unit)
    return sizes


def slop_space(dspace: int, embedded_log: int) -> int:
    slop = min(dspace >> SPA_SLOP_SHIFT, SPA_MAX_SLOP)
    slop -= min(embedded_log, slop >> 1)
    return max(slop, min(dspace >> 1, SPA_MIN_SLOP))


@dataclass(frozen=True)
class PoolSpace:
    """Space figures of a fresh pool made of ``vdevs`` identical dRAID vdevs."""

    child_asize: int
    vdev_asize: int
    metaslab_shift: int
    metaslab_count: int
    deflate_ratio: int
    normal_dspace: int
    embedded_log_dspace: int
    slop: int

    @property
    def usable(self) -> int:
        """``zfs list -p`` used + available of the root dataset."""
        return max(self.normal_dspace - self.slop, 0)


def pool_space(child_osize: int, ndata: int, nparity: int, children: int,
               nspares: int, ashift: int, vdevs: int = 1) -> PoolSpace:
    child = leaf_asize(child_osize)
    vasize = draid_vdev_asize(child, ndata, nparity, children, nspares)
    if vasize <= 0:
        raise PlanError(f"children of {child_osize} bytes leave no room for a "
                        f"dRAID group of width {ndata + nparity}")
    ratio = deflate_ratio(ndata, nparity, ashift)
    sizes = draid_metaslab_sizes(vasize, ndata + nparity, ashift)
    deflated = [(s >> SPA_MINBLOCKSHIFT) * ratio for s in sizes]
    # At pool creation every space map is empty, so the first metaslab is
    # "the emptiest" and becomes the embedded log metaslab of each vdev.
    log = deflated[0] if len(sizes) > ZFS_EMBEDDED_SLOG_MIN_MS else 0
    normal = (sum(deflated) - log) * vdevs
    log *= vdevs
    return PoolSpace(child_asize=child, vdev_asize=vasize,
                     metaslab_shift=metaslab_shift(vasize), metaslab_count=len(sizes),
                     deflate_ratio=ratio, normal_dspace=normal,
                     embedded_log_dspace=log, slop=slop_space(normal, log))


def draid_name(nparity: int, ndata: int, children: int, nspares: int) -> str:
    return f"draid{nparity}:{ndata}d:{children}c:{nspares}s"


def check_draid(nparity: int, ndata: int, children: int, nspares: int) -> str | None:
    """Why OpenZFS would refuse this dRAID, or None if it is valid."""
    if not 1 <= nparity <= VDEV_DRAID_MAX_PARITY:
        return f"parity {nparity} is not 1..{VDEV_DRAID_MAX_PARITY}"
    if ndata < 1:
        return f"data disks {ndata} must be at least 1"
    if not 0 <= nspares <= VDEV_DRAID_MAX_SPARES:
        return f"spares {nspares} is not 0..{VDEV_DRAID_MAX_SPARES}"
    if children > VDEV_DRAID_MAX_CHILDREN:
        return f"children {children} exceeds {VDEV_DRAID_MAX_CHILDREN}"
    if ndata + nparity > children - nspares:
        return (f"group width {ndata + nparity} exceeds children - spares "
                f"({children} - {nspares})")
    return None


def _frac(f: Fraction) -> str:
    return str(f.numerator) if f.denominator == 1 else f"{f.numerator}/{f.denominator}"


def _pct(f: Fraction) -> float:
    return round(float(f * 100), 2)


@dataclass(frozen=True)
class Candidate:
    nparity: int
    ndata: int
    children: int
    nspares: int
    vdevs: int
    unused_disks: int
    ashift: int
    recordsizes: tuple[int, ...]
    space: PoolSpace

    @property
    def name(self) -> str:
        return draid_name(self.nparity, self.ndata, self.children, self.nspares)

    @property
    def group_width(self) -> int:
        return self.ndata + self.nparity

    @property
    def parity_efficiency(self) -> Fraction:
        return Fraction(self.ndata, self.group_width)

    def padding(self, recordsize: int) -> dict:
        sector = 1 << self.ashift
        sectors = _ceil_div(recordsize, sector)
        rows = _ceil_div(sectors, self.ndata)
        allocated = rows * self.group_width * sector
        padding_eff = Fraction(sectors, rows * self.ndata)
        storage_eff = Fraction(sectors, rows * self.group_width)
        charged = (allocated >> SPA_MINBLOCKSHIFT) * self.space.deflate_ratio
        return {
            "recordsize": recordsize,
            "allocated_bytes": allocated,
            "padding_sectors": rows * self.ndata - sectors,
            "padding_efficiency": _frac(padding_eff),
            "padding_efficiency_pct": _pct(padding_eff),
            "storage_efficiency": _frac(storage_eff),
            "storage_efficiency_pct": _pct(storage_eff),
            "charged_bytes": charged,
            "fits_bytes": self.space.usable // charged * recordsize,
        }

    @property
    def mean_padding_efficiency(self) -> Fraction:
        total = Fraction(0)
        sector = 1 << self.ashift
        for rs in self.recordsizes:
            sectors = _ceil_div(rs, sector)
            total += Fraction(sectors, _ceil_div(sectors, self.ndata) * self.ndata)
        return total / len(self.recordsizes)

    @property
    def ngroups(self) -> int:
        ndisks = self.children - self.nspares
        return ndisks // gcd(self.group_width, ndisks)

    def as_dict(self) -> dict:
        sp = self.space
        mean_pad = self.mean_padding_efficiency
        return {
            "layout": self.name,
            "vdevs": self.vdevs,
            "unused_disks": self.unused_disks,
            "parity": self.nparity,
            "data": self.ndata,
            "children": self.children,
            "spares": self.nspares,
            "group_width": self.group_width,
            "groups_per_slice": self.ngroups,
            "parity_efficiency": _frac(self.parity_efficiency),
            "parity_efficiency_pct": _pct(self.parity_efficiency),
            "mean_padding_efficiency": _frac(mean_pad),
            "mean_padding_efficiency_pct": _pct(mean_pad),
            "padding": [self.padding(rs) for rs in self.recordsizes],
            "usable_bytes": sp.usable,
            "usable_tib": round(sp.usable / TIB, 3),
            "min_alloc_bytes": self.ndata << self.ashift,
            "min_alloc_on_disk_bytes": self.group_width << self.ashift,
            "failure_tolerance": {
                "concurrent_per_vdev": self.nparity,
                "sequential_per_vdev": self.nparity + self.nspares,
            },
            "space": {
                "child_asize": sp.child_asize,
                "vdev_asize": sp.vdev_asize,
                "metaslab_count": sp.metaslab_count,
                "metaslab_size": 1 << sp.metaslab_shift,
                "deflate_ratio": sp.deflate_ratio,
                "dspace": sp.normal_dspace,
                "embedded_log_dspace": sp.embedded_log_dspace,
                "slop": sp.slop,
            },
        }


def rank_key(c: Candidate):
    """Order of preference: least padding waste, then most usable space,
    then the narrower group (faster rebuild, smaller minimum allocation)."""
    return (-c.mean_padding_efficiency, -c.space.usable, c.ndata, c.nparity, c.nspares)


@dataclass
class Plan:
    candidates: list[Candidate]
    rejected: list[dict]
    recommended: Candidate | None
    reason: str


def plan(disk_count: int, disk_size: int, *, ashift: int = 12,
         recordsizes=(128 * KIB, MIB), parity=(1, 2, 3), spares=(0, 1, 2),
         min_data: int = 2, max_data: int = 12, children=None,
         whole_disk: bool = True, logical_sector: int = 512,
         min_parity: int = 2, min_spares: int = 1) -> Plan:
    if disk_count < 2:
        raise PlanError(f"disk_count {disk_count} must be at least 2")
    if not 9 <= ashift <= 16:
        raise PlanError(f"ashift {ashift} is not 9..16")
    if not recordsizes:
        raise PlanError("recordsizes must not be empty")
    for rs in recordsizes:
        if rs < 512 or rs & (rs - 1) or rs > 16 * MIB:
            raise PlanError(f"recordsize {rs} is not a power of two in 512..16M")
    if min_data < 1 or max_data < min_data:
        raise PlanError(f"min_data {min_data} / max_data {max_data} is not a range >= 1")
    child_counts = list(children) if children else [disk_count]
    for c in child_counts:
        if not 2 <= c <= disk_count:
            raise PlanError(f"children {c} is not 2..disk_count ({disk_count})")
    osize = whole_disk_partition_size(disk_size, logical_sector) if whole_disk else disk_size

    cands: list[Candidate] = []
    rejected: list[dict] = []
    for c in sorted(set(child_counts)):
        for p in sorted(set(parity)):
            for s in sorted(set(spares)):
                for d in range(min_data, max_data + 1):
                    why = check_draid(p, d, c, s)
                    if why:
                        rejected.append({"layout": draid_name(p, d, c, s), "reason": why})
                        continue
                    space = pool_space(osize, d, p, c, s, ashift, vdevs=disk_count // c)
                    cands.append(Candidate(p, d, c, s, disk_count // c, disk_count % c,
                                           ashift, tuple(recordsizes), space))
    cands.sort(key=rank_key)
    eligible = [c for c in cands if c.nparity >= min_parity and c.nspares >= min_spares]
    if not eligible:
        return Plan(cands, rejected, None,
                    f"no candidate has parity >= {min_parity} and spares >= {min_spares}")
    best = eligible[0]
    # The runner-up worth naming: same parity and spares, a different group
    # width, and within 5 % of the usable space (a real alternative, not a
    # narrow group that is padding-free but much smaller).
    peers = [c for c in eligible[1:] if c.nparity == best.nparity
             and c.nspares == best.nspares and c.ndata != best.ndata]
    runner = next((c for c in peers if c.space.usable * 20 >= best.space.usable * 19),
                  peers[0] if peers else None)
    rs_text = ", ".join(_size(rs) for rs in recordsizes)
    reason = (f"{best.name}: mean padding efficiency "
              f"{_pct(best.mean_padding_efficiency)}% over recordsizes {rs_text}, "
              f"parity efficiency {_frac(best.parity_efficiency)}, "
              f"{best.space.usable} bytes ({best.space.usable / TIB:.2f} TiB) usable, "
              f"survives {best.nparity} concurrent disk failures per vdev "
              f"and {best.nparity + best.nspares} with rebuilds to "
              f"{best.nspares} distributed spare(s)")
    if runner is not None:
        reason += (f"; runner-up {runner.name}: padding "
                   f"{_pct(runner.mean_padding_efficiency)}%, "
                   f"{runner.space.usable / TIB:.2f} TiB")
    return Plan(cands, rejected, best, reason)


def _size(n: int) -> str:
    for unit, name in ((MIB, "M"), (KIB, "K")):
        if n >= unit and n % unit == 0:
            return f"{n // unit}{name}"
    return str(n)


def format_table(p: Plan, recordsizes) -> str:
    """A fixed-width text table of the candidates, best first."""
    head = ["layout", "vdevs", "parity"] + [f"pad@{_size(rs)}" for rs in recordsizes]
    head += ["usable TiB", "min alloc", "tolerates"]
    rows = [head]
    for c in p.candidates:
        mark = "*" if c is p.recommended else ""
        row = [mark + c.name, str(c.vdevs), f"{_pct(c.parity_efficiency)}%"]
        row += [f"{c.padding(rs)['padding_efficiency_pct']}%" for rs in recordsizes]
        row += [f"{c.space.usable / TIB:.2f}", _size(c.ndata << c.ashift),
                f"{c.nparity}+{c.nspares}s"]
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines)
