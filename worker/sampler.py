"""One tick: every GPU source and the host sampled together, then every shard judged."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import UTC, datetime

import anyio

from placewatch.schemas import GpuSample, NodeTelemetry, SourceStatus

from .gpu.registry import VendorChain
from .host import HostSampler
from .shards.watch import ShardsView, ShardWatch


def new_session() -> str:
    """An id for one run of a worker: consumers tell a restart from a gap by it."""
    return secrets.token_hex(6)


@dataclass
class Tick:
    telemetry: NodeTelemetry
    shards: ShardsView | None


class NodeSampler:
    def __init__(
        self,
        node: str,
        interval_s: float,
        chains: list[VendorChain],
        host: HostSampler,
        *,
        session: str | None = None,
        watch: ShardWatch | None = None,
    ) -> None:
        self.node = node
        self.interval_s = interval_s
        self.chains = chains
        self.host = host
        self.session = session or new_session()
        self.watch = watch
        self.seq = 0

    async def sample(self) -> Tick:
        results: list[tuple[list[GpuSample], list[SourceStatus]]] = [([], [])] * len(self.chains)

        async def probe(i: int, chain: VendorChain) -> None:
            results[i] = await chain.sample()

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
        gpus = sorted((g for found, _ in results for g in found), key=lambda g: (g.vendor, g.index))
        # A vendor with no tool on this node is noise in every sample; it is
        # listed only when no vendor has one, to say what is missing.
        present = [
            statuses
            for chain, (_, statuses) in zip(self.chains, results, strict=True)
            if not chain.absent
        ]
        shown = present or [statuses for _, statuses in results]
        sources = [status for statuses in shown for status in statuses]
        view = None
        if self.watch is not None:
            view = await self.watch.check(gpus, gpus_known=any(s.ok for s in sources) or bool(gpus))
            gpus = view.gpus
            sources += view.problems
        telemetry = NodeTelemetry(
            node=self.node,
            session=self.session,
            seq=self.seq,
            time=datetime.now(UTC),
            interval_s=self.interval_s,
            gpus=gpus,
            host=host,
            shards=view.briefs if view else [],
            sources=sources,
        )
        self.seq += 1
        return Tick(telemetry, view)
