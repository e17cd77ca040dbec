"""A placement refused still gets an answer, on its own key.

A control plane that writes a placement watches its shard's key (the compute bucket, or
its compute subject) for the verdict. The worker refuses a placement that names a process
another shard holds (one process is one shard), and one whose value is not a placement (an
entry of the shards file, a key of the placements bucket); saying so only in its log and
the telemetry's `sources` left that key silent, and the control plane waiting. So each
refused placement whose shard can be named gets a ComputeStatus under its own key, verdict
`unknown`, its reason saying why (naming the shard that holds the process), published at
the tick that refuses it, and `gone` once the placement is removed; one mended is judged,
and its verdict replaces the refusal.

Refusals are given statuses only as far as the node's MAX_SHARDS leaves room: a shards file
or bucket with thousands of bad values is told in `sources`, not in thousands of statuses.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime

from placewatch.schemas import ComputeStatus, SourceStatus, subjects
from placewatch.schemas.printable import printable

from .liveness import Tracked, named
from .placements import MAX_SHARDS, Placement, PlacementFeed, ShardsFile

log = logging.getLogger(__name__)


def at_most(placements: list[Placement]) -> tuple[list[Placement], list[SourceStatus]]:
    """The first MAX_SHARDS placements, and a problem for `sources` saying how many more
    there were (they are not watched, and get no status: the limit bounds that too)."""
    refused = len(placements) - MAX_SHARDS
    if refused <= 0:
        return placements, []
    said = (
        f"{len(placements)} shards placed or found on this node, more than the {MAX_SHARDS} "
        f"a node takes: the last {refused} are not watched (docs/shards.md); spread them "
        "over more nodes"
    )
    return placements[:MAX_SHARDS], [SourceStatus(name="placements", ok=False, error=said)]


def shared_reasons(shared: Mapping[str, str], tracked: Mapping[str, Tracked]) -> dict[str, str]:
    """Each shard refused for naming a process that another shard holds -> why, naming it."""
    reasons = {}
    for sid, holder in shared.items():
        t, first = tracked[sid], tracked[holder]
        reasons[sid] = (
            f"{named(sid, t.placement)} names process {t.pid}, which "
            f"{named(holder, first.placement)} holds: one process is one shard, so it is "
            f"refused and {holder!r} keeps it; remove one of the two placements"
        )
    return reasons


def refusals_told(
    refusals: Mapping[str, str], tracked: Mapping[str, Tracked]
) -> list[SourceStatus]:
    """A problem in `sources` for each shard refused for naming a process that another shard
    holds (`refusals`, shared_reasons'), every tick; a line in the log the first time."""
    problems = []
    for sid, said in refusals.items():
        t = tracked[sid]
        if t.said != said:
            log.warning("%s", printable(said))
            t.said = said
        problems.append(SourceStatus(name="placements", ok=False, error=said))
    return problems


def shard_of_key(node: str, key: str) -> str | None:
    """The shard a placements bucket's key of `node` names; None for a key that names none
    (more than one token after the node's, or one that is no name's token)."""
    ours, _, rest = key.partition(".")
    if ours != subjects.token(node) or not rest or "." in rest:
        return None
    try:
        return subjects.name(rest)
    except ValueError:
        return None


def refused_values(
    node: str, shards_file: ShardsFile | None, bucket: PlacementFeed | None
) -> dict[str, str]:
    """Each shard whose placement was refused for its value (the shards file's entry, the
    bucket's key) -> why; the file's first, as the file wins a shard both place."""
    reasons = dict(shards_file.refused) if shards_file is not None else {}
    for key, problem in sorted(bucket.problems.items()) if bucket is not None else ():
        shard = shard_of_key(node, key)
        if shard is not None:
            reasons.setdefault(shard, problem)
    return reasons


class RefusedValues:
    """The statuses of placements refused for their values, and `gone` for those removed."""

    def __init__(self, node: str, session: str) -> None:
        self.node = node
        self.session = session
        self.said: dict[str, ComputeStatus] = {}
        """Each shard refused at the last pass -> its status then."""

    def pass_(
        self, reasons: Mapping[str, str], watched: set[str], now: datetime
    ) -> tuple[list[ComputeStatus], list[ComputeStatus]]:
        """This pass's refusal statuses (for shards `watched` does not hold, as far as
        MAX_SHARDS leaves room), and `gone` for each refused before and neither refused nor
        watched now (a shard mended is watched: its verdict replaces the refusal)."""
        room = max(MAX_SHARDS - len(watched), 0)
        refused = [s for s in sorted(reasons) if s not in watched][:room]
        statuses = [self._status(shard, reasons[shard], now) for shard in refused]
        gone = [
            self._gone(status, now)
            for shard, status in self.said.items()
            if shard not in reasons and shard not in watched
        ]
        self.said = {s.shard: s for s in statuses}
        return statuses, gone

    def _status(self, shard: str, reason: str, now: datetime) -> ComputeStatus:
        return ComputeStatus(
            node=self.node,
            shard=printable(shard),
            session=self.session,
            time=now,
            verdict="unknown",
            reason=printable(f"placement refused: {reason}"),
        )

    def _gone(self, status: ComputeStatus, now: datetime) -> ComputeStatus:
        return ComputeStatus(
            node=self.node,
            shard=status.shard,
            session=self.session,
            time=now,
            verdict="gone",
            reason="no longer watched: its refused placement was removed",
        )
