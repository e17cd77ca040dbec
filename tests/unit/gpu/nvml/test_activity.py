"""NVML's per-process utilization: samples since the last read, NOT_FOUND is idle, a GPU that
cannot say gives None, and nothing is asked unless a shard needs it."""

from __future__ import annotations

from typing import Any

import anyio
import msgspec

from placewatch.worker.gpu import ActivityWanted
from placewatch.worker.gpu.nvml import NvmlSource, ProcessUtilization, read_gpus

from tests.support.fake_nvml import FakeNvml, Mig, Process, UtilizationSample, captured

MiB = 1 << 20


def sample(source: NvmlSource, activity: ActivityWanted) -> Any:
    async def once() -> Any:
        return await source.sample(activity)

    return anyio.run(once, backend="asyncio")


def usage(gpus: Any) -> dict[int, dict[int, tuple[float | None, float | None]]]:
    return {g.index: {p.pid: (p.sm_pct, p.mem_pct) for p in g.processes} for g in gpus}


def test_samples_are_put_on_their_processes_and_a_process_without_one_ran_nothing() -> None:
    nvml = FakeNvml(captured())
    nvml.samples[0] = [UtilizationSample(pid=4242, timeStamp=1_000, smUtil=35, memUtil=12)]
    gpus, status = sample(NvmlSource(nvml), activity="any")
    assert status.ok
    # 4317 holds memory on GPU 0 but had no sample: NVML returns one only for a process
    # that ran. GPU 1 had none at all (NOT_FOUND): its process ran nothing either.
    assert usage(gpus) == {0: {4242: (35.0, 12.0), 4317: (0.0, 0.0)}, 1: {5120: (0.0, 0.0)}}


def test_each_read_asks_for_the_samples_since_the_newest_it_saw_on_that_gpu() -> None:
    nvml = FakeNvml(captured())
    source = NvmlSource(nvml)
    nvml.samples[0] = [
        UtilizationSample(pid=4242, timeStamp=1_000, smUtil=30, memUtil=10),
        UtilizationSample(pid=4242, timeStamp=1_166, smUtil=50, memUtil=20),
    ]
    first, _ = sample(source, activity="any")
    assert usage(first)[0][4242] == (40.0, 15.0)  # the mean over its samples
    nvml.samples[0].append(UtilizationSample(pid=4242, timeStamp=2_000, smUtil=0, memUtil=0))
    second, _ = sample(source, activity="any")
    assert usage(second)[0][4242] == (0.0, 0.0)
    third, _ = sample(source, activity="any")  # nothing new: NOT_FOUND, idle
    assert usage(third)[0][4242] == (0.0, 0.0)
    assert [since for index, since in nvml.asked_since if index == 0] == [0, 1_166, 2_000]


def test_without_activity_nothing_is_asked_and_nothing_is_said() -> None:
    nvml = FakeNvml(captured())
    nvml.samples[0] = [UtilizationSample(pid=4242, timeStamp=1_000, smUtil=35, memUtil=12)]
    gpus, _ = sample(NvmlSource(nvml), activity="no")
    assert nvml.asked_since == []
    assert {p.sm_pct for g in gpus for p in g.processes} == {None}


def test_a_gpu_that_cannot_say_gives_no_reading() -> None:
    nvml = FakeNvml(captured())
    nvml.no_utilization = {0}  # NOT_SUPPORTED: a vGPU guest, a GPU before Maxwell
    gpus, status = sample(NvmlSource(nvml), activity="any")
    assert status.ok  # the rest of the reading stands
    assert usage(gpus) == {0: {4242: (None, None), 4317: (None, None)}, 1: {5120: (0.0, 0.0)}}


def test_a_mig_gpu_is_not_asked() -> None:
    gpu = msgspec.structs.replace(captured()[0], utilization_pct=None)
    mig = [Mig(1, 0, "MIG-1", "NVIDIA A100-SXM4-80GB MIG 3g.40gb", 40192 * MiB, 20000 * MiB,
               [Process(9001, 19000 * MiB)])]  # fmt: skip
    nvml = FakeNvml([gpu], {0: mig})
    (read,), _ = read_gpus(nvml, utilization=ProcessUtilization())
    assert nvml.asked_since == []
    assert [(p.pid, p.sm_pct) for p in read.processes] == [(9001, None)]


def test_a_driver_without_the_first_call_is_asked_through_the_second() -> None:
    nvml = FakeNvml(captured())
    nvml.v1_gone = True
    nvml.samples[0] = [UtilizationSample(pid=4242, timeStamp=5, smUtil=80, memUtil=40)]
    utilization = ProcessUtilization()
    (busy, _), _ = read_gpus(nvml, utilization=utilization)
    assert [(p.pid, p.sm_pct) for p in busy.processes] == [(4242, 80.0), (4317, 0.0)]
    assert utilization.last_seen == {0: 5}  # GPU 1 had no sample: nothing newer to keep


def test_bindings_without_the_call_give_no_reading() -> None:
    class Older(FakeNvml):
        nvmlDeviceGetProcessUtilization = None  # type: ignore[assignment]

    gpus, status = sample(NvmlSource(Older(captured())), activity="any")
    assert status.ok
    assert {p.sm_pct for g in gpus for p in g.processes} == {None}


def test_an_out_of_range_sample_is_clamped() -> None:
    nvml = FakeNvml(captured())
    nvml.samples[0] = [UtilizationSample(pid=4242, timeStamp=9, smUtil=250, memUtil=3)]
    gpus, _ = sample(NvmlSource(nvml), activity="any")
    assert usage(gpus)[0][4242] == (100.0, 3.0)
