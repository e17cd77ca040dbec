"""Every engine placewatch knows, and which one a command line starts.

Adding an engine is a folder beside these (its `ENGINE`, docs/development.md has the
checklist) and a line here. Log lines are offered to each engine's reader in this order, and
llama.cpp's, last, reads every line no other engine claims: Ollama's log carries its runners'
llama.cpp lines.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from . import llama_cpp, ollama, sglang, vllm
from .base import Engine, Launch

ENGINES: tuple[Engine, ...] = (ollama.ENGINE, vllm.ENGINE, sglang.ENGINE, llama_cpp.ENGINE)
BY_NAME = {e.name: e for e in ENGINES}

_PYTHON = re.compile(r"python(\d+(\.\d+)*)?t?w?")


def engine_of(launch: Launch) -> Engine:
    return BY_NAME[launch.engine]


def engine_named(name: str | None) -> Engine | None:
    """The engine a status or a shards file names; None for a name no engine has (or none)."""
    return BY_NAME.get(name) if name is not None else None


def owns_log(name: str | None) -> bool:
    """Whether a shard of the engine `name` (None: not said) writes its log itself."""
    engine = engine_named(name)
    return engine is None or engine.owns_log


def read_launch(cmdline: Sequence[str]) -> Launch | None:
    """Which engine a command line starts; None for anything else (a shell, an editor, grep).

    A Python engine is told by its module or script, found the way CPython's own option
    parser finds them (`python3.12 -u -X faulthandler -m vllm...`)."""
    if not cmdline:
        return None
    exe = _basename(cmdline[0])
    args = tuple(cmdline[1:])
    if _PYTHON.fullmatch(exe):
        target = _python_target(args)
        if target is None:
            return None
        kind, what, rest = target
        module, script = (what, None) if kind == "module" else (None, _basename(what))
        return next(
            (found for e in ENGINES if (found := e.python_launch(module, script, rest))), None
        )
    return next((found for e in ENGINES if (found := e.launch(exe, args))), None)


def _basename(arg: str) -> str:
    name = arg.replace("\\", "/").rsplit("/", 1)[-1].lower()
    return name.removesuffix(".exe")


def _python_target(args: tuple[str, ...]) -> tuple[str, str, tuple[str, ...]] | None:
    """("module", name, its args) or ("script", path, its args) from python's own options."""
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("--", "-") or not arg.startswith("-"):
            at = i + 1 if arg == "--" else i
            if at >= len(args) or args[at] == "-":
                return None  # reads its program from stdin
            return "script", args[at], args[at + 1 :]
        if arg.startswith("--"):
            i += 2 if arg == "--check-hash-based-pycs" else 1
            continue
        letters = arg[1:]
        for j, letter in enumerate(letters):  # options combine: -um module, -Wignore
            if letter in "mcWX":
                value = letters[j + 1 :]
                if not value:
                    i += 1
                    if i >= len(args):
                        return None
                    value = args[i]
                if letter == "m":
                    return "module", value, args[i + 1 :]
                if letter == "c":
                    return None
                break
        i += 1
    return None
