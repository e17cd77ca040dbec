"""Whether each engine's log is its own and may be read: two live engines appending to one
file interleave their lines, so the worker reads both as `unknown` (liveness.shared_logs);
and a log that is not the file its engine writes, or that the engine's user could not read
(a named pipe, a link, another user's file: engines/evidence/source.py), is not read. Doctor
says so before a status does."""

from __future__ import annotations

import os
from collections.abc import Sequence

from ..engines.evidence.source import Gone, Refused
from ..shards.discover import Discovered
from ..shards.discover.log_path import log_source
from ..shards.discovered import placement_of
from ..shards.liveness import Tracked, shared_logs
from ..shards.placements import Placement
from .placed import Placed
from .report import Report, count

ENGINE_LOGS = "engine logs"
GIVE_EACH = "give each engine its own log (llama.cpp: -lv 4 with --log-file)"
GIVE_OWN = (
    "name the file the engine itself writes, as its own user may read it (docs/shards.md); "
    "or leave log_path out"
)


def check_logs(found: Sequence[Discovered], placed: Sequence[Placed], report: Report) -> None:
    tracked = {p.spec.id: Tracked(Placement(p.spec, "file"), pid=p.pid) for p in placed if p.pid}
    tracked |= {d.spec.id: Tracked(placement_of(d), pid=d.spec.pid) for d in found}
    logs = {t.placement.spec.log_path for t in tracked.values() if t.placement.spec.log_path}
    if not logs:
        report.skip(ENGINE_LOGS, "no engine's log is followed (none found or named)")
        return
    said = shared_logs(tracked, {})
    refused = _refused(tracked)
    for sid, why in sorted(said.items()):
        report.fail(ENGINE_LOGS, f"{sid}: {why.split('; give each')[0]}", GIVE_EACH)
    for sid, why in sorted(refused.items()):
        report.fail(ENGINE_LOGS, f"{sid}: its log is not read: {why}", GIVE_OWN)
    if not said and not refused:
        report.ok(ENGINE_LOGS, f"{count(len(logs), 'log')} followed, each written by one engine")


def _refused(tracked: dict[str, Tracked]) -> dict[str, str]:
    """Each shard whose log the worker would not read -> why (source.py's words)."""
    found = {}
    for sid, t in tracked.items():
        path = t.placement.spec.log_path
        if not path:
            continue
        try:
            fd, _ = log_source(path, t.placement.log, t.pid).open()
        except Refused as why:
            found[sid] = str(why)
        except (Gone, OSError):
            continue  # not written yet, or its process exited: nothing wrong with it
        else:
            os.close(fd)
    return found
