# Copyright (c) 2026, junkyard.cluster developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reading a BMC's sensor list and proposing a hardware profile from it.

Parsers for ``ipmitool sdr list -v all``, ``ipmitool fru print 0`` and
``ipmitool mc info``, and the rules that turn the sensors into a profile in the
inventory's own shape (inventories/example/group_vars/all/hardware.yml).
"""

import re

# IPMI sensor type codes (IPMI 2.0, table 42-3) that the profile uses.
TEMPERATURE, CURRENT, FAN, POWER_SUPPLY = 0x01, 0x03, 0x04, 0x08

# Fan commands of the BMC vendors seen so far, by IANA enterprise number
# (ipmitool mc info's "Manufacturer ID"), and how their zones are laid out.
KNOWN_BOARDS = {
    # Gigabyte: zone by fan_id; the design's G292s: one zone per side, CPU zone 0.
    15370: {"vendor": "Gigabyte", "layout": "sides", "fan_ids": [1, 2], "cpu_fan_id": 0,
            "fan_commands": {"set_duty": "0x2e 0x10 0x0a 0x3c 0x00 {fan_id} 0x01 {duty}",
                             "auto": "0x2e 0x10 0x0a 0x3c 0x00 {fan_id} 0x00 0x00"}},
    # Supermicro X10-X12/H11-H12: zone 0 CPU/system fans (FAN1..), zone 1
    # peripheral fans (FANA..); full manual mode is 0x30 0x45 0x01 0x01.
    10876: {"vendor": "Supermicro", "layout": "one", "fan_ids": [1], "cpu_fan_id": 0,
            "fan_commands": {"set_duty": "0x30 0x70 0x66 0x01 {fan_id} {duty}",
                             "manual": "0x30 0x45 0x01 0x01"}},
}

_NOT_CPU_DIE = re.compile(r"VR|VRM|VDD|DIMM|MEM|SOC|VCORE", re.IGNORECASE)
_CPU = re.compile(r"(?:^|[^A-Z])CPU\s*_?(\d+)|^P(\d+)[ _]", re.IGNORECASE)
_GPU = re.compile(r"GPU\s*_?(\d+)", re.IGNORECASE)


class DiscoverError(Exception):
    """The BMC's answers cannot be turned into a profile."""


def parse_sdr_verbose(text):
    """Sensors from ``ipmitool sdr list -v all``: name, number, type, reading, unit."""
    sensors = []
    for block in re.split(r"\n\s*\n", text):
        fields = {}
        for line in block.splitlines():
            key, sep, value = line.partition(":")
            if sep and key.strip():
                fields.setdefault(key.strip(), value.strip())
        ident = re.match(r"^(.*) \((0x[0-9a-fA-F]+)\)$", fields.get("Sensor ID", ""))
        type_key = next((k for k in fields if k.startswith("Sensor Type")), None)
        if not ident or type_key is None:
            continue
        kind = re.match(r"^(.*) \((0x[0-9a-fA-F]+)\)$", fields[type_key])
        discrete = "Discrete" in type_key
        reading, unit = None, None
        raw = fields.get("Sensor Reading", "")
        value = re.match(r"^(-?[0-9.]+)(?: \(\+/- [0-9.]+\))? ?(.*)$", raw)
        if value and not discrete:
            reading, unit = float(value.group(1)), value.group(2).strip() or None
        sensors.append({
            "name": ident.group(1).strip(), "number": int(ident.group(2), 16),
            "type": kind.group(1).strip() if kind else fields[type_key],
            "type_code": int(kind.group(2), 16) if kind else None,
            "discrete": discrete, "reading": reading, "unit": unit,
            "entity": fields.get("Entity ID", "").split(" ")[0] or None,
        })
    return sensors


def parse_fru(text):
    """Board fields of ``ipmitool fru print 0`` (``Board Mfg``, ``Board Product``, ...)."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out.setdefault(key.strip(), value.strip())
    return {"manufacturer": out.get("Board Mfg") or out.get("Product Manufacturer"),
            "product": out.get("Board Product") or out.get("Product Name"),
            "serial": out.get("Board Serial"), "part_number": out.get("Board Part Number")}


def parse_mc_info(text):
    match = re.search(r"^Manufacturer ID\s*:\s*(\d+)", text, re.MULTILINE)
    return int(match.group(1)) if match else None


def _number(regex, name):
    match = regex.search(name)
    if not match:
        return None
    return int(next(g for g in match.groups() if g is not None))


def slug(text):
    return re.sub(r"[^a-z0-9]+", "-", (text or "board").lower()).strip("-") or "board"


def propose(sensors, fru, manufacturer_id, options):
    """A hardware profile (dict) and the notes an operator must check.

    ``options``: ``gpu_model``, ``gfx_target``, ``gpu_max_power_w``,
    ``psu_rating_w``, ``cpu_fans`` (how many tachometers, last in SDR order,
    the CPU zone gets), ``fan_commands`` and ``fan_zones`` (override the
    proposal).
    """
    notes = []
    by_type = {}
    for s in sensors:
        by_type.setdefault(s["type_code"], []).append(s)

    currents = [s for s in by_type.get(CURRENT, []) if _number(_GPU, s["name"]) is not None]
    currents.sort(key=lambda s: _number(_GPU, s["name"]))
    gpu_numbers = [_number(_GPU, s["name"]) for s in currents]
    if len(set(gpu_numbers)) != len(gpu_numbers):
        raise DiscoverError("GPU current sensors with the same GPU number: "
                            + ", ".join(s["name"] for s in currents))
    if not currents:
        notes.append("no GPU current sensor (type Current, name with GPU<n>) in the SDR: "
                     "the fan daemon needs one per GPU")
    cpu_temps = [s for s in by_type.get(TEMPERATURE, [])
                 if _number(_CPU, s["name"]) is not None and not _NOT_CPU_DIE.search(s["name"])]
    cpu_temps.sort(key=lambda s: _number(_CPU, s["name"]))
    psus = sorted((s for s in by_type.get(POWER_SUPPLY, []) if s["discrete"]),
                  key=lambda s: s["name"])
    fans = [s for s in by_type.get(FAN, []) if not s["discrete"]]
    gpu_temps = [s for s in by_type.get(TEMPERATURE, []) if _number(_GPU, s["name"]) is not None]
    if gpu_temps:
        notes.append("GPU temperature sensors in the SDR (" + ", ".join(
            s["name"] for s in gpu_temps) + ") are left out: the fan daemon reads the GPUs' own "
            "temperatures from amdgpu's hwmon; add bmc.gpu_temp_sensors only if they are "
            "plausible under load")

    board = KNOWN_BOARDS.get(manufacturer_id)
    fan_commands = options.get("fan_commands")
    if not fan_commands:
        if board is None:
            raise DiscoverError(
                f"BMC manufacturer {manufacturer_id} has no known fan command: give "
                "fan_commands (set_duty, and auto or manual if the BMC needs them)")
        fan_commands = dict(board["fan_commands"])
        notes.append(f"fan_commands are {board['vendor']}'s usual OEM commands: check them "
                     "with junkyard-fan --probe on the node")

    count = len(currents)
    zones = options.get("fan_zones") or _zones(
        board, count, fans, options.get("cpu_fans", 2), bool(cpu_temps), notes)
    names = {s["name"] for s in sensors}
    for z in zones:
        for tach in z.get("tach_sensors", []):
            if tach not in names:
                raise DiscoverError(f"fan_zones {z.get('name')}: tach sensor {tach!r} is not "
                                    "in the BMC's SDR")

    product = fru.get("product")
    profile = {
        "description": " ".join(p for p in (fru.get("manufacturer"), product) if p)
        + " (proposed by bmc_discover from its BMC: verify every entry)",
        "cpu_sockets": max(1, len(cpu_temps)),
        "gpu": {"model": options.get("gpu_model", "MI100"), "count": count,
                "gfx_target": options.get("gfx_target", "gfx908"),
                "max_power_w": options.get("gpu_max_power_w", 300)},
        "bmc": {"supply_voltage": 12.0, "current_calibration": 1.0,
                "gpu_current_sensors": [s["name"] for s in currents],
                "cpu_temp_sensors": [s["name"] for s in cpu_temps],
                "psu_status_sensors": [s["name"] for s in psus]},
        "psu": {"count": max(1, len(psus)), "rating_w": options.get("psu_rating_w", 2200)},
        "fan_zones": zones,
        "fan_commands": fan_commands,
    }
    if not count:
        del profile["gpu"]["gfx_target"]
    notes.append("current_calibration is 1.0: compare the BMC's GPU power with amdgpu's "
                 "(junkyard_fan_gpu_power_mismatch) under load; a G292-Z45 reads twice the "
                 "real current")
    notes.append("GPU numbers follow the current sensors' names; set gpu.pci_addresses to tie "
                 "them to the PCI slots (docs/hardware.md)")
    return profile, notes


def _zones(board, count, fans, cpu_fans, has_cpu_temps, notes):
    """Zones: the last ``cpu_fans`` tachometers (SDR order) for the CPU zone, the rest
    for the GPUs, split by side for boards laid out by side."""
    zones = []
    fan_names = [s["name"] for s in fans]
    cpu_part = fan_names[len(fan_names) - cpu_fans:] if has_cpu_temps and cpu_fans else []
    gpu_part = fan_names[:len(fan_names) - len(cpu_part)]
    layout = board["layout"] if board else "one"
    fan_ids = board["fan_ids"] if board else [1]
    if count:
        if layout == "sides" and count >= 2:
            half, fhalf = count // 2, (len(gpu_part) + 1) // 2
            zones.append({"name": "gpu-left", "fan_id": fan_ids[0],
                          "gpus": list(range(half)), "tach_sensors": gpu_part[:fhalf]})
            zones.append({"name": "gpu-right", "fan_id": fan_ids[1],
                          "gpus": list(range(half, count)), "tach_sensors": gpu_part[fhalf:]})
            notes.append("GPU zones split the GPUs and fans in halves by number: check which "
                         "fans and GPUs sit on each side (junkyard-fan --probe tells whether "
                         "each zone's fans follow its command)")
        else:
            zones.append({"name": "gpu", "fan_id": fan_ids[0], "gpus": list(range(count)),
                          "tach_sensors": gpu_part})
    if cpu_part:
        zones.append({"name": "cpu", "fan_id": board["cpu_fan_id"] if board else 0,
                      "gpus": [], "tach_sensors": cpu_part})
    for z in zones:
        if not z["tach_sensors"]:
            del z["tach_sensors"]
    return zones
