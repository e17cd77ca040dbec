"""Where one process life of an engine starts in its log.

A log is often appended to by one run of the engine after another (`llama-server ... >> s.log
2>&1`, a service restarted into its file, a worker that starts after several restarts).
What an earlier run said is not what the running one says: a CPU build's "no usable GPU
found" followed by a GPU build's full offload is a GPU shard. So the evidence starts afresh
at each startup banner, the line an engine prints once per start (its folder's log
module names it, and the lines it may print before it: llama.cpp's argument warnings and GPU
backends' init, printed before `llama_server: initializing`; vLLM's platform detection).
Such lines read since the last finding of another kind are read again into the life the
banner starts. A log first followed when it is already large is read from its newest banner
(`newest_life`), found in its last bytes.
"""

from __future__ import annotations

from typing import Literal

from .. import ENGINES
from .clean import clean_line

LifeLine = Literal["banner", "before"]
MAX_BEFORE = 256
"""The most lines kept from before a banner (a node of 16 GPUs prints two a GPU)."""
BEFORE_CHARS = 2048
"""The most of each such line kept: the lines that come before a banner are short (a GPU's
init, an argument's warning), and a log may make every line one."""
BEFORE_BYTES = 64 << 10
"""How far before the newest banner a log read from its end is read: the lines that may come
before a banner are read with it, and those of the last life before it are dropped by it."""
MAX_CANDIDATES = 4096
"""The most lines holding a banner's word that `newest_life` looks at: a log may hold
"build" in every line, and each look runs the banners' patterns."""
_SCAN_CHARS = 16_384

_LOGS = [e.log() for e in ENGINES]
_BANNER_WORDS = tuple(sorted({w for log in _LOGS for w in log.words[0]}))
_BEFORE_WORDS = tuple(sorted({w for log in _LOGS for w in log.words[1]}))
_BANNER_BYTES = tuple(w.encode() for w in _BANNER_WORDS)


def life_line(line: str, low: str) -> LifeLine | None:
    """Whether a raw line starts a process life ("banner"), may come just before the banner
    of one ("before"), or neither. `low` is the line lowercased."""
    if any(w in low for w in _BANNER_WORDS) and any(g.banner.search(line) for g in _LOGS):
        return "banner"
    return "before" if _before(line, low) else None


def _before(line: str, low: str) -> bool:
    if any(w in low for w in _BEFORE_WORDS):
        text = clean_line(line)
        return any(g.before is not None and g.before.match(text) for g in _LOGS)
    return False


def newest_life(window: bytes) -> int | None:
    """Where to start reading a log's last bytes so that its newest process life is read
    whole: the first line that starts at most BEFORE_BYTES before its newest banner; None
    when they hold no banner (or none within MAX_CANDIDATES lines holding a banner's word)."""
    low = window.lower()
    last = {w: low.rfind(w) for w in _BANNER_BYTES}
    for _ in range(MAX_CANDIDATES):
        at = max(last.values())
        if at < 0:
            return None
        first = low.rfind(b"\n", 0, at) + 1
        end = low.find(b"\n", at)
        line = window[first : end if end >= 0 else len(window)][:_SCAN_CHARS]
        text = line.decode("utf-8", "replace")
        if life_line(text, text.lower()) == "banner":
            return 0 if first == 0 else low.find(b"\n", max(first - BEFORE_BYTES, 0), first) + 1
        for word, found in last.items():
            if found >= first:  # each word's looks back cover the window once in all
                last[word] = low.rfind(word, 0, first)
    return None


class Lives:
    """Tells where each process life starts in a log read line by line.

    `see(line, low)` returns the lines to read into a fresh evidence when `line` starts a
    life (the lines before its banner, then the banner), else None; `settled()` says a line
    of another kind was a finding, which ends the lines kept; `starts` counts the banners
    seen."""

    def __init__(self) -> None:
        self.starts = 0
        self._before: list[str] = []
        self._kept = False

    def see(self, line: str, low: str) -> list[str] | None:
        found = life_line(line, low)
        if found == "banner":
            replay, self._before = [*self._before, line], []
            self.starts += 1
            if _before(line, low):  # Ollama's start of a llama-server, whose own banner follows
                self._before.append(line)
                self._kept = True
            return replay
        if found == "before":
            self._before.append(line[:BEFORE_CHARS])
            del self._before[:-MAX_BEFORE]
            self._kept = True
        else:
            self._kept = False
        return None

    def new_file(self) -> None:
        """The log was truncated or replaced: what was kept was the last file's."""
        self._before.clear()

    def settled(self) -> None:
        """The line just seen was a finding; unless it may come before a banner, what was
        kept belongs to the life it is part of."""
        if not self._kept:
            self._before.clear()
