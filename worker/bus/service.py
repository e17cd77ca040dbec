"""A NATS micro service per worker, so `nats micro ls` lists the fleet's workers.

The endpoints, their replies and errors are the contract's (placewatch.schemas.service):
`telemetry`, `inventory`, `shards` and `recheck` under `<prefix>.service.<node>`. A recheck runs at
most one at a time and one a second (RecheckLimit); a request past that is refused at once
with error 429. `nats micro stats placewatch` shows each worker's request counts, errors
and latency.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable

import nats.errors
from nats.aio.client import Client
from nats.micro import add_service
from nats.micro.request import Request, ServiceError
from nats.micro.service import Service

from placewatch import __version__
from placewatch.schemas import NodeInventory, NodeTelemetry, subjects
from placewatch.schemas.codec import Encoding
from placewatch.schemas.service import (
    ENDPOINTS,
    FAILED,
    NAME,
    NO_SAMPLE_YET,
    TOO_MANY,
    encode_statuses,
)

from ..latest import Latest
from .fit import fit

log = logging.getLogger(__name__)

RECHECK_EVERY_S = 1.0
"""The least time between the starts of two rechecks. Each is a whole tick (every GPU tool
run, every shard judged), and anyone who may reach the service can ask: unlimited, a burst
of requests keeps a core busy running tools."""


class RecheckLimit:
    """One recheck at a time and one a second: whether one may start now, or why not."""

    def __init__(
        self, every: float = RECHECK_EVERY_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.every = every
        self.clock = clock
        self.running = False
        self.started: float | None = None

    def refusal(self) -> str | None:
        """None when a recheck may start now (it is then counted as running); else why it
        may not and when to ask again."""
        now = self.clock()
        since = math.inf if self.started is None else now - self.started
        if self.running:
            return (
                f"a recheck is under way (started {since:.1f} s ago); one runs at a time: ask "
                f"again in {self.every:g} s"
            )
        if since < self.every:
            wait = max(math.ceil((self.every - since) * 10) / 10, 0.1)
            return (
                f"a recheck started {since:.1f} s ago; at most {self._rate()}: ask again in "
                f"{wait:.1f} s"
            )
        self.running, self.started = True, now
        return None

    def finished(self) -> None:
        self.running = False

    def _rate(self) -> str:
        return "one a second" if self.every == 1 else f"one every {self.every:g} s"


class Rechecks:
    """The `recheck` endpoint: a recheck within the limit, answered with the statuses after
    it; one past the limit refused at once with TOO_MANY, saying when to ask again.

    nats-py calls one subscription's handler for one request after another, so a recheck
    awaited in the handler would queue every request behind it, refusals included: it runs
    in a task of its own, one at most (the limit), ending with the tick it waits for.
    """

    def __init__(
        self,
        recheck: Callable[[], Awaitable[None]],
        answer: Callable[[], tuple[bytes, dict[str, str]]],
        limit: RecheckLimit | None = None,
    ) -> None:
        self.recheck = recheck
        self.answer = answer
        self.limit = limit or RecheckLimit()
        self._under_way: set[asyncio.Task[None]] = set()

    async def handle(self, req: Request) -> None:
        refused = self.limit.refusal()
        if refused is not None:
            raise ServiceError(TOO_MANY, refused)  # answered by nats-py, counted as an error
        task = asyncio.get_running_loop().create_task(self._recheck_then_answer(req))
        self._under_way.add(task)
        task.add_done_callback(self._under_way.discard)

    async def _recheck_then_answer(self, req: Request) -> None:
        failed = False
        try:
            await self.recheck()
        except Exception:  # a defect: said in the log and answered; the limit is freed
            log.exception("recheck failed")
            failed = True
        finally:
            self.limit.finished()
        with contextlib.suppress(nats.errors.Error):  # closed while it ran: nobody to answer
            if failed:
                await req.respond_error(FAILED, "the recheck failed; the worker's log says why")
            else:
                body, headers = self.answer()
                await req.respond(body, headers=headers)


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

    async def answer(req: Request, message: NodeTelemetry | NodeInventory | None) -> None:
        if message is None:
            await req.respond_error(
                NO_SAMPLE_YET, "no sample taken yet; ask again after one interval"
            )
            return
        fitted = fit(message, nc.max_payload, encoding)
        if fitted is None:
            await req.respond_error(FAILED, "the sample is larger than the server's max_payload")
            return
        await req.respond(fitted.payload, headers=fitted.headers)

    async def telemetry(req: Request) -> None:
        await answer(req, latest.telemetry)

    async def inventory(req: Request) -> None:
        await answer(req, latest.inventory)

    def statuses() -> tuple[bytes, dict[str, str]]:
        return encode_statuses(latest.statuses, encoding)

    async def shards(req: Request) -> None:
        body, headers = statuses()
        await req.respond(body, headers=headers)

    rechecks = Rechecks(recheck, statuses)
    await group.add_endpoint(name="telemetry", handler=telemetry)
    await group.add_endpoint(name="inventory", handler=inventory)
    await group.add_endpoint(name="shards", handler=shards)
    await group.add_endpoint(name="recheck", handler=rechecks.handle)
    log.info(
        "micro service %s on %s.{%s}", NAME, subjects.service(node, prefix), ",".join(ENDPOINTS)
    )
    return service
