"""The connection to NATS and publishing with the contract's headers.

Telemetry is latest-value: while the server is away a sample is not
buffered for replay (it would be stale when it arrived), it is counted, and
the next sample that goes out says how many were dropped.
"""

from __future__ import annotations

import logging
import os
import re
import ssl
from typing import Any

import nats
import nats.errors
from nats.aio.client import Client

from placewatch.schemas import NodeTelemetry, encode, subjects
from placewatch.schemas.codec import Encoding

from .config import ConfigError, Settings

log = logging.getLogger(__name__)

PENDING_BYTES = 256 * 1024
"""nats-py's reconnect buffer; small, as telemetry is not replayed from it."""

_CREDENTIALS = re.compile(r"//[^@/]*@")


def redact(url: str) -> str:
    """A server URL fit for a log line: user and password removed."""
    return _CREDENTIALS.sub("//***@", url)


class _ConnectionLog:
    """One log line per change of state, not one per failed attempt."""

    def __init__(self, servers: list[str]) -> None:
        self.servers = ", ".join(redact(s) for s in servers)
        self.failing = False
        self.nc: Client | None = None
        self.refused: set[str] = set()

    def _closing(self) -> bool:
        return self.nc is not None and (self.nc.is_draining or self.nc.is_closed)

    async def error(self, exc: Exception) -> None:
        said = str(exc)
        if "permissions violation" in said.lower():
            # The server refused one message and keeps the connection: say which, once.
            if said not in self.refused:
                self.refused.add(said)
                log.error(
                    "NATS refused it: %s; this node's credentials do not allow it "
                    "(the permissions a node needs are in docs/operations.md)",
                    said.removeprefix("nats: "),
                )
            return
        if not self.failing and not self._closing():
            self.failing = True
            log.warning(
                "cannot reach NATS at %s (%s); retrying every half second",
                self.servers,
                str(exc) or type(exc).__name__,
            )

    async def disconnected(self) -> None:
        if self._closing():
            return  # our own shutdown
        log.warning("disconnected from NATS; telemetry is dropped until it returns")

    async def reconnected(self) -> None:
        self.failing = False
        log.info("reconnected to NATS")


def connect_options(settings: Settings) -> dict[str, Any]:
    """nats.connect() arguments for the settings' credentials and TLS.

    Raises ConfigError naming the setting when a file it names cannot be used;
    no secret is ever part of a message.
    """
    options: dict[str, Any] = {}
    if settings.user is not None:
        options["user"] = settings.user
        options["password"] = settings.password or ""
    if settings.token is not None:
        options["token"] = settings.token
    for field, argument in (("nkey_seed", "nkeys_seed"), ("creds", "user_credentials")):
        path = getattr(settings, field)
        if path is not None:
            _readable(field, path)
            options[argument] = path
    if settings.tls_ca or settings.tls_cert:
        try:
            context = ssl.create_default_context(cafile=settings.tls_ca)
            if settings.tls_cert:
                context.load_cert_chain(settings.tls_cert, settings.tls_key)
        except (OSError, ssl.SSLError) as exc:
            which = (
                "tls_ca" if settings.tls_ca and not _exists(settings.tls_ca) else "tls_cert/tls_key"
            )
            raise ConfigError(
                f"{which}: cannot load the TLS files ({getattr(exc, 'strerror', None) or exc}); "
                "check the paths and that they are PEM"
            ) from None
        options["tls"] = context
    return options


def _exists(path: str) -> bool:
    return os.path.isfile(path)


def _readable(field: str, path: str) -> None:
    if not os.access(path, os.R_OK):
        raise ConfigError(f"{field}: {path} cannot be read; check the path and its permissions")


def inbox_prefix(node: str) -> str:
    """Replies to this node come under its own inbox prefix, so its credentials may subscribe
    to its own replies only (docs/operations.md)."""
    return f"_INBOX.{subjects.token(node)}"


async def connect(servers: list[str], name: str, options: dict[str, Any] | None = None) -> Client:
    """A connection that retries for ever, at start as after an outage."""
    events = _ConnectionLog(servers)
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


class Publisher:
    """Publishes a node's messages; knows its prefix and encoding."""

    def __init__(self, nc: Client, prefix: str, encoding: Encoding = "json") -> None:
        self.nc = nc
        self.prefix = prefix
        self.encoding: Encoding = encoding
        self.dropped = 0

    async def telemetry(self, message: NodeTelemetry) -> bool:
        """Publish one sample now or drop it; True when it went out."""
        if not self.nc.is_connected:
            self.dropped += 1
            return False
        message.dropped = self.dropped
        payload, headers = encode(message, self.encoding)
        try:
            await self.nc.publish(
                subjects.telemetry(message.node, self.prefix), payload, headers=headers
            )
        except nats.errors.Error as exc:
            self.dropped += 1
            log.warning("telemetry not published: %s", exc)
            return False
        self.dropped = 0
        return True
