"""Whether a shard's engine is ready: its health URL asked, within the tick's deadline.

An engine's HTTP answer is something a local process controls: a server that accepts and
never answers, or answers one byte a second, holds a blocking request for as long as it
likes (urllib's timeout bounds each read, not the request). The request runs in a worker
thread, which cannot be stopped, so the tick waits for it only until its deadline
(worker/deadline.py). A check still running then is not asked again while it runs: its
answer, when it comes, is taken by the next tick, and a server that never answers holds
one thread, not one a tick.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future
from typing import Literal

import anyio.to_thread

from ..deadline import NEVER, Deadline
from .liveness import Tracked

HEALTH_TIMEOUT_S = 1.0
"""The longest a check waits to connect, and then for each read of the answer: its own
limit, whatever is left of the tick that asked."""

Readiness = Literal["ok", "not ready", "unreachable"]


def readiness(url: str, timeout: float = HEALTH_TIMEOUT_S) -> Readiness:
    """What a health URL says: 2xx, another status (503 while loading, a redirect), or nothing.

    The URL itself is asked, and nothing else: no proxy from the environment (a node-local
    URL, whose query may hold a token, goes to no third host) and no redirect followed
    (llama-server's and vLLM's /health answer themselves; a 3xx is not ready). The body is
    never read. What is no HTTP answer at all is unreachable, including what http.client
    raises as its own HTTPException rather than an OSError (a server that does not speak
    HTTP, a port that is not a number; Python 3.11), so that no placement stops the tick.
    """
    # Imported at the first health check: urllib brings http and email with it, as much
    # to import as the rest of a node without health URLs takes.
    import http.client  # noqa: PLC0415
    import urllib.error  # noqa: PLC0415

    from placewatch.http_opener import opener  # noqa: PLC0415

    try:
        with opener(proxies=False).open(url, timeout=timeout) as response:
            return "ok" if 200 <= int(response.status) < 300 else "not ready"
    except urllib.error.HTTPError:
        return "not ready"
    except (OSError, ValueError, http.client.HTTPException):
        return "unreachable"


def _ask(url: str, answer: Future[Readiness]) -> None:
    """In a worker thread: `url` asked, its answer handed over in `answer` (a Future is
    made to cross threads), however long the tick that asked waited."""
    if not answer.set_running_or_notify_cancel():
        return
    try:
        answer.set_result(readiness(url))
    except Exception as exc:  # a defect: raised where the answer is taken, in the tick
        answer.set_exception(exc)


class ReadinessChecks:
    """The health URLs being asked, by shard, across ticks."""

    def __init__(self) -> None:
        self._asked: dict[tuple[str, str], Future[Readiness]] = {}

    async def ask(self, shard: str, url: str, deadline: Deadline = NEVER) -> Readiness | None:
        """What `url` says, if it says it by `deadline`: asked now, or the answer of a check
        an earlier tick left running. None while the answer has not come."""
        key = (shard, url)
        answer = self._asked.get(key)
        if answer is None:
            if deadline.passed:
                return None
            answer = Future()
            with deadline.scope():
                await anyio.to_thread.run_sync(_ask, url, answer, abandon_on_cancel=True)
            if not (answer.running() or answer.done()):
                return None  # the deadline came before a thread took it: asked next tick
        if not answer.done():
            self._asked[key] = answer
            return None
        self._asked.pop(key, None)
        return answer.result()

    async def settle(
        self, tracked: Mapping[str, Tracked], now: float, grace_s: float, deadline: Deadline
    ) -> None:
        """Mark ready each running shard that is: its health URL answered by `deadline` (a
        URL that has not leaves it not ready this tick), or, with none, its process has run
        `grace_s` by `now` (the clock's)."""
        self.keep_only(set(tracked))
        for sid, t in tracked.items():
            if t.ready or t.pid is None:
                continue
            # The start time the OS keeps: a restarted worker, or a one-off
            # `placewatch sample`, judges a long-running shard at once.
            graced = t.create_time is not None and now - t.create_time >= grace_s
            url = t.placement.spec.health_url
            if not url:
                t.ready = graced
                continue
            answer = await self.ask(sid, url, deadline)
            if answer is None:
                continue
            # Discovery only guesses a health URL from the command line: one that
            # nothing answers on is a wrong guess, and the grace period decides.
            guessed = t.placement.origin == "discovered"
            t.ready = answer == "ok" or (guessed and answer == "unreachable" and graced)

    def keep_only(self, shards: set[str]) -> None:
        """Forget the checks of shards no longer watched (a thread still running ends on
        its own; its answer goes nowhere)."""
        for key in [k for k in self._asked if k[0] not in shards]:
            del self._asked[key]
