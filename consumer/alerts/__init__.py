"""`placewatch alerts`: every fallback event delivered to stdout or a webhook, once; or, to
Alertmanager, alerts that say what each shard does now.

options.py holds the flags and their variables, consume.py the durable consumer,
catchup.py what it reads at start, sinks.py where messages go, reconcile.py which alerts
Alertmanager should hold, blindness.py which blindness alerts (from the nodes' telemetry,
which telemetry.py follows), alertmanager.py their body, webhook.py the HTTP POST.
"""

from __future__ import annotations

import argparse
import logging
import sys

import anyio
from nats.aio.client import Client

from placewatch.connection import Bus, connect, redact
from placewatch.lifecycle import drain, stop_on_signal

from . import telemetry
from .alertmanager import AlertTemplate
from .blindness import Blindness
from .consume import Conflict, consume
from .options import DEFAULT_DURABLE, RESEND_S, OptionError, Options, add_arguments, options
from .sinks import (
    AlertmanagerSink,
    Sink,
    StdoutSink,
    WebhookSink,
    check_blindness_every,
    resend_every,
)
from .webhook import check_url

log = logging.getLogger(__name__)

EXIT_CONFIG = 2
BLIND_CHECK_S = 1.0
"""How often blindness is checked against the limit: an alert fires within a second of it."""
INBOX = "_INBOX.placewatch-alerts"
"""Its replies' prefix, so its credentials may subscribe to its own only (docs/consumers.md)."""

__all__ = [
    "DEFAULT_DURABLE",
    "RESEND_S",
    "AlertmanagerSink",
    "StdoutSink",
    "WebhookSink",
    "add_arguments",
    "command",
    "consume",
    "main",
]


def command(bus: Bus, args: argparse.Namespace) -> int:
    """`placewatch alerts` as the command line and its environment ask for it."""
    try:
        chosen = options(args)
    except OptionError as exc:
        print(f"placewatch: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    sink = _sink(chosen)
    if isinstance(sink, str):
        print(f"placewatch: {sink}", file=sys.stderr)
        return EXIT_CONFIG
    return main(bus, sink, chosen.durable, chosen.resend)


def _sink(chosen: Options) -> Sink | str:
    """Where to deliver, or why the options give nowhere."""
    if chosen.format == "json" and (chosen.labels or chosen.annotations):
        log.warning("--label and --annotation are for --format alertmanager; left out")
    if not chosen.webhook:
        if chosen.format == "alertmanager":
            return "--format alertmanager needs --webhook URL (or PLACEWATCH_ALERTS_WEBHOOK)"
        return StdoutSink()
    problem = check_url(chosen.webhook)
    if problem:
        return problem
    log.info("posting each fallback event to %s (%s)", redact(chosen.webhook), chosen.format)
    if chosen.format == "json":
        return WebhookSink(chosen.webhook, chosen.timeout)
    template = AlertTemplate(chosen.labels, chosen.annotations, chosen.generator_url)
    blind = Blindness(chosen.blind_after) if chosen.blind_after > 0 else None
    return AlertmanagerSink(chosen.webhook, template, chosen.timeout, blind)


def main(bus: Bus, sink: Sink, durable: str = DEFAULT_DURABLE, resend: float = 0.0) -> int:
    """Deliver until stopped; 0, or EXIT_CONFIG when the durable consumer cannot be used."""
    try:
        return anyio.run(_deliver_until_stopped, bus, sink, durable, resend, backend="asyncio")
    except KeyboardInterrupt:
        return 0


async def _deliver_until_stopped(bus: Bus, sink: Sink, durable: str, resend: float) -> int:
    nc: Client | None = None
    code = 0
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(stop_on_signal, tg.cancel_scope)
            nc = await connect(
                bus.servers, f"placewatch alerts {durable}", bus.options | {"inbox_prefix": INBOX}
            )
            ready = anyio.Event()
            if resend > 0 and isinstance(sink, AlertmanagerSink):
                tg.start_soon(resend_every, sink, resend, ready)
            if isinstance(sink, AlertmanagerSink) and sink.blindness is not None:
                await telemetry.follow(nc, bus.prefix, sink.blindness)  # drained with nc
                every = min(BLIND_CHECK_S, sink.blindness.limit_s / 2)
                tg.start_soon(check_blindness_every, sink, every, ready)
            try:
                await consume(nc, bus.prefix, durable, sink, ready)
            except Conflict as exc:
                print(f"placewatch: {exc}", file=sys.stderr)
                code = EXIT_CONFIG
            tg.cancel_scope.cancel()
    finally:
        await drain(nc)
    return code
