"""The least-privilege permissions docs/consumers.md gives suffice for a gateway's FleetView,
`placewatch watch` and `placewatch alerts`, on a server that enforces them."""

from __future__ import annotations

import json
import re
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import anyio
import nats
from nats.js.api import StreamConfig

from placewatch.consumer import FleetView
from placewatch.schemas import (
    ComputeStatus,
    FallbackEvent,
    GpuSample,
    NodeSample,
    encode,
    lean,
    partitions,
    subjects,
)
from placewatch.schemas.streams import COMPUTE, EVENTS, INVENTORY, TELEMETRY

from tests.conftest import ROOT, NatsServer, clean_env, placewatch_cmd, run_placewatch
from tests.support.exporter import publish_nodes
from tests.support.http_endpoint import Endpoint

WHEN = datetime(2026, 11, 30, 6, 0, tzinfo=UTC)
ADMIN = '{user: admin, password: adminpw, permissions: {publish: ">", subscribe: ">"}}'


def permissions() -> str:
    doc = (ROOT / "docs" / "consumers.md").read_text()
    block = re.search(r"<!-- consumer-permissions -->\s*```\n(.*?)```", doc, re.S)
    assert block, "docs/consumers.md lost its consumer-permissions block"
    text = block.group(1)
    gateway = re.search(r"    \{user: GATEWAY.*?\n    \}\}\n", text, re.S)
    assert gateway
    # `placewatch watch`: the gateway's permissions with its own inbox.
    watcher = (
        gateway.group(0)
        .replace("_INBOX.GATEWAY.>", "_INBOX.placewatch-watch.>")
        .replace("user: GATEWAY, password: $GATEWAY_PASSWORD", "user: watcher, password: watchpw")
    )
    text = text.replace("users = [\n", f"users = [\n    {ADMIN}\n{watcher}", 1)
    text = text.replace("user: GATEWAY, password: $GATEWAY_PASSWORD", "user: gw, password: gwpw")
    text = text.replace("_INBOX.GATEWAY.>", "_INBOX.gw.>")
    return text.replace("$ALERTS_PASSWORD", "alertspw").replace("user: ALERTS", "user: alerts")


async def publish_as_admin(url: str) -> None:
    """What an operator and a worker leave on the bus: streams, a sample, a status, an event."""
    nc = await nats.connect(url, user="admin", password="adminpw")
    try:
        js = nc.jetstream()
        await js.add_stream(StreamConfig(name=EVENTS.name, subjects=subjects.all_events()))
        await js.add_stream(
            StreamConfig(
                name=TELEMETRY.name,
                subjects=list(TELEMETRY.subjects),
                max_msgs_per_subject=1,
            )
        )
        kv = await js.create_key_value(bucket=COMPUTE.name)
        await js.add_stream(
            StreamConfig(
                name=INVENTORY.name,
                subjects=list(INVENTORY.subjects),
                max_msgs_per_subject=1,
            )
        )
        whole = NodeSample(
            node="gpu-07",
            session="s1",
            seq=0,
            time=WHEN,
            interval_s=2.0,
            gpus=[GpuSample(index=0, memory_free_bytes=1 << 30)],
        )
        inventory, t = lean.split(whole)
        payload, headers = encode(inventory)
        await js.publish(subjects.inventory("gpu-07"), payload, headers=headers)
        payload, headers = encode(t)
        await js.publish(subjects.telemetry("gpu-07"), payload, headers=headers)
        status = ComputeStatus(
            node="gpu-07", shard="qwen", session="s1", time=WHEN, verdict="cpu_fallback"
        )
        payload, headers = encode(status)
        await kv.put(subjects.shard_key("gpu-07", "qwen"), payload)
        payload, headers = encode(FallbackEvent(state="firing", status=status))
        await js.publish(subjects.fallback("gpu-07", "qwen"), payload, headers=headers)
    finally:
        await nc.close()


async def acknowledged(url: str) -> bool:
    """Whether the alerts consumer's acknowledgement reached the server, within 5 s."""
    nc = await nats.connect(url, user="admin", password="adminpw")
    try:
        js = nc.jetstream()
        with anyio.move_on_after(5):
            while True:
                info = await js.consumer_info(EVENTS.name, "placewatch-alerts")
                if info.ack_floor is not None and info.ack_floor.stream_seq >= 1:
                    return True
                await anyio.sleep(0.1)
        return False
    finally:
        await nc.close()


def test_documented_consumer_permissions_suffice(tmp_path: Path) -> None:
    server = NatsServer(tmp_path / "js", config=permissions())
    server.start()
    try:
        anyio.run(publish_as_admin, server.url, backend="asyncio")

        async def gateway() -> None:
            errors: list[Exception] = []

            async def error_cb(exc: Exception) -> None:
                errors.append(exc)

            nc = await nats.connect(
                server.url,
                user="gw",
                password="gwpw",
                inbox_prefix="_INBOX.gw",
                error_cb=error_cb,
            )
            view = FleetView(nc)
            try:
                await view.start()
                t = view.telemetry("gpu-07")
                assert t is not None and t.gpus[0].memory_free_bytes == 1 << 30
                status = view.status("gpu-07", "qwen")
                assert status is not None and status.verdict == "cpu_fallback"
                assert errors == []  # no permissions violation
            finally:
                await view.stop()
                await nc.close()

        anyio.run(gateway, backend="asyncio")

        env = clean_env() | {"PLACEWATCH_USER": "watcher", "PLACEWATCH_PASSWORD": "watchpw"}
        done = run_placewatch(
            "watch", "--once", "--json", "--wait", "0.2", "--nats", server.url, env=env
        )
        assert done.returncode == 0, done.stderr
        fleet = json.loads(done.stdout)
        assert [n["node"] for n in fleet["nodes"]] == ["gpu-07"]
        assert [s["shard"] for s in fleet["shards"]] == ["qwen"]

        env = clean_env() | {"PLACEWATCH_USER": "alerts", "PLACEWATCH_PASSWORD": "alertspw"}
        alerts = subprocess.Popen(
            [*placewatch_cmd(), "alerts", "--nats", server.url],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert alerts.stdout is not None
            line = alerts.stdout.readline()
            assert anyio.run(acknowledged, server.url, backend="asyncio")
            alerts.terminate()
            _, err = alerts.communicate(timeout=10)
        finally:
            if alerts.poll() is None:
                alerts.kill()
                alerts.communicate()
        assert json.loads(line)["status"]["shard"] == "qwen"
        assert alerts.returncode == 0, err
        assert "refused" not in err.lower() and "violation" not in err.lower(), err
        alertmanager_format_under_its_permissions(server.url, env)
    finally:
        server.stop()


def alertmanager_format_under_its_permissions(url: str, env: dict[str, str]) -> None:
    """The same durable consumer, now following statuses too: it reads the acknowledged
    messages again and the compute bucket, and posts what fires."""
    hook = Endpoint()
    args = ["alerts", "--nats", url, "--format", "alertmanager", "--webhook", hook.url]
    alerts = subprocess.Popen(
        [*placewatch_cmd(), *args], env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        (body,) = hook.wait(1)
        alerts.terminate()
        _, err = alerts.communicate(timeout=10)
    finally:
        hook.close()
        if alerts.poll() is None:
            alerts.kill()
            alerts.communicate()
    assert [a["labels"]["shard"] for a in body if "endsAt" not in a] == ["qwen"]
    assert alerts.returncode == 0, err
    assert "refused" not in err.lower() and "violation" not in err.lower(), err


def test_a_gateway_held_to_its_partition_checks_the_mapping_without_a_violation(
    tmp_path: Path,
) -> None:
    """docs/consumers.md: a gateway of partition P of N may be held to `telemetry.P.*` and
    `inventory.P.*`, with `telemetry.*` and `telemetry.N.*` for its check of the mapping."""
    held = (
        '"placewatch.telemetry.2.*"\n          "placewatch.inventory.2.*"\n'
        '          "placewatch.telemetry.*"\n          "placewatch.telemetry.4.*"'
    )
    config = permissions().replace('"placewatch.telemetry.>"', "")  # the gateway's and watch's
    config = config.replace('"placewatch.inventory.>"', held)
    assert "placewatch.telemetry.>" not in config
    server = NatsServer(tmp_path / "js", config=config + partitions.server_config("placewatch", 4))
    server.start()
    node = next(
        f"gpu-{i:02d}" for i in range(100) if partitions.partition_of(f"gpu-{i:02d}", 4) == 2
    )
    try:

        async def gateway() -> None:
            errors: list[Exception] = []

            async def error_cb(exc: Exception) -> None:
                errors.append(exc)

            nc = await nats.connect(
                server.url, user="gw", password="gwpw", inbox_prefix="_INBOX.gw", error_cb=error_cb
            )
            admin = await nats.connect(server.url, user="admin", password="adminpw")
            view = FleetView(nc, partition=2, partitions=4)
            try:
                await view.start()
                await publish_nodes(admin, [node])
                with anyio.fail_after(5):
                    while view.sample(node) is None:
                        await anyio.sleep(0.05)
                await nc.flush()
                assert errors == []  # the probes' subscriptions are allowed
                assert view.problems() == []  # and the servers map as the view was told
            finally:
                await view.stop()
                await nc.close()
                await admin.close()

        anyio.run(gateway, backend="asyncio")
    finally:
        server.stop()
