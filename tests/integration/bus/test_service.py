"""The worker's NATS micro service: discoverable, and answering for its node."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import time
from pathlib import Path

import anyio
import nats
import nats.aio.client

from placewatch.schemas import NodeInventory, NodeTelemetry, decode

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
            assert list(telemetry.shards) == ["svc"]
            answer = await nc.request("placewatch.service.n7.inventory", b"", timeout=1)
            inventory = decode(answer.data, NodeInventory, answer.headers)
            assert (inventory.node, inventory.id) == ("n7", telemetry.inventory)

            ping = json.loads((await nc.request("$SRV.PING.placewatch", b"", timeout=2)).data)
            assert ping["name"] == "placewatch"
            assert ping["metadata"]["node"] == "n7"
            info = json.loads((await nc.request("$SRV.INFO.placewatch", b"", timeout=2)).data)
            assert sorted(e["subject"] for e in info["endpoints"]) == [
                "placewatch.service.n7.inventory",
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


SLOW_TOOL_S = 0.5
"""Each nvidia-smi run takes this long: a tick, which runs it twice, takes a second or more."""


def slow_nvidia_smi(fake_gpu: FakeGpuTools) -> None:
    """The fake nvidia-smi, each run half a second late, as a loaded driver answers."""
    wrapper = fake_gpu.bin / "nvidia-smi"
    lines = wrapper.read_text().splitlines()
    wrapper.write_text("\n".join([lines[0], f"sleep {SLOW_TOOL_S}", *lines[1:]]) + "\n")


async def ask_recheck(nc: nats.aio.client.Client) -> tuple[float, dict[str, str], bytes]:
    started = time.monotonic()
    reply = await nc.request("placewatch.service.n7.recheck", b"", timeout=15)
    return time.monotonic() - started, dict(reply.headers or {}), reply.data


def test_rechecks_run_one_at_a_time_one_a_second_and_the_rest_are_refused_at_once(
    nats_server: NatsServer, fake_gpu: FakeGpuTools, workers: list[Worker]
) -> None:
    fake_gpu.nvidia_smi(FIXTURES / "nvidia-smi" / "a100x2-query-gpu.csv")
    slow_nvidia_smi(fake_gpu)
    workers.append(
        Worker("--nats", nats_server.url, "--node", "n7", "--interval", "60", "--no-discover",
               env=fake_gpu.env())
    )  # fmt: skip

    async def go() -> None:
        nc = await nats.connect(nats_server.url)
        try:
            with anyio.fail_after(20):  # the service is up and a recheck was taken
                while True:
                    try:
                        if "Nats-Service-Error-Code" not in (await ask_recheck(nc))[1]:
                            break
                    except nats.errors.NoRespondersError:
                        pass
                    await anyio.sleep(1.1)
            runs = len(fake_gpu.calls("nvidia-smi"))
            await anyio.sleep(1.1)
            elapsed, headers, _ = await ask_recheck(nc)
            per_tick = len(fake_gpu.calls("nvidia-smi")) - runs
            assert per_tick >= 1 and elapsed >= per_tick * SLOW_TOOL_S
            assert headers["Placewatch-Type"] == "ComputeStatus[]"
            await anyio.sleep(1.1)

            runs = len(fake_gpu.calls("nvidia-smi"))
            replies = await asyncio.gather(*(ask_recheck(nc) for _ in range(200)))
            ran = [r for r in replies if "Nats-Service-Error-Code" not in r[1]]
            refused = [r for r in replies if r[1].get("Nats-Service-Error-Code") == "429"]
            assert len(ran) in (1, 2) and len(ran) + len(refused) == 200
            assert len(fake_gpu.calls("nvidia-smi")) - runs == len(ran) * per_tick
            for _, _, body in ran:
                assert json.loads(body) == []  # the statuses: this node has no shard
            # Refused at once, not after the recheck under way.
            assert max(e for e, _, _ in refused) < min(e for e, _, _ in ran)
            assert max(e for e, _, _ in refused) < per_tick * SLOW_TOOL_S
            said = {re.sub(r"\d+\.\d", "N", h["Nats-Service-Error"]) for _, h, _ in refused}
            assert said <= {
                "a recheck is under way (started N s ago); one runs at a time: ask again in 1 s",
                "a recheck started N s ago; at most one a second: ask again in N s",
            }
            stats = json.loads((await nc.request("$SRV.STATS.placewatch", b"", timeout=2)).data)
            by_name = {e["name"]: e for e in stats["endpoints"]}
            assert by_name["recheck"]["num_errors"] == len(refused)
        finally:
            await nc.close()

    anyio.run(go, backend="asyncio")
    code, _, _, err = workers[0].stop()
    assert code == 0
    assert "Traceback" not in err
