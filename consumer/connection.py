"""The connection to NATS that every placewatch process makes: retried for ever, logged once.

nats-py reports each failed attempt to `error_cb`, and prints a traceback
for it when there is none; a process that waits for a server that is down
would fill its log. Here a state change is one line: cannot reach, refused,
disconnected, reconnected. No credential is ever part of a line: a URL goes
through `redact`.

The node worker and the commands that read the bus share it; it depends on
nats-py and the standard library only, as the rest of placewatch.consumer.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

import anyio
import nats
from nats.aio.client import Client

from placewatch.schemas import subjects

log = logging.getLogger(__name__)

PENDING_BYTES = 256 * 1024
"""nats-py's reconnect buffer; small, as telemetry is not replayed from it."""

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
        self.failing = False
        self.nc: Client | None = None
        self.refused: set[str] = set()

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
            log.warning(
                "cannot reach NATS at %s (%s); retrying every half second",
                self.servers,
                redact(str(exc)) or type(exc).__name__,
            )

    async def disconnected(self) -> None:
        if self._closing():
            return  # our own shutdown
        log.warning("disconnected from NATS; telemetry is dropped until it returns")

    async def reconnected(self) -> None:
        self.failing = False
        log.info("reconnected to NATS")


async def connect(servers: list[str], name: str, options: dict[str, Any] | None = None) -> Client:
    """A connection that retries for ever, at start as after an outage."""
    events = ConnectionLog(servers)
    nc = await nats.connect(
        servers=servers,
        name=name,
        **(options or {}),
        allow_reconnect=True,
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.5,
        connect_timeout=2,
        pending_size=PENDING_BYTES,
        error_cb=events.error,
        disconnected_cb=events.disconnected,
        reconnected_cb=events.reconnected,
    )
    events.failing = False
    events.nc = nc
    where = nc.connected_url.geturl() if nc.connected_url else "?"
    log.info("connected to NATS at %s", redact(where))
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
    if not await _listening(servers[0]):
        why = "nothing answers there; check --nats (or PLACEWATCH_NATS) and that a server runs"
    else:
        why = "a server answers but the connection failed; check the credentials and TLS flags"
    raise Unreachable(f"cannot reach NATS at {where} within {seconds:g} s: {why}")


async def _listening(url: str) -> bool:
    parsed = urlparse(url if "://" in url else f"nats://{url}")
    try:
        with anyio.fail_after(1):
            stream = await anyio.connect_tcp(
                parsed.hostname or "127.0.0.1", parsed.port or subjects.DEFAULT_PORT
            )
    except (OSError, TimeoutError):
        return False
    await stream.aclose()
    return True
