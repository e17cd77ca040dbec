"""A real three-server NATS cluster with R3 streams: the worker rides out losing its server."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import anyio
import nats
import pytest

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
from tests.integration.test_shards_end_to_end import events_now
from tests.support.natsproto import RawSubscriber


def start_cluster(where: Path) -> list[tuple[NatsServer, int]]:
    """Three servers routed to each other, with JetStream, once their meta leader is elected;
    TimeoutError where it is not within 30 s."""
    routes = [free_port() for _ in range(3)]
    servers = []
    for i, route in enumerate(routes):
        monitor = free_port()
        config = (
            f"server_name: s{i}\nhttp: 127.0.0.1:{monitor}\n"
            f"cluster {{\n  name: pw\n  listen: 127.0.0.1:{route}\n"
            f"  routes: [{', '.join(f'nats://127.0.0.1:{r}' for r in routes)}]\n}}\n"
        )
        servers.append((NatsServer(where / f"s{i}", config=config), monitor))
    for server, _ in servers:
        server.start()

    async def meta_ready() -> None:
        nc = await nats.connect(servers[0][0].url)
        try:
            with anyio.fail_after(30):
                while True:
                    try:
                        await nc.jetstream().account_info()
                        return
                    except Exception:
                        await anyio.sleep(0.3)
        finally:
            await nc.close()

    try:
        anyio.run(meta_ready, backend="asyncio")
    except TimeoutError:
        for server, _ in servers:
            server.stop()
        raise
    return servers


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[list[tuple[NatsServer, int]]]:
    try:
        servers = start_cluster(tmp_path / "first")
    except TimeoutError:
        # A port picked free was taken meanwhile (the suite's other workers pick theirs at
        # the same time), and the routes never met: once more, on other ports.
        servers = start_cluster(tmp_path / "again")
    yield servers
    for server, _ in servers:
        server.stop()


def connected_to(servers: list[tuple[NatsServer, int]], client: str) -> int:
    for i, (_, monitor) in enumerate(servers):
        with urllib.request.urlopen(f"http://127.0.0.1:{monitor}/connz", timeout=2) as r:
            if any(c.get("name") == client for c in json.load(r).get("connections", [])):
                return i
    raise AssertionError(f"{client} is connected to no server")


def test_losing_the_connected_server_loses_no_event(
    cluster: list[tuple[NatsServer, int]],
    fake_gpu: FakeGpuTools,
    shard_procs: dict[str, subprocess.Popen[bytes]],
    workers: list[Worker],
    tmp_path: Path,
) -> None:
    urls = ",".join(s.url for s, _ in cluster)
    pid = start(shard_procs, "r3")
    fake_gpu.nvidia_smi(FIXTURES / "nvidia-smi" / "a100x2-query-gpu.csv", apps({}))
    shards = tmp_path / "shards.toml"
    shards.write_text(f'[[shard]]\nid = "r3"\npid = {pid}\ngpus = [1]\n')
    wait_older_than([pid], 1.2)
    worker = Worker("--nats", urls, "--node", "n1", "--shards", str(shards), "--grace", "1", "--interval", "1",
                    "--no-discover", "--replicas", "3", env=fake_gpu.env())  # fmt: skip
    workers.append(worker)
    first = [("fallback", "r3", "firing"), ("compute", "r3", "cpu_fallback")]
    deadline = time.monotonic() + 20
    while events_now(cluster[0][0].url) != first:
        assert time.monotonic() < deadline, "no first verdict"
        time.sleep(0.3)

    async def replicas() -> int:
        nc = await nats.connect(cluster[0][0].url)
        try:
            return (await nc.jetstream().stream_info("PLACEWATCH_EVENTS")).config.num_replicas or 0
        finally:
            await nc.close()

    assert anyio.run(replicas, backend="asyncio") == 3

    victim = connected_to(cluster, "placewatch n1")
    survivors = [s for i, (s, _) in enumerate(cluster) if i != victim]
    dead = cluster[victim][0]
    with RawSubscriber(survivors[0].url, "placewatch.telemetry.n1") as sub:
        sub.next(timeout=5)
        assert dead.proc is not None
        dead.proc.send_signal(signal.SIGKILL)
        dead.proc.wait()
        killed = time.monotonic()
        fake_gpu.write("nvidia-smi", "query-compute-apps.csv", apps({pid: (GPU1, 7000)}))
        sub.next(timeout=10)
        back = time.monotonic() - killed
    assert back < 3, f"telemetry took {back:.1f} s to come back"
    expected = [*first, ("fallback", "r3", "resolved"), ("compute", "r3", "gpu")]
    deadline = time.monotonic() + 20
    seen: list[tuple[str, str, str]] | None = []
    while seen != expected:
        assert time.monotonic() < deadline, f"stream holds {seen}"
        # The stream elects a new leader after losing a server: no answer means ask again.
        seen = events_now(survivors[0].url)
        time.sleep(0.3)
    assert connected_to([c for c in cluster if c[0] is not dead], "placewatch n1") in (0, 1)
    code, _, _, err = worker.stop()
    assert code == 0, err
