"""The worker's NATS micro service: discoverable, and answering for its node."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import anyio
import nats

from placewatch.schemas import NodeTelemetry, decode

from tests.conftest import (
    FIXTURES,
    GPU0,
    FakeGpuTools,
    NatsServer,
    Worker,
    apps,
    start,
    wait_older_than,
)


def test_micro_service_lists_the_worker_and_answers_its_endpoints(
    nats_server: NatsServer,
    fake_gpu: FakeGpuTools,
    shard_procs: dict[str, subprocess.Popen[bytes]],
    workers: list[Worker],
    tmp_path: Path,
) -> None:
    pid = start(shard_procs, "svc")
    fake_gpu.nvidia_smi(FIXTURES / "nvidia-smi" / "a100x2-query-gpu.csv", apps({pid: (GPU0, 3000)}))
    shards = tmp_path / "shards.toml"
    shards.write_text(f'[[shard]]\nid = "svc"\npid = {pid}\ngpus = [0]\n')
    wait_older_than([pid], 1.2)
    workers.append(
        Worker("--nats", nats_server.url, "--node", "n7", "--shards", str(shards), "--grace", "1",
               "--interval", "1", "--no-discover", env=fake_gpu.env())
    )  # fmt: skip

    async def go() -> None:
        nc = await nats.connect(nats_server.url)
        try:
            with anyio.fail_after(10):
                while True:
                    try:
                        reply = await nc.request("placewatch.service.n7.telemetry", b"", timeout=1)
                    except nats.errors.Error:
                        await anyio.sleep(0.2)
                        continue
                    if reply.headers and reply.headers.get("Nats-Service-Error-Code"):
                        await anyio.sleep(0.2)
                        continue
                    break
            telemetry = decode(reply.data, NodeTelemetry, reply.headers)
            assert telemetry.node == "n7"
            assert [b.shard for b in telemetry.shards] == ["svc"]

            ping = json.loads((await nc.request("$SRV.PING.placewatch", b"", timeout=2)).data)
            assert ping["name"] == "placewatch"
            assert ping["metadata"]["node"] == "n7"
            info = json.loads((await nc.request("$SRV.INFO.placewatch", b"", timeout=2)).data)
            assert sorted(e["subject"] for e in info["endpoints"]) == [
                "placewatch.service.n7.recheck",
                "placewatch.service.n7.shards",
                "placewatch.service.n7.telemetry",
            ]
            shards_reply = json.loads(
                (await nc.request("placewatch.service.n7.shards", b"", timeout=2)).data
            )
            assert [(s["shard"], s["verdict"]) for s in shards_reply] == [("svc", "gpu")]
            started = time.monotonic()
            recheck = json.loads(
                (await nc.request("placewatch.service.n7.recheck", b"", timeout=5)).data
            )
            assert [(s["shard"], s["verdict"]) for s in recheck] == [("svc", "gpu")]
            assert time.monotonic() - started < 5
            stats = json.loads((await nc.request("$SRV.STATS.placewatch", b"", timeout=2)).data)
            by_name = {e["name"]: e for e in stats["endpoints"]}
            assert by_name["recheck"]["num_requests"] == 1
            assert by_name["telemetry"]["num_requests"] >= 1
        finally:
            await nc.close()

    anyio.run(go, backend="asyncio")
