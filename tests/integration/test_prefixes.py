"""Two prefixes on one server: two workers, one under `placewatch` and one under `acme.pw`, both
for a node of the same name, each in streams and buckets of its own, and neither sees the
other's data: telemetry, statuses, events, lease."""

from __future__ import annotations

import functools
import subprocess
from dataclasses import dataclass
from pathlib import Path

import anyio
import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client

from placewatch.consumer import FleetView
from placewatch.schemas import ComputeStatus, NodeLease, NodeTelemetry, decode, subjects
from placewatch.schemas.codec import value_headers
from placewatch.schemas.streams import StreamsAndBuckets, for_prefix

from tests.conftest import NatsServer, Worker, clean_env, start
from tests.support.eventually import eventually_async
from tests.support.kv import kv_keys

NODE = "gpu-07"
PREFIXES = {"placewatch": "shard-a", "acme.pw": "shard-b"}


@dataclass
class Published:
    """What one prefix's streams and buckets hold, read as an operator would."""

    telemetry: dict[str, int]
    """The telemetry stream's subjects, with their message counts."""
    events: dict[str, int]
    statuses: dict[str, str]
    """The compute bucket's keys, with the session of each status."""
    lease: str
    """The session that holds the node's lease."""
    sample: str
    """The session of the node's last sample."""


async def read(nc: Client, stores: StreamsAndBuckets) -> Published | None:
    js = nc.jetstream()
    try:
        telemetry = await js.stream_info(stores.telemetry.name, subjects_filter=">")
        events = await js.stream_info(stores.events.name, subjects_filter=">")
        compute = await js.key_value(stores.compute.name)
        statuses = {}
        for key in await kv_keys(js, stores.compute.name):
            value = (await compute.get(key)).value or b""
            statuses[key] = decode(value, ComputeStatus, value_headers(value)).session
        lease = (await (await js.key_value(stores.leases.name)).get(NODE)).value or b""
        last = await js.get_last_msg(stores.telemetry.name, subjects.telemetry(NODE, stores.prefix))
    except (nats.errors.Error, nats.js.errors.Error):
        return None  # not all there yet
    if not statuses or not events.state.subjects or not telemetry.state.subjects:
        return None  # read before the first telemetry was stored, or the first status
    return Published(
        telemetry=telemetry.state.subjects or {},
        events=events.state.subjects or {},
        statuses=statuses,
        lease=decode(lease, NodeLease, value_headers(lease)).session,
        sample=decode(last.data or b"", NodeTelemetry, last.headers).session,
    )


async def held(url: str) -> dict[str, Published]:
    """Each prefix's, once both workers have published all of it."""
    nc = await nats.connect(url)
    found: dict[str, Published] = {}
    try:

        async def look() -> None:
            for prefix in PREFIXES:
                got = await read(nc, for_prefix(prefix))
                if got is not None:
                    found[prefix] = got

        with anyio.fail_after(30):
            while len(found) < len(PREFIXES):
                await look()
                await anyio.sleep(0.2)
        return found
    finally:
        await nc.close()


def holds(view: FleetView) -> bool:
    return NODE in view.nodes and len(view.shards) == 1


async def views(url: str) -> dict[str, FleetView]:
    nc = await nats.connect(url)
    found = {}
    try:
        for prefix in PREFIXES:
            view = FleetView(nc, prefix)
            await view.start()
            await eventually_async(functools.partial(holds, view))
            await view.stop()
            found[prefix] = view
        return found
    finally:
        await nc.close()


async def stream_names(url: str) -> set[str]:
    nc = await nats.connect(url)
    try:
        return {str(s.config.name) for s in await nc.jetstream().streams_info()}
    finally:
        await nc.close()


def test_two_prefixes_on_one_server_keep_to_their_own_streams_and_buckets(
    nats_server: NatsServer,
    tmp_path: Path,
    workers: list[Worker],
    shard_procs: dict[str, subprocess.Popen[bytes]],
) -> None:
    for prefix, shard in PREFIXES.items():
        shards = tmp_path / f"{prefix}.toml"
        shards.write_text(
            f'[[shard]]\nid = "{shard}"\npid = {start(shard_procs, shard)}\ngpus = []\n'
        )
        args = (
            "--nats",
            nats_server.url,
            "--node",
            NODE,
            "--prefix",
            prefix,
            "--shards",
            str(shards),
        )
        workers.append(Worker(*args, "--interval", "1", "--no-discover", env=clean_env()))

    found = anyio.run(held, nats_server.url, backend="asyncio")
    seen = anyio.run(views, nats_server.url, backend="asyncio")
    names = anyio.run(stream_names, nats_server.url, backend="asyncio")
    for worker in workers:
        code, _, _, err = worker.stop()
        assert code == 0, err  # neither was refused the node's lease: each has its own bucket

    assert names == {
        "PLACEWATCH_EVENTS",
        "PLACEWATCH_TELEMETRY",
        "PLACEWATCH_INVENTORY",
        "KV_placewatch_placements",
        "KV_placewatch_compute",
        "KV_placewatch_leases",
        "ACME_PW_EVENTS",
        "ACME_PW_TELEMETRY",
        "ACME_PW_INVENTORY",
        "KV_acme_pw_placements",
        "KV_acme_pw_compute",
        "KV_acme_pw_leases",
    }
    ours, theirs = found["placewatch"], found["acme.pw"]
    assert ours.lease != theirs.lease  # two workers, two sessions
    for prefix, got in found.items():
        shard = PREFIXES[prefix]
        # Each holds its own worker's messages, under its own prefix, and nothing else.
        assert list(got.telemetry) == [f"{prefix}.telemetry.{NODE}"]
        assert list(got.events) == [f"{prefix}.compute.{NODE}.{shard}"]
        assert got.statuses == {f"{NODE}.{shard}": got.lease}
        assert got.sample == got.lease
        view = seen[prefix]
        telemetry = view.telemetry(NODE)
        assert telemetry is not None and telemetry.session == got.lease
        assert list(view.shards) == [(NODE, shard)]
        assert view.shards[(NODE, shard)].session == got.lease
