"""The statuses a shard pass publishes: a judged shard's, and a shard no longer watched.

Shard and pod names, reasons and evidence lines are text a local user can put control
characters in: an engine's command line names a discovered shard, its log gives the
evidence, a placement names the rest. They leave the node printable (schemas/printable.py:
each control character and bidirectional mark as its escape), so that no terminal, log or
alert that shows a status is driven by them.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

import msgspec

from placewatch.schemas import ComputeStatus, GpuHealth, SourceStatus
from placewatch.schemas.printable import printable

from .activity import Activity
from .discovered import handed_over
from .gpu_health import unhealthy, with_health
from .liveness import Tracked
from .served import for_others, placed_endpoint
from .verdict import Judgement


def judged_status(
    sid: str,
    t: Tracked,
    j: Judgement,
    *,
    node: str,
    session: str,
    now: datetime,
    activity: Activity | None,
    gpu_health: dict[int, GpuHealth],
    address: str,
) -> ComputeStatus:
    """Shard `sid`'s status, as `j` judged it this tick; `address`: the node's, for others
    (served.py)."""
    sick = unhealthy(j.devices, gpu_health)
    reason = with_health(j.reason, sick, gpu_health) if sick else j.reason
    c = t.container
    return ComputeStatus(
        node=node,
        shard=printable(sid),
        session=session,
        time=now,
        pid=t.pid if t.pid is not None else t.placement.spec.pid,
        placed_gpus=list(t.placement.spec.gpus),
        backend=j.backend,
        devices=list(j.devices),
        layers_offloaded=j.layers_offloaded,
        layers_total=j.layers_total,
        verdict=j.verdict,
        reason=printable(reason),
        evidence=[printable(line) for line in j.evidence],
        stale=j.stale,
        stale_since=j.stale_since,
        container_id=c.container_id,
        pod_uid=c.pod_uid,
        pod_namespace=_printable(c.namespace),
        pod_name=_printable(c.pod),
        container_name=_printable(c.name),
        sm_pct=activity.sm_pct if activity else None,
        requests=activity.requests if activity else None,
        unhealthy_gpus=sick,
        engine=t.placement.spec.engine,
        endpoint=for_others(placed_endpoint(t.placement.spec), address),
    )


def gone_status(
    gone: Tracked,
    *,
    node: str,
    session: str,
    now: datetime,
    tracked: Mapping[str, Tracked],
    address: str,
) -> ComputeStatus:
    """The last status of a shard no longer placed or found (a discovered one's process may
    be watched on by a placement among `tracked`), at the endpoint it served on. A discovered
    shard whose process exited says so as a judged one does, and keeps what its engine said
    while it ran as its evidence, whichever of the tick or discovery's walk saw it first."""
    placement = gone.placement
    pid = placement.spec.pid
    reason = "no longer watched: its placement was removed"
    evidence: list[str] = []
    if placement.origin == "discovered":
        other = handed_over(tracked, pid)
        if other is not None:
            reason = f"no longer watched: {other}"
        else:
            reason = f"pid {pid} is not running; nothing computes for this shard"
            evidence = list(gone.judged[2].evidence) if gone.judged is not None else []
    return ComputeStatus(
        node=node,
        shard=printable(placement.spec.id),
        session=session,
        time=now,
        pid=pid,
        placed_gpus=list(placement.spec.gpus),
        verdict="gone",
        reason=printable(reason),
        evidence=[printable(line) for line in evidence],
        engine=placement.spec.engine,
        endpoint=for_others(placed_endpoint(placement.spec), address),
    )


def printable_problem(problem: SourceStatus) -> SourceStatus:
    """A problem of the placements, which names shards and quotes their values, printable."""
    if problem.error is None:
        return problem
    return msgspec.structs.replace(problem, error=printable(problem.error))


def _printable(text: str | None) -> str | None:
    return None if text is None else printable(text)
