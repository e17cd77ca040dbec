"""A GPU read a tick waits for until its deadline, never killed for being late: its answer
serves the next tick, and a tick without one reads none of the GPUs, saying why."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import anyio

from placewatch.schemas import GpuHealth, GpuProcess, GpuSample, SourceStatus
from placewatch.schemas.messages import Vendor
from placewatch.worker.deadline import Deadline
from placewatch.worker.gpu import ActivityWanted
from placewatch.worker.gpu.registry import VendorChain
from placewatch.worker.host import HostSampler
from placewatch.worker.sampler import NodeReading, NodeSampler


def gpu(used_mib: int, clock_events: tuple[str, ...] = ("sw_power_cap",)) -> GpuSample:
    return GpuSample(
        index=0,
        uuid="GPU-0",
        name="NVIDIA A100-SXM4-80GB",
        memory_total_bytes=80 << 30,
        memory_used_bytes=used_mib << 20,
        utilization_pct=37.0,
        processes=[GpuProcess(pid=4242, used_bytes=used_mib << 20)],
        health=GpuHealth(ecc_uncorrected_volatile=2, clock_events=list(clock_events)),
    )


@dataclass
class Gated:
    """A GPU source whose every answer waits for the test to let it go: a tool that hangs
    until the driver lets go."""

    name: str = "nvidia-smi"
    vendor: Vendor = "nvidia"
    answers: list[tuple[anyio.Event, list[GpuSample], str | None, Exception | None]] = field(
        default_factory=list
    )
    asked: int = 0
    answered: int = 0

    def unavailable(self) -> str | None:
        return None

    def answer(
        self, gpus: list[GpuSample], error: str | None = None, raises: Exception | None = None
    ) -> anyio.Event:
        """The next call's answer (a failure with `error`; a defect that `raises`), given
        once the event is set."""
        gate = anyio.Event()
        self.answers.append((gate, gpus, error, raises))
        return gate

    async def sample(self, activity: ActivityWanted = "no") -> tuple[list[GpuSample], SourceStatus]:
        gate, gpus, error, raises = self.answers[self.asked]
        self.asked += 1
        await gate.wait()
        self.answered += 1
        if raises is not None:
            raise raises
        return gpus, SourceStatus(name=self.name, ok=error is None, error=error, vendor="nvidia")


async def tick(sampler: NodeSampler, wait_s: float) -> tuple[NodeReading, float]:
    """One tick's reading with `wait_s` for the GPUs, and how long the tick took."""
    began = time.monotonic()
    reading = await sampler.sample(deadline=Deadline.after(wait_s))
    return reading, time.monotonic() - began


def test_a_late_answer_is_not_waited_for_nor_cut_short_and_serves_the_next_tick() -> None:
    source = Gated()
    sampler = NodeSampler([VendorChain("nvidia", [source])], HostSampler())

    async def ticks() -> None:
        async with anyio.create_task_group() as tg:
            await tg.start(sampler.run)
            source.answer([gpu(1000)]).set()
            first, _ = await tick(sampler, 5.0)
            assert first.gpus_known and first.gpus[0].memory_used_bytes == 1000 << 20

            hung = source.answer([gpu(2000)])  # the next read hangs
            late, took = await tick(sampler, 0.05)
            assert took < 1.0  # the deadline, not the tool
            assert not late.gpus_known and late.unread
            (status,) = late.sources
            assert (status.name, status.ok) == ("nvidia-smi", False)
            assert status.error is not None
            assert status.error.startswith("no answer within the tick's deadline; last answer")
            assert late.gpus == []  # no last value repeated as if read again

            again, _ = await tick(sampler, 0.05)  # the read under way is not asked again
            assert again.unread and source.asked == 2

            hung.set()  # the late answer comes, between two ticks
            await anyio.wait_all_tasks_blocked()
            assert source.answered == 2  # it ran to its end: nothing cancelled it
            source.answer([gpu(3000)])  # the next tick's own read hangs in its turn
            served, _ = await tick(sampler, 0.05)
            assert served.gpus_known and not served.unread
            assert served.gpus[0].memory_used_bytes == 2000 << 20
            assert [p.pid for p in served.gpus[0].processes] == [4242]
            assert served.started < time.monotonic() - 0.05  # as old as the late read is

            after, _ = await tick(sampler, 0.05)  # a late answer serves one tick, no more
            assert after.unread and after.gpus == []
            tg.cancel_scope.cancel()

    anyio.run(ticks, backend="asyncio")


def test_the_first_answer_after_the_start_is_waited_for_past_the_deadline() -> None:
    # Before it there is no GPU to list: every shard would read `unknown` at each start.
    source = Gated()
    sampler = NodeSampler([VendorChain("nvidia", [source])], HostSampler())

    async def first() -> tuple[NodeReading, float]:
        async with anyio.create_task_group() as tg:
            await tg.start(sampler.run)
            tg.start_soon(_set_soon, source.answer([gpu(1000)]))
            reading, took = await tick(sampler, 0.01)
            tg.cancel_scope.cancel()
        return reading, took

    reading, took = anyio.run(first, backend="asyncio")
    assert reading.gpus_known and reading.gpus[0].memory_used_bytes == 1000 << 20
    assert took >= 0.05


def test_without_its_task_a_read_is_waited_for_whole() -> None:
    # `placewatch sample`: no task runs the reads, and the deadline is NEVER.
    source = Gated()
    sampler = NodeSampler([VendorChain("nvidia", [source])], HostSampler())

    async def once() -> NodeReading:
        gate = source.answer([gpu(1000)])
        async with anyio.create_task_group() as tg:
            tg.start_soon(_set_soon, gate)
            reading = await sampler.sample()
        return reading

    reading = anyio.run(once, backend="asyncio")
    assert reading.gpus_known and reading.gpus[0].memory_used_bytes == 1000 << 20


async def _set_soon(gate: anyio.Event) -> None:
    await anyio.sleep(0.05)
    gate.set()


def test_a_failed_read_leaves_the_gpus_unread() -> None:
    source = Gated()
    sampler = NodeSampler([VendorChain("nvidia", [source])], HostSampler())

    async def failing() -> NodeReading:
        source.answer([gpu(1000)]).set()
        await sampler.sample()
        source.answer([], "nvidia-smi exited 9: NVIDIA-SMI has failed").set()
        return await sampler.sample()

    reading = anyio.run(failing, backend="asyncio")
    assert reading.unread and not reading.gpus_known
    assert [(s.ok, s.error) for s in reading.sources] == [
        (False, "nvidia-smi exited 9: NVIDIA-SMI has failed")
    ]
    assert reading.gpus == []


def test_a_source_that_raises_fails_its_read_and_the_reads_go_on() -> None:
    source = Gated()
    sampler = NodeSampler([VendorChain("nvidia", [source])], HostSampler())

    async def ticks() -> tuple[NodeReading, NodeReading]:
        async with anyio.create_task_group() as tg:
            await tg.start(sampler.run)
            source.answer([], raises=RuntimeError("a defect")).set()
            broken, _ = await tick(sampler, 5.0)
            source.answer([gpu(1000)]).set()
            mended, _ = await tick(sampler, 5.0)
            tg.cancel_scope.cancel()
        return broken, mended

    broken, mended = anyio.run(ticks, backend="asyncio")
    (status,) = broken.sources
    assert not status.ok and status.error is not None
    assert status.error.startswith("placewatch could not read it (RuntimeError: a defect)")
    assert mended.gpus_known and mended.gpus[0].memory_used_bytes == 1000 << 20
