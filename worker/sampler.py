"""One tick: every GPU source and the host, sampled together into a NodeTelemetry."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime

import anyio

from placewatch.schemas import GpuSample, NodeTelemetry, SourceStatus

from .gpu import GpuSource
from .host import HostSampler


def new_session() -> str:
    """An id for one run of a worker: consumers tell a restart from a gap by it."""
    return secrets.token_hex(6)


class NodeSampler:
    def __init__(
        self,
        node: str,
        interval_s: float,
        sources: list[GpuSource],
        host: HostSampler,
        session: str | None = None,
    ) -> None:
        self.node = node
        self.interval_s = interval_s
        self.sources = sources
        self.host = host
        self.session = session or new_session()
        self.seq = 0

    async def sample(self) -> NodeTelemetry:
        results: list[tuple[list[GpuSample], SourceStatus]] = [
            ([], _pending(s)) for s in self.sources
        ]

        async def probe(i: int, source: GpuSource) -> None:
            results[i] = await source.sample()

        async with anyio.create_task_group() as tg:
            for i, source in enumerate(self.sources):
                tg.start_soon(probe, i, source)
        host = await anyio.to_thread.run_sync(self.host.sample)
        gpus = sorted((g for found, _ in results for g in found), key=lambda g: (g.vendor, g.index))
        telemetry = NodeTelemetry(
            node=self.node,
            session=self.session,
            seq=self.seq,
            time=datetime.now(UTC),
            interval_s=self.interval_s,
            gpus=gpus,
            host=host,
            sources=[status for _, status in results],
        )
        self.seq += 1
        return telemetry


def _pending(source: GpuSource) -> SourceStatus:
    return SourceStatus(name=source.name, ok=False, error="not probed")
