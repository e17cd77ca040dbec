"""Where an engine says it computes, read from its own output, and its log file followed as
it grows (tail.py) by one task for every shard (follow.py).

What each engine prints and why it is read as it is lives in its folder
(worker/engines/<name>/log.py). Here is what every engine shares: unwrap.py takes lines out of
the files that wrap them (CRI, Docker, JSONL), lives.py tells one process life from the next,
clean.py takes off what is put before a line, rules.py weighs one line's finding against the
lines before it, read.py sends each line to its engine's reader, state.py holds the
value the tick gets, and serving.py the requests each engine's lines show running.

The readers are imported from read.py where they are used: their patterns take as long to
compile as the rest of a node without engine logs takes to import.
"""

from .state import EngineBackend, EngineEvidence
from .tail import LogTail

__all__ = ["EngineBackend", "EngineEvidence", "LogTail"]
