"""`placewatch exporter`: serving the fleet on the bus as Prometheus metrics, on /metrics.

A FleetView follows the bus (the whole fleet or one partition, and of it every node, those
of a glob, or one); the metrics server (placewatch/prometheus/) answers each scrape in a
thread of its own, which asks the event loop for the view's holdings (a copy of its dicts)
and builds the metric families from them there, a batch of nodes at a time, writing the
body as exposition.stream makes it, so nothing the view holds is touched from two threads, a
scrape of a large fleet does not stall the view, and it holds a batch's rows and the
compressed body, not the body.
"""

from __future__ import annotations

import argparse
import fnmatch
import functools
import logging
import sys
import threading
from collections.abc import Callable
from wsgiref.simple_server import WSGIServer

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
from nats.aio.client import Client

from placewatch.connection import Bus, connect
from placewatch.consumer.fleet import FleetView, Holdings
from placewatch.lifecycle import drain, stop_on_signal
from placewatch.prometheus import server as metrics_server
from placewatch.prometheus.listen import Listen
from placewatch.schemas.streams import for_prefix

from .collector import FleetCollector

log = logging.getLogger(__name__)

INBOX = "_INBOX.placewatch-exporter"
"""Its replies' prefix (the view asks nodes for an inventory), so that its credentials may
subscribe to its own only (docs/consumers.md)."""
EXIT_LISTEN = 1
EXIT_CONFIG = 2


def command(bus: Bus, args: argparse.Namespace) -> int:
    try:
        for_prefix(bus.prefix)
    except ValueError as exc:
        print(f"placewatch: --prefix: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        return anyio.run(_serve, bus, args, backend="asyncio")
    except KeyboardInterrupt:
        return 0


async def _serve(bus: Bus, args: argparse.Namespace) -> int:
    """Serve /metrics until SIGTERM or SIGINT: 0, or EXIT_LISTEN when it cannot listen."""
    listen: Listen = args.listen
    p, n = args.partition or (None, None)
    holder: list[FleetView] = []
    token = anyio.lowlevel.current_token()

    def take() -> Holdings:
        if not holder:
            return Holdings({}, {})
        return anyio.from_thread.run_sync(
            functools.partial(holder[0].holdings, statuses=True), token=token
        )

    def partition_problems() -> list[str]:
        check = holder[0].check if holder else None
        return [] if check is None else anyio.from_thread.run_sync(list, check.found, token=token)

    def unreadable() -> dict[str, int]:
        return dict(holder[0].unreadable.counts) if holder else {}

    collector = FleetCollector(
        take,
        node=args.only_node,
        stale_after=args.stale_after,
        partition_problems=partition_problems,
        unreadable=unreadable,
        serves=("" if p is None else f"{p}/{n}", args.only_node or args.nodes or "*"),
    )
    try:
        server, thread = metrics_server.serve(
            listen.host, listen.port, collector.collect, streamed=collector.order()
        )
    except OSError as exc:
        why = exc.strerror or str(exc)
        print(
            f"placewatch: --listen {listen}: cannot serve there ({why}); give a free port "
            "on an address of this host",
            file=sys.stderr,
        )
        return EXIT_LISTEN
    log.info("serving Prometheus metrics on http://%s/metrics", listen)
    nc: Client | None = None
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(stop_on_signal, tg.cancel_scope)
            options = bus.options | {"inbox_prefix": INBOX}
            nc = await connect(bus.servers, "placewatch exporter", options)
            view = FleetView(
                nc,
                bus.prefix,
                partition=p,
                partitions=n,
                node=args.only_node,
                only=_only(args.nodes),
            )
            await view.start()
            holder.append(view)
            await anyio.sleep_forever()
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(_shut, server, thread)
            if holder:
                await holder[0].stop()
        await drain(nc)
    return 0


def _only(glob: str | None) -> Callable[[str], bool] | None:
    """The test of the nodes the view holds: the glob's (fnmatch's, case kept), or none."""
    if glob is None:
        return None
    return lambda name: fnmatch.fnmatchcase(name, glob)


def _shut(server: WSGIServer, thread: threading.Thread) -> None:
    server.shutdown()
    server.server_close()
    thread.join()
