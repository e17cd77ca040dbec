"""The node's GPUs and host, read together once a tick; it knows nothing of shards."""

from __future__ import annotations

import time
from dataclasses import dataclass

import anyio
from anyio.abc import TaskStatus

from placewatch.schemas import GpuSample, HostSample, SourceStatus

from .gpu import ActivityWanted, LoopingSource, health
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

    @property
    def gpus_known(self) -> bool:
        """Whether any GPU source answered: without one, no GPU says what it holds."""
        return bool(self.gpus) or any(s.ok for s in self.sources)


class NodeSampler:
    def __init__(self, chains: list[VendorChain], host: HostSampler) -> None:
        self.chains = chains
        self.host = host

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """The GPU sources' own tasks (a tool kept running that loops by itself), for as long
        as the worker runs. Without this, as in `placewatch sample`, each tool runs once a
        tick."""
        async with anyio.create_task_group() as tg:
            for chain in self.chains:
                for source in chain.candidates:
                    if isinstance(source, LoopingSource):
                        await tg.start(source.run)
            task_status.started()

    async def sample(self, activity: ActivityWanted = "no") -> NodeReading:
        """The GPUs and the host; with `activity`, what each GPU process ran since the last
        read, where the source can tell (a shard placed on GPUs needs it to be judged)."""
        started = time.monotonic()
        results: list[tuple[list[GpuSample], list[SourceStatus]]] = [([], [])] * len(self.chains)

        async def probe(i: int, chain: VendorChain) -> None:
            results[i] = await chain.sample(activity)

        # A node has one vendor's GPUs, or none: a task group only when two must wait.
        if sum(not chain.resting() for chain in self.chains) > 1:
            async with anyio.create_task_group() as tg:
                for i, chain in enumerate(self.chains):
                    tg.start_soon(probe, i, chain)
        else:
            for i, chain in enumerate(self.chains):
                await probe(i, chain)
        # A thread costs as much as the reading itself: one only when it has to wait.
        if self.host.ready():
            host = self.host.sample()
        else:
            host = await anyio.to_thread.run_sync(self.host.sample)
        gpus = sorted(
            (health.assess(g) for found, _ in results for g in found),
            key=lambda g: (g.vendor, g.index),
        )
        # A vendor with no tool on this node is noise in every sample; it is
        # listed only when no vendor has one, to say what is missing.
        present = [
            statuses
            for chain, (_, statuses) in zip(self.chains, results, strict=True)
            if not chain.absent
        ]
        shown = present or [statuses for _, statuses in results]
        sources = [status for statuses in shown for status in statuses]
        return NodeReading(gpus, host, sources, started)
