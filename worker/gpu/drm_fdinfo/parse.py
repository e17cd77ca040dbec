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

_PDEV = re.compile(r"[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]")
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_CLIENT_ID = re.compile(r"\d{1,19}")
_NUMBER = re.compile(r"(\d{1,20})\s*([A-Za-z]*)")
MEMORY_STATS = ("resident", "memory", "total")
"""Which memory key a region's bytes are taken from, first found first."""


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


def _number(value: str, units: dict[str, int]) -> int | None:
    match = _NUMBER.fullmatch(value)
    if match is None or match[2] not in units:
        return None
    number = int(match[1]) * units[match[2]]
    return number if number < MAX_VALUE else None


def _pairs(text: str) -> dict[str, str]:
    """`key: value` per line, keys and values stripped; the first of a repeated key wins."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        key, colon, value = line.partition(":")
        key = key.strip()
        if colon and key.startswith("drm-") and not any(c.isspace() for c in key):
            found.setdefault(key, value.strip())
    return found


def _named(pairs: dict[str, str], prefix: str, units: dict[str, int]) -> dict[str, int]:
    """`prefix<name>` keys' numbers by name."""
    found: dict[str, int] = {}
    for key, value in pairs.items():
        name = key.removeprefix(prefix)
        if name != key and _NAME.fullmatch(name):
            number = _number(value, units)
            if number is not None:
                found[name] = number
    return found


def _memory(pairs: dict[str, str]) -> dict[str, int]:
    by_stat = {stat: _named(pairs, f"drm-{stat}-", SIZE_UNITS) for stat in MEMORY_STATS}
    # `drm-total-cycles-<engine>` is a clock, not a region's bytes.
    by_stat["total"] = {r: v for r, v in by_stat["total"].items() if not r.startswith("cycles-")}
    regions = {region for found in by_stat.values() for region in found}
    return {
        region: next(by_stat[s][region] for s in MEMORY_STATS if region in by_stat[s])
        for region in sorted(regions)
    }


def parse_fdinfo(text: str) -> DrmClient | None:
    """The DRM client in one fdinfo text; None where it is not a DRM file's (no valid
    `drm-driver`)."""
    pairs = _pairs(text)
    driver = pairs.get("drm-driver", "")
    if not _NAME.fullmatch(driver):
        return None
    pdev = pairs.get("drm-pdev", "")
    client = pairs.get("drm-client-id", "")
    ns = {k: v.removesuffix("ns").strip() for k, v in pairs.items() if k.startswith("drm-engine-")}
    engines = _named(pairs | ns, "drm-engine-", {"": 1})
    capacity = {
        k.removeprefix("capacity-"): v for k, v in engines.items() if k.startswith("capacity-")
    }
    return DrmClient(
        driver=driver,
        pdev=pdev.lower() if _PDEV.fullmatch(pdev) else None,
        client_id=int(client)
        if client.isascii() and client.isdigit() and len(client) < 20
        else None,
        memory=_memory(pairs),
        engine_ns={k: v for k, v in engines.items() if not k.startswith("capacity-")},
        cycles=_named(pairs, "drm-cycles-", {"": 1}),
        total_cycles=_named(pairs, "drm-total-cycles-", {"": 1}),
        maxfreq_hz=_named(pairs, "drm-maxfreq-", FREQ_UNITS),
        capacity={k: v for k, v in capacity.items() if v > 0},
    )
