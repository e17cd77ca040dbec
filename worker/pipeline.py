"""The sampling pipeline, built once from the settings for `run`, `sample` and `doctor`.

A tick is three steps, each its own call so that the worker's tick reads as
the pipeline it is:

1. `read`: the GPUs and the host (NodeSampler, which knows nothing of shards);
2. `judge`: the shard pass on those readings (ShardPass), each shard's engine
   log as EngineLogs last read it;
3. `sample`: the NodeSample of this tick, immutable once built (it travels split in two:
   placewatch.schemas.lean).

The worker gives `read` and `judge` what is left of the tick's one deadline
(worker/deadline.py): an input that has not answered by then is marked not read, never
waited for. `take` waits for everything.

`take` runs the three for a one-off sample. EngineLogs' task must run for
the pipeline to judge: `open_pipeline` runs it for a one-off use, and the
worker starts it in its own task group.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime

import anyio

from placewatch.schemas import NodeSample

from .config import Settings
from .deadline import NEVER, Deadline
from .engines.evidence.follow import EngineLogs
from .engines.evidence.journal import Journal
from .gpu.drm_fdinfo import DrmUsage
from .gpu.registry import chains_for
from .host import HostSampler
from .sampler import NodeReading, NodeSampler
from .shards.placements import PlacementFeed, ShardsFile
from .shards.scope import ProcessScope
from .shards.shard_pass import ShardPass, ShardsView

LATE_INTERVALS = 1.5
"""GPU readings missing for no longer than this many intervals are late, not lost: one
tick's read that answered after its deadline serves the next tick, and the shards' verdicts
stand unmarked meanwhile (shards/lost_evidence.py)."""


def new_session() -> str:
    """An id for one run of a worker: consumers tell a restart from a gap by it."""
    return secrets.token_hex(6)


@dataclass(frozen=True)
class Tick:
    """One tick's result: the sample, and the shard pass it was built from."""

    sample: NodeSample
    shards: ShardsView


class Pipeline:
    def __init__(
        self,
        node: str,
        interval_s: float,
        sampler: NodeSampler,
        shards: ShardPass,
        *,
        session: str | None = None,
    ) -> None:
        self.node = node
        self.interval_s = interval_s
        self.sampler = sampler
        self.shards = shards
        self.session = session or shards.session
        self.seq = 0

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        session: str | None = None,
        bucket: PlacementFeed | None = None,
    ) -> Pipeline:
        session = session or new_session()
        shards = ShardPass(
            settings.node,
            session,
            grace_s=settings.grace,
            shards_file=ShardsFile(settings.shards) if settings.shards else None,
            bucket=bucket,
            discovery=settings.discover,
            scope=ProcessScope.parse(settings.discover_env),
            logs=EngineLogs(journal=Journal.at(settings.journal_dir)),
            late_s=LATE_INTERVALS * settings.interval,
            advertise_host=settings.advertise_host,
        )
        chains = chains_for(
            settings.probe_timeout,
            settings.kfd_root,
            settings.gpu_sources,
            settings.interval,
            settings.drm_root,
        )
        sampler = NodeSampler(chains, HostSampler(), DrmUsage(settings.fdinfo_root))
        return cls(settings.node, settings.interval, sampler, shards, session=session)

    @property
    def logs(self) -> EngineLogs | None:
        return self.shards.logs

    async def read(self, deadline: Deadline = NEVER) -> NodeReading:
        """The GPUs and the host; what each GPU process ran, only while a shard needs it. A
        GPU read not done by `deadline` is left unread (gpu/reads.py)."""
        return await self.sampler.sample(self.shards.wants_activity, deadline)

    async def judge(self, reading: NodeReading, *, deadline: Deadline = NEVER) -> ShardsView:
        """Every shard on `reading`; what the shards' engines answer (their logs, a health
        URL, a router server) after `deadline` waits for the next tick."""
        silent = [s.name for s in reading.sources if not s.ok]
        return await self.shards.judge(
            reading.gpus,
            reading.gpus_known,
            reading.started,
            silent,
            deadline=deadline,
            foreign_unknown=reading.foreign_unknown,
        )

    def sample(self, reading: NodeReading, shards: ShardsView) -> NodeSample:
        sample = NodeSample(
            node=self.node,
            session=self.session,
            seq=self.seq,
            time=datetime.now(UTC),
            interval_s=self.interval_s,
            gpus=shards.gpus,
            host=reading.host,
            shards=shards.briefs,
            sources=[*reading.sources, *shards.problems],
        )
        self.seq += 1
        return sample

    async def take(self) -> Tick:
        """One whole tick: read, judge, build."""
        reading = await self.read()
        shards = await self.judge(reading)
        return Tick(self.sample(reading, shards), shards)


@asynccontextmanager
async def open_pipeline(settings: Settings, session: str | None = None) -> AsyncIterator[Pipeline]:
    """A pipeline whose engine logs are followed while the block runs (`sample`, `doctor`)."""
    pipeline = Pipeline.from_settings(settings, session)
    async with anyio.create_task_group() as tg:
        if pipeline.logs is not None:
            await tg.start(pipeline.logs.run)
        yield pipeline
        tg.cancel_scope.cancel()
