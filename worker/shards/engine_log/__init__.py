"""Where an engine says it computes, read from its own output (see parse.py for what each
engine prints), and its log file followed as it grows (tail.py)."""

from .evidence import EngineBackend, EngineEvidence
from .parse import EvidenceReader, read_line, read_text
from .tail import LogTail

__all__ = ["EngineBackend", "EngineEvidence", "EvidenceReader", "LogTail", "read_line", "read_text"]
