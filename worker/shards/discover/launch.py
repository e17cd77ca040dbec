"""Which engine a command line starts, read from the command line alone.

- llama.cpp: `llama-server` serves HTTP (8080 by default); `llama-cli` does
  not. llama-cpp-python runs as `python -m llama_cpp.server` (8000).
- Ollama: `ollama serve` computes nothing and `ollama run` is a client; each
  model runs in `ollama runner` (older releases: `ollama_llama_server`). A
  runner without `--model` is the short-lived probe newer releases start to
  find GPUs.
- vLLM: `vllm serve` (the console script, which runs as `python <venv>/bin/vllm
  serve` too), `python -m vllm.entrypoints.cli.main serve`, or the older
  `python -m vllm.entrypoints.openai.api_server`; `run-batch` serves nothing,
  and `vllm chat` or `vllm complete` are clients of a server.

A Python engine is told by its module or script, found the way CPython's own
option parser finds them (`python3.12 -u -X faulthandler -m vllm...`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from .flags import flag

LLAMA_CPP = "llama.cpp"
OLLAMA = "ollama"
VLLM = "vllm"

_PYTHON = re.compile(r"python(\d+(\.\d+)*)?t?w?")


@dataclass(frozen=True)
class Launch:
    """What the command line alone says: which engine, and its own arguments."""

    engine: str
    name: str
    """The id's stem: "llama-server", "ollama-runner", "vllm"..."""
    args: tuple[str, ...]
    """The engine's arguments, after the executable, module or subcommand."""
    dialect: str
    """Whose flags these are: "llama", "llama-cpp-python", "ollama" or "vllm"."""
    serves: bool = False
    """Whether it answers HTTP on a port (llama-cli and batch jobs do not)."""
    default_port: int | None = None
    """The port it serves on without a --port flag."""
    health: bool = False
    """Whether GET /health answers 2xx only once the model is loaded."""


def read_launch(cmdline: Sequence[str]) -> Launch | None:
    """Which engine a command line starts; None for anything else (a shell, an editor, grep)."""
    if not cmdline:
        return None
    exe = _basename(cmdline[0])
    args = tuple(cmdline[1:])
    if _PYTHON.fullmatch(exe):
        return _python(args)
    if exe == "llama-server":
        return Launch(
            LLAMA_CPP, "llama-server", args, "llama", serves=True, default_port=8080, health=True
        )
    if exe == "llama-cli":
        return Launch(LLAMA_CPP, "llama-cli", args, "llama")
    if exe in ("ollama", "ollama_llama_server"):
        return _ollama(exe, args)
    if exe == "vllm":
        return _vllm_cli(args)
    return None


def _basename(arg: str) -> str:
    name = arg.replace("\\", "/").rsplit("/", 1)[-1].lower()
    return name.removesuffix(".exe")


def _ollama(exe: str, args: tuple[str, ...]) -> Launch | None:
    if args[:1] == ("runner",):
        args = args[1:]
    elif exe == "ollama":
        return None  # `ollama serve` schedules; `ollama run` is a client
    if flag(args, {"--model"}, go=True) is None:
        return None  # the GPU discovery probe of newer releases: no model, gone in a second
    return Launch(OLLAMA, "ollama-runner", args, "ollama", serves=True)


def _python(args: tuple[str, ...]) -> Launch | None:
    target = _python_target(args)
    if target is None:
        return None
    kind, what, rest = target
    if kind == "script":
        return _vllm_cli(rest) if _basename(what) == "vllm" else None  # the console script
    if what == "llama_cpp.server":
        return Launch(
            LLAMA_CPP, "llama-cpp-python", rest, "llama-cpp-python", serves=True, default_port=8000
        )
    if what == "vllm.entrypoints.cli.main":
        return _vllm_cli(rest)
    if what in ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server"):
        return Launch(VLLM, "vllm", rest, "vllm", serves=True, default_port=8000, health=True)
    if what == "vllm.entrypoints.openai.run_batch":
        return Launch(VLLM, "vllm-run-batch", rest, "vllm")
    return None


def _vllm_cli(args: tuple[str, ...]) -> Launch | None:
    if args[:1] == ("serve",):
        return Launch(VLLM, "vllm", args[1:], "vllm", serves=True, default_port=8000, health=True)
    if args[:1] == ("run-batch",):
        return Launch(VLLM, "vllm-run-batch", args[1:], "vllm")
    return None  # `vllm chat`, `vllm complete`: clients of a server


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
