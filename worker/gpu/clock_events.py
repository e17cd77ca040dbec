"""What holds a GPU's clocks down: NVML's clock event reasons ("throttle reasons" before
R535), one bit each, decoded once here for every NVIDIA source.

The bits are nvml.h's `nvmlClocksEventReason*` (formerly `nvmlClocksThrottleReason*`),
the same in NVML and in nvidia-smi's `clocks_event_reasons.active` (a hex mask such as
0x0000000000000001). The XML prints each reason as an element of its own, named as here
after a `clocks_event_reason_` (R535 and later) or `clocks_throttle_reason_` prefix.
Bits not listed (0x8000000000000000, "unknown", on old drivers) are left out. Pure.
"""

from __future__ import annotations

import re

CLOCK_EVENT_BITS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clocks_setting",
}
"""Each reason's bit, by nvml.h, with the name GpuHealth.clock_events gives it."""

CLOCK_EVENT_NAMES = frozenset(CLOCK_EVENT_BITS.values())

_HEX = re.compile(r"^\s*0[xX]([0-9a-fA-F]{1,16})\s*$")


def clock_event_names(mask: int) -> list[str]:
    """The reasons set in `mask`, lowest bit first; unknown bits are left out."""
    return [name for bit, name in CLOCK_EVENT_BITS.items() if mask & bit]


def parse_mask(text: str | None) -> int | None:
    """A clock event mask as nvidia-smi prints it ("0x0000000000000041"); None when it is
    not one ("[N/A]", "[Not Supported]")."""
    match = _HEX.match(text or "")
    return int(match.group(1), 16) if match else None


def active(state: str | None) -> bool | None:
    """One reason's state as nvidia-smi prints it: "Active", "Not Active"; else None."""
    said = (state or "").strip().lower()
    return {"active": True, "not active": False}.get(said)
