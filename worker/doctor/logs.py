"""Whether each engine's log is its own and may be read: two live engines appending to one
file interleave their lines, so the worker reads both as `unknown` (liveness.shared_logs);
and a log that is not the file its engine writes, or that the engine's user could not read
(a named pipe, a link, another user's file: engines/evidence/source.py), is not read; nor is
a log deleted while its engine writes to it, the output of an engine that goes to a pipe
(discover/log_path.py), or the journal of a service that journalctl cannot read here
(engines/evidence/journal/). Doctor says so before a status does."""

from __future__ import annotations

import os
from collections.abc import Sequence

from ..engines.evidence.journal import Journal, JournalTail
from ..engines.evidence.source import Deleted, Gone, JournalLog, LogSource, Refused
from ..shards.discover import Discovered
from ..shards.discover.log_path import log_source
from ..shards.discovered import placement_of
from ..shards.liveness import Tracked, shared_logs
from ..shards.placements import Placement
from .placed import Placed
from .report import Report, count

ENGINE_LOGS = "engine logs"
GIVE_EACH = "give each engine its own log (llama.cpp: -lv 4 with --log-file)"
READ_JOURNAL = "let the worker read the journal (docs/shards.md: engines run as systemd services)"
GIVE_OWN = (
    "name the file the engine itself writes, as its own user may read it (docs/shards.md); "
    "or leave log_path out"
)
WRITE_AGAIN = "restart the engine with a log file that stays; until then its verdict stands, stale"


def check_logs(
    found: Sequence[Discovered],
    placed: Sequence[Placed],
    report: Report,
    journal: Journal | None = None,
) -> None:
    """Whether each engine's log is its own and may be read; `journal`: where a service's
    output is read (the node's journal unless told)."""
    journal = Journal.at() if journal is None else journal
    tracked = {p.spec.id: Tracked(Placement(p.spec, "file"), pid=p.pid) for p in placed if p.pid}
    tracked |= {d.spec.id: Tracked(placement_of(d), pid=d.spec.pid) for d in found}
    logs = {t.placement.spec.log_path for t in tracked.values() if t.placement.spec.log_path}
    piped = {d.spec.id: d.unlogged for d in found if d.unlogged}
    if not logs and not piped:
        report.skip(ENGINE_LOGS, "no engine's log is followed (none found or named)")
        return
    said = shared_logs(tracked, {})
    refused = _refused(tracked, journal)
    for sid, why in sorted(said.items()):
        report.fail(ENGINE_LOGS, f"{sid}: {why.split('; give each')[0]}", GIVE_EACH)
    for sid, (why, fix) in sorted(refused.items()):
        report.fail(ENGINE_LOGS, f"{sid}: its log is not read: {why}", fix)
    for sid, why in sorted(piped.items()):
        head, _, fix = why.partition("; send it")
        report.fail(ENGINE_LOGS, f"{sid}: it has no log: {head}", f"send it{fix}")
    if not said and not refused and not piped:
        report.ok(ENGINE_LOGS, f"{count(len(logs), 'log')} followed, each written by one engine")


def _refused(tracked: dict[str, Tracked], journal: Journal) -> dict[str, tuple[str, str]]:
    """Each shard whose log the worker would not read -> why (source.py's or journal/'s
    words), and what to do."""
    found = {}
    for sid, t in tracked.items():
        path = t.placement.spec.log_path
        if not path:
            continue
        source = log_source(path, t.placement.log, t.pid)
        if isinstance(source, JournalLog):
            why = _journal_refused(source, journal)
            if why is not None:
                found[sid] = (why, READ_JOURNAL)
        elif (said := _file(source, path)) is not None:
            found[sid] = said
    return found


def _file(source: LogSource, path: str) -> tuple[str, str] | None:
    """Why the file is not read, and what to do; None where it is."""
    if isinstance(source, JournalLog):
        return None
    try:
        fd, _ = source.open()
    except Refused as why:
        return str(why), GIVE_OWN
    except Deleted:
        return f"{path} was deleted while its process writes to it", WRITE_AGAIN
    except (Gone, OSError):
        return None  # not written yet, or its process exited: nothing wrong with it
    os.close(fd)
    return None


def _journal_refused(source: JournalLog, journal: Journal) -> str | None:
    """Why the unit's entries are not read, as the worker would find it: one bounded run of
    journalctl, as the worker's own read."""
    tail = JournalTail(source, journal)
    tail.poll()
    return tail.refused
