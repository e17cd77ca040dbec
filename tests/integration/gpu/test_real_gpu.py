"""On a node with a real NVIDIA GPU: the worker against the real driver and nvidia-smi.

Skipped wherever no NVIDIA driver answers (CI, a laptop). The shards are
real processes: `cuda_holder.py` takes memory on GPU 0 through the driver,
and a plain sleeping interpreter placed on the same GPU is the engine that
came up on the CPU. `cuda_holder.py --busy` runs kernels on the GPU, where the
plain holder only holds its buffer: the driver's per-process samples tell them
apart. Nothing here is faked: the tool, the library and the processes the
driver lists are the node's own (only an engine's request lines are written
by the test, in llama-server's format).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import nats
import pytest
from nats.aio.msg import Msg

from placewatch.schemas import (
    ComputeStatus,
    FallbackEvent,
    GpuSample,
    NodeInventory,
    NodeSample,
    NodeTelemetry,
    decode,
    lean,
)
from placewatch.worker.config import Settings
from placewatch.worker.gpu.nvidia_smi import NvidiaSmiSource
from placewatch.worker.gpu.nvml import NvmlSource
from placewatch.worker.pipeline import Pipeline
from placewatch.worker.probe import ProbeRunner
from placewatch.worker.shards.activity import ActivityWindows

from tests.conftest import (
    SLEEP,
    NatsServer,
    Worker,
    node_env,
    parse_json,
    real_nvml,
    run_placewatch,
)

HOLDER = Path(__file__).resolve().parents[2] / "support" / "cuda_holder.py"
HOLD_MIB = 512

pytestmark = pytest.mark.skipif(
    not (real_nvml() and shutil.which("nvidia-smi")),
    reason="no NVIDIA driver answers here (NVML and nvidia-smi): runs on a GPU node",
)


def read(source: NvmlSource | NvidiaSmiSource) -> list[GpuSample]:
    gpus, status = anyio.run(source.sample)
    assert status.ok, status.error
    return gpus


def reserve(gpu: GpuSample) -> int:
    total, used, free = gpu.memory_total_bytes, gpu.memory_used_bytes, gpu.memory_free_bytes
    assert total is not None and used is not None and free is not None, gpu
    return total - used - free


def holding(gpus: list[GpuSample], pid: int) -> int:
    """Bytes the driver lists `pid` as holding on GPU 0."""
    return sum(p.used_bytes or 0 for p in gpus[0].processes if p.pid == pid)


@pytest.fixture
def holder() -> Iterator[int]:
    """A process holding HOLD_MIB on GPU 0, as the driver sees it: its pid."""
    proc = subprocess.Popen(
        [sys.executable, str(HOLDER), "--mib", str(HOLD_MIB)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    try:
        assert proc.stdout.readline().strip() == "ready", "cuda_holder did not take its memory"
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()


@pytest.fixture
def busy_holder() -> Iterator[int]:
    """A process holding HOLD_MIB on GPU 0 and running kernels there without pause: its pid."""
    proc = subprocess.Popen(
        [sys.executable, str(HOLDER), "--mib", str(HOLD_MIB), "--busy"],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    try:
        assert proc.stdout.readline().strip() == "ready", "cuda_holder --busy did not start"
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()


@pytest.fixture
def on_cpu() -> Iterator[int]:
    """A process that holds nothing on any GPU: its pid."""
    proc = subprocess.Popen([sys.executable, "-c", SLEEP], start_new_session=True)
    yield proc.pid
    proc.kill()
    proc.wait()


def shards_file(where: Path, on_gpu: int, on_cpu: int) -> Path:
    path = where / "shards.toml"
    path.write_text(
        f'[[shard]]\nid = "on-gpu"\npid = {on_gpu}\ngpus = [0]\n'
        f"min_gpu_bytes = {HOLD_MIB << 20}\n\n"
        f'[[shard]]\nid = "on-cpu"\npid = {on_cpu}\ngpus = [0]\n'
    )
    return path


def test_nvml_and_nvidia_smi_read_the_same_gpus() -> None:
    by_nvml = read(NvmlSource())
    by_smi = read(NvidiaSmiSource(ProbeRunner()))
    assert by_nvml, "NVML lists no GPU"
    assert [g.index for g in by_nvml] == [g.index for g in by_smi]
    for a, b in zip(by_nvml, by_smi, strict=True):
        assert (a.uuid, a.name, a.bus_id) == (b.uuid, b.name, b.bus_id)
        assert a.uuid is not None and a.uuid.startswith("GPU-")
        assert a.memory_total_bytes == b.memory_total_bytes
        assert a.memory_total_bytes is not None and a.memory_total_bytes > 1 << 30
        assert a.power_cap_w == b.power_cap_w
        assert a.mig_enabled == b.mig_enabled
        # What is neither used nor free is the driver's reserve, the same through both
        # (nvidia-smi rounds to MiB); NVML's first reading would count it as used.
        assert abs(reserve(a) - reserve(b)) <= 2 << 20, (reserve(a), reserve(b))


def test_nvml_reads_clocks_and_health_from_the_driver() -> None:
    source = NvmlSource()
    first, again = read(source), read(source)  # the second drains the XID event set
    ecc = smi_query("ecc.mode.current")
    for gpu, mode in zip(again, ecc, strict=True):
        assert gpu.sm_clock_mhz is not None and gpu.sm_clock_mhz > 0, gpu
        assert gpu.memory_clock_mhz is not None and gpu.memory_clock_mhz > 0, gpu
        assert gpu.memory_util_pct is not None and 0 <= gpu.memory_util_pct <= 100
        assert gpu.health is not None, gpu
        assert gpu.health.pcie_gen is None or 1 <= gpu.health.pcie_gen <= 6
        if mode == "Enabled":
            assert gpu.health.ecc_uncorrected_aggregate is not None, gpu.health
        # A registered GPU counts from 0; one that refuses the event set has none.
        assert gpu.health.xid_errors in (None, 0) or gpu.health.last_xid is not None
    assert [g.uuid for g in first] == [g.uuid for g in again]


def smi_query(field: str) -> list[str]:
    out = subprocess.run(
        ["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=True,
    )
    return [line.strip() for line in out.stdout.splitlines() if line.strip()]


def test_a_process_holding_gpu_memory_is_listed_by_both_sources(holder: int) -> None:
    for source in (NvmlSource(), NvidiaSmiSource(ProbeRunner())):
        held = holding(read(source), holder)
        # The allocation and the context the driver keeps beside it.
        assert held >= HOLD_MIB << 20, (source.name, held)


@pytest.mark.parametrize("sources", ["nvml", "nvidia-smi"])
def test_a_one_off_sample_judges_real_shards(
    sources: str, holder: int, on_cpu: int, tmp_path: Path
) -> None:
    shards = shards_file(tmp_path, holder, on_cpu)
    result = run_placewatch(
        "sample",
        "--json",
        "--no-discover",
        "--grace",
        "0",
        "--gpu-sources",
        sources,
        "--shards",
        str(shards),
        env=node_env(),
    )
    assert result.returncode == 0, result.stderr
    telemetry = parse_json(result.stdout)
    assert isinstance(telemetry, dict)
    assert [s["name"] for s in telemetry["sources"] if s["ok"]] == [sources]
    verdicts = {s["shard"]: s["verdict"] for s in telemetry["shards"]}
    assert verdicts == {"on-gpu": "gpu", "on-cpu": "cpu_fallback"}, telemetry["shards"]


def test_the_worker_publishes_real_gpus_and_fires_for_the_shard_on_the_cpu(
    holder: int, on_cpu: int, tmp_path: Path
) -> None:
    server = NatsServer(tmp_path / "jetstream")
    server.start()
    argv = ["--nats", server.url, "--node", "gpu-node", "--interval", "1", "--no-discover"]
    argv += ["--grace", "0", "--shards", str(shards_file(tmp_path, holder, on_cpu))]
    try:
        telemetry, statuses, fallbacks, said = anyio.run(watch, server.url, argv)
    finally:
        server.stop()
    assert telemetry and len(statuses) == 2 and fallbacks, (statuses, fallbacks, said)
    expected = read(NvmlSource())
    first = telemetry[0]
    assert [(g.uuid, g.name) for g in first.gpus] == [(g.uuid, g.name) for g in expected]
    assert holding(first.gpus, holder) >= HOLD_MIB << 20
    assert {s.shard: s.verdict for s in first.shards} == {"on-gpu": "gpu", "on-cpu": "cpu_fallback"}
    assert statuses == {"on-gpu": "gpu", "on-cpu": "cpu_fallback"}
    assert [(f.status.shard, f.state, f.status.pid) for f in fallbacks] == [
        ("on-cpu", "firing", on_cpu)
    ]


async def watch(
    url: str, argv: list[str]
) -> tuple[list[NodeSample], dict[str, str], list[FallbackEvent], str]:
    """Subscribed first, then `placewatch run argv`: the samples (inventory and telemetry
    joined) that judge both shards, their statuses and the fallback events, until there are
    all three or 30 s have passed; and what the worker said."""
    telemetry: list[NodeSample] = []
    inventories: dict[str, NodeInventory] = {}
    statuses: dict[str, str] = {}
    fallbacks: list[FallbackEvent] = []

    async def on_inventory(msg: Msg) -> None:
        inventory = decode(msg.data, NodeInventory, msg.headers)
        inventories[inventory.id] = inventory

    async def on_telemetry(msg: Msg) -> None:
        read = decode(msg.data, NodeTelemetry, msg.headers)
        verdicts = {s.verdict for s in read.shards.values()}
        if len(read.shards) == 2 and "starting" not in verdicts:
            telemetry.append(lean.join(inventories[read.inventory], read))

    async def on_status(msg: Msg) -> None:
        status = decode(msg.data, ComputeStatus, msg.headers)
        statuses[status.shard] = status.verdict

    async def on_fallback(msg: Msg) -> None:
        fallbacks.append(decode(msg.data, FallbackEvent, msg.headers))

    nc = await nats.connect(url)
    try:
        await nc.subscribe("placewatch.inventory.gpu-node", cb=on_inventory)
        await nc.subscribe("placewatch.telemetry.gpu-node", cb=on_telemetry)
        await nc.subscribe("placewatch.compute.gpu-node.*", cb=on_status)
        await nc.subscribe("placewatch.fallback.gpu-node.*", cb=on_fallback)
        await nc.flush()
        worker = Worker(*argv, env=node_env())
        try:
            with anyio.move_on_after(30):
                while not (telemetry and len(statuses) == 2 and fallbacks):
                    await anyio.sleep(0.05)
        finally:
            _, _, _, said = worker.stop()
    finally:
        await nc.close()
    return telemetry, statuses, fallbacks, said


def read_activity(source: NvmlSource | NvidiaSmiSource) -> dict[int, float | None]:
    """pid -> SM % on GPU 0, from a read 1.5 s after a first one (NVML's covers the time
    between; pmon's its last second)."""

    async def twice() -> list[GpuSample]:
        await source.sample("any")
        await anyio.sleep(1.5)
        gpus, status = await source.sample("any")
        assert status.ok, status.error
        return gpus

    gpus = anyio.run(twice)
    return {p.pid: p.sm_pct for p in gpus[0].processes}


def test_nvml_shows_the_busy_holder_running_and_the_idle_one_not(
    holder: int, busy_holder: int
) -> None:
    found = read_activity(NvmlSource())
    busy, idle = found[busy_holder], found[holder]
    assert busy is not None and busy > 0, found
    assert idle == 0.0, found


def test_pmon_shows_the_busy_holder_running_and_the_idle_one_not(
    holder: int, busy_holder: int
) -> None:
    found = read_activity(NvidiaSmiSource(ProbeRunner()))
    busy, idle = found[busy_holder], found[holder]
    assert busy is not None and busy > 0, found
    # pmon prints `-` for a process without a sample; beside a busy one the GPU is busy,
    # so that says nothing (None), or pmon printed a 0.
    assert idle in (0.0, None), found


def test_pmon_reads_an_idle_holder_on_an_otherwise_idle_gpu_as_zero(holder: int) -> None:
    assert read_activity(NvidiaSmiSource(ProbeRunner()))[holder] == 0.0


LAUNCH = "0.02.031.619 I slot launch_slot_: id  0 | task 0 | processing task, is_child = 0"
STARTED_S = 2.0
"""Time for a holder's start to reach the driver's samples: on an H200 (driver 580.159.04)
NVML's samples show a holder that then idles at 1% SM once, within 1.4 s of its `ready` (its
context's creation), and at 0% from there on. The first read of the shard's activity after
it takes that sample."""


def serve(pid: int, sources: str, where: Path) -> ComputeStatus:
    """The status of a shard of `pid` placed on GPU 0 whose engine's log says a request is
    running, after 9 ticks 0.7 s apart. The request starts once the holder's own start is in
    the driver's samples, as an engine serves once it has loaded. Any activity in the
    shard's window holds a finding of idle serving off (shards.md), and the start is
    activity: the window starts afresh after the first read of the shard's activity, which
    takes the start's sample, as the window of a shard that has served a while holds no
    start."""
    time.sleep(STARTED_S)
    log = where / "engine.log"
    log.write_text(LAUNCH + "\n")
    shards = where / "shards.toml"
    shards.write_text(f'[[shard]]\nid = "s"\npid = {pid}\ngpus = [0]\nlog_path = "{log}"\n')
    settings = Settings(
        node="gpu-node", shards=str(shards), grace=0.0, discover=False, gpu_sources=[sources]
    )
    pipeline = Pipeline.from_settings(settings)

    async def ticks() -> ComputeStatus:
        assert pipeline.logs is not None
        async with anyio.create_task_group() as tg:
            await tg.start(pipeline.logs.run)
            await pipeline.take()  # the log's lines are history: running from here
            assert pipeline.shards.wants_activity == "any"  # the shard found, serving
            await anyio.sleep(0.7)
            tick = await pipeline.take()  # its first read of what the GPU processes ran
            pipeline.shards.windows = ActivityWindows()
            for _ in range(7):
                await anyio.sleep(0.7)
                tick = await pipeline.take()
            tg.cancel_scope.cancel()
        (status,) = tick.shards.statuses
        return status

    return anyio.run(ticks)


@pytest.mark.parametrize("sources", ["nvml", "nvidia-smi"])
def test_a_serving_shard_whose_gpu_runs_nothing_is_a_fallback(
    sources: str, holder: int, tmp_path: Path
) -> None:
    """It holds 512 MiB on GPU 0, so memory alone says `gpu`; its engine says a request is
    running; its process runs nothing there."""
    status = serve(holder, sources, tmp_path)
    assert (status.verdict, status.backend) == ("cpu_fallback", "CPU"), status.reason
    assert "showed 0% SM on GPU 0" in status.reason
    assert (status.sm_pct, status.requests) == (0.0, 1)


@pytest.mark.parametrize("sources", ["nvml", "nvidia-smi"])
def test_a_serving_shard_whose_gpu_runs_its_kernels_is_on_the_gpu(
    sources: str, busy_holder: int, tmp_path: Path
) -> None:
    status = serve(busy_holder, sources, tmp_path)
    assert status.verdict == "gpu", status.reason
    assert status.sm_pct is not None and status.sm_pct > 0
