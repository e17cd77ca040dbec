"""A NATS micro service per worker, so `nats micro ls` lists the fleet's workers.

Service `placewatch`, one instance per worker, with the node in its
metadata, and three endpoints under `<prefix>.service.<node>`:

- `telemetry`: the node's latest NodeTelemetry;
- `shards`: the latest ComputeStatus of each of its shards, as a JSON list;
- `recheck`: take a sample and judge every shard now, answering with the statuses.

`nats micro stats placewatch` shows each worker's request counts and latency.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import msgspec
from nats.aio.client import Client
from nats.micro import add_service
from nats.micro.request import Request
from nats.micro.service import Service

from placewatch.schemas import ComputeStatus, NodeTelemetry, encode, subjects
from placewatch.schemas.codec import CONTENT_TYPES, Encoding

from .. import __version__

log = logging.getLogger(__name__)

NAME = "placewatch"


class Latest:
    """What the endpoints answer with: the worker keeps it current."""

    def __init__(self) -> None:
        self.telemetry: NodeTelemetry | None = None
        self.statuses: list[ComputeStatus] = []


async def start_service(
    nc: Client,
    node: str,
    latest: Latest,
    recheck: Callable[[], Awaitable[None]],
    *,
    prefix: str = subjects.DEFAULT_PREFIX,
    encoding: Encoding = "json",
) -> Service:
    service = await add_service(
        nc,
        name=NAME,
        version=__version__,
        description="placewatch node worker: GPU telemetry and where each shard computes",
        metadata={"node": node},
    )
    group = service.add_group(name=subjects.service(node, prefix))

    async def telemetry(req: Request) -> None:
        if latest.telemetry is None:
            await req.respond_error("503", "no sample taken yet; ask again after one interval")
            return
        payload, headers = encode(latest.telemetry, encoding)
        await req.respond(payload, headers=headers)

    def statuses_body() -> tuple[bytes, dict[str, str]]:
        body = msgspec.json.encode(latest.statuses)
        return body, {"Content-Type": CONTENT_TYPES["json"], "Placewatch-Type": "ComputeStatus[]"}

    async def shards(req: Request) -> None:
        body, headers = statuses_body()
        await req.respond(body, headers=headers)

    async def check_now(req: Request) -> None:
        await recheck()
        body, headers = statuses_body()
        await req.respond(body, headers=headers)

    await group.add_endpoint(name="telemetry", handler=telemetry)
    await group.add_endpoint(name="shards", handler=shards)
    await group.add_endpoint(name="recheck", handler=check_now)
    log.info(
        "micro service %s on %s.{telemetry,shards,recheck}", NAME, subjects.service(node, prefix)
    )
    return service
