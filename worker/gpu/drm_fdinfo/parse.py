"""One DRM file's usage stats, parsed from the text of /proc/PID/fdinfo/FD.

The kernel's Documentation/gpu/drm-usage-stats.rst defines the keys: `drm-driver`,
`drm-pdev` (the PCI address), `drm-client-id` (one per open DRM file: a descriptor
duplicated, or passed to another process, shows the same id), busy time per engine
(`drm-engine-<name>` in ns; or `drm-cycles-<name>` against `drm-total-cycles-<name>`, as
xe writes it, or against `drm-maxfreq-<name>`), `drm-engine-capacity-<name>` (identical
engines grouped under one name) and memory per region (`drm-resident-<region>`; older
kernels' `drm-memory-<region>`, its alias; `drm-total-<region>` counts buffers without
backing store too, and is used only where neither is written).

Regions are the driver's own names: i915 `local0` (VRAM) and `system0`, xe `vram0`,
`vram1` (one per tile), `gtt`, `system` and `stolen`, amdgpu `vram`, `gtt` and `cpu`.

Parsing never raises: what a process's fdinfo holds is text this worker did not write
(a descriptor replaced between its link and its fdinfo being read is another file's), so a
line that is not `key: value` as the spec writes it, a number too large, or a PCI address
not written as one, is left out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

MAX_VALUE = 1 << 63
"""No counter the kernel writes (u64 ns, bytes, cycles) is read past this."""

SIZE_UNITS = {"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
"""drm_file.c's print_size() writes "", " KiB" or " MiB"; the spec allows GiB too."""
FREQ_UNITS = {"Hz": 1, "KHz": 1000, "kHz": 1000, "MHz": 1_000_000}
READINGS: dict[str, tuple[str, dict[str, int]]] = {
    "engine-capacity": ("capacity", {"": 1}),
    "engine": ("engine_ns", {"ns": 1, "": 1}),
    "total-cycles": ("total_cycles", {"": 1}),
    "cycles": ("cycles", {"": 1}),
    "maxfreq": ("maxfreq_hz", FREQ_UNITS),
    "resident": ("resident", SIZE_UNITS),
    "memory": ("memory", SIZE_UNITS),
    "total": ("total", SIZE_UNITS),
}
"""Each counted key's kind (`drm-<kind>-<name>`), the reading it goes to and the units its
value may carry; a kind that starts another (`total`, `total-cycles`) is tried after it."""
MEMORY_STATS = ("resident", "memory", "total")
"""Which memory key a region's bytes are taken from, first found first."""

_COUNTED = re.compile(
    r"^[ \t]*drm-(" + "|".join(re.escape(k) for k in READINGS) + r")-([A-Za-z0-9_.-]{1,64})"
    r"[ \t]*:[ \t]*(\d{1,20}) ?([A-Za-z]*)[ \t]*$",
    re.MULTILINE,
)
_NAMED = re.compile(r"^[ \t]*drm-(driver|pdev|client-id)[ \t]*:[ \t]*(\S*)[ \t]*$", re.MULTILINE)
_DRIVER = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_PDEV = re.compile(r"[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]")
_CLIENT_ID = re.compile(r"\d{1,19}")


@dataclass(frozen=True)
class DrmClient:
    """What one DRM file (one `drm-client-id` on one device) says of itself."""

    driver: str
    pdev: str | None
    """The PCI address, lower case: `0000:03:00.0`."""
    client_id: int | None
    memory: dict[str, int] = field(default_factory=dict)
    """Region -> bytes resident there."""
    engine_ns: dict[str, int] = field(default_factory=dict)
    cycles: dict[str, int] = field(default_factory=dict)
    total_cycles: dict[str, int] = field(default_factory=dict)
    maxfreq_hz: dict[str, int] = field(default_factory=dict)
    capacity: dict[str, int] = field(default_factory=dict)


def _readings(text: str) -> dict[str, dict[str, int]]:
    """Each counted key's number by reading and name, in one pass over the text; the first
    of a repeated key wins."""
    found: dict[str, dict[str, int]] = {reading: {} for reading, _ in READINGS.values()}
    for kind, name, digits, unit in _COUNTED.findall(text):
        reading, units = READINGS[kind]
        if unit in units:
            number = int(digits) * units[unit]
            if number < MAX_VALUE:
                found[reading].setdefault(name, number)
    return found


def _memory(found: dict[str, dict[str, int]]) -> dict[str, int]:
    regions = {region for stat in MEMORY_STATS for region in found[stat]}
    return {
        region: next(found[s][region] for s in MEMORY_STATS if region in found[s])
        for region in sorted(regions)
    }


def parse_fdinfo(text: str) -> DrmClient | None:
    """The DRM client in one fdinfo text; None where it is not a DRM file's (no valid
    `drm-driver`)."""
    named: dict[str, str] = {}
    for key, value in _NAMED.findall(text):
        named.setdefault(key, value)
    driver = named.get("driver", "")
    if not _DRIVER.fullmatch(driver):
        return None
    pdev, client = named.get("pdev", ""), named.get("client-id", "")
    found = _readings(text)
    return DrmClient(
        driver=driver,
        pdev=pdev.lower() if _PDEV.fullmatch(pdev) else None,
        client_id=int(client) if _CLIENT_ID.fullmatch(client) else None,
        memory=_memory(found),
        engine_ns=found["engine_ns"],
        cycles=found["cycles"],
        total_cycles=found["total_cycles"],
        maxfreq_hz=found["maxfreq_hz"],
        capacity={k: v for k, v in found["capacity"].items() if v > 0},
    )
