"""The bus goes away and comes back: no event lost or doubled, telemetry back at once."""

from __future__ import annotations

import functools
import signal
import subprocess
import time
from pathlib import Path

import anyio
import nats

from placewatch.schemas import ComputeStatus, FallbackEvent, NodeInventory, decode

from tests.conftest import (
    FIXTURES,
    GPU1,
    FakeGpuTools,
    NatsServer,
    Worker,
    apps,
    free_port,
    start,
    wait_older_than,
)
from tests.integration.test_shards_end_to_end import events_now, stream_events
from tests.support.eventually import eventually
from tests.support.natsproto import RawSubscriber


def kill(server: NatsServer) -> None:
    assert server.proc is not None
    server.proc.send_signal(signal.SIGKILL)
    server.proc.wait()
    server.proc = None


def said_again(worker: Worker, line: str, times: int) -> bool:
    return worker.err().count(line) > times


def test_events_survive_server_kills_exactly_once_and_telemetry_resumes(
    fake_gpu: FakeGpuTools,
    shard_procs: dict[str, subprocess.Popen[bytes]],
    workers: list[Worker],
    tmp_path: Path,
) -> None:
    server = NatsServer(tmp_path / "store", port=free_port())
    server.start()
    try:
        pid = start(shard_procs, "flappy")
        holding = apps({pid: (GPU1, 5000)})
        idle = apps({})
        fake_gpu.nvidia_smi(FIXTURES / "nvidia-smi" / "a100x2-query-gpu.csv", idle)
        shards = tmp_path / "shards.toml"
        shards.write_text(f'[[shard]]\nid = "flappy"\npid = {pid}\ngpus = [1]\n')
        wait_older_than([pid], 1.2)
        worker = Worker(
            "--nats", server.url, "--node", "n1", "--shards", str(shards), "--grace", "1",
            "--interval", "1", "--no-discover", env=fake_gpu.env(),
        )  # fmt: skip
        workers.append(worker)
        expected = [("fallback", "flappy", "firing"), ("compute", "flappy", "cpu_fallback")]
        deadline = time.monotonic() + 15
        while events_now(server.url) != expected:
            assert time.monotonic() < deadline, "the first verdict never reached the stream"
            time.sleep(0.3)

        resumed = []
        for answer, verdict, state in [
            (holding, "gpu", "resolved"),
            (idle, "cpu_fallback", "firing"),
            (holding, "gpu", "resolved"),
        ]:
            kill(server)
            line = f"fallback {state}: shard flappy"
            said = worker.err().count(line)
            fake_gpu.write("nvidia-smi", "query-compute-apps.csv", answer)
            # The change is judged and queued while the server is away.
            eventually(functools.partial(said_again, worker, line, said))
            server.start()
            back = time.monotonic()
            with RawSubscriber(server.url, "placewatch.telemetry.n1") as sub:
                sub.next(timeout=5)
            resumed.append(time.monotonic() - back)
            expected += [("fallback", "flappy", state), ("compute", "flappy", verdict)]
            deadline = time.monotonic() + 10
            while (seen := events_now(server.url)) != expected:
                assert time.monotonic() < deadline, f"stream holds {seen}, expected {expected}"
                time.sleep(0.3)
        assert all(t < 2 for t in resumed), resumed
        code, _, _, err = worker.stop()
        assert code == 0, err
        assert "Traceback" not in err
        assert err.count("disconnected from NATS") == 3
    finally:
        server.stop()


def stream_statuses(url: str) -> list[tuple[str, str, bool]]:
    """The events stream as (kind, state or verdict, stale) of each message, oldest first."""
    found: list[tuple[str, str, bool]] = []
    for e in anyio.run(stream_events, url, backend="asyncio"):
        if isinstance(e, FallbackEvent):
            found.append(("fallback", e.state, e.status.stale))
        elif isinstance(e, ComputeStatus):
            found.append(("compute", e.verdict, e.stale))
    return found


def on_cpu(
    url: str,
    fake_gpu: FakeGpuTools,
    shard_procs: dict[str, subprocess.Popen[bytes]],
    workers: list[Worker],
    tmp_path: Path,
    *,
    interval: float = 1.0,
) -> Worker:
    """A worker of node n1 (ticking every `interval`) whose shard `on-cpu`, placed on GPU 1,
    holds nothing there."""
    pid = start(shard_procs, "on-cpu")
    fake_gpu.nvidia_smi(FIXTURES / "nvidia-smi" / "a100x2-query-gpu.csv", apps({}))
    shards = tmp_path / "shards.toml"
    shards.write_text(f'[[shard]]\nid = "on-cpu"\npid = {pid}\ngpus = [1]\n')
    wait_older_than([pid], 1.2)
    worker = Worker(
        "--nats", url, "--node", "n1", "--shards", str(shards), "--grace", "1",
        "--interval", str(interval), "--no-discover", env=fake_gpu.env(),
    )  # fmt: skip
    workers.append(worker)
    return worker


def test_a_gpu_tool_outage_neither_resolves_a_live_fallback_nor_fires_it_again(
    fake_gpu: FakeGpuTools,
    shard_procs: dict[str, subprocess.Popen[bytes]],
    nats_server: NatsServer,
    workers: list[Worker],
    tmp_path: Path,
) -> None:
    worker = on_cpu(nats_server.url, fake_gpu, shard_procs, workers, tmp_path)
    fired = [("fallback", "firing", False), ("compute", "cpu_fallback", False)]
    eventually(lambda: stream_statuses(nats_server.url) == fired)
    # The driver stops answering: the looping tool hangs, and every tool started fails.
    fake_gpu.write("nvidia-smi", "fail", "9 NVIDIA-SMI has failed because it couldn't communicate")
    fake_gpu.write("nvidia-smi", "loop-hang", "")
    held = [*fired, ("compute", "cpu_fallback", True)]
    eventually(lambda: stream_statuses(nats_server.url) == held)
    with RawSubscriber(nats_server.url, "placewatch.telemetry.n1") as sub:
        for _ in range(6):  # six more ticks without a GPU reading: still held, nothing said
            brief = sub.next(timeout=5).json()
            assert isinstance(brief, dict)
            assert brief["shards"]["on-cpu"]["verdict"] == "cpu_fallback"
    assert stream_statuses(nats_server.url) == held
    # The driver is back: judged afresh, the same verdict, fresh. Still one firing, no resolve.
    (fake_gpu.data / "nvidia-smi" / "fail").unlink()
    eventually(
        lambda: stream_statuses(nats_server.url) == [*held, ("compute", "cpu_fallback", False)]
    )
    code, _, _, err = worker.stop()
    assert code == 0, err
    assert "fallback resolved" not in err


def test_jetstream_that_appears_later_gets_what_is_true_now_once(
    fake_gpu: FakeGpuTools,
    shard_procs: dict[str, subprocess.Popen[bytes]],
    workers: list[Worker],
    tmp_path: Path,
) -> None:
    core = NatsServer(tmp_path / "store", port=free_port(), jetstream=False)
    core.start()
    worker = on_cpu(core.url, fake_gpu, shard_procs, workers, tmp_path)
    worker.wait_for("fallback firing: shard on-cpu")  # published as a core message, not kept
    core.stop()
    stored = NatsServer(tmp_path / "store", port=core.port)  # the same server, with -js now
    stored.start()
    try:
        fired = [("fallback", "firing", False), ("compute", "cpu_fallback", False)]
        eventually(lambda: stream_statuses(stored.url) == fired, 20)
        worker.wait_for("stored again, what is true now")

        async def kept() -> tuple[str, str]:
            nc = await nats.connect(stored.url)
            try:
                js = nc.jetstream()
                kv = await js.key_value("placewatch_compute")
                status = decode((await kv.get("n1.on-cpu")).value or b"", ComputeStatus)
                inventory = await js.get_last_msg("PLACEWATCH_INVENTORY", "placewatch.inventory.n1")
                return status.verdict, decode(inventory.data or b"", NodeInventory).node
            finally:
                await nc.close()

        assert anyio.run(kept, backend="asyncio") == ("cpu_fallback", "n1")
        # Ticks go on: nothing is stored twice.
        with RawSubscriber(stored.url, "placewatch.telemetry.n1") as sub:
            for _ in range(3):
                sub.next(timeout=5)
        assert stream_statuses(stored.url) == fired
        code, _, _, err = worker.stop()
        assert code == 0, err
    finally:
        stored.stop()
