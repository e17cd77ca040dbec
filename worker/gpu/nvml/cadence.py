"""How often a tick asks NVML for each reading: no more often than the reading can change.

On a real GPU the calls are the tick's cost (an H200's driver reads took 8.6 ms of a 10.5 ms
tick, docs/benchmarks.md), and eight GPUs multiply them. So the readings fall in three sets:

- Kept once: each GPU's handle, name, UUID and PCI bus id (the board's identity) and the
  driver's version, one for the node (the worker holds the driver's device files open, so
  the driver cannot be unloaded under it). A change in the number of GPUs NVML counts forgets
  them all, and a GPU that answers NVML_ERROR_GPU_IS_LOST is forgotten alone; a new source
  (a worker restart, a new `nvmlInit`) starts with none.
- Slow, every SLOW_EVERY_S and at once after an XID on the GPU: the health counts (ECC,
  retired pages, remapped rows, the PCIe link's generation, width and replays, the recovery
  the driver asks for), the enforced power limit (`nvidia-smi -pl` and a datacenter's power
  capping change it while the driver runs) and the MIG mode (a change waits for the GPU to be
  idle, and its instances are read each tick once it is on).
- Every tick: the rest (memory, utilization, power, energy, temperatures, clocks and their
  event reasons, fan, encoder and decoder, the processes and what each ran).

An XID, not NVML's ECC events, makes the slow set due early: an uncorrectable ECC error, a
row remapping and its failure come with an XID (48, 63, 64, 94, 95; 154 for a new recovery
action), on the event set every tick drains already (nvml/health.py). Registering the
single- and double-bit ECC events too would need each GPU's supported event types first
(a registration with one it lacks is refused whole), and would hand the read an event for
every corrected error of a degrading GPU, for counts that no verdict reads between two slow
reads. Corrected counts are as fresh as SLOW_EVERY_S.

Touched by one read at a time, as the process lists in nvml/__init__.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from placewatch.schemas import GpuHealth

SLOW_EVERY_S = 30.0
"""How old a GPU's slow readings may grow before a tick reads them again."""


class Fixed(NamedTuple):
    """What a GPU's board fixes: read once."""

    uuid: str | None
    name: str | None
    bus_id: str | None


class Slow(NamedTuple):
    """What changes slowly, and when it was read (the cadence's clock)."""

    power_cap_w: float | None
    mig_enabled: bool | None
    counts: GpuHealth
    at: float


class Cadence:
    """The readings kept between ticks, per GPU index, and when the slow ones are due.

    `slow_every_s` 0 reads the slow set every tick; `clock` is monotonic seconds."""

    def __init__(
        self, slow_every_s: float = SLOW_EVERY_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.slow_every_s = slow_every_s
        self.clock = clock
        self.count: int | None = None
        self.handles: dict[int, Any] = {}
        self.fixed: dict[int, Fixed] = {}
        self.slow: dict[int, Slow] = {}
        self.driver: str | None = None
        self.driver_read = False

    def counted(self, count: int) -> None:
        """NVML counts `count` GPUs: a count other than the last forgets every GPU."""
        if count != self.count:
            self.count = count
            self.handles.clear()
            self.fixed.clear()
            self.slow.clear()

    def lost(self, index: int) -> None:
        """GPU `index` is lost: its handle and readings are asked again once it answers."""
        self.handles.pop(index, None)
        self.fixed.pop(index, None)
        self.slow.pop(index, None)

    def xids(self, indices: Iterable[int]) -> None:
        """XIDs came from these GPUs: their slow readings are due at once."""
        for index in indices:
            self.slow.pop(index, None)

    def slow_of(self, index: int) -> Slow | None:
        """GPU `index`'s slow readings while they are fresh; None when they are due."""
        kept = self.slow.get(index)
        if kept is None or self.clock() - kept.at >= self.slow_every_s:
            return None
        return kept

    def keep_slow(
        self, index: int, power_cap_w: float | None, mig_enabled: bool | None, counts: GpuHealth
    ) -> Slow:
        kept = Slow(power_cap_w, mig_enabled, counts, self.clock())
        self.slow[index] = kept
        return kept
