"""Tests of the dRAID planner (module_utils/draid.py and the draid_plan module).

Every expected figure below is derived by hand in the comments from the rules
(padding: ceil(psize / (D * sector)) * (D + P) * sector; the OpenZFS space
rules listed in draid.py's docstring), not computed by the code under test.
"""

import json
import os
import subprocess
import sys
from fractions import Fraction
from pathlib import Path
from unittest import mock

import pytest
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args
from ansible_collections.junkyard.cluster.plugins.module_utils import draid
from ansible_collections.junkyard.cluster.plugins.modules import draid_plan

K = 1024
M = 1024 * 1024

# (P, D, ashift, recordsize, allocated bytes, padding eff, storage eff)
PADDING_TABLE = [
    # draid2:8d, 4K sectors, 128K = 32 sectors: ceil(32/8) = 4 rows of 10
    # = 40 sectors = 163840 B; 32 of 32 data slots used; 32/40 = 4/5 stored.
    (2, 8, 12, 128 * K, 40 * 4096, Fraction(1), Fraction(4, 5)),
    # draid2:9d, 128K: ceil(32/9) = 4 rows of 11 = 44 sectors; 32 of 36 data
    # slots = 8/9; 32/44 = 8/11 stored.
    (2, 9, 12, 128 * K, 44 * 4096, Fraction(8, 9), Fraction(8, 11)),
    # draid2:11d, 128K: ceil(32/11) = 3 rows of 13 = 39 sectors; 32/33; 32/39.
    (2, 11, 12, 128 * K, 39 * 4096, Fraction(32, 33), Fraction(32, 39)),
    # draid2:11d, 1M = 256 sectors: ceil(256/11) = 24 rows of 13 = 312
    # sectors; 256 of 264 slots = 32/33; 256/312 = 32/39.
    (2, 11, 12, M, 312 * 4096, Fraction(32, 33), Fraction(32, 39)),
    # draid2:9d, 1M: ceil(256/9) = 29 rows of 11 = 319 sectors; 256/261;
    # 256/319.
    (2, 9, 12, M, 319 * 4096, Fraction(256, 261), Fraction(256, 319)),
    # draid1:4d, 128K: 8 rows of 5 = 40 sectors; 1; 32/40 = 4/5.
    (1, 4, 12, 128 * K, 40 * 4096, Fraction(1), Fraction(4, 5)),
    # draid1:5d, 128K: ceil(32/5) = 7 rows of 6 = 42 sectors; 32/35; 32/42.
    (1, 5, 12, 128 * K, 42 * 4096, Fraction(32, 35), Fraction(16, 21)),
    # draid1:5d, 1M: ceil(256/5) = 52 rows of 6 = 312 sectors; 256/260.
    (1, 5, 12, M, 312 * 4096, Fraction(64, 65), Fraction(256, 312)),
    # draid3:8d, 16K = 4 sectors: 1 row of 11 = 45056 B; 4 of 8 slots; 4/11.
    (3, 8, 12, 16 * K, 11 * 4096, Fraction(1, 2), Fraction(4, 11)),
    # 512-byte record on 4K sectors is one sector: 1 row of 10 on draid2:8d.
    (2, 8, 12, 512, 10 * 4096, Fraction(1, 8), Fraction(1, 10)),
    # ashift 9, draid2:6d, 4K = 8 sectors: ceil(8/6) = 2 rows of 8 = 16
    # sectors = 8192 B; 8 of 12 slots = 2/3; 8/16 = 1/2.
    (2, 6, 9, 4 * K, 16 * 512, Fraction(2, 3), Fraction(1, 2)),
    # ashift 13 (8K sectors), draid2:8d, 128K = 16 sectors: 2 rows of 10 =
    # 20 sectors = 163840 B; 1; 16/20.
    (2, 8, 13, 128 * K, 20 * 8192, Fraction(1), Fraction(4, 5)),
]


def _fixed_space(ratio=409):
    return draid.PoolSpace(child_asize=0, vdev_asize=0, metaslab_shift=34, metaslab_count=0,
                           deflate_ratio=ratio, normal_dspace=10 * 2**40,
                           embedded_log_dspace=0, slop=0)


@pytest.mark.parametrize("p,d,ashift,rs,alloc,pad,store", PADDING_TABLE)
def test_padding_table(p, d, ashift, rs, alloc, pad, store):
    assert draid.block_asize(rs, d, p, ashift) == alloc
    cand = draid.Candidate(p, d, 45, 0, 1, 0, ashift, (rs,), _fixed_space())
    row = cand.padding(rs)
    assert row["allocated_bytes"] == alloc
    assert Fraction(row["padding_efficiency"]) == pad
    assert Fraction(row["storage_efficiency"]) == store
    assert cand.mean_padding_efficiency == pad


@pytest.mark.parametrize("p,d,ashift,ratio", [
    # 128K on draid2:6d, 4K: 6 rows of 8 = 48 sectors = 196608 B; >> 9 = 384;
    # 131072 // 384 = 341 (341.33 truncated).
    (2, 6, 12, 341),
    # draid2:8d: 40 sectors = 163840 B; >> 9 = 320; 131072 // 320 = 409.
    (2, 8, 12, 409),
    # draid1:16d: 2 rows of 17 = 34 sectors = 139264 B; >> 9 = 272; 481.
    (1, 16, 12, 481),
    # draid2:11d: 39 sectors = 159744 B; >> 9 = 312; 420.
    (2, 11, 12, 420),
])
def test_deflate_ratio(p, d, ashift, ratio):
    assert draid.deflate_ratio(d, p, ashift) == ratio


@pytest.mark.parametrize("disk,lbsize,part", [
    # 10^12 B = 1953125000 LBAs; backup GPT 16384/512 + 1 = 33 blocks, last
    # usable LBA 1953124966; 1953124967 - 16384 (reserved p9) - 2048 (start)
    # = 1953106535, aligned down to 2048 -> 1953105920 LBAs = 999990231040 B.
    (10**12, 512, 999990231040),
    # 1953525168 LBAs (a common "1 TB" drive): 1953525135 - 18432 =
    # 1953506703 -> 953860 * 2048 = 1953505280 LBAs = 1000194703360 B.
    (1953525168 * 512, 512, 1000194703360),
    # 4Kn 10^12 B = 244140625 LBAs; GPT 16384/4096 + 1 = 5; 244140620 -
    # 16384 - 2048 = 244122188 -> 119200 * 2048 = 244121600 LBAs.
    (10**12, 4096, 244121600 * 4096),
])
def test_whole_disk_partition(disk, lbsize, part):
    assert draid.whole_disk_partition_size(disk, lbsize) == part


def test_published_24x1tb_case_exact():
    """openzfs/zfs#15467: 24 x 1 TB, draid2:6d:24c:0s, zfs list -p used+avail
    = 2095104 + 15835676542976 = 15835678638080 on OpenZFS 2.2.0.

    partition 999990231040 B (above); 256K-aligned already; minus 4 MiB +
    512 KiB labels = 999985512448; minus 32 MiB reflow reserve = 999951958016;
    // 16 MiB = 59601 rows -> 999938850816; x 24 = 23998532419584; group
    8 x 16 MiB divides it (178803 groups).  asize >> 29 = 44700 > 200, so
    shift = highbit(asize / 200) = 37 -> capped at 34: 1396 metaslabs of
    16 GiB (8 x 4K divides 2^34, no trimming).  Each deflates to
    (2^34 >> 9) * 341 = 11442061312; one is the embedded log: dspace =
    1395 * 11442061312 = 15961675530240.  Slop: dspace >> 5 > 128 GiB ->
    137438953472 - 11442061312 = 125996892160.  Used + avail =
    15961675530240 - 125996892160 = 15835678638080.  Tolerance: 0 bytes.
    """
    space = draid.pool_space(draid.whole_disk_partition_size(10**12), 6, 2, 24, 0, 12)
    assert space.child_asize == 999985512448
    assert space.vdev_asize == 23998532419584
    assert space.metaslab_count == 1396
    assert space.metaslab_shift == 34
    assert space.deflate_ratio == 341
    assert space.normal_dspace == 15961675530240
    assert space.slop == 125996892160
    assert space.usable == 2095104 + 15835676542976 == 15835678638080


def test_published_case_file_vdevs_same():
    # `truncate -s 1TB` files used as they are: 10^12 // 262144 = 3814697
    # labels' worth -> 999999930368 B; minus 4718592 B of labels =
    # 999995211776; after the 32 MiB reserve 59602 rows (one more than the
    # whole-disk case), 24 more rows in all, but still 1396 whole 16 GiB
    # metaslabs, so the same figure.
    space = draid.pool_space(10**12, 6, 2, 24, 0, 12)
    assert space.child_asize == 999995211776
    assert space.metaslab_count == 1396
    assert space.usable == 15835678638080


def test_one_more_metaslab_with_a_1953525168_sector_disk():
    # The 1000204886016-byte "1 TB" drive gives 1397 metaslabs, so the
    # published figure fixes the disk at 10^12 bytes (within a metaslab).
    disk = draid.whole_disk_partition_size(1953525168 * 512)
    space = draid.pool_space(disk, 6, 2, 24, 0, 12)
    assert space.metaslab_count == 1397
    assert space.usable - 15835678638080 == 11442061312


def test_36x18tb_case_within_root_used():
    """openzfs/zfs#13727 (OpenZFS 2.1.5): 36 x 18000207937536 B,
    draid1:16d:36c:2s, `zfs get available -p` = 574804246033080.  The model's
    used+avail is 6279936 B (6 MiB) above it: the new pool's root `used`."""
    space = draid.pool_space(draid.whole_disk_partition_size(18000207937536), 16, 1, 36, 2, 12)
    assert space.deflate_ratio == 481
    assert space.usable - 574804246033080 == 6279936


@pytest.mark.parametrize("dspace,log,slop", [
    # small pool: 4 GiB >> 5 = 128 MiB, no embedded log.
    (4 * 2**30, 0, 128 * M),
    # tiny pool: 1 GiB >> 5 = 32 MiB < 128 MiB floor; floor is min(512 MiB, 128 MiB).
    (2**30, 0, 128 * M),
    # 100 MiB pool: floor min(50 MiB, 128 MiB) = 50 MiB.
    (100 * M, 0, 50 * M),
    # 1 TiB: 32 GiB, log 1 GiB -> 31 GiB.
    (2**40, 2**30, 31 * 2**30),
    # log larger than half the slop: only half is taken off.
    (2**40, 20 * 2**30, 16 * 2**30),
    # huge: capped at 128 GiB.
    (2**50, 0, 128 * 2**30),
])
def test_slop(dspace, log, slop):
    assert draid.slop_space(dspace, log) == slop


@pytest.mark.parametrize("asize,shift", [
    # 8 GiB: 8G >> 29 = 16 metaslabs, neither < 16 nor > 200: default 29.
    (8 * 2**30, 29),
    # 2 GiB: 4 < 16 -> highbit(2^31 / 16 = 2^27) = 28 (2^27 has bit_length 28).
    (2 * 2**30, 28),
    # 100 TiB: 204800 > 200 -> highbit(100 * 2^40 / 200 = 2^39) = 40 -> 34;
    # 100 * 2^40 >> 34 = 6400 <= 2^17.
    (100 * 2**40, 34),
    # 4 PiB: capped at 34 gives 2^18 > 2^17 metaslabs -> highbit(2^52 / 2^17
    # = 2^35) = 36.
    (4 * 2**50, 36),
    # 64 MiB: 0 -> highbit(2^26 / 16 = 2^22) = 23 < 24 -> 24.
    (64 * M, 24),
])
def test_metaslab_shift(asize, shift):
    assert draid.metaslab_shift(asize) == shift


def test_draid_metaslab_trim_to_group_width():
    # draid2:8d, ashift 12: unit 10 x 4096 = 40960 B.  Metaslab 0 starts at
    # 0: 2^29 // 40960 = 13107 units = 536862720 B.  Metaslab 1 starts at
    # 2^29 = 13107.2 units -> aligned up to 13108 units = 536903680, 32768 B
    # later; (2^29 - 32768) // 40960 = 13106 units = 536821760 B.
    sizes = draid.draid_metaslab_sizes(16 * 2**29, 10, 12)
    assert sizes[0] == 536862720
    assert sizes[1] == 536821760
    assert len(sizes) == 16


@pytest.mark.parametrize("p,d,c,s,why", [
    (4, 8, 45, 0, "parity 4 is not 1..3"),
    (2, 8, 9, 0, "group width 10 exceeds children - spares (9 - 0)"),
    (2, 8, 11, 2, "group width 10 exceeds children - spares (11 - 2)"),
    (2, 8, 256, 1, "children 256 exceeds 255"),
    (2, 0, 45, 1, "data disks 0 must be at least 1"),
    (2, 8, 45, 101, "spares 101 is not 0..100"),
    (2, 8, 10, 0, None),
])
def test_check_draid(p, d, c, s, why):
    assert draid.check_draid(p, d, c, s) == why


def _by_name(result, name):
    return next(c for c in result.candidates if c.name == name)


def test_45_disks_ranking():
    res = draid.plan(45, 18000207937536, recordsizes=[128 * K, M], parity=[1, 2],
                     spares=[1], min_data=2, max_data=12)
    order = [c.name for c in res.candidates]
    d8 = order.index("draid2:8d:45c:1s")
    d9 = order.index("draid2:9d:45c:1s")
    d11 = order.index("draid2:11d:45c:1s")
    assert d8 < d11 < d9
    # "close behind": 11d loses 1/33 (3.03 %) to padding at both sizes.
    assert _by_name(res, "draid2:11d:45c:1s").mean_padding_efficiency == Fraction(32, 33)
    assert _by_name(res, "draid2:8d:45c:1s").mean_padding_efficiency == 1
    assert order.index("draid1:4d:45c:1s") < order.index("draid1:5d:45c:1s")
    assert (_by_name(res, "draid1:5d:45c:1s").mean_padding_efficiency
            < _by_name(res, "draid1:4d:45c:1s").mean_padding_efficiency)
    assert res.recommended.name == "draid2:8d:45c:1s"
    assert "runner-up draid2:11d:45c:1s" in res.reason


def test_45_disks_recommendation_with_defaults():
    res = draid.plan(45, 18000207937536)
    assert res.recommended.name == "draid2:8d:45c:1s"
    # 8d and 11d usable: 11d has more raw space (parity 11/13) but pays padding.
    assert (_by_name(res, "draid2:11d:45c:1s").space.usable
            > _by_name(res, "draid2:8d:45c:1s").space.usable)


def test_multiple_vdevs_and_unused_disks():
    res = draid.plan(45, 10**12, parity=[2], spares=[0], min_data=8, max_data=8,
                     children=[22], min_spares=0)
    (cand,) = res.candidates
    assert (cand.vdevs, cand.unused_disks) == (2, 1)
    one = draid.pool_space(draid.whole_disk_partition_size(10**12), 8, 2, 22, 0, 12)
    assert cand.space.normal_dspace == 2 * one.normal_dspace


def test_no_eligible_candidate():
    res = draid.plan(8, 10**12, parity=[1], spares=[0], min_parity=2)
    assert res.recommended is None
    assert res.reason == "no candidate has parity >= 2 and spares >= 1"


@pytest.mark.parametrize("kwargs,msg", [
    (dict(disk_count=1), "disk_count 1 must be at least 2"),
    (dict(ashift=17), "ashift 17 is not 9..16"),
    (dict(recordsizes=[3000]), "recordsize 3000 is not a power of two in 512..16M"),
    (dict(min_data=5, max_data=4), "min_data 5 / max_data 4 is not a range >= 1"),
    (dict(children=[50]), "children 50 is not 2..disk_count (45)"),
    (dict(disk_size=32 * M, whole_disk=False), "below the 64 MiB ZFS minimum"),
])
def test_plan_errors(kwargs, msg):
    args = dict(disk_count=45, disk_size=10**12)
    args.update(kwargs)
    with pytest.raises(draid.PlanError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        draid.plan(**args)


def test_table_marks_recommendation():
    res = draid.plan(24, 10**12, parity=[2], spares=[0, 1], min_data=6, max_data=8)
    table = draid.format_table(res, [128 * K, M])
    lines = table.splitlines()
    assert lines[0].split()[:3] == ["layout", "vdevs", "parity"]
    marked = [line for line in lines if line.startswith("*")]
    assert len(marked) == 1
    assert marked[0].split()[0] == "*" + res.recommended.name
    assert len(lines) == 1 + len(res.candidates)


class _Exit(Exception):
    pass


def _run_module(args):
    def exit_json(self, **kw):
        raise _Exit(dict(kw, failed=False))

    def fail_json(self, **kw):
        raise _Exit(dict(kw, failed=True))

    with patch_module_args(args), \
            mock.patch.object(basic.AnsibleModule, "exit_json", exit_json), \
            mock.patch.object(basic.AnsibleModule, "fail_json", fail_json), \
            pytest.raises(_Exit) as exc:
        draid_plan.main()
    return exc.value.args[0]


def test_module_published_case():
    out = _run_module({"disk_count": 24, "disk_size": 10**12, "parity": [2], "spares": [0],
                       "min_data": 6, "max_data": 6, "min_spares": 0, "_ansible_check_mode": True})
    assert out["changed"] is False
    assert out["recommended"]["layout"] == "draid2:6d:24c:0s"
    assert out["recommended"]["usable_bytes"] == 15835678638080
    json.dumps(out)  # everything returned is JSON-serialisable (no Fraction)


def test_module_error():
    out = _run_module({"disk_count": 45, "disk_size": 10**12, "ashift": 20})
    assert out["failed"] is True
    assert out["msg"] == "ashift 20 is not 9..16"


ROOT = Path(__file__).resolve().parents[2]


def _playbook(*extra):
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default")
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "playbooks/draid_plan.yml",
         *extra], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)


def test_playbook_prints_table_and_recommendation():
    run = _playbook("-e", '{"disk_count": 24, "disk_size": 1000000000000, "parity": [2], '
                          '"spares": [0, 1], "min_data": 6, "max_data": 8}')
    assert run.returncode == 0, run.stdout + run.stderr
    assert "layout             vdevs  parity  pad@128K  pad@1M  usable TiB" in run.stdout
    assert "draid2:6d:24c:0s   1      75.0%   88.89%    99.22%  14.40" in run.stdout
    assert "*draid2:8d:24c:1s" in run.stdout


def test_playbook_without_inputs_says_what_to_give():
    run = _playbook()
    assert run.returncode != 0
    assert "give -e disk_count=<n> -e disk_size=<bytes>" in run.stdout


def test_playbook_takes_the_sizes_as_command_line_words():
    """-e disk_count=24 gives strings; the module's int options convert them (the playbook
    casts nothing)."""
    run = _playbook("-e", "disk_count=24", "-e", "disk_size=1000000000000",
                    "-e", '{"parity": [2], "spares": [0], "min_data": 6, "max_data": 6}')
    assert run.returncode == 0, run.stdout + run.stderr
    rows = [line.split() for line in run.stdout.splitlines() if "draid2:6d:24c:0s" in line]
    assert ["-", "draid2:6d:24c:0s", "1", "75.0%", "88.89%", "99.22%", "14.40"] in \
        [r[:7] for r in rows], run.stdout
