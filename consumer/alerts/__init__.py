"""`placewatch alerts`: every fallback event delivered to stdout or a webhook, once.

consume.py is the durable consumer, sinks.py where events go, webhook.py the
HTTP POST, alertmanager.py the body Alertmanager takes.
"""

from __future__ import annotations

import argparse
import logging
import sys

import anyio
from nats.aio.client import Client

from ..connection import Bus, connect, redact
from ..lifecycle import drain, stop_on_signal
from .consume import DEFAULT_DURABLE, Conflict, consume
from .sinks import HTTP_TIMEOUT_S, RESEND_S, StdoutSink, WebhookSink, resend_every
from .webhook import check_url

log = logging.getLogger(__name__)

EXIT_CONFIG = 2
INBOX = "_INBOX.placewatch-alerts"
"""Its replies' prefix, so its credentials may subscribe to its own only (docs/consumers.md)."""

__all__ = [
    "DEFAULT_DURABLE",
    "RESEND_S",
    "StdoutSink",
    "WebhookSink",
    "add_arguments",
    "command",
    "consume",
    "main",
]


def add_arguments(alerts: argparse.ArgumentParser) -> None:
    alerts.add_argument(
        "--durable",
        default=DEFAULT_DURABLE,
        metavar="NAME",
        help=f"the durable consumer's name; it keeps the position ({DEFAULT_DURABLE})",
    )
    alerts.add_argument("--webhook", metavar="URL", help="POST each event here (2xx: delivered)")
    alerts.add_argument(
        "--format",
        choices=["json", "alertmanager"],
        default="json",
        help="webhook body: the event's JSON, or Alertmanager's POST /api/v2/alerts (json)",
    )
    alerts.add_argument(
        "--generator-url", metavar="URL", help="Alertmanager format: each alert's generatorURL"
    )
    alerts.add_argument(
        "--resend",
        type=float,
        default=RESEND_S,
        metavar="SECONDS",
        help=f"Alertmanager format: post firing alerts again this often; 0: never ({RESEND_S:g})",
    )
    alerts.add_argument(
        "--timeout",
        type=float,
        default=HTTP_TIMEOUT_S,
        metavar="SECONDS",
        help=f"limit for one webhook request ({HTTP_TIMEOUT_S:g})",
    )


def command(bus: Bus, args: argparse.Namespace) -> int:
    """`placewatch alerts` as the command line asks for it."""
    sink: StdoutSink | WebhookSink
    if args.webhook:
        problem = check_url(args.webhook)
        if problem:
            print(f"placewatch: {problem}", file=sys.stderr)
            return EXIT_CONFIG
        sink = WebhookSink(
            args.webhook, args.format == "alertmanager", args.generator_url, args.timeout
        )
        log.info("posting each fallback event to %s (%s)", redact(args.webhook), args.format)
    elif args.format == "alertmanager":
        print("placewatch: --format alertmanager needs --webhook URL", file=sys.stderr)
        return EXIT_CONFIG
    else:
        sink = StdoutSink()
    return main(bus, sink, args.durable, args.resend)


def main(
    bus: Bus, sink: StdoutSink | WebhookSink, durable: str = DEFAULT_DURABLE, resend: float = 0.0
) -> int:
    """Deliver until stopped; 0, or EXIT_CONFIG when the durable consumer cannot be used."""
    try:
        return anyio.run(_deliver_until_stopped, bus, sink, durable, resend, backend="asyncio")
    except KeyboardInterrupt:
        return 0


async def _deliver_until_stopped(
    bus: Bus, sink: StdoutSink | WebhookSink, durable: str, resend: float
) -> int:
    nc: Client | None = None
    code = 0
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(stop_on_signal, tg.cancel_scope)
            nc = await connect(
                bus.servers, f"placewatch alerts {durable}", bus.options | {"inbox_prefix": INBOX}
            )
            ready = anyio.Event()
            if resend > 0 and isinstance(sink, WebhookSink) and sink.alertmanager:
                tg.start_soon(resend_every, sink, resend, ready)
            try:
                await consume(nc, bus.prefix, durable, sink, ready)
            except Conflict as exc:
                print(f"placewatch: {exc}", file=sys.stderr)
                code = EXIT_CONFIG
            tg.cancel_scope.cancel()
    finally:
        await drain(nc)
    return code
