"""Lost evidence holds a verdict: a fallback resolves only on evidence.

Evidence ends a fallback: the shard seen computing where it was placed, its process gone, or
no longer placed. Losing it does not: the GPU tools that stop answering (a driver stuck after
an Xid), an engine's log truncated or deleted, an error checking the shard. Read as `unknown`,
such a tick resolved every live alert, and the alert fired again when the evidence came back.
So a verdict that evidence gave a shard's process stands while the evidence is lost, marked
stale since the evidence was last had (ComputeStatus.stale, .stale_since), for as long as it
stays lost (docs/shards.md, Lost evidence).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from ..engines.evidence import EngineEvidence
from ..engines.evidence.state import WRITES_DELETED
from .liveness import Tracked
from .verdict import Judgement

MIB = 1 << 20
HELD = frozenset({"gpu", "partial", "cpu_fallback", "misplaced", "cpu"})
"""The verdicts that evidence gave and that a shard keeps, marked stale, while the evidence
is lost."""


def held(
    t: Tracked, judged: Judgement, gpus_known: bool, now: datetime, late_s: float = 0.0
) -> Judgement:
    """The verdict to give: `judged`, unless it is `unknown` for want of evidence (the GPU
    tools silent, a log gone, an error) where evidence judged this same process before.
    That verdict then stands, marked stale since the last evidence, for as long as the
    evidence stays lost: only evidence ends a fallback (the shard seen computing where it
    was placed, its process gone, or no longer placed; docs/shards.md, Lost evidence).

    GPU readings missed for no longer than `late_s` are late, not lost: a tool that answers
    after a tick's deadline serves the next tick (worker/gpu/reads.py), and a node whose
    nvidia-smi takes a second to start would otherwise mark every verdict stale, and fresh
    again, each time it lists its processes. Until then the verdict stands as it was."""
    known = t.known if t.known is not None and t.known[2] == t.pid else None
    if judged.verdict == "unknown":
        if known is None:
            return judged
        last, since, _ = known
        if not gpus_known and (now - since).total_seconds() <= late_s:
            return last
        lost = "the GPU tools have not answered" if not gpus_known else judged.reason
        return replace(
            last,
            reason=f"{last.reason} (stale since {since:%Y-%m-%dT%H:%M:%SZ}: {lost}; the "
            "verdict stands until evidence says otherwise)",
            stale=True,
            stale_since=since,
        )
    if gpus_known:
        if judged.verdict in HELD:
            t.known = (judged, now, t.pid)
        return judged
    if known is None:
        return judged
    # The engine's own word decides, fresh; what only the GPU tools tell (the memory its
    # processes hold, whose GPUs those are) stands as they last told it, rather than a
    # status for every failed read.
    last = known[0]
    backend = last.backend if judged.backend == "unknown" else judged.backend
    return replace(judged, devices=last.devices, backend=backend)


def rotated(judged: Judgement, evidence: EngineEvidence | None) -> Judgement:
    """A verdict read from a log truncated, rotated or removed under the same process: it
    stands, stale since then, until the engine says more (or starts again); the reason says
    which, a log deleted while its process writes to it by its path."""
    since = evidence.stale_since if evidence is not None else None
    if evidence is None or since is None or judged.stale or judged.verdict not in HELD:
        return judged
    lost = (
        "its log was truncated or rotated under it; the verdict stands until its engine says "
        "otherwise"
        if evidence.deleted is None
        else f"its log {evidence.deleted} {WRITES_DELETED}; the verdict stands until its "
        "engine starts again or exits"
    )
    return replace(
        judged,
        reason=f"{judged.reason} (stale since {since:%Y-%m-%dT%H:%M:%SZ}: {lost})",
        stale=True,
        stale_since=since,
    )


def log_note(
    judged: Judgement, evidence: EngineEvidence | None, unlogged: str | None = None
) -> Judgement:
    """The verdict, saying so where its engine's log is not read (and why: source.py) or is
    read behind what it holds (follow.py's budget), or where it has none, as `unlogged` says
    (a pipe: discover/log_path.py): the verdict is then of less than the engine said."""
    if evidence is None:
        if unlogged is not None:
            return replace(judged, reason=f"{judged.reason}; it has no log: {unlogged}")
        return judged
    if evidence.unread is not None:
        return replace(judged, reason=f"{judged.reason}; its log is not read: {evidence.unread}")
    behind = evidence.behind_bytes
    if behind:
        return replace(
            judged,
            reason=f"{judged.reason}; its evidence is behind: its log holds {behind / MIB:.1f} "
            "MiB not read yet (it grows faster than it is read: it is read on at each tick)",
        )
    return judged
