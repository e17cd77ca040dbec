"""xpu-smi's output as values: pure functions that never raise on bad text.

Checked against intel/xpumanager's source at v1.3.7 (57e44f5, 2026-06) and v2.0.0
(33afa12, 2026-06):

- `xpu-smi discovery -j` prints `{"device_list": [...]}`, each device with `device_id`,
  `device_name`, `uuid`, `pci_bdf_address`, `drm_device`, `device_function_type`
  (`physical` or `virtual`: an SR-IOV function) and more (1.3.7
  cli/src/core_stub/devices_stub.cpp getDeviceList; 2.0.0 ial/cmn/cmd_discovery.cpp).
  A failure prints `{"error": "...", "errno": N}`.
- `xpu-smi discovery -d N -j` prints one device's properties, every value a string:
  `memory_physical_size_byte` ("68702699520"), `driver_version`, `gfx_firmware_status`.
- `xpu-smi dump` prints CSV: a header, then a row per device, `, `-separated, padded to
  4 characters, `N/A` where a reading failed. Its column names changed: 1.3.7 names each
  metric by its description ("Average % utilization of all GPU Engines", "GPU Power (W)",
  "GPU Core Temperature (Celsius Degree)", "GPU Memory Used (MiB)"; core/src/api/
  internal_dump_raw_data.cpp), 2.0.0 by its query name and unit ("utilization.gpu (%)",
  "power.draw (W)", "temperature.gpu (C)", "memory.used (MiB)"; ial/cmn/metrics/). Both
  are read, by name, so a column added or moved shifts nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .. import values
from ..rocm_smi import load_json

MIB = 1 << 20

DUMP_METRICS = "0,1,2,3,4,8,17,18"
"""The legacy metric ids both versions take: utilization, power, frequency, core and memory
temperature, energy, memory bandwidth utilization, memory used. Not 5, "GPU Memory
Utilization": 1.3.7 computes it as memory used over its size (core/src/device/gpu/
gpu_device_stub.cpp), 2.0.0 as the time memory was read or written; 17, throughput over
peak bandwidth in both, is the memory controller's busy share DCGM users read."""

COLUMNS: dict[str, str] = {
    # 1.3.7: the metric's description (internal_dump_raw_data.cpp)
    "average % utilization of all gpu engines": "utilization_pct",
    "gpu utilization": "utilization_pct",
    "gpu power": "power_w",
    "gpu frequency": "sm_clock_mhz",
    "gpu core temperature": "temperature_c",
    "gpu memory temperature": "memory_temperature_c",
    "gpu memory bandwidth utilization": "memory_util_pct",
    "gpu energy consumed": "energy_j",
    "gpu memory used": "memory_used_mib",
    # 2.0.0: the query name (ial/cmn/metrics/*.cpp)
    "utilization.gpu": "utilization_pct",
    "power.draw": "power_w",
    "clocks.current.graphics": "sm_clock_mhz",
    "temperature.gpu": "temperature_c",
    "temperature.memory": "memory_temperature_c",
    "memory.bandwidth.utilization": "memory_util_pct",
    "energy.consumed": "energy_j",
    "memory.used": "memory_used_mib",
}
"""Each dump column read, by its name without its unit, lowercase, and the reading it is."""

_UNIT = re.compile(r"\s*\([^)]*\)\s*$")


@dataclass(frozen=True)
class XpuDevice:
    """A device as `xpu-smi discovery -j` lists it."""

    device_id: int
    name: str | None
    uuid: str | None
    bus_id: str | None
    drm_device: str | None


@dataclass(frozen=True)
class XpuProperties:
    """What `xpu-smi discovery -d N -j` adds: the memory's size, the driver, the firmware."""

    memory_total_bytes: int | None = None
    driver_version: str | None = None
    firmware_status: str | None = None


def tool_error(text: str) -> str | None:
    """The error xpu-smi printed as JSON (`{"error": "Level Zero Initialization Error"}`)."""
    document = load_json(text)
    if isinstance(document, dict) and "error" in document:
        return values.text(document.get("error")) or "error"
    return None


def parse_discovery(text: str) -> list[XpuDevice]:
    """The physical devices of `xpu-smi discovery -j`, in its order. Virtual functions are
    left out: an SR-IOV function is a slice of a physical GPU listed beside it (1.3.7's
    table prints physical ones only, unless asked for `--vf`)."""
    document = load_json(text)
    listed = document.get("device_list") if isinstance(document, dict) else None
    if not isinstance(listed, list):
        return []
    found: list[XpuDevice] = []
    for item in listed:
        if not isinstance(item, dict):
            continue
        device_id = values.integer(item.get("device_id"))
        if device_id is None or device_id < 0 or item.get("device_function_type") == "virtual":
            continue
        found.append(
            XpuDevice(
                device_id=device_id,
                name=values.text(item.get("device_name")),
                uuid=values.text(item.get("uuid")),
                bus_id=values.text(item.get("pci_bdf_address")),
                drm_device=values.text(item.get("drm_device")),
            )
        )
    return sorted(found, key=lambda d: d.device_id)


def parse_properties(text: str) -> XpuProperties:
    """The properties of `xpu-smi discovery -d N -j` that placewatch reads."""
    document = load_json(text)
    if not isinstance(document, dict) or "error" in document:
        return XpuProperties()
    return XpuProperties(
        memory_total_bytes=values.to_bytes(document.get("memory_physical_size_byte"), "B"),
        driver_version=values.text(document.get("driver_version")),
        firmware_status=values.text(document.get("gfx_firmware_status")),
    )


def parse_dump(text: str) -> dict[int, dict[str, float]]:
    """Each device's readings in `xpu-smi dump` CSV, by device id; `N/A` and unknown columns
    are left out. The last row of a device is kept (a dump of several passes)."""
    rows = [[cell.strip() for cell in line.split(",")] for line in text.splitlines()]
    header_at = next((i for i, row in enumerate(rows) if "DeviceId" in row), None)
    if header_at is None:
        return {}
    header = [_UNIT.sub("", cell).lower() for cell in rows[header_at]]
    device_at = rows[header_at].index("DeviceId")
    found: dict[int, dict[str, float]] = {}
    for row in rows[header_at + 1 :]:
        if len(row) != len(header):
            continue
        device_id = values.integer(row[device_at])
        if device_id is None:
            continue
        readings: dict[str, float] = {}
        for name, cell in zip(header, row, strict=True):
            field = COLUMNS.get(name)
            value = values.number(cell) if field else None
            if field and value is not None:
                readings[field] = value
        found[device_id] = readings
    return found


def memory_used_bytes(readings: dict[str, float]) -> int | None:
    """The dump's memory used (MiB, two decimals in 1.3.7) in bytes."""
    mib = readings.get("memory_used_mib")
    return None if mib is None or mib < 0 else int(mib * MIB)
