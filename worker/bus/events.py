"""Which compute statuses and fallback events a tick produces.

A shard's status is published when it is first known in this worker session
(`starting` may come first) and whenever its verdict, backend, device set,
layer counts, process or container change (a shard restarted in a new
container under the same verdict is news to whoever routes to it), a GPU it
holds memory on turns unhealthy or healthy again, or its verdict turns stale
(its evidence lost) or fresh again; never for memory jitter, nor
for a problem's count rising on a GPU already unhealthy. A fallback fires on entering
`partial`, `cpu_fallback` or `misplaced` and resolves on leaving it, `gone`
included. Message ids are the node, shard, session and the shard's status
number, so a retried publish is stored once, and a restarted worker (a new
session) reports every shard once again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import msgspec

from placewatch.schemas import FALLBACK_VERDICTS, ComputeStatus, FallbackEvent, subjects
from placewatch.schemas.messages import FallbackState


@dataclass(frozen=True)
class Outgoing:
    subject: str
    message: ComputeStatus | FallbackEvent
    msg_id: str
    kv_key: str | None = None
    """Also stored in the compute bucket under this key (a ComputeStatus)."""


def signature(status: ComputeStatus) -> tuple[object, ...]:
    return (
        status.verdict,
        status.backend,
        tuple(sorted(d.index for d in status.devices)),
        status.layers_offloaded,
        status.layers_total,
        status.pid,
        status.container_id,
        tuple(status.unhealthy_gpus),
        status.stale,
    )


class EventTracker:
    def __init__(self, node: str, session: str, prefix: str = subjects.DEFAULT_PREFIX) -> None:
        self.node = node
        self.session = session
        self.prefix = prefix
        self._last: dict[str, tuple[object, ...]] = {}
        self._numbers: dict[str, int] = {}
        self._firing: set[str] = set()
        self._seeded: dict[str, ComputeStatus] = {}

    def seed(self, previous: Sequence[ComputeStatus]) -> None:
        """What an earlier session last said (the compute bucket): a fallback it left firing
        is resolved by this session once the shard is judged again, or found no more."""
        for status in previous:
            if status.verdict in FALLBACK_VERDICTS:
                self._firing.add(status.shard)
                self._seeded[status.shard] = status

    def forget(self, previous: Sequence[ComputeStatus], reason: str) -> list[Outgoing]:
        """Every shard of `previous` (what the node's sessions left in the compute bucket)
        `gone` for `reason`, and each fallback it left firing resolved: said for a node whose
        worker will not say it (`placewatch forget`). A shard already `gone` is left be."""
        gone = [self._gone(s, reason) for s in previous if s.verdict != "gone"]
        self.seed(previous)
        self._seeded.clear()
        return self.changes([], gone)

    def changes(
        self, statuses: Sequence[ComputeStatus], gone: Sequence[ComputeStatus] = ()
    ) -> list[Outgoing]:
        out: list[Outgoing] = []
        for status in statuses:
            out += self._observe(status)
        seen = {s.shard for s in statuses}
        leftover = [s for shard, s in self._seeded.items() if shard not in seen]
        self._seeded.clear()
        gone = [
            *gone,
            *(
                self._gone(s, "no longer placed or found since the worker restarted")
                for s in leftover
            ),
        ]
        for status in gone:
            out += self._observe(status)
            self._last.pop(status.shard, None)  # a shard placed again later starts afresh
        return out

    def _gone(self, status: ComputeStatus, reason: str) -> ComputeStatus:
        """`status`, said again by this session: its shard is gone, for `reason`."""
        return msgspec.structs.replace(
            status,
            session=self.session,
            time=datetime.now(UTC),
            verdict="gone",
            devices=[],
            reason=reason,
        )

    def again(self, status: ComputeStatus, *, fire: bool) -> list[Outgoing]:
        """`status` said again under a new number of this session, and with `fire` its
        fallback's firing event before it: what a store that appeared lacks (restore.py)."""
        base = self._next(status.shard)
        fired = [self._fallback("firing", status, base)] if fire else []
        return [*fired, self._status(status, base)]

    def _next(self, shard: str) -> str:
        """The base of the ids of the shard's next status and event."""
        number = self._numbers.get(shard, 0) + 1
        self._numbers[shard] = number
        return f"{subjects.token(self.node)}.{subjects.token(shard)}.{self.session}.{number}"

    def _status(self, status: ComputeStatus, base: str) -> Outgoing:
        return Outgoing(
            subjects.compute(self.node, status.shard, self.prefix),
            status,
            base,
            subjects.shard_key(self.node, status.shard),
        )

    def _observe(self, status: ComputeStatus) -> list[Outgoing]:
        shard = status.shard
        sig = signature(status)
        if self._last.get(shard) == sig:
            return []
        self._last[shard] = sig
        base = self._next(shard)
        # A fallback event goes out before the status, whose copy in the compute bucket is
        # what a restarted worker believes it last said: stopped between the two, it says
        # the event again rather than never.
        out = []
        falling = status.verdict in FALLBACK_VERDICTS
        if falling and shard not in self._firing:
            self._firing.add(shard)
            out.append(self._fallback("firing", status, base))
        elif not falling and shard in self._firing:
            self._firing.discard(shard)
            out.append(self._fallback("resolved", status, base))
        out.append(self._status(status, base))
        return out

    def _fallback(self, state: FallbackState, status: ComputeStatus, base: str) -> Outgoing:
        event = FallbackEvent(state=state, status=status)
        return Outgoing(
            subjects.fallback(self.node, status.shard, self.prefix), event, f"{base}.{state}"
        )

    def firing(self) -> set[str]:
        return set(self._firing)
