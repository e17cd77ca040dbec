"""Whether each engine's log is its own: two live engines appending to one file interleave
their lines, so the worker reads both as `unknown` (liveness.shared_logs); doctor says so
before a status does."""

from __future__ import annotations

from collections.abc import Sequence

from ..shards.discover import Discovered
from ..shards.discovered import placement_of
from ..shards.liveness import Tracked, shared_logs
from ..shards.placements import Placement
from .placed import Placed
from .report import Report, count

ENGINE_LOGS = "engine logs"


def check_logs(found: Sequence[Discovered], placed: Sequence[Placed], report: Report) -> None:
    tracked = {p.spec.id: Tracked(Placement(p.spec, "file"), pid=p.pid) for p in placed if p.pid}
    tracked |= {d.spec.id: Tracked(placement_of(d), pid=d.spec.pid) for d in found}
    logs = {t.placement.spec.log_path for t in tracked.values() if t.placement.spec.log_path}
    if not logs:
        report.skip(ENGINE_LOGS, "no engine's log is followed (none found or named)")
        return
    said = shared_logs(tracked, {})
    if said:
        for sid, why in sorted(said.items()):
            report.fail(ENGINE_LOGS, f"{sid}: {why.split('; give each')[0]}", GIVE_EACH)
        return
    report.ok(ENGINE_LOGS, f"{count(len(logs), 'log')} followed, each written by one engine")


GIVE_EACH = "give each engine its own log (llama.cpp: -lv 4 with --log-file)"
