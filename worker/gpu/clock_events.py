"""What holds a GPU's clocks down: NVML's clock event reasons ("throttle reasons" before
R535), one bit each, decoded once here for every NVIDIA source.

The bits (placewatch.schemas.health.CLOCK_EVENT_BITS) are nvml.h's
`nvmlClocksEventReason*` (formerly `nvmlClocksThrottleReason*`), the same in NVML and in
nvidia-smi's `clocks_event_reasons.active` (a hex mask such as 0x0000000000000001). The XML
prints each reason as an element of its own, named as here after a `clocks_event_reason_`
(R535 and later) or `clocks_throttle_reason_` prefix.
Bits not listed (0x8000000000000000, "unknown", on old drivers) are left out. Pure.
"""

from __future__ import annotations

import re

from placewatch.schemas.health import CLOCK_EVENT_BITS

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
