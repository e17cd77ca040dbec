"""A GPU turning unhealthy and healthy again, end to end: a fake nvidia-smi whose answer
gains an uncorrected ECC count, real processes as shards, `placewatch run`, a real
nats-server, and what a gateway reads: FleetView's joined sample and gpus_for, the raw
telemetry, the inventory kept in its stream, and each shard's ComputeStatus."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import anyio
import nats
from nats.aio.msg import Msg

from placewatch.consumer import FleetView
from placewatch.schemas import ComputeStatus, NodeTelemetry, decode

from tests.conftest import (
    GPU0,
    GPU1,
    FakeGpuTools,
    NatsServer,
    Worker,
    apps,
    start,
    wait_older_than,
)
from tests.integration.test_shards_end_to_end import stream_events
from tests.support.fleet_node import a100x2_health

PROBLEM = (
    "2 uncorrected ECC error(s) since the last reset: reset the GPU (nvidia-smi -r, with "
    "nothing running on it) or reboot the node"
)


def statuses(url: str, shard: str) -> list[ComputeStatus]:
    events = anyio.run(stream_events, url, backend="asyncio")
    return [e for e in events if isinstance(e, ComputeStatus) and e.shard == shard]


def wait_statuses(url: str, shard: str, count: int, timeout: float = 15) -> list[ComputeStatus]:
    deadline = time.monotonic() + timeout
    found: list[ComputeStatus] = []
    while time.monotonic() < deadline:
        found = statuses(url, shard)
        if len(found) >= count:
            return found
        time.sleep(0.3)
    raise AssertionError(f"{shard}: {len(found)} statuses, wanted {count}: {found}")


async def read_fleet(url: str, want_problems: bool) -> tuple[FleetView, NodeTelemetry]:
    """A FleetView of the fleet once node n1's GPU 1 is as wanted, and the raw telemetry
    that said so."""
    nc = await nats.connect(url)
    view = FleetView(nc)
    seen: list[NodeTelemetry] = []

    async def take(msg: Msg) -> None:
        seen.append(decode(msg.data, NodeTelemetry, msg.headers))

    sub = await nc.subscribe("placewatch.telemetry.n1", cb=take)
    await view.start()
    try:
        with anyio.fail_after(15):
            while True:
                sample = view.sample("n1")
                gpu = None if sample is None else sample.gpus[1]
                unhealthy = gpu is not None and gpu.health is not None and not gpu.health.healthy
                if (
                    unhealthy == want_problems
                    and seen
                    and bool(seen[-1].gpus[1].problems) == (want_problems)
                ):
                    return view, seen[-1]
                await anyio.sleep(0.2)
    finally:
        await sub.unsubscribe()
        await view.stop()
        await nc.close()


def test_a_gpu_turning_unhealthy_is_seen_by_every_reader_and_clears(
    nats_server: NatsServer,
    fake_gpu: FakeGpuTools,
    shard_procs: dict[str, subprocess.Popen[bytes]],
    workers: list[Worker],
    tmp_path: Path,
) -> None:
    on0, on1 = start(shard_procs, "on0"), start(shard_procs, "on1")
    fake_gpu.nvidia_smi(a100x2_health(0), apps({on0: (GPU0, 30000), on1: (GPU1, 9000)}))
    shards = tmp_path / "shards.toml"
    shards.write_text(
        f'[[shard]]\nid = "on0"\npid = {on0}\ngpus = [0]\n\n'
        f'[[shard]]\nid = "on1"\npid = {on1}\ngpus = [1]\n'
    )
    wait_older_than([on0, on1], 1.2)
    worker = Worker(
        *("--nats", nats_server.url, "--node", "n1", "--shards", str(shards)),
        *("--grace", "1", "--interval", "1", "--no-discover", "--gpu-sources", "nvidia-smi"),
        env=fake_gpu.env(),
    )
    workers.append(worker)

    (first,) = wait_statuses(nats_server.url, "on1", 1)
    assert (first.verdict, first.unhealthy_gpus) == ("gpu", [])
    view, telemetry = anyio.run(read_fleet, nats_server.url, False, backend="asyncio")
    assert telemetry.gpus[1].problems == []
    assert [g.gpu for g in view.gpus_for(1 << 30)] == [1, 0]  # both offered, by free memory

    # GPU 1 reports uncorrected ECC errors: unhealthy, wherever it is read.
    fake_gpu.write("nvidia-smi", "query-gpu.csv", a100x2_health(2))
    _, now = wait_statuses(nats_server.url, "on1", 2)
    assert now.verdict == "gpu"  # it still computes where it was placed
    assert now.unhealthy_gpus == [1]
    assert now.reason.endswith(f"GPU 1 is unhealthy: {PROBLEM}")
    view, telemetry = anyio.run(read_fleet, nats_server.url, True, backend="asyncio")
    assert telemetry.gpus[1].problems == [PROBLEM]  # in the telemetry itself, every tick
    assert telemetry.gpus[1].clock_events == ["gpu_idle", "hw_thermal_slowdown"]  # mask 0x41
    sample = view.sample("n1")
    assert sample is not None
    health = sample.gpus[1].health  # the counts, from the inventory kept in its stream
    assert health is not None
    assert (health.healthy, health.problems) == (False, [PROBLEM])
    assert (health.ecc_uncorrected_volatile, health.pcie_width) == (2, 8)
    assert [g.gpu for g in view.gpus_for(1 << 30)] == [0]  # GPU 1 is offered no more
    assert len(statuses(nats_server.url, "on0")) == 1  # the shard on GPU 0 is untouched

    # Reset: the count is gone, the GPU healthy again, and the shard's status says so once.
    fake_gpu.write("nvidia-smi", "query-gpu.csv", a100x2_health(0))
    _, _, cleared = wait_statuses(nats_server.url, "on1", 3)
    assert cleared.unhealthy_gpus == [] and "unhealthy" not in cleared.reason
    view, telemetry = anyio.run(read_fleet, nats_server.url, False, backend="asyncio")
    assert telemetry.gpus[1].problems == []
    time.sleep(2.5)  # two more ticks: nothing changed, nothing published
    assert len(statuses(nats_server.url, "on1")) == 3
    code, _, _, err = worker.stop()
    assert code == 0, err
