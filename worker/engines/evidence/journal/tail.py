"""Following one systemd unit's journal entries as the journal grows, as LogTail follows a file.

Each poll runs journalctl once, bounded (run.py), for the unit's entries after the cursor of
the last one read (`--after-cursor`), and hands on their MESSAGEs as lines. Nothing is run
while the journal's files are as they were at the last run (folders.py lists them), nor more
often than once every `Journal.gap_s` unless a read left entries behind: journald writes the
files for every unit on the node, and a run costs a process's start.

A first read starts at the process's start (JournalLog.since) and takes at most FIRST_ENTRIES
of the newest entries, as a file's first read takes its newest life in its last bytes.

The rules are a file's (follow.py applies them): journald's own rotation archives a file and
keeps its entries, so reading goes on at the cursor; when the entry at the cursor is gone
(vacuumed, or its file deleted), what was read is no longer said, and `generation` counts one,
as a truncated or replaced file does; reading goes on from the time the cursor names. That is
looked at only when a file read before is no longer listed: then journalctl is asked for the
entry at the cursor (`--cursor`), whose first line is that cursor while the entry is kept.
"""

from __future__ import annotations

import time

from ..source import JournalLog
from .export import Entry, parse
from .folders import GROUP_ADVICE, Journal, Listing
from .run import Run, run
from .units import valid_unit

CHUNK = 64 << 10
EXPORT_FACTOR = 4
"""A poll's cap on journalctl's output, in what a file's poll reads: the export format adds
some 250 bytes of cursor, times and boot id to each entry, a llama.cpp line being about 100."""
FIRST_ENTRIES = 20_000
"""The most entries a first read takes, the newest: some 4 MiB of engine lines, as a file's."""
MIN_S = 0.25
"""The least time a run is given, even past the tick's deadline: journalctl starts in tens of
milliseconds on an idle node."""
MAX_S = 1.0
"""The most time a run is given."""
CHECK_BYTES = 1024
"""What is read of journalctl's output to see the cursor of the entry at the cursor."""


class JournalTail:
    """The entries one unit adds to the journal, as lines. `generation` counts the times what
    was read was lost (vacuumed); `refused` says why the journal is not read, `behind` that a
    read stopped at its cap or its time with more to come."""

    def __init__(self, source: JournalLog, journal: Journal, *, max_line: int = 64 << 10) -> None:
        self.source = source
        self.journal = journal
        self.max_line = max_line
        self.generation = 0
        self.refused: str | None = None
        self.behind = 0
        self.last_read = 0
        self.offset = 0
        """The bytes of journalctl's output read so far."""
        self._cursor: str | None = None
        self._resume: str | None = None
        """Where to read from once the cursor's entry was lost (`--since`), or None."""
        self._seen: Listing | None = None
        self._next_at = 0.0

    @property
    def path(self) -> str:
        return self.source.path

    def poll(self, limit: int = CHUNK, stop_at: float | None = None) -> list[str]:
        """The lines of the entries added since the last poll (journalctl's output of them at
        most EXPORT_FACTOR x `limit`), run for no longer than until `stop_at`
        (time.monotonic()) but at least MIN_S. Blocking."""
        self.last_read = 0
        now = time.monotonic()
        if not self.behind and now < self._next_at:
            return []  # at most one look a gap, unless entries were left behind
        listing = self._listing()
        if listing is None:
            self._next_at = now + self.journal.gap_s
            return []
        if not self.behind and self.refused is None and listing == self._seen:
            return []  # the files are as they were when last read
        timeout = MAX_S if stop_at is None else min(MAX_S, max(stop_at - now, MIN_S))
        if self._lost(listing, timeout):
            # journalctl seeks a cursor whose entry is gone to no set place (systemd 252 may
            # skip what follows it): reading goes on from the time the cursor names.
            self.generation += 1
            self._cursor, self._resume = None, _after(self._cursor)
        done = run(
            self._args(listing, self._position()), cap=limit * EXPORT_FACTOR, timeout_s=timeout
        )
        self._next_at = now + self.journal.gap_s
        if done.returncode not in (0, None):
            if b"No such file" not in done.error:  # else a file vacuumed since the listing
                self.refused = _failed(done)
            return []
        self.refused, self._seen = None, listing
        read = self._lines(done)
        if done.stopped and not self.last_read:  # its time ran out before one entry
            self.refused = f"journalctl read no entry of the journal within {timeout:.2f} s"
        return read

    def _listing(self) -> Listing | None:
        """The journal's files; None, with `refused` saying why, where none can be read."""
        if not valid_unit(self.source.unit):
            self.refused = f"{self.path} does not name a systemd unit, so it is not read"
            return None
        if self.source.refused is not None:
            self.refused = self.source.refused
            return None
        listing = self.journal.listing()
        self.refused = listing.problem if listing.problem is not None else self.refused
        return None if listing.problem is not None else listing

    def _lost(self, listing: Listing, timeout: float) -> bool:
        """Whether the entry at the cursor is gone: asked only when a file read before is."""
        if self._cursor is None or self._seen is None or self._seen.inodes <= listing.inodes:
            return False
        check = run(
            self._args(listing, [f"--cursor={self._cursor}"]), cap=CHECK_BYTES, timeout_s=timeout
        )
        if check.returncode not in (0, None):
            return False  # cannot tell: the next look asks again
        return check.out.partition(b"\n")[0] != f"__CURSOR={self._cursor}".encode()

    def _position(self) -> list[str]:
        if self._cursor is not None:
            return [f"--after-cursor={self._cursor}"]
        if self._resume is not None:
            return [f"--since={self._resume}"]
        since = self.source.since
        start = [f"--since=@{int(since) - 1}"] if since is not None else []
        return [*start, f"--lines={FIRST_ENTRIES}"]

    def _args(self, listing: Listing, position: list[str]) -> list[str]:
        assert self.journal.journalctl is not None
        files = [f"--file={f[0]}" for f in listing.files]
        return [
            self.journal.journalctl,
            "--no-pager",
            "--quiet",
            "--output=export",
            "--output-fields=MESSAGE",
            *files,
            *position,
            f"_SYSTEMD_UNIT={self.source.unit}",
        ]

    def _lines(self, done: Run) -> list[str]:
        parsed = parse(done.out, self.max_line)
        entries, used = parsed.entries, parsed.used
        if done.stopped and not entries and parsed.partial is not None:
            entries, used = [parsed.partial], len(done.out)  # one entry longer than the cap
        # Left behind: what it wrote past the last whole entry, or more. Where it wrote no
        # whole entry, nothing is known to be left: the next look runs it again (a read that
        # reads nothing must not be asked for more at once).
        self.behind = max(len(done.out) - used, 1) if done.stopped and used else 0
        self.offset += used
        self.last_read = used
        if entries:
            self._cursor, self._resume = entries[-1].cursor, None
        return [line for e in entries for line in self._split(e)]

    def _split(self, entry: Entry) -> list[str]:
        if not entry.message:
            return []
        return [
            p[: self.max_line].decode("utf-8", "replace").rstrip("\r")
            for p in entry.message.split(b"\n")
        ]


def _after(cursor: str | None) -> str | None:
    """Just after the time a cursor names (its `t=`, microseconds since the epoch, in hex), as
    `--since` takes it; None where it names none."""
    for part in (cursor or "").split(";"):
        if part.startswith("t="):
            try:
                return f"@{(int(part[2:], 16) + 1) / 1e6:.6f}"
            except ValueError:
                return None
    return None


def _failed(done: Run) -> str:
    """Why journalctl read nothing, in its own words (its first line, printable), and what
    to do where that is known."""
    said = done.error.decode("utf-8", "replace").strip().splitlines()
    first = "".join(c if c.isprintable() else " " for c in (said[0] if said else ""))[:200]
    if "ermission denied" in first:
        return f"journalctl may not read the journal ({first}): {GROUP_ADVICE}"
    return f"journalctl could not read the journal (exit status {done.returncode}: {first})"
