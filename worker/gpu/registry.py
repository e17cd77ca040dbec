"""Which source reads each vendor's GPUs: chosen at start, re-chosen when it fails.

Sources are ordered by preference per vendor (NVML before nvidia-smi: no
process to spawn; rocm-smi before amd-smi: only rocm-smi reports the board
power cap that AMD activity is derived from; xpu-smi before Intel's sysfs: only
xpu-smi reads utilization and memory in use, but of data-center GPUs only).
The first that answers is used until it fails; then the others are tried in
the same tick, so one bad probe does not cost a sample. A vendor with no tool at all on the node is
looked for again once a minute, not every tick.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Protocol

from placewatch.schemas import GpuSample, SourceStatus
from placewatch.schemas.messages import Vendor

from ..probe import ProbeRunner
from . import DRM_ROOT, KFD_ROOT, ActivityWanted, GpuSource, SourceOptions
from .amd_smi import AmdSmiSource
from .intel_sysfs import IntelSysfsSource
from .nvidia_smi import NvidiaSmiSource
from .nvml import NvmlSource
from .rocm_smi import RocmSmiSource
from .xpu_smi import XpuSmiSource

log = logging.getLogger(__name__)

RECHECK_ABSENT_S = 60.0


class SourceType(Protocol):
    """A GPU source's class: its name and vendor, and how it is built."""

    @property
    def name(self) -> str: ...

    @property
    def vendor(self) -> Vendor: ...

    def build(self, options: SourceOptions) -> GpuSource: ...


SOURCES: tuple[SourceType, ...] = (
    NvmlSource,
    NvidiaSmiSource,
    RocmSmiSource,
    AmdSmiSource,
    XpuSmiSource,
    IntelSysfsSource,
)
"""Every GPU source, each vendor's in its order of preference."""
NAMES: tuple[str, ...] = tuple(source.name for source in SOURCES)


def default_chains(
    runner: ProbeRunner,
    kfd_root: str | Path = KFD_ROOT,
    sources: Collection[str] = NAMES,
    interval_s: float | None = None,
    drm_root: str | Path = DRM_ROOT,
) -> list[VendorChain]:
    """A chain for each vendor with a source among `sources`, in the vendor's order; with
    `interval_s`, a tool that loops by itself repeats at it where its source's task runs."""
    options = SourceOptions(runner, Path(kfd_root), interval_s, Path(drm_root))
    chains: dict[Vendor, VendorChain] = {}
    for source in SOURCES:
        if source.name in sources:
            chain = chains.setdefault(source.vendor, VendorChain(source.vendor, []))
            chain.candidates.append(source.build(options))
    return list(chains.values())


def chains_for(
    probe_timeout: float,
    kfd_root: str | Path,
    sources: Collection[str],
    interval_s: float | None = None,
    drm_root: str | Path = DRM_ROOT,
) -> list[VendorChain]:
    """The chains of the GPU sources named, with that tool timeout, KFD tree, interval and
    DRM class folder."""
    return default_chains(ProbeRunner(probe_timeout), kfd_root, sources, interval_s, drm_root)


class VendorChain:
    """The working source of one vendor."""

    def __init__(
        self,
        vendor: Vendor,
        candidates: list[GpuSource],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.vendor: Vendor = vendor
        self.candidates = candidates
        self.current: GpuSource | None = None
        self.absent = False
        self._clock = clock
        self._absent_until = 0.0
        self._missing: list[SourceStatus] = []
        self.asking: str | None = None
        """The source asked now, while a read is under way: the one a late answer waits on."""

    def resting(self) -> bool:
        """Whether sample() answers at once: no tool for this vendor, and not yet time to look
        again."""
        return self.current is None and self.absent and self._clock() < self._absent_until

    async def sample(
        self, activity: ActivityWanted = "no"
    ) -> tuple[list[GpuSample], list[SourceStatus]]:
        statuses: list[SourceStatus] = []
        failed: GpuSource | None = None
        if self.current is not None:
            gpus, status = await self._ask(self.current, activity)
            if status.ok or gpus:
                return gpus, [status]
            log.warning(
                "%s failed (%s); trying the other %s sources",
                status.name,
                status.error,
                self.vendor,
            )
            statuses.append(status)
            failed, self.current = self.current, None
        elif self.absent and self._clock() < self._absent_until:
            return [], self._missing
        missing: list[SourceStatus] = []
        for candidate in self.candidates:
            if candidate is failed:
                continue
            why = candidate.unavailable()
            if why is not None:
                missing.append(
                    SourceStatus(name=candidate.name, ok=False, error=why, vendor=self.vendor)
                )
                continue
            gpus, status = await self._ask(candidate, activity)
            if status.ok or gpus:
                if self.current is not candidate:
                    log.info("reading %s GPUs through %s", self.vendor, candidate.name)
                self.current = candidate
                self.absent = False
                return gpus, [*statuses, status]
            statuses.append(status)
        self.absent = not statuses
        if self.absent:
            self._missing = missing
            self._absent_until = self._clock() + RECHECK_ABSENT_S
            return [], missing
        return [], statuses

    async def _ask(
        self, source: GpuSource, activity: ActivityWanted
    ) -> tuple[list[GpuSample], SourceStatus]:
        self.asking = source.name
        try:
            return await source.sample(activity)
        finally:
            self.asking = None
