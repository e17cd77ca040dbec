"""A client that tries things with a node's credentials and says how each came out.

Everything the server sends this client's inbox is kept, so that a test can say
that none of it holds another node's data, whatever the outcome of each try.
A refused publish or subscription comes back only as the server's
`Permissions Violation` to the error callback (nats-py 2.16 lower-cases its
text), so each outcome is told by looking there for the subject tried.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg

ASK_TIMEOUT_S = 0.5
"""How long a try waits for an answer: a refusal comes back within milliseconds."""

REFUSED = "refused: permissions violation"


@dataclass
class Intruder:
    """A connection as one node, and what came of each try."""

    nc: Client
    inbox: str
    errors: list[str] = field(default_factory=list)
    received: list[bytes] = field(default_factory=list)
    """Every message delivered to this client's inbox: headers and payload."""
    outcomes: dict[str, str] = field(default_factory=dict)

    @classmethod
    async def connect(cls, url: str, node: str, password: str) -> Intruder:
        errors: list[str] = []

        async def error_cb(exc: Exception) -> None:
            errors.append(str(exc))

        inbox = f"_INBOX.{node}"
        nc = await nats.connect(
            url, user=node, password=password, inbox_prefix=inbox, error_cb=error_cb
        )
        self = cls(nc, inbox, errors)

        async def keep(msg: Msg) -> None:
            self.received.append(repr(msg.headers).encode() + msg.data)

        await nc.subscribe(f"{inbox}.>", cb=keep)
        return self

    def _refused(self, subject: str, since: int) -> bool:
        wanted = f'"{subject.lower()}"'
        return any("permissions violation" in e and wanted in e for e in self.errors[since:])

    async def ask(self, label: str, subject: str, body: dict[str, Any] | None = None) -> str:
        """A raw request, as a hostile client would make it: how it came out."""
        since = len(self.errors)
        data = json.dumps(body).encode() if body is not None else b""
        try:
            reply = await self.nc.request(subject, data, timeout=ASK_TIMEOUT_S)
        except (nats.errors.Error, TimeoutError) as exc:
            await self.nc.flush()
            said = REFUSED if self._refused(subject, since) else f"no answer ({exc})"
            return self._record(label, said)
        headers = reply.headers or {}
        if "Status" in headers:
            return self._record(label, f"refused: {headers['Status']} {headers.get('Description')}")
        try:
            error = json.loads(reply.data).get("error")
        except ValueError:
            error = None
        if error:
            return self._record(label, f"refused: {error['err_code']} {error['description']}")
        return self._record(label, f"answered: {reply.data.decode(errors='replace')}")

    async def call(self, label: str, subject: str, action: Callable[[], Awaitable[object]]) -> str:
        """A nats-py call that makes a request on `subject`: how it came out."""
        since = len(self.errors)
        try:
            with anyio.fail_after(3 * ASK_TIMEOUT_S):
                got = await action()
        except (nats.errors.Error, TimeoutError) as exc:
            await self.nc.flush()
            said = (
                REFUSED
                if self._refused(subject, since)
                else f"failed ({exc or type(exc).__name__})"
            )
            return self._record(label, said)
        return self._record(label, f"answered: {got!r}")

    async def subscribe(self, label: str, subject: str) -> str:
        """A subscription: refused, or taken (then what it got is in `received`)."""
        since = len(self.errors)

        async def keep(msg: Msg) -> None:
            self.received.append(repr(msg.headers).encode() + msg.data)

        await self.nc.subscribe(subject, cb=keep)
        await self.nc.flush()
        await anyio.sleep(0.1)
        wanted = f'subscription to "{subject.lower()}"'
        refused = any(wanted in e for e in self.errors[since:])
        return self._record(label, REFUSED if refused else "subscribed")

    async def publish(
        self, label: str, subject: str, data: bytes, *, checked_as: str | None = None
    ) -> str:
        """A publish: refused, or published. `checked_as`: the subject the server checks and
        names when it refuses, where its subject mapping rewrites `subject`."""
        since = len(self.errors)
        await self.nc.publish(subject, data)
        await self.nc.flush()
        await anyio.sleep(0.1)
        refused = self._refused(checked_as or subject, since)
        return self._record(label, REFUSED if refused else "published")

    def _record(self, label: str, outcome: str) -> str:
        self.outcomes[label] = outcome
        return outcome
