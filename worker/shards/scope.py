"""Which of the node's processes the worker considers: every one, or those that carry a mark.

Discovery, a placement's `match` and doctor's engine pre-flight walk every process of the
node. `discover_env = "NAME=VALUE"` narrows them to processes whose environment holds that
variable: a node whose engines are started by one supervisor that marks them, or a test
that must not see the engines another job runs on the same machine. A child inherits its
parent's environment, so an engine's workers and children (vLLM's, Ollama's, a router's)
carry the mark with it. The environment is read only for a process already recognised as an
engine, or whose command line a pattern matched: the walk itself stays a walk of command lines.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import psutil

MARK = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", re.S)
"""NAME=VALUE, NAME as a shell names a variable."""


@dataclass(frozen=True)
class ProcessScope:
    """Every process (`mark` None), or those whose environment holds NAME=VALUE."""

    mark: tuple[str, str] | None = None

    @classmethod
    def parse(cls, text: str | None) -> ProcessScope:
        """The scope a `discover_env` setting names; ValueError naming what is wrong."""
        if text is None:
            return EVERY
        found = MARK.fullmatch(text)
        if found is None:
            raise ValueError(f"{text!r} is not NAME=VALUE (NAME a variable's name)")
        return cls((found[1], found[2]))

    def admits(self, pid: int, env: Mapping[str, str] | None = None) -> bool:
        """Whether the process `pid` (its environment `env`, when read already) is in scope.
        A process whose environment cannot be read is not: its mark cannot be seen."""
        if self.mark is None:
            return True
        if env is None:
            try:
                env = psutil.Process(pid).environ()
            except psutil.Error:
                return False
        name, value = self.mark
        return env.get(name) == value


EVERY = ProcessScope()
