"""Every Intel GPU (Arc, Battlemage, Flex, Max, integrated) from the i915 and xe drivers'
sysfs files: no tool to install, and the only source for the GPUs xpu-smi does not read.

It reads what the drivers write (read.py): power (from the energy counter's rise between
two reads: neither driver writes a power reading), the power limit, energy, temperatures,
the GT's clock and, on xe, the VRAM's size. It cannot read utilization nor memory in use:
neither is a sysfs file. They are None here, never 0; per process, both are in
/proc/PID/fdinfo.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar, Self

import anyio.to_thread

from placewatch.schemas import GpuSample, SourceStatus
from placewatch.schemas.messages import Vendor

from .. import DRM_ROOT, ActivityWanted, SourceOptions
from .read import CardReading, intel_cards, read_cards

NAME = "intel-sysfs"


class EnergyClock:
    """Power from each card's energy counter: its rise over the time since the last read.
    The first read of a card, and one after the counter went back (a driver reload, a
    32-bit counter's wrap in i915's older firmware), give no power."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[int, float]] = {}

    def power_w(self, bus_id: str, energy_uj: int | None, now_s: float) -> float | None:
        if energy_uj is None:
            self._last.pop(bus_id, None)
            return None
        last = self._last.get(bus_id)
        self._last[bus_id] = (energy_uj, now_s)
        if last is None or energy_uj < last[0] or now_s <= last[1]:
            return None
        return round((energy_uj - last[0]) / 1e6 / (now_s - last[1]), 3)


def card_sample(index: int, reading: CardReading, power_w: float | None) -> GpuSample:
    """A card's sample. Its name is its PCI id: sysfs holds no product name."""
    card = reading.card
    driver = f" ({card.driver})" if card.driver else ""
    return GpuSample(
        index=index,
        vendor="intel",
        name=f"Intel GPU {card.pci_id}{driver}",
        bus_id=card.bus_id,
        memory_total_bytes=reading.vram_bytes,
        power_w=power_w,
        power_cap_w=reading.power_cap_w,
        energy_j=None if reading.energy_uj is None else reading.energy_uj / 1e6,
        temperature_c=reading.temperature_c,
        temperature_sensor="package" if reading.temperature_c is not None else None,
        memory_temperature_c=reading.memory_temperature_c,
        sm_clock_mhz=reading.clock_mhz,
    )


class IntelSysfsSource:
    """Intel GPU readings from /sys/class/drm (or the root it is given)."""

    name: ClassVar[str] = NAME
    vendor: ClassVar[Vendor] = "intel"

    def __init__(
        self, root: Path | str = DRM_ROOT, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._root = Path(root)
        self._clock = clock
        self._energy = EnergyClock()

    @classmethod
    def build(cls, options: SourceOptions) -> Self:
        return cls(options.drm_root)

    def unavailable(self) -> str | None:
        if intel_cards(self._root):
            return None
        return (
            f"no Intel GPU under {self._root} (no card whose device/uevent says PCI_ID "
            "8086:*): check that the i915 or xe driver is loaded (lsmod | grep -e i915 -e xe) "
            "and, in a container, that /sys is mounted"
        )

    async def sample(self, activity: ActivityWanted = "no") -> tuple[list[GpuSample], SourceStatus]:
        """Every card's files, read in a thread (sysfs reads can block on a GPU waking up);
        `activity` is not used: nothing per process is in sysfs."""
        started = time.perf_counter()
        readings = await anyio.to_thread.run_sync(read_cards, self._root)
        now = self._clock()
        gpus = [
            card_sample(i, r, self._energy.power_w(r.card.bus_id, r.energy_uj, now))
            for i, r in enumerate(readings)
        ]
        latency = round((time.perf_counter() - started) * 1000, 3)
        error = None if gpus else self.unavailable() or f"no Intel GPU under {self._root}"
        status = SourceStatus(
            name=self.name, ok=error is None, latency_ms=latency, error=error, vendor=self.vendor
        )
        return gpus, status
