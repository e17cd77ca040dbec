"""A shard that serves while its GPU does nothing, through the whole pipeline: its engine's
log followed as it grows, NVML's per-process samples (a stand-in library), the verdict, the
status and the telemetry's brief; and a real llama-server serving real requests."""

from __future__ import annotations

import json
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from placewatch.schemas import GpuProcess, GpuSample, ShardReading, lean
from placewatch.worker.engines.evidence.follow import EngineLogs
from placewatch.worker.gpu import ActivityWanted
from placewatch.worker.gpu.nvml import NvmlSource
from placewatch.worker.gpu.registry import VendorChain
from placewatch.worker.host import HostSampler
from placewatch.worker.pipeline import Pipeline, Tick
from placewatch.worker.sampler import NodeSampler
from placewatch.worker.shards.activity import ActivityWindows
from placewatch.worker.shards.placements import ShardsFile
from placewatch.worker.shards.shard_pass import ShardPass

from tests.conftest import FIXTURES
from tests.support.fake_nvml import FakeNvml, UtilizationSample
from tests.support.llama_server import NO_PROXY, LlamaServers

GiB = 1 << 30
CAPTURE = (FIXTURES / "serving" / "llamacpp-b11434-serving.log").read_text().splitlines()
LAUNCH = next(line for line in CAPTURE if "launch_slot_" in line)
FINISH = [line for line in CAPTURE if "task 0 " in line and "print_timing" in line]


@pytest.fixture
def engine() -> Iterator[int]:
    """A process standing in for llama-server: the pid the GPU lists."""
    proc = subprocess.Popen(["sleep", "3602.5"])
    yield proc.pid
    proc.kill()
    proc.wait()


def node(
    pid: int, tmp_path: Path, gpus: str = "[0]", log: Path | None = None
) -> tuple[Pipeline, FakeNvml, Path]:
    """A pipeline watching `pid` placed on `gpus`, its log `log` (an empty file if None), and
    NVML's stand-in listing it holding 1.4 GiB on GPU 0 with no utilization sample."""
    if log is None:
        log = tmp_path / "llama.log"
        log.write_text("")
    shards = tmp_path / "shards.toml"
    shards.write_text(f'[[shard]]\nid = "llama"\npid = {pid}\ngpus = {gpus}\nlog_path = "{log}"\n')
    gpu = GpuSample(
        index=0,
        uuid="GPU-0",
        memory_total_bytes=80 * GiB,
        memory_used_bytes=int(1.4 * GiB),
        memory_free_bytes=int(78.6 * GiB),
        utilization_pct=0.0,
        processes=[GpuProcess(pid=pid, used_bytes=int(1.4 * GiB))],
    )
    nvml = FakeNvml([gpu])
    shard_pass = ShardPass(
        "n1", "s1", grace_s=0, shards_file=ShardsFile(shards), discovery=False, logs=EngineLogs()
    )
    sampler = NodeSampler([VendorChain("nvidia", [NvmlSource(nvml)])], HostSampler())
    return Pipeline("n1", 1.0, sampler, shard_pass), nvml, log


def wanted(pipeline: Pipeline) -> ActivityWanted:
    """How far the next GPU read goes for process activity (a call: read afresh each time)."""
    return pipeline.shards.wants_activity


async def ticks(pipeline: Pipeline, n: int, every: float = 0.6) -> list[Tick]:
    taken = []
    for _ in range(n):
        taken.append(await pipeline.take())
        await anyio.sleep(every)
    return taken


def test_serving_with_its_gpu_idle_turns_gpu_into_cpu_fallback_and_back(
    engine: int, tmp_path: Path
) -> None:
    pipeline, nvml, log = node(engine, tmp_path)

    async def scenario() -> None:
        logs = pipeline.logs
        assert logs is not None
        async with anyio.create_task_group() as tg:
            await tg.start(logs.run)
            (first,) = await ticks(pipeline, 1)
            status = first.shards.statuses[0]
            assert (status.verdict, status.sm_pct, status.requests) == ("gpu", None, None)
            # Running and not serving: activity is read in process only (no tool run).
            assert wanted(pipeline) == "in-process"
            with log.open("a") as f:  # a request starts, and runs
                f.write(LAUNCH + "\n")
            await anyio.sleep(0.4)  # the log is followed between ticks, as a worker's is
            taken = await ticks(pipeline, 5)
            assert wanted(pipeline) == "any"  # serving: a tool may run for it
            last = taken[-1].shards.statuses[0]
            assert last.verdict == "cpu_fallback", last.reason
            assert last.backend == "CPU" and last.requests == 1 and last.sm_pct == 0
            assert last.reason.startswith(
                "placed on GPU 0 but computing on the CPU: llama.cpp served 1 request within "
                "30 s while its processes showed 0% SM on GPU 0 at all "
            )
            brief = taken[-1].sample.shards[0]
            assert (brief.verdict, brief.sm_pct, brief.requests) == ("cpu_fallback", 0, 1)
            process = taken[-1].sample.gpus[0].processes[0]
            assert (process.shard, process.sm_pct, process.mem_pct) == ("llama", 0, 0)
            _, telemetry = lean.split(taken[-1].sample)
            assert telemetry.shards["llama"] == ShardReading(verdict="cpu_fallback", sm_pct=0)
            with log.open("a") as f:  # it finishes; the finding holds between requests
                f.write("\n".join(FINISH) + "\n")
            (between,) = await ticks(pipeline, 1)
            assert between.shards.statuses[0].verdict == "cpu_fallback"
            # Its GPU shows it computing: `gpu` again.
            nvml.samples[0] = [UtilizationSample(pid=engine, timeStamp=10, smUtil=40, memUtil=9)]
            (woke,) = await ticks(pipeline, 1)
            assert woke.shards.statuses[0].verdict == "gpu"
            assert woke.sample.gpus[0].processes[0].sm_pct == 40
            tg.cancel_scope.cancel()

    anyio.run(scenario, backend="asyncio")


def test_the_engine_s_start_in_the_driver_s_samples_holds_the_finding_off_while_in_the_window(
    engine: int, tmp_path: Path
) -> None:
    """As an H200's driver showed it (driver 580.159.04): one sample at 1% SM while the
    engine made its CUDA context, before it served, then nothing. The first read of the
    shard's activity takes that sample, and the finding waits until it leaves the window
    (the real-GPU test, test_real_gpu.py's serve(), starts the window afresh after that read,
    as a shard that has served a while has it)."""

    async def serving(fresh_window: bool) -> str:
        where = tmp_path / ("fresh" if fresh_window else "started")
        where.mkdir()
        log = where / "llama.log"
        log.write_text(LAUNCH + "\n")  # history: the request runs from the first tick
        pipeline, nvml, _ = node(engine, where, log=log)
        nvml.samples[0] = [UtilizationSample(pid=engine, timeStamp=5, smUtil=1)]
        assert pipeline.logs is not None
        async with anyio.create_task_group() as tg:
            await tg.start(pipeline.logs.run)
            await ticks(pipeline, 1, every=0.3)
            assert wanted(pipeline) == "any" and nvml.asked_since == []
            await ticks(pipeline, 1, every=0.3)  # the first read of its activity
            assert nvml.asked_since == [(0, 0)]
            if fresh_window:
                pipeline.shards.windows = ActivityWindows()
            *_, last = await ticks(pipeline, 7, every=0.3)
            tg.cancel_scope.cancel()
        # The reads after the start's: nothing ran since its sample.
        assert nvml.asked_since[-1] == (0, 5)
        (status,) = last.shards.statuses
        return status.verdict

    assert anyio.run(serving, False, backend="asyncio") == "gpu"
    assert anyio.run(serving, True, backend="asyncio") == "cpu_fallback"


def test_a_request_in_the_log_before_the_worker_came_is_not_counted(
    engine: int, tmp_path: Path
) -> None:
    pipeline, _, log = node(engine, tmp_path)
    # The first request, launched and done (its lines alone: the capture's `no usable GPU
    # found` would decide the verdict on its own).
    log.write_text("\n".join(x for x in CAPTURE[:18] if " slot " in x) + "\n")

    async def scenario() -> None:
        logs = pipeline.logs
        assert logs is not None
        async with anyio.create_task_group() as tg:
            await tg.start(logs.run)
            taken = await ticks(pipeline, 4)
            assert [t.shards.statuses[0].verdict for t in taken] == ["gpu"] * 4
            assert taken[-1].shards.statuses[0].requests == 0
            tg.cancel_scope.cancel()

    anyio.run(scenario, backend="asyncio")


def test_activity_is_read_only_while_a_shard_placed_on_gpus_needs_it(
    engine: int, tmp_path: Path
) -> None:
    pipeline, nvml, _ = node(engine, tmp_path, gpus="[]")  # placed on the CPU on purpose

    async def scenario() -> None:
        logs = pipeline.logs
        assert logs is not None
        async with anyio.create_task_group() as tg:
            await tg.start(logs.run)
            await ticks(pipeline, 2, every=0)
            tg.cancel_scope.cancel()

    anyio.run(scenario, backend="asyncio")
    assert nvml.asked_since == []


def test_a_real_llama_server_serving_while_its_gpu_shows_nothing_is_cpu_fallback(
    llama_servers: LlamaServers, tmp_path: Path
) -> None:
    """The engine is a real llama-server (the CPU-only build of the real-engine lane) answering
    real completions; the GPU is the stand-in library listing it holding 1.4 GiB and giving no
    utilization sample for it, as NVML does for a process that runs no kernel. Started with no
    GPU flags, it says nothing of GPUs in its log: its requests are the only evidence. Each
    request runs for seconds (a long answer, the context shifted), so that reads are taken
    while one runs, as on a real model."""
    log = tmp_path / "server.log"
    with log.open("wb") as out:
        proc, port = llama_servers.start(
            "-np", "1", "--context-shift", stdout=out, stderr=subprocess.STDOUT
        )
    assert "GPU" not in log.read_text(errors="replace")
    pipeline, nvml, _ = node(proc.pid, tmp_path, log=log)

    def complete(n: int) -> None:
        # Seconds of work a request: the tiny model's 256-token context shifted as it fills.
        query = {"prompt": f"the GPU is {n}", "n_predict": 20000, "ignore_eos": True}
        body = json.dumps(query).encode()
        ask = urllib.request.Request(f"http://127.0.0.1:{port}/completion", body)
        with NO_PROXY.open(ask, timeout=60) as answer:
            assert answer.status == 200

    async def scenario() -> None:
        logs = pipeline.logs
        assert logs is not None
        async with anyio.create_task_group() as tg:
            await tg.start(logs.run)
            (first,) = await ticks(pipeline, 1)
            assert first.shards.statuses[0].verdict == "gpu"  # memory held, nothing served yet
            served = 0

            async def serve() -> None:
                nonlocal served
                while True:
                    await anyio.to_thread.run_sync(complete, served)
                    served += 1

            tg.start_soon(serve)
            judged = first.shards.statuses[0]
            for _ in range(60):
                (tick,) = await ticks(pipeline, 1, every=0.3)
                judged = tick.shards.statuses[0]
                if judged.verdict != "gpu":
                    break
            tg.cancel_scope.cancel()
        assert judged.verdict == "cpu_fallback", (judged.reason, judged.requests, served)
        assert judged.backend == "CPU" and judged.sm_pct == 0
        assert judged.requests is not None and 1 <= judged.requests <= served + 1
        assert judged.reason.startswith(
            f"placed on GPU 0 but computing on the CPU: llama.cpp served {judged.requests} request"
        ), judged.reason
        assert "showed 0% SM on GPU 0" in judged.reason and "1.4 GiB" in judged.reason

    anyio.run(scenario, backend="asyncio")
    assert nvml.asked_since, "NVML's per-process samples were read"
