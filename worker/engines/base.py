"""What an engine folder gives: the `Engine` protocol, and the values it works with.

An engine says how to recognise its process and arguments (`launch`), which GPUs its flags
pick (`gpus`) and which of its flags keep it on the CPU (`cpu_flag`), where its output goes
first (`outputs`), and what its log lines mean (`log()`, imported when a log is first read:
the patterns take as long to compile as the rest of a node's start).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from .flags import Dialect

if TYPE_CHECKING:
    from .evidence.state import EvidenceState
    from .visible import Visible

STDOUT, STDERR = 1, 2


@dataclass(frozen=True)
class Launch:
    """What the command line alone says: which engine, and its own arguments."""

    engine: str
    name: str
    """The id's stem: "llama-server", "ollama-runner", "vllm"..."""
    args: tuple[str, ...]
    """The engine's arguments, after the executable, module or subcommand."""
    dialect: Dialect
    """Whose flags these are."""
    serves: bool = False
    """Whether it answers HTTP on a port (llama-cli and batch jobs do not)."""
    default_port: int | None = None
    """The port it serves on without a --port flag."""
    health: bool = False
    """Whether GET /health answers 2xx only once the model is loaded."""
    router: bool = False
    """It loads no model itself and starts one child process per model (llama-server's
    router mode): each child is a shard, the router none."""


@dataclass(frozen=True)
class Intent:
    """The GPUs an engine meant to use, or why they cannot be told, or what says the CPU."""

    gpus: tuple[int, ...] = ()
    unknown: str | None = None
    """Why the GPUs cannot be told; `gpus` means nothing when set."""
    cpu: str | None = None
    """What says the engine was meant for the CPU, as written ("-ngl 0")."""
    gpu_request: str | None = None
    """What asks for GPUs ("-ngl 99"), set when no GPU tool answered to say which GPUs there
    are: `unknown` says so, and the engine's own word may still tell that it runs on the CPU."""


class EngineLog(Protocol):
    """What an engine's log lines mean."""

    @property
    def banner(self) -> re.Pattern[str]:
        """The line it prints once per start (lives.py)."""
        ...

    @property
    def before(self) -> re.Pattern[str] | None:
        """Lines it prints before its banner, matched on the cleaned line."""
        ...

    @property
    def words(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """Lowercase words every banner line, and every line before one, holds (a cheap
        test)."""
        ...

    @property
    def keywords(self) -> tuple[str, ...]:
        """Lowercase words every line its reader takes holds one of (a cheap test first)."""
        ...

    @property
    def prefixes(self) -> tuple[str, ...]:
        """Patterns of what it puts before its lines (a level, a time, a source line), taken
        off by clean.py with everyone's."""
        ...

    def read(self, ev: EvidenceState, line: str, text: str, low: str) -> tuple[str, bool] | None:
        """A line in its format: the engine that said it, and whether it is a finding; None
        for a line in another format. `text` is the line cleaned, `low` the raw lowercased."""
        ...


class Engine(Protocol):
    """One engine: its folder's `ENGINE`, listed in registry.py."""

    name: str
    """As a ComputeStatus names it: "llama.cpp", "ollama", "vllm", "sglang"."""
    outputs: tuple[int, int]
    """Its output descriptors in the order its log is looked for (STDERR first for most)."""
    owns_log: bool
    """Whether the shard's process writes its log, so that a new pid is a new life of it
    (lives.py); False where processes come and go within one server's log (Ollama's
    runners)."""

    def launch(self, exe: str, args: tuple[str, ...]) -> Launch | None:
        """Its process, from the executable's name (lowercased, no folder) and arguments."""
        ...

    def python_launch(
        self, module: str | None, script: str | None, args: tuple[str, ...]
    ) -> Launch | None:
        """Its process run by Python: `python -m module ...` or `python script ...`."""
        ...

    def cpu_flag(self, launch: Launch, env: Mapping[str, str] | None) -> str | None:
        """Its own flag (or variable) that keeps the model on the CPU, as written."""
        ...

    def gpus(self, launch: Launch, env: Mapping[str, str], visible: Visible) -> Intent:
        """The GPUs its flags pick from those visible to it."""
        ...

    def gpu_request(self, launch: Launch, env: Mapping[str, str] | None) -> str:
        """What asks for GPUs, as written, for a node whose GPU tools did not say which."""
        ...

    def log(self) -> EngineLog:
        """What its log lines mean (imported when first asked)."""
        ...
