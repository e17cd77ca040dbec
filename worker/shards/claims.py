"""What each router server says of its models, asked once a tick (Ollama's /api/ps), and which
of its children may read the log they share.

The server's word is its plan and belief, weighed in the verdict against the memory the
shard's processes hold (verdict.py). Each server is asked once a tick in a worker thread, by
what is left of the tick's deadline (ASK_CAP_S at most, and that where none is given); an
answer is kept KEEP_S, so that one slow answer does not flip a verdict from the server's
word to memory's alone.

A router that copies its children's lines into its log as they are (Ollama's server) gives
no way to tell whose lines are whose, and each child's own start begins a new life in that
log (lives.py): the log is read for a child only while it is its server's one child and no
child started after it, so that it reads its own start and lines.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

import anyio
import anyio.to_thread

from ..deadline import Deadline
from ..engines import ModelClaim, Server, engine_named, owns_log
from .liveness import Tracked

ASK_CAP_S = 0.25
"""The most a tick waits for one server's answer."""
KEEP_S = 30.0
"""How long a server's last answer stands while it does not answer."""


class ServerClaims:
    """The last word of each router server the shards were found under; owned by one shard
    pass."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._kept: dict[Server, tuple[float, Mapping[str, ModelClaim]]] = {}

    async def read(
        self, tracked: Mapping[str, Tracked], deadline: Deadline | None = None
    ) -> dict[str, ModelClaim]:
        """Each shard's model, as its server says it, by shard id; asks each server once."""
        servers = {t.placement.server for t in tracked.values() if t.pid and t.placement.server}
        for server in [s for s in self._kept if s not in servers]:
            del self._kept[server]
        for server in servers:
            await self._ask(server, deadline)
        found = {}
        for sid, t in tracked.items():
            at, model = t.placement.server, t.placement.model
            kept = self._kept.get(at) if at is not None else None
            claim = kept[1].get(model) if kept is not None and model is not None else None
            if claim is not None:
                found[sid] = claim
        return found

    async def _ask(self, server: Server, deadline: Deadline | None) -> None:
        engine = engine_named(server.engine)
        reports = engine.reports() if engine is not None else None
        if reports is None:
            return
        left = min(deadline.left(), ASK_CAP_S) if deadline is not None else ASK_CAP_S
        until = time.monotonic() + left
        answer = None
        with anyio.move_on_after(left):
            answer = await anyio.to_thread.run_sync(
                reports.claims, server, until, abandon_on_cancel=True
            )
        now = self.clock()
        if answer is not None:
            self._kept[server] = (now, answer)
        elif server in self._kept and now - self._kept[server][0] > KEEP_S:
            del self._kept[server]


class SharedServerLogs:
    """Which children of a router that copies their lines into its log unprefixed may read it:
    the one child of its log that started last."""

    def __init__(self) -> None:
        self._newest: dict[str, float] = {}
        """Each such log -> the start of the newest child seen writing it."""

    def unread(self, tracked: Mapping[str, Tracked]) -> set[str]:
        """The shards whose log is left unread this tick."""
        children: dict[str, list[tuple[float, str]]] = {}
        for sid, t in tracked.items():
            path = t.placement.spec.log_path
            if owns_log(t.placement.spec.engine) or t.placement.log_prefix or not path or not t.pid:
                continue
            children.setdefault(path, []).append((t.create_time or 0.0, sid))
        for path in [p for p in self._newest if p not in children]:
            del self._newest[path]
        unread: set[str] = set()
        for path, found in children.items():
            newest = self._newest[path] = max(self._newest.get(path, 0.0), *(c for c, _ in found))
            if len(found) > 1:
                unread.update(sid for _, sid in found)
            else:
                unread.update(sid for started, sid in found if started < newest)
        return unread
