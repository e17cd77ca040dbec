"""Can this node reach its NATS server, and does the server take its credentials?

Reachability is a bare TCP connect to each configured URL, so that "nothing
listens there" and "the server refused you" are told apart. Authentication is
one NATS handshake that tries each reachable server once, with the worker's own
credentials, TLS and inbox prefix. A credentials setting is named in the
advice, never shown.
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import anyio
import anyio.to_thread
import nats
import nats.errors
from nats.aio.client import Client

from placewatch.connection import redact, refusal
from placewatch.schemas import subjects

from ..bus.options import connect_options
from ..config import ConfigError, Settings
from .report import Report

REACHABLE = "server reachable"
AUTHENTICATED = "server authenticated"

NET_TIMEOUT_S = 2.0
"""Limit for one TCP connect, the NATS handshake and each JetStream request."""

_AUTH = re.compile(r"authorization violation|authentication (?:expired|revoked|timeout)", re.I)


@dataclass
class ServerErrors:
    """What nats-py hands its error callback: a refused message is reported only this way."""

    seen: list[Exception] = field(default_factory=list)

    async def record(self, exc: Exception) -> None:
        self.seen.append(exc)

    def refused(self, since: int) -> str | None:
        """The server's first Permissions Violation after the `since`-th error."""
        for exc in self.seen[since:]:
            said = refusal(exc)
            if said is not None:
                return said
        return None


async def check_server(
    settings: Settings, errors: ServerErrors, report: Report, later: Sequence[str]
) -> Client | None:
    """A connection to the first server that takes the credentials, or None.

    Without one, the `later` checks, which need a connection, are skipped with
    the reason.
    """
    embedded = not settings.nats
    urls = settings.nats or [f"nats://127.0.0.1:{settings.embedded_port or subjects.DEFAULT_PORT}"]
    reachable = [url for url in urls if await _check_reachable(url, embedded, report)]
    if not reachable:
        for name in (AUTHENTICATED, *later):
            report.skip(name, "no server reachable")
        return None
    nc = await _authenticate(settings, reachable, errors, report)
    if nc is None:
        for name in later:
            report.skip(name, "not connected")
    return nc


async def close(nc: Client) -> None:
    """Close the connection, even while the doctor is cancelled, but not wait on it for long."""
    with anyio.move_on_after(NET_TIMEOUT_S, shield=True):
        await nc.close()


async def _check_reachable(url: str, embedded: bool, report: Report) -> bool:
    where = redact(url) + (" (none configured: the embedded default)" if embedded else "")
    try:
        parts = urlsplit(url if "://" in url else f"nats://{url}")
        host = parts.hostname or "127.0.0.1"
        port = parts.port or {"ws": 80, "wss": 443}.get(parts.scheme, 4222)
    except ValueError:
        report.fail(REACHABLE, f"{where} is not a valid URL", "fix --nats (or PLACEWATCH_NATS)")
        return False
    started = time.perf_counter()
    try:
        await anyio.to_thread.run_sync(_tcp_connect, host, port)
    except OSError as exc:
        timed_out = isinstance(exc, TimeoutError)
        why = f"no answer within {NET_TIMEOUT_S:g} s" if timed_out else exc.strerror or str(exc)
        report.fail(REACHABLE, f"{where}: {why}", _unreachable_advice(exc, host, port, embedded))
        return False
    report.ok(REACHABLE, f"{where}: TCP connect in {(time.perf_counter() - started) * 1000:.0f} ms")
    return True


def _tcp_connect(host: str, port: int) -> None:
    socket.create_connection((host, port), timeout=NET_TIMEOUT_S).close()


def _unreachable_advice(exc: OSError, host: str, port: int, embedded: bool) -> str:
    if embedded:
        return (
            "nothing listens there: `placewatch run` starts its embedded server there; "
            "or give the server with --nats URL (or PLACEWATCH_NATS)"
        )
    if isinstance(exc, socket.gaierror):
        return f"{host} does not resolve: check the URL in --nats (or PLACEWATCH_NATS)"
    return (
        f"check that nats-server runs on {host} port {port} and that this node may reach "
        "it (firewall, security group), or fix --nats (or PLACEWATCH_NATS)"
    )


async def _authenticate(
    settings: Settings, servers: list[str], errors: ServerErrors, report: Report
) -> Client | None:
    """A connection that tries each server once: a doctor reports, it does not wait."""
    try:
        options = connect_options(settings)
    except ConfigError as exc:
        report.fail(AUTHENTICATED, str(exc), "fix the setting it names")
        return None
    limit = NET_TIMEOUT_S * (len(servers) + 2)
    problem: Exception | None = None
    with anyio.move_on_after(limit):
        try:
            nc = await nats.connect(
                servers=servers,
                name=f"placewatch-doctor {settings.node}",
                **options,
                inbox_prefix=subjects.inbox(settings.node),  # as the worker's replies
                allow_reconnect=False,
                max_reconnect_attempts=1,
                reconnect_time_wait=0.1,
                connect_timeout=NET_TIMEOUT_S,
                error_cb=errors.record,
            )
        except (nats.errors.Error, OSError, TimeoutError) as exc:
            problem = exc
        else:
            where = redact(nc.connected_url.geturl() if nc.connected_url else servers[0])
            report.ok(
                AUTHENTICATED,
                f"connected to {where} with {_credentials_kind(settings)} "
                f"(nats-server {_server_version(nc)})",
            )
            return nc
    _report_no_connection(problem, limit, settings, report)
    return None


def _report_no_connection(
    problem: Exception | None, limit: float, settings: Settings, report: Report
) -> None:
    """Why the handshake failed: the credentials, no NATS server on the port, or TLS.

    `problem` is None when no server answered the handshake within `limit`.
    """
    said = str(problem or "").strip().removeprefix("nats: ").strip("'") or type(problem).__name__
    if isinstance(problem, nats.errors.AuthorizationError) or _AUTH.search(said):
        report.fail(
            AUTHENTICATED,
            f"the server refused the credentials ({said})",
            _credentials_advice(settings),
        )
    elif problem is None:
        report.fail(
            AUTHENTICATED,
            f"no NATS handshake within {limit:g} s",
            "check that the port is a NATS client port (4222), not a cluster, monitoring or "
            "websocket one, and the TLS settings (tls_ca)",
        )
    else:
        report.fail(
            AUTHENTICATED,
            f"no NATS connection: {said}",
            "check the TLS settings (tls_ca, tls_cert, tls_key) and the server's log",
        )


def _server_version(nc: Client) -> str:
    try:
        v = nc.connected_server_version
        return f"{v.major}.{v.minor}.{v.patch}"
    except (ValueError, KeyError, TypeError):
        return "of unknown version"


def _credentials_kind(settings: Settings) -> str:
    """The kind of credentials this node connects with, named, never shown."""
    if settings.creds:
        return "a credentials file"
    if settings.nkey_seed:
        return "an NKey"
    if settings.user is not None:
        return f"user {settings.user}"
    return "a token" if settings.token is not None else "no credentials"


def _credentials_advice(settings: Settings) -> str:
    """Which credentials setting to check, by name, never by value."""
    named = []
    if settings.user is not None:
        named.append("user and password (PLACEWATCH_USER, PLACEWATCH_PASSWORD)")
    if settings.token is not None:
        named.append("token (PLACEWATCH_TOKEN)")
    if settings.nkey_seed:
        named.append(f"nkey_seed file {settings.nkey_seed}: the seed of a user the server knows")
    if settings.creds:
        named.append(f"creds file {settings.creds}: a user of the server's operator, not expired")
    if not named:
        return (
            "the server wants credentials: set user and password, token, nkey_seed or creds "
            "(docs/configuration.md)"
        )
    return "check the " + " and the ".join(named)
