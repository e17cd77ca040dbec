"""What this node's credentials may do on the server: JetStream, the streams and buckets of the
contract under the prefix (`placewatch.schemas.streams`), and publishing its telemetry (publish.py).

A request the credentials may not make comes back as a timeout or no
responders, and the server's Permissions Violation only through the error
callback; each check reads that callback's errors since it began, so that it
can say "refused" rather than "no answer".
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.js import JetStreamContext

from placewatch.schemas import partitions, subjects
from placewatch.schemas.streams import (
    DEFAULT_CONSUMER_LIMIT_SINCE,
    MAX_CONSUMERS,
    for_prefix,
    raise_consumer_limit,
)

from ..bus.clock import CLOCK_OFF_S, clock_offset, describe, now_utc
from ..config import Settings
from .publish import LEAST_PRIVILEGE, PUBLISH, check_publish
from .report import Report, count
from .server import NET_TIMEOUT_S, ServerErrors

JETSTREAM = "JetStream"
STREAMS = "streams and buckets"
CLOCK = "clock"
CHECKS = (JETSTREAM, STREAMS, CLOCK, PUBLISH)
"""The checks made over the connection, in the order they are made."""


async def check_jetstream(
    nc: Client, errors: ServerErrors, settings: Settings, report: Report
) -> None:
    """JetStream, then its streams and buckets when there is one, then a publish."""
    checks = _JetStreamChecks(nc, nc.jetstream(timeout=NET_TIMEOUT_S), errors, settings, report)
    if await checks.jetstream():
        await checks.streams()
        await checks.buckets()
        await checks.server_clock()
    else:
        report.skip(STREAMS, "no JetStream")
        report.skip(CLOCK, "no JetStream to ask the server's time")
    await check_publish(nc, errors, settings, report)


@dataclass
class _JetStreamChecks:
    """The checks made over one connection."""

    nc: Client
    js: JetStreamContext
    errors: ServerErrors
    settings: Settings
    report: Report
    clock: Callable[[], datetime] = now_utc
    """This node's clock (a test's may be off)."""

    async def jetstream(self) -> bool:
        seen = len(self.errors.seen)
        try:
            info = await self.js.account_info()
        except (nats.js.errors.ServiceUnavailableError, nats.errors.NoRespondersError):
            self.report.fail(
                JETSTREAM,
                "the server has no JetStream for this account: compute statuses and fallback "
                "events would go out as core messages, kept nowhere",
                "enable JetStream (nats-server -js, or jetstream {} in its config, and for the "
                "account)",
            )
            return False
        except (nats.errors.Error, TimeoutError) as exc:
            self._unanswered(JETSTREAM, "$JS.API.INFO", exc, seen)
            return False
        domain = f" in domain {info.domain}" if info.domain else ""
        self.report.ok(
            JETSTREAM,
            f"available{domain}: {count(info.streams, 'stream')}, "
            f"{count(info.consumers, 'consumer')} in this account",
        )
        return True

    async def streams(self) -> None:
        """The two streams the worker publishes events and telemetry to."""
        settings = self.settings
        for stream in for_prefix(settings.prefix).streams:
            name = f"stream {stream.name}"
            seen = len(self.errors.seen)
            try:
                info = await self.js.stream_info(stream.name)
            except nats.js.errors.NotFoundError:
                self._missing(name, stream.command(settings.storage, settings.replicas))
                continue
            except (nats.errors.Error, TimeoutError) as exc:
                self._unanswered(name, f"$JS.API.STREAM.INFO.{stream.name}", exc, seen)
                continue
            if self._consumers_limited(name, stream.name, info.config.max_consumers):
                continue
            held = list(info.config.subjects or [])
            lacking = [s for s in stream.subjects if not any(subjects.covers(h, s) for h in held)]
            found = (
                f"{count(info.state.messages, 'message')}, subjects {', '.join(held)}, "
                f"R{info.config.num_replicas or 1}"
            )
            edit = (
                f"add {', '.join(lacking)} to its subjects (nats stream edit {stream.name} "
                f"--subjects '{','.join([*held, *lacking])}' -f)"
            )
            published = [s for s in lacking if s not in _mapped_forms(settings.prefix)]
            if published:
                self.report.fail(
                    name,
                    f"takes {', '.join(held) or 'no subject'}, not {', '.join(published)}: this "
                    "worker's messages would not be stored",
                    edit,
                )
            elif lacking:
                # A stream made before the partitions: what this worker publishes is kept
                # until the servers' mapping is turned on, then nothing is.
                self.report.ok(
                    name,
                    f"{found}; partitions would need {', '.join(lacking)} too: before the "
                    f"servers' mapping is turned on, {edit}",
                )
            else:
                self.report.ok(name, found)

    async def buckets(self) -> None:
        """The placements the worker reads and the compute statuses it keeps."""
        settings = self.settings
        for bucket in for_prefix(settings.prefix).buckets:
            name = f"bucket {bucket.name}"
            seen = len(self.errors.seen)
            try:
                status = await (await self.js.key_value(bucket.name)).status()
            except nats.js.errors.NotFoundError:
                self._missing(name, bucket.command(settings.storage, settings.replicas))
                continue
            except (nats.errors.Error, TimeoutError) as exc:
                self._unanswered(name, f"$JS.API.STREAM.INFO.{bucket.stream}", exc, seen)
                continue
            if not bucket.rollup and status.stream_info.config.allow_rollup_hdrs:
                self.report.fail(
                    name,
                    "takes rollups: one message with Nats-Rollup: all, which any node may send "
                    "on its own key, would wipe every node's keys in it",
                    f"nats stream edit {bucket.stream} --no-allow-rollup -f (a put, an update "
                    "and a delete need no rollup)",
                )
                continue
            config = status.stream_info.config
            if self._consumers_limited(name, bucket.stream, config.max_consumers):
                continue
            self.report.ok(name, f"{count(status.values, 'key')}, history {status.history}")

    async def server_clock(self) -> None:
        """This node's clock against the server's, as the first stream of the prefix that
        exists tells the server's time."""
        stores = for_prefix(self.settings.prefix)
        offset = None
        for stream in [s.name for s in stores.streams] + [b.stream for b in stores.buckets]:
            with contextlib.suppress(nats.errors.Error, TimeoutError):
                offset = await clock_offset(self.nc, stream, self.clock)
            if offset is not None:
                break
        if offset is None:
            self.report.skip(
                CLOCK,
                "no stream of the prefix yet to ask the server's time (or a server before "
                "2.10, which does not say it)",
            )
        elif abs(offset) > CLOCK_OFF_S:
            self.report.fail(
                CLOCK,
                f"this node's clock is {describe(offset)}: each message it publishes carries a "
                "time off by as much",
                "check NTP on this node (timedatectl, chronyc tracking)",
            )
        else:
            self.report.ok(CLOCK, f"{describe(offset)}, within {CLOCK_OFF_S:g} s")

    def _consumers_limited(self, name: str, stream: str, limit: int | None) -> bool:
        """Fail a stream made without a consumer limit on a server that then gives it its
        default (nats-server 2.15: 1,000); whether it did."""
        version = self.nc.connected_server_version
        if (limit or 0) > 0 or (version.major, version.minor) < DEFAULT_CONSUMER_LIMIT_SINCE:
            return False
        self.report.fail(
            name,
            "sets no consumer limit, so this server (nats-server "
            f"{version.major}.{version.minor}) gives it its default_max_consumers, 1,000 unless "
            "its configuration says otherwise: every worker holds a consumer on the placements "
            "bucket and makes short-lived ones on the others, so from about the 1,000th node on "
            "workers are refused",
            f"{raise_consumer_limit(stream)} (the {MAX_CONSUMERS:,} the worker sets when it "
            "creates it)",
        )
        return True

    def _missing(self, name: str, command: str) -> None:
        if self.settings.create:
            self.report.ok(name, "not there yet: the worker creates it when it starts")
        else:
            self.report.fail(
                name, "does not exist, and --no-create is set", f"an operator creates it: {command}"
            )

    def _unanswered(self, name: str, api: str, exc: BaseException, seen: int) -> None:
        refused = self.errors.refused(seen)
        said = refused or str(exc) or type(exc).__name__
        inbox = subjects.inbox(self.settings.node)
        self.report.fail(
            name,
            f"no answer to {api} ({said})",
            f"allow this user to publish on {api} and to subscribe to {inbox}.>; {LEAST_PRIVILEGE}",
        )


def _mapped_forms(prefix: str) -> set[str]:
    """The stream subjects only the servers' partition mapping publishes on."""
    return {partitions.stream_subjects(kind, prefix)[1] for kind in partitions.PARTITIONED}
