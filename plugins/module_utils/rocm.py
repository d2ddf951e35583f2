# Copyright: junkyard.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parse what rocminfo, rocm-smi, amd-smi, modinfo and the HIP check print, and
compare it with what a node's hardware profile says it has.

Pure Python (stdlib only): the module rocm_facts runs the commands, this file
only reads their output, so every parser is unit-tested on recorded output.
"""

from __future__ import annotations

import json
import re

GFX_RE = re.compile(r"^gfx[0-9a-f]{3,4}$")
_AGENT_SPLIT_RE = re.compile(r"^\*{7}\s*\n\s*Agent (\d+)\s*\n\*{7}\s*$", re.M)
_TOP_KEY_RE = re.compile(r"^  ([A-Za-z][A-Za-z0-9 .#()/-]*?):\s*(.*?)\s*$")
_ISA_RE = re.compile(r"^\s+Name:\s+(amdgcn-amd-amdhsa--\S+)\s*$", re.M)
_HIP_LINE_RE = re.compile(
    r"^hip-check: device (\d+) (\S+) (ok|FAIL)(?: (.*))?$")
_HIP_COUNT_RE = re.compile(r"^hip-check: devices (\d+)$", re.M)


def gfx_of(value):
    """'gfx908:sramecc+:xnack-' or 'amdgcn-amd-amdhsa--gfx908:...' -> 'gfx908' (else None)."""
    if not value:
        return None
    value = str(value).strip().rsplit("--", maxsplit=1)[-1].split(":", maxsplit=1)[0].lower()
    return value if GFX_RE.match(value) else None


def parse_rocminfo(text):
    """Return {'kfd_loaded', 'agents': [...], 'gpus': [...]} from rocminfo's output.

    Only an agent's own fields (two-space indent) are read; the nested pool and
    ISA sections repeat keys such as Name and are skipped, except the ISA names.
    """
    loaded = "ROCk module is loaded" in text and "NOT loaded" not in text
    parts = _AGENT_SPLIT_RE.split(text)
    agents = []
    # parts: [preamble, num, body, num, body, ...]
    for i in range(1, len(parts) - 1, 2):
        body = parts[i + 1].split("*** Done ***")[0]
        fields = {}
        for line in body.splitlines():
            match = _TOP_KEY_RE.match(line)
            if match and match.group(1) not in fields:
                fields[match.group(1)] = match.group(2)
        isas = _ISA_RE.findall(body)
        agent = {
            "agent": int(parts[i]),
            "name": fields.get("Name", ""),
            "marketing_name": fields.get("Marketing Name", ""),
            "uuid": fields.get("Uuid", ""),
            "device_type": fields.get("Device Type", ""),
            "node": _int(fields.get("Node")),
            "chip_id": _hex_in(fields.get("Chip ID")),
            "compute_units": _int(fields.get("Compute Unit")),
            "isa": isas,
        }
        agent["gfx_target"] = gfx_of(agent["name"]) or (gfx_of(isas[0]) if isas else None)
        agents.append(agent)
    gpus = [a for a in agents if a["device_type"].upper() == "GPU"]
    return {"kfd_loaded": loaded, "agents": agents, "gpus": gpus}


def parse_rocm_smi_json(text):
    """`rocm-smi --showid --showproductname --json` -> one entry per card, card order."""
    data = _json(text, "rocm-smi")
    cards = []
    for key, fields in data.items():
        match = re.match(r"^card(\d+)$", key)
        if not match or not isinstance(fields, dict):
            continue
        cards.append({
            "index": int(match.group(1)),
            "device_id": (fields.get("GPU ID") or fields.get("Device ID") or "").lower(),
            "series": fields.get("Card series") or fields.get("Card Series", ""),
            "vendor": fields.get("Card vendor") or fields.get("Card Vendor", ""),
            "gfx_target": gfx_of(fields.get("GFX Version")),
        })
    return sorted(cards, key=lambda c: c["index"])


def parse_amd_smi_static(text):
    """`amd-smi static --asic --json` -> one entry per GPU (list form, or the older dict form)."""
    data = _json(text, "amd-smi")
    if isinstance(data, dict):
        items = [dict(v, gpu=_int(re.sub(r"\D", "", k))) for k, v in data.items()
                 if isinstance(v, dict)]
    elif isinstance(data, list):
        items = [d for d in data if isinstance(d, dict)]
    else:
        raise ValueError("amd-smi printed JSON that is neither a list nor a mapping")
    gpus = []
    for item in items:
        asic = item.get("asic") if isinstance(item.get("asic"), dict) else item
        gpus.append({
            "index": _int(item.get("gpu")),
            "market_name": asic.get("market_name", ""),
            "device_id": str(asic.get("device_id", "")).lower(),
            "gfx_target": gfx_of(asic.get("target_graphics_version")),
        })
    return sorted(gpus, key=lambda g: (g["index"] is None, g["index"]))


def parse_modinfo_filename(text, kernel_release):
    """Classify `modinfo -F filename amdgpu`: in-tree under /lib/modules/<rel>/kernel/."""
    path = text.strip().splitlines()[0].strip() if text.strip() else ""
    in_tree = bool(re.match(
        rf"^(/usr)?/lib/modules/{re.escape(kernel_release)}/kernel/.*/amdgpu\.ko(\.xz|\.zst|\.gz)?$",
        path))
    return {"filename": path, "in_tree": in_tree,
            "dkms": "/updates/" in path or "/dkms/" in path or "/extra/" in path}


def parse_hip_check(text):
    """Lines of the HIP check program -> {'device_count', 'devices': [...]}."""
    count = _HIP_COUNT_RE.search(text)
    devices = []
    for line in text.splitlines():
        match = _HIP_LINE_RE.match(line.strip())
        if match:
            devices.append({"device": int(match.group(1)), "arch": match.group(2),
                            "gfx_target": gfx_of(match.group(2)),
                            "ok": match.group(3) == "ok", "detail": match.group(4) or ""})
    return {"device_count": int(count.group(1)) if count else None, "devices": devices}


def check_gpus(facts, expected_count, expected_gfx):
    """Compare the collected facts with the profile; return a list of problems (empty: fine)."""
    problems = []
    want = f"{expected_count} x {expected_gfx}" if expected_count else "no GPU"
    rocminfo = facts.get("rocminfo")
    if rocminfo is None:
        problems.append("rocminfo is not installed")
    else:
        gpus = rocminfo["gpus"]
        if not rocminfo["kfd_loaded"] and expected_count:
            problems.append("rocminfo: the amdgpu/KFD driver is not loaded (no /dev/kfd): "
                            f"no GPU found, the profile expects {want}")
        elif len(gpus) != expected_count:
            problems.append(f"rocminfo reports {len(gpus)} GPU agents, the profile expects {want}")
        wrong = sorted({g["gfx_target"] or g["name"] for g in gpus} - {expected_gfx})
        if gpus and expected_gfx and wrong:
            problems.append(f"rocminfo reports gfx targets {', '.join(map(str, wrong))}, "
                            f"the profile expects {expected_gfx}")
    smi = facts.get("smi")
    if smi is None:
        problems.append("neither amd-smi nor rocm-smi is installed")
    else:
        if len(smi["gpus"]) != expected_count:
            problems.append(f"{smi['tool']} reports {len(smi['gpus'])} GPUs, "
                            f"the profile expects {want}")
        wrong = sorted({g["gfx_target"] for g in smi["gpus"] if g["gfx_target"]}
                       - {expected_gfx})
        if expected_gfx and wrong:
            problems.append(f"{smi['tool']} reports gfx targets {', '.join(wrong)}, "
                            f"the profile expects {expected_gfx}")
    driver = facts.get("driver") or {}
    if expected_count:
        if not driver.get("filename"):
            problems.append("modinfo finds no amdgpu module for the running kernel")
        elif not driver.get("in_tree"):
            problems.append(f"amdgpu is loaded from {driver['filename']}, not from the "
                            "kernel's own tree (/lib/modules/<release>/kernel/): a DKMS or "
                            "out-of-tree driver")
        if driver.get("dkms_version"):
            problems.append(f"/sys/module/amdgpu/version is {driver['dkms_version']}: the "
                            "running amdgpu is a DKMS build (the in-tree driver has no version)")
    return problems


def check_hip(result, expected_count, expected_gfx):
    problems = []
    if result["device_count"] != expected_count:
        problems.append(f"the HIP check sees {result['device_count']} devices, "
                        f"the profile expects {expected_count}")
    for dev in result["devices"]:
        if not dev["ok"]:
            problems.append(f"the HIP check failed on device {dev['device']}: {dev['detail']}")
        elif expected_gfx and dev["gfx_target"] != expected_gfx:
            problems.append(f"the HIP check ran on device {dev['device']} as {dev['arch']}, "
                            f"the profile expects {expected_gfx}")
    seen = {d["device"] for d in result["devices"] if d["ok"]}
    missing = sorted(set(range(expected_count)) - seen)
    if missing and result["device_count"] == expected_count:
        problems.append(f"the HIP check did not pass on devices {missing}")
    return problems


def _json(text, tool):
    start = min([i for i in (text.find("{"), text.find("[")) if i >= 0], default=-1)
    if start < 0:
        raise ValueError(f"{tool} printed no JSON: {text.strip()[:200]!r}")
    return json.loads(text[start:])


def _int(value):
    try:
        return int(str(value).split("(", maxsplit=1)[0].strip())
    except (TypeError, ValueError):
        return None


def _hex_in(value):
    match = re.search(r"\((0x[0-9a-fA-F]+)\)", value or "")
    return match.group(1).lower() if match else None
