"""An AMD GPU's health counts from `amd-smi metric`: ECC, PCIe link and throttling.

Only counts are read here; worker/gpu/health.py judges them (an uncorrected ECC error makes
the GPU unhealthy). Where each block's readings sit, by amd-smi version (checked against
amd-smi's own CLI source, ROCm 6.0 to 6.2, and an 8x MI300X `metric --csv` capture):

- `ecc`: `total_correctable_count`, `total_uncorrectable_count`, `total_deferred_count`
  (ROCm 6.1 onward; `total_correctable` and `total_uncorrectable` in 6.0). They are the
  amdgpu driver's RAS error counts, summed over its blocks (UMC, GFX, SDMA, ...), kept since
  the driver loaded: the `*_volatile` counts. The deferred count (an error the hardware
  parked for later handling) has no field and is not read.
- `power.throttle_status`: `THROTTLED` or `UNTHROTTLED`, from the firmware's throttle flags;
  it names no reason. Read as a clock event named as the tool names it, in lower case
  ("throttled"); UNTHROTTLED is none.
- `pcie`: `width`, `speed` in GT/s and `replay_count` (ROCm 6.1 onward; `current_lanes`
  and `current_speed` in 6.0). Flattened to CSV, the fan block's `speed` (0-255) lands in
  the PCIe `speed` column (amd-smi keeps one column per name, the later block's value), so
  a flat row whose fan block was printed (`rpm`) has no PCIe speed.

amd-smi has no XID events, retired-page or row-remapping counts in `metric` (AMD retires
bad pages through `amd-smi bad-pages`, a separate run): those stay null.
"""

from __future__ import annotations

from collections.abc import Mapping

from placewatch.schemas import GpuHealth

from .. import values
from .fields import Spec, count, number

ECC_CORRECTED: Spec = (
    (("ecc",), ("total_correctable_count", "total_correctable")),
    ((), ("total_correctable_count", "total_correctable")),
)
ECC_UNCORRECTED: Spec = (
    (("ecc",), ("total_uncorrectable_count", "total_uncorrectable")),
    ((), ("total_uncorrectable_count", "total_uncorrectable")),
)
PCIE_WIDTH: Spec = ((("pcie",), ("width", "current_lanes")), ((), ("width", "current_lanes")))
PCIE_SPEED: Spec = ((("pcie",), ("speed", "current_speed")), ((), ("current_speed",)))
PCIE_SPEED_FLAT: Spec = (((), ("speed",)),)
PCIE_REPLAYS: Spec = ((("pcie",), ("replay_count",)), ((), ("replay_count",)))

PCIE_GENERATIONS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}
"""A PCIe link's generation by its transfer rate in GT/s."""

UNTHROTTLED = "unthrottled"
_MOST_EVENTS = 16


def pcie_generation(item: Mapping[str, object]) -> int | None:
    """The link's generation from its speed in GT/s; None for a speed no generation has."""
    speed = number(item, PCIE_SPEED)
    if speed is None and "rpm" not in item:
        speed = number(item, PCIE_SPEED_FLAT)
    return None if speed is None else PCIE_GENERATIONS.get(speed)


def clock_events(item: Mapping[str, object]) -> list[str] | None:
    """What holds the clocks down, lower case as the tool names it; None when not read."""
    power = item.get("power")
    raw = power.get("throttle_status") if isinstance(power, dict) else None
    if raw is None:
        raw = item.get("throttle_status")
    named = raw if isinstance(raw, list) else [raw]
    found = [values.text(n) for n in named[:_MOST_EVENTS]]
    events = [n.lower() for n in found if n is not None]
    if not events:
        return None
    return list(dict.fromkeys(e for e in events if e != UNTHROTTLED))


def read_health(item: Mapping[str, object]) -> GpuHealth | None:
    """The GPU's health counts, or None where its output has none of them."""
    events = clock_events(item)
    health = GpuHealth(
        ecc_corrected_volatile=count(item, ECC_CORRECTED),
        ecc_uncorrected_volatile=count(item, ECC_UNCORRECTED),
        pcie_gen=pcie_generation(item),
        pcie_width=count(item, PCIE_WIDTH),
        pcie_replays=count(item, PCIE_REPLAYS),
        clock_events=events or [],
    )
    return None if events is None and health == GpuHealth() else health
