"""The connection to NATS that every placewatch process makes: retried for ever, logged once.

nats-py reports each failed attempt to `error_cb`, and prints a traceback
for it when there is none; a process that waits for a server that is down
would fill its log. Here a state change is one line: cannot reach, refused,
disconnected, reconnected. No credential is ever part of a line: a URL goes
through `redact`. With a health file set, the connection also keeps a heartbeat there:
whether the server answered its PINGs (RoundTrips; docs/operations.md, Health checks).

The node worker and the commands that read the bus share it; it depends on
nats-py and the standard library only, as the rest of placewatch.consumer.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

import anyio
import anyio.to_thread
import nats
import nats.errors
from nats.aio.client import Client

from placewatch.schemas import subjects

from .heartbeat import PERIODS, Beat, since, write_beat

log = logging.getLogger(__name__)

PENDING_BYTES = 256 * 1024
"""nats-py's reconnect buffer; small, as telemetry is not replayed from it."""
HEARTBEAT = "placewatch_heartbeat"
"""A key of Bus.options that is not nats.connect()'s: the heartbeat file the connection keeps
(RoundTrips). connect() takes it out; every command that reads the bus passes Bus.options
to connect(), so the setting reaches each without a change to the command."""
HEARTBEAT_EVERY_S = 5.0

_USERINFO = re.compile(r"//[^@/?#\s]*@")
_SECRET_PARAM = re.compile(
    r"(?<=[?&;#])([^=&;#\s]*(?:token|key|pass|pwd|secret|sig|auth|cred|session)[^=&;#\s]*=)"
    r"[^&;#\s'\"<>]*",
    re.IGNORECASE,
)
"""A query or fragment parameter whose name says it holds a secret: `token`, `access_token`,
`api_key`, `key`, `password`, `sig`, `X-Amz-Signature`, `auth`, `sessionid` and the like."""


def redact(text: str) -> str:
    """A URL, or a line that holds URLs, fit for a log line or a report: the user and
    password before `@` and the value of every query parameter named like a secret
    (`?token=`, `&access_token=`, `&key=`, `&password=`, `&sig=`) replaced with `***`."""
    return _SECRET_PARAM.sub(r"\1***", _USERINFO.sub("//***@", text))


def refusal(exc: Exception) -> str | None:
    """The server's words when `exc` is its Permissions Violation, else None.

    The server refuses a message it does not allow with `-ERR 'Permissions
    Violation for Publish to "SUBJECT"'` and keeps the connection; nats-py
    hands that to the error callback as a plain `nats.errors.Error` reading
    `nats: permissions violation for ...` (its parser lower-cases the server's
    text; nats-py 2.16), so the text is all there is to tell it by.
    """
    said = str(exc).strip()
    if "permissions violation" not in said.lower():
        return None
    return said.removeprefix("nats: ")


@dataclass(frozen=True)
class Bus:
    """Where a command connects, and how: server URLs, nats.connect() options (credentials,
    TLS) and the subject prefix."""

    servers: list[str] = field(default_factory=lambda: [subjects.LOCAL_URL])
    options: dict[str, Any] = field(default_factory=dict)
    prefix: str = subjects.DEFAULT_PREFIX


class Unreachable(Exception):
    """No server answered in time; the message says where and what to check."""


class ConnectionLog:
    """One log line per change of state, not one per failed attempt."""

    def __init__(self, servers: list[str]) -> None:
        self.servers = ", ".join(redact(s) for s in servers)
        self.first = servers[0]
        self.failing = False
        self.nc: Client | None = None
        self.refused: set[str] = set()
        self.heartbeat: asyncio.Task[None] | None = None

    def _closing(self) -> bool:
        return self.nc is not None and (self.nc.is_draining or self.nc.is_closed)

    async def error(self, exc: Exception) -> None:
        refused = refusal(exc)
        if refused is not None:
            # The server refused one message and keeps the connection: say which, once.
            if refused not in self.refused:
                self.refused.add(refused)
                log.error(
                    "NATS refused it: %s; these credentials do not allow it "
                    "(the permissions each process needs are in docs/operations.md)",
                    refused,
                )
            return
        if not self.failing and not self._closing():
            self.failing = True
            why = redact(str(exc)) or type(exc).__name__
            # No greeting, or another one than INFO (nats-py: "... when expecting INFO
            # message"): is a NATS server there at all?
            if isinstance(exc, TimeoutError) or "info" in str(exc).lower():
                answer = await _answer(self.first)
                if answer not in (None, NATS_GREETING):
                    why = f"{why}: {_not_nats(answer)}"
            log.warning(
                "cannot reach NATS at %s (%s); retrying every half second", self.servers, why
            )

    async def disconnected(self) -> None:
        if self._closing():
            return  # our own shutdown
        log.warning("disconnected from NATS; telemetry is dropped until it returns")

    async def reconnected(self) -> None:
        self.failing = False
        log.info("reconnected to NATS")

    async def closed(self) -> None:
        if self.heartbeat is not None:
            self.heartbeat.cancel()


class RoundTrips:
    """A connection's heartbeat: every `every` seconds a PING the server must answer, and the
    heartbeat file written with how that went, so that `placewatch health --heartbeat` asks
    this connection, not a new one. It lives as long as the connection, as nats-py's own
    pinger and reader do: connect() starts it and the connection's close ends it."""

    def __init__(self, nc: Client, path: str, what: str, every: float = HEARTBEAT_EVERY_S) -> None:
        self.nc = nc
        self.path = path
        self.what = what
        self.every = every
        self.last_ok: float | None = None
        self.write_failed = False

    async def keep(self) -> None:
        while not self.nc.is_closed:
            await self.beat()
            await anyio.sleep(self.every)

    async def beat(self) -> None:
        if self.nc.is_connected:
            try:
                await self.nc.flush(timeout=max(int(self.every / 2), 1))
                self.last_ok = time.time()
            except (nats.errors.Error, TimeoutError):
                pass
        now = time.time()
        ok = self.last_ok is not None and now - self.last_ok <= PERIODS * self.every
        where = redact(self.nc.connected_url.geturl()) if self.nc.connected_url else "NATS"
        why = (
            f"connected to {where}: the server answered a PING {since(self.last_ok, now)}"
            if ok
            else f"no round trip with NATS for {PERIODS * self.every:g} s (last: "
            f"{since(self.last_ok, now)}); its log says why"
        )
        beat = Beat(os.getpid(), self.what, now, self.every, ok, why)
        try:
            await anyio.to_thread.run_sync(write_beat, self.path, beat)
            self.write_failed = False
        except OSError as exc:
            if not self.write_failed:
                log.error("cannot write the health file %s (%s)", self.path, exc.strerror)
            self.write_failed = True


async def connect(servers: list[str], name: str, options: dict[str, Any] | None = None) -> Client:
    """A connection that retries for ever, at start as after an outage; with HEARTBEAT in
    the options, one that keeps that heartbeat file (RoundTrips)."""
    events = ConnectionLog(servers)
    options = dict(options or {})
    heartbeat: str | None = options.pop(HEARTBEAT, None)
    nc = await nats.connect(
        servers=servers,
        name=name,
        **options,
        allow_reconnect=True,
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.5,
        connect_timeout=2,
        pending_size=PENDING_BYTES,
        error_cb=events.error,
        disconnected_cb=events.disconnected,
        reconnected_cb=events.reconnected,
        closed_cb=events.closed,
    )
    events.failing = False
    events.nc = nc
    where = nc.connected_url.geturl() if nc.connected_url else "?"
    log.info("connected to NATS at %s", redact(where))
    if heartbeat:
        trips = RoundTrips(nc, heartbeat, name.split()[1] if " " in name else name)
        events.heartbeat = asyncio.get_running_loop().create_task(trips.keep())
    return nc


async def connect_within(
    servers: list[str], name: str, options: dict[str, Any], seconds: float
) -> Client:
    """The first connection within `seconds`, else Unreachable saying why."""
    try:
        with anyio.fail_after(seconds):
            return await connect(servers, name, options)
    except TimeoutError:
        pass
    where = ", ".join(redact(s) for s in servers)
    answer = await _answer(servers[0])
    if answer is None:
        why = "nothing answers there; check --nats (or PLACEWATCH_NATS) and that a server runs"
    elif answer == NATS_GREETING:
        why = "a server answers but the connection failed; check the credentials and TLS flags"
    else:
        why = _not_nats(answer)
    raise Unreachable(f"cannot reach NATS at {where} within {seconds:g} s: {why}")


NATS_GREETING = "INFO"
"""What a NATS server sends first, before the client says anything."""


async def _answer(url: str) -> str | None:
    """What listens at `url`: None where nothing takes a connection within a second,
    NATS_GREETING where a NATS server greets, else what came instead (a few words)."""
    parsed = urlparse(url if "://" in url else f"nats://{url}")
    try:
        with anyio.fail_after(1):
            stream = await anyio.connect_tcp(
                parsed.hostname or "127.0.0.1", parsed.port or subjects.DEFAULT_PORT
            )
    except (OSError, TimeoutError):
        return None
    first = b""
    try:
        with anyio.move_on_after(1):
            first = await stream.receive(64)
    except (OSError, anyio.EndOfStream, anyio.BrokenResourceError):
        pass
    finally:
        await stream.aclose()
    if first.startswith(NATS_GREETING.encode()):
        return NATS_GREETING
    return f"it sent {first[:24]!r}" if first else "it sent nothing within 1 s"


def _not_nats(answer: str) -> str:
    return (
        f"what answers there is no NATS server ({answer}, where a NATS server greets with "
        "INFO); check the port in --nats (or PLACEWATCH_NATS): clients connect to 4222 "
        "unless the server says otherwise, its monitoring port (8222) is HTTP"
    )
