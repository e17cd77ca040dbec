"""An engine's output read line by line into its evidence: which engine's reader each line
goes to, and which finding lines are kept to show a person.

A line that says nothing leaves the evidence unchanged. Lines are matched after a cheap
keyword test, with precompiled patterns, because this runs on every new line of every
followed log.
"""

from __future__ import annotations

from .. import ENGINES
from .clean import clean_line
from .lives import Lives
from .rules import cut_line
from .state import EngineEvidence, EvidenceState

MAX_LINES = 20
"""Finding lines kept in the evidence, newest last."""
_SCAN_CHARS = 16_384
"""Only this much of a line is searched: vLLM's config line is about 3 KB."""

_KEYWORDS = tuple(dict.fromkeys(k for e in ENGINES for k in e.log().keywords))
"""Every line any engine's reader takes holds one of these, lowercased."""


def read_line(ev: EvidenceState, line: str, low: str | None = None) -> bool:
    """Update `ev` from one line of an engine's output (`low`: the line lowercased, where the
    caller has it). False when the line was passed over unread (no keyword in it, or nothing
    left once cleaned), so `ev` is unchanged. Never raises."""
    if len(line) > _SCAN_CHARS:
        line, low = line[:_SCAN_CHARS], None
    low = line.lower() if low is None else low
    if not any(k in low for k in _KEYWORDS):
        return False
    text = clean_line(line)
    if not text:
        return False
    engine, found = _read_in_its_format(ev, line, text, low)
    if found and engine is not None:
        if engine in _HOSTS or ev.engine is None:
            ev.engine = engine
        _remember(ev, text)
    return True


_LOGS = [e.log() for e in ENGINES]
_HOSTS = frozenset(e.name for e in ENGINES if e.hosts_other_engines)
"""The engines whose log carries others' lines: their own finding names the log's engine."""


def _read_in_its_format(
    ev: EvidenceState, line: str, text: str, low: str
) -> tuple[str | None, bool]:
    """The line read by the reader its format calls for (registry.py's order; the last
    reads every line no other claims): the engine that said it, and whether it is a
    finding."""
    for log in _LOGS:
        found = log.read(ev, line, text, low)
        if found is not None:
            return found
    return None, False


def _remember(ev: EvidenceState, text: str) -> None:
    """A finding line, cut, kept newest last; one that only brings the line before it up to
    date (an engine's `replaces`) takes its place."""
    line = cut_line(text)
    if ev.lines and any(log.replaces(line, ev.lines[-1]) for log in _LOGS):
        ev.lines[-1] = line
        return
    ev.lines.append(line)
    del ev.lines[:-MAX_LINES]


class EvidenceReader:
    """The evidence of one engine's output, read line by line, of the process life that wrote
    it last (lives.py); `snapshot()` is what it says so far, a value no later line changes."""

    def __init__(self) -> None:
        self._state = EvidenceState()
        self._snapshot: EngineEvidence | None = None
        self.lives = Lives()

    def read(self, line: str) -> None:
        line = line[:_SCAN_CHARS]
        low = line.lower()
        replay = self.lives.see(line, low)
        if replay is not None:
            self.new_life()
            for said in replay:
                read_line(self._state, said)
        elif read_line(self._state, line, low):
            self._snapshot = None
            self.lives.settled()

    def new_life(self) -> None:
        """Another process writes from here on: what was read so far is not its evidence."""
        self._state, self._snapshot = EvidenceState(), None

    def snapshot(self) -> EngineEvidence:
        """The evidence so far; the same value until a line that may change it is read."""
        if self._snapshot is None:
            self._snapshot = self._state.freeze()
        return self._snapshot


def read_text(text: str) -> EngineEvidence:
    """The evidence of a whole log, read from a fresh start."""
    reader = EvidenceReader()
    for line in text.splitlines():
        reader.read(line)
    return reader.snapshot()
