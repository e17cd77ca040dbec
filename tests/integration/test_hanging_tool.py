"""A GPU tool that hangs on every call never makes a live node look silent: `placewatch run`
with `--interval 0.5` and the default 5 s probe timeout, a stand-in nvidia-smi that hangs,
a real nats-server."""

from __future__ import annotations

import itertools
import subprocess
from pathlib import Path

from placewatch.schemas import NodeTelemetry, decode

from tests.conftest import FakeGpuTools, NatsServer, Worker
from tests.integration.test_outages import on_cpu, stream_statuses
from tests.support.eventually import eventually
from tests.support.natsproto import RawSubscriber

INTERVAL_S = 0.5
TICKS = 20
LATE = "no answer within the tick's deadline; last answer"


def telemetry(sub: RawSubscriber) -> NodeTelemetry:
    msg = sub.next(timeout=10)
    return decode(msg.payload, NodeTelemetry, msg.headers)


def said_late(t: NodeTelemetry) -> bool:
    return any(LATE in (s.error or "") for s in t.sources)


def queries(fake_gpu: FakeGpuTools) -> list[str]:
    """The GPU queries nvidia-smi was run with once (not looping)."""
    calls = fake_gpu.calls("nvidia-smi")
    return [c for c in calls if "--query-gpu=" in c and "--loop-ms" not in c]


def test_telemetry_goes_out_every_interval_while_the_gpu_tool_hangs(
    fake_gpu: FakeGpuTools,
    shard_procs: dict[str, subprocess.Popen[bytes]],
    nats_server: NatsServer,
    workers: list[Worker],
    tmp_path: Path,
) -> None:
    worker = on_cpu(nats_server.url, fake_gpu, shard_procs, workers, tmp_path, interval=INTERVAL_S)
    fired = [("fallback", "firing", False), ("compute", "cpu_fallback", False)]
    eventually(lambda: stream_statuses(nats_server.url) == fired)
    with RawSubscriber(nats_server.url, "placewatch.telemetry.n1") as sub:
        for _ in range(40):  # a tick that read the GPUs (a slow run of the tool misses one)
            read = telemetry(sub)
            if read.gpus:
                break
        assert [g.index for g in read.gpus] == [0, 1]
        fake_gpu.hang("nvidia-smi")  # every call from now on, the looping one's next pass too
        fake_gpu.write("nvidia-smi", "loop-hang", "")
        for _ in range(40):  # until a tick found the tool hanging
            if said_late(telemetry(sub)):
                break
        else:
            raise AssertionError("no telemetry said the GPU tool did not answer")
        runs_before = len(queries(fake_gpu))
        ticks = [telemetry(sub) for _ in range(TICKS)]
    # The gaps between consecutive messages, by the time each was built.
    gaps = [(b.time - a.time).total_seconds() for a, b in itertools.pairwise(ticks)]
    assert max(gaps) < 1.5 * INTERVAL_S, gaps
    for t in ticks:
        assert [(s.name, s.ok) for s in t.sources] == [("nvidia-smi", False)], t.sources
        # No reading repeated as if read again; the inventory keeps the GPUs as last read.
        assert (t.gpus, t.inventory) == ([], read.inventory), t.gpus
        assert {s: r.verdict for s, r in t.shards.items()} == {"on-cpu": "cpu_fallback"}
    assert sum(said_late(t) for t in ticks) >= TICKS - 4, [t.sources for t in ticks]
    # A read under way is not asked again each tick: a run a probe timeout, not one a tick.
    assert len(queries(fake_gpu)) - runs_before <= 4, fake_gpu.calls("nvidia-smi")
    # The shard is held, stale, never resolved, and fired once.
    held = [*fired, ("compute", "cpu_fallback", True)]
    assert stream_statuses(nats_server.url) == held
    code, _, _, err = worker.stop()
    assert code == 0, err
    assert "fallback resolved" not in err
