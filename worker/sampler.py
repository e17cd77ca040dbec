"""The node's GPUs and host, read together once a tick; it knows nothing of shards."""

from __future__ import annotations

import time
from dataclasses import dataclass

import anyio
from anyio.abc import TaskStatus

from placewatch.schemas import GpuSample, HostSample, SourceStatus

from .deadline import NEVER, Deadline
from .gpu import ActivityWanted, LoopingSource, health
from .gpu.drm_fdinfo import DRM_VENDORS, DrmUsage, attach_drm_processes
from .gpu.reads import ChainReading, ChainReads
from .gpu.registry import VendorChain
from .host import HostSampler


@dataclass(frozen=True)
class NodeReading:
    """What the GPU sources and the host said at one tick."""

    gpus: list[GpuSample]
    host: HostSample
    sources: list[SourceStatus]
    started: float = 0.0
    """When the reading began (time.monotonic()): a slow failed read is as old as its start."""
    unread: bool = False
    """A vendor that had GPUs gave no reading of them this tick (late, or failed)."""
    foreign_unknown: frozenset[str] = frozenset()
    """Bus ids of the GPUs whose foreign memory cannot be told: a process that may hold
    them could not be read whole (gpu/drm_fdinfo)."""

    @property
    def gpus_known(self) -> bool:
        """Whether the GPU sources told what the GPUs hold: one answered, and no vendor's
        GPUs went unread (a shard placed on them would read `cpu_fallback`)."""
        return not self.unread and (bool(self.gpus) or any(s.ok for s in self.sources))


class NodeSampler:
    def __init__(
        self, chains: list[VendorChain], host: HostSampler, drm: DrmUsage | None = None
    ) -> None:
        self.chains = chains
        self.reads = [ChainReads(chain) for chain in chains]
        self.host = host
        self.drm = drm
        """Each process's use of each AMD and Intel GPU from /proc/PID/fdinfo; None: not read."""

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """The GPU sources' own tasks (a tool kept running that loops by itself) and each
        vendor's reads (gpu/reads.py), for as long as the worker runs. Without this, as in
        `placewatch sample`, each tool runs once a tick, waited for whole."""
        async with anyio.create_task_group() as tg:
            for chain in self.chains:
                for source in chain.candidates:
                    if isinstance(source, LoopingSource):
                        await tg.start(source.run)
            for reads in self.reads:
                await tg.start(reads.run)
            task_status.started()

    async def sample(
        self, activity: ActivityWanted = "no", deadline: Deadline = NEVER
    ) -> NodeReading:
        """The GPUs and the host; with `activity`, what each GPU process ran since the last
        read, where the source can tell (a shard placed on GPUs needs it to be judged). A
        GPU read not done by `deadline` is not waited for: its GPUs go unread this tick."""
        started = time.monotonic()
        results = [ChainReading([], [], started)] * len(self.chains)

        async def probe(i: int, reads: ChainReads) -> None:
            results[i] = await reads.read(activity, deadline)

        # A node has one vendor's GPUs, or none: a task group only when two must wait.
        if sum(not chain.resting() for chain in self.chains) > 1:
            async with anyio.create_task_group() as tg:
                for i, reads in enumerate(self.reads):
                    tg.start_soon(probe, i, reads)
        else:
            for i, reads in enumerate(self.reads):
                await probe(i, reads)
        # A thread costs as much as the reading itself: one only when it has to wait.
        if self.host.ready():
            host = self.host.sample()
        else:
            host = await anyio.to_thread.run_sync(self.host.sample)
        gpus = sorted(
            (health.assess(g) for r in results for g in r.gpus),
            key=lambda g: (g.vendor, g.index),
        )
        foreign_unknown: frozenset[str] = frozenset()
        if self.drm is not None and any(g.vendor in DRM_VENDORS for g in gpus):
            uses, unread = await anyio.to_thread.run_sync(self.drm.read)
            gpus = attach_drm_processes(gpus, uses)
            if unread is not None:
                foreign_unknown = frozenset(
                    g.bus_id for g in gpus if g.vendor in DRM_VENDORS and g.bus_id
                )
        # A vendor with no tool on this node is noise in every sample; it is
        # listed only when no vendor has one, to say what is missing.
        present = [
            r.statuses for chain, r in zip(self.chains, results, strict=True) if not chain.absent
        ]
        shown = present or [r.statuses for r in results]
        sources = [status for statuses in shown for status in statuses]
        began = min((r.started for r in results), default=started)
        return NodeReading(
            gpus,
            host,
            sources,
            began,
            unread=any(r.unread for r in results),
            foreign_unknown=foreign_unknown,
        )
