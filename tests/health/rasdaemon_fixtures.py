"""Fixtures shared by the health tests: an EDAC sysfs tree and a rasdaemon database.

The database tables are created with the columns and types rasdaemon 0.6.8
(Debian 12) declares for ``mc_event`` and ``mce_record``; timestamps are
written as rasdaemon writes them (``%Y-%m-%d %H:%M:%S %z``).
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

MC_EVENT_COLUMNS = [
    ("id", "INTEGER PRIMARY KEY"), ("timestamp", "TEXT"), ("err_count", "INTEGER"),
    ("err_type", "TEXT"), ("err_msg", "TEXT"), ("label", "TEXT"), ("mc", "INTEGER"),
    ("top_layer", "INTEGER"), ("middle_layer", "INTEGER"), ("lower_layer", "INTEGER"),
    ("address", "INTEGER"), ("grain", "INTEGER"), ("syndrome", "INTEGER"),
    ("driver_detail", "TEXT"),
]
MCE_RECORD_COLUMNS = [
    ("id", "INTEGER PRIMARY KEY"), ("timestamp", "TEXT"), ("mcgcap", "INTEGER"),
    ("mcgstatus", "INTEGER"), ("status", "INTEGER"), ("addr", "INTEGER"), ("misc", "INTEGER"),
    ("ip", "INTEGER"), ("tsc", "INTEGER"), ("walltime", "INTEGER"), ("cpu", "INTEGER"),
    ("cpuid", "INTEGER"), ("apicid", "INTEGER"), ("socketid", "INTEGER"), ("cs", "INTEGER"),
    ("bank", "INTEGER"), ("cpuvendor", "INTEGER"), ("bank_name", "TEXT"),
    ("error_msg", "TEXT"), ("mcgstatus_msg", "TEXT"), ("mcistatus_msg", "TEXT"),
    ("user_action", "TEXT"), ("mc_location", "TEXT"),
]

# 2026-11-29 12:00:00 UTC: the reference instant of the unit tests, which pass
# it to the code under test as ``now=``.  A test whose code reads the real
# clock (a playbook on a node) passes ``now=time.time()`` to the builders below
# instead, so that "two hours old" stays two hours old whatever the date.
NOW = 1795953600.0
HOUR = 3600
DAY = 86400

# MCi_STATUS of a corrected DRAM ECC error from a UMC bank: VAL (63), EN (60),
# ADDRV (58), SYNDV (53); an uncorrected one has UC (61) and PCC (57) too.
STATUS_CE = (1 << 63) | (1 << 60) | (1 << 58) | (1 << 53)
STATUS_UE = STATUS_CE | (1 << 61) | (1 << 57)


def rasdaemon_ts(epoch, offset_hours=0):
    """How rasdaemon writes a timestamp (local time with its UTC offset)."""
    local = time.gmtime(epoch + offset_hours * HOUR)
    sign = "+" if offset_hours >= 0 else "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", local) + f" {sign}{abs(offset_hours):02d}00"


def _signed64(v):
    """sqlite stores 64-bit registers as signed integers, as rasdaemon binds them."""
    return v - (1 << 64) if v >= 1 << 63 else v


def create_db(path: Path, mc_events=(), mce_records=()):
    """A rasdaemon database with the given rows (dicts of column values)."""
    db = sqlite3.connect(path)
    for table, cols in (("mc_event", MC_EVENT_COLUMNS), ("mce_record", MCE_RECORD_COLUMNS)):
        db.execute(f"CREATE TABLE IF NOT EXISTS {table} ("
                   + ", ".join(f"{n} {t}" for n, t in cols) + ")")
    for row in mc_events:
        full = {"err_msg": "", "address": 0, "grain": 64, "syndrome": 0, "driver_detail": "",
                "top_layer": 0, "middle_layer": 0, "lower_layer": -1, **row}
        db.execute(f"INSERT INTO mc_event ({', '.join(full)}) VALUES "
                   f"({', '.join('?' for _col in full)})", list(full.values()))
    for row in mce_records:
        full = {"mcgcap": 0x117, "mcgstatus": 0, "addr": 0x1234000, "misc": 0, "ip": 0,
                "tsc": 0, "walltime": 0, "cpu": 0, "cpuid": 0xA00F11, "apicid": 0, "cs": 0,
                "bank": 16, "cpuvendor": 2, "mcgstatus_msg": "", "user_action": "", **row}
        full["status"] = _signed64(full["status"])
        db.execute(f"INSERT INTO mce_record ({', '.join(full)}) VALUES "
                   f"({', '.join('?' for _col in full)})", list(full.values()))
    db.commit()
    db.close()
    return path


def mc_event(age_s, label, kind="Corrected", count=1, mc=0, top=0, mid=0, offset_hours=0,
             now=NOW):
    return {"timestamp": rasdaemon_ts(now - age_s, offset_hours), "err_count": count,
            "err_type": kind, "err_msg": "memory read error", "label": label, "mc": mc,
            "top_layer": top, "middle_layer": mid}


def umc_mce(age_s, channel, csrow=0, socket=0, uncorrected=False, now=NOW):
    return {"timestamp": rasdaemon_ts(now - age_s), "socketid": socket,
            "status": STATUS_UE if uncorrected else STATUS_CE,
            "bank_name": f"Unified Memory Controller (bank={16 + channel})",
            "error_msg": "DRAM ECC error.",
            "mcistatus_msg": ("Uncorrected_error" if uncorrected else
                              "Corrected_error, no action required."),
            "mc_location": f"memory_channel={channel},csrow={csrow}"}


def write(path: Path, text: str):
    # Whole or not at all, as a sysfs attribute reads: a test that changes the
    # tree while the code under test samples it must never show it a file
    # that is created but not yet written (an empty count).
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def edac_tree(root: Path, dimms, mc_name="F19h"):
    """An EDAC sysfs tree: ``dimms`` = [(mc, idx, label, location, ce, ue)]."""
    for mc in sorted({d[0] for d in dimms}):
        mine = [d for d in dimms if d[0] == mc]
        write(root / f"mc{mc}" / "mc_name", mc_name + "\n")
        write(root / f"mc{mc}" / "ce_count", f"{sum(d[4] for d in mine)}\n")
        write(root / f"mc{mc}" / "ue_count", f"{sum(d[5] for d in mine)}\n")
        write(root / f"mc{mc}" / "ce_noinfo_count", "0\n")
        write(root / f"mc{mc}" / "ue_noinfo_count", "0\n")
        write(root / f"mc{mc}" / "size_mb", "65536\n")
        for _mc, idx, label, location, ce, ue in mine:
            d = root / f"mc{mc}" / f"dimm{idx}"
            write(d / "dimm_label", label + "\n")
            write(d / "dimm_location", location + " \n")
            write(d / "dimm_ce_count", f"{ce}\n")
            write(d / "dimm_ue_count", f"{ue}\n")
            write(d / "dimm_mem_type", "Registered-DDR4\n")
            write(d / "dimm_edac_mode", "S16ECD16ED\n")
            write(d / "size", "65536\n")
    return root


def csrow_tree(root: Path, rows):
    """The older layout: ``rows`` = [(mc, row, {ch: (label, ce)}, ue)]."""
    for mc, row, chans, ue in rows:
        write(root / f"mc{mc}" / "ce_count", f"{sum(c[1] for c in chans.values())}\n")
        write(root / f"mc{mc}" / "ue_count", f"{ue}\n")
        d = root / f"mc{mc}" / f"csrow{row}"
        write(d / "ue_count", f"{ue}\n")
        write(d / "ce_count", f"{sum(c[1] for c in chans.values())}\n")
        for ch, (label, ce) in chans.items():
            write(d / f"ch{ch}_dimm_label", label + "\n")
            write(d / f"ch{ch}_ce_count", f"{ce}\n")
    return root
