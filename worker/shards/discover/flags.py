"""Reading an engine's flag from its command line, or else from the variable it reads.

Each engine spells its flags its own way (read from llama.cpp's
common/arg.cpp, Ollama's llm/server.go, llama-cpp-python's server settings
and vLLM's engine arguments):

- llama.cpp: every flag can also come from a LLAMA_ARG_* variable, which the
  command line overrides.
- llama-cpp-python: underscore flags (`--n_gpu_layers`), and pydantic
  settings that read the variable in either case (N_GPU_LAYERS, n_gpu_layers).
- Ollama: Go's flag package, which reads `-port` as `--port`.
- vLLM: `_` and `-` alike in flag names; no variables.

The tables below say, per dialect, which flags set a setting and which
variable sets it when no flag does.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Protocol


class EngineArgs(Protocol):
    """An engine's own arguments, and whose flags they are."""

    @property
    def args(self) -> tuple[str, ...]: ...

    @property
    def dialect(self) -> str:
        """Whose flags these are: "llama", "llama-cpp-python", "ollama" or "vllm"."""
        ...


FlagTable = Mapping[str, tuple[set[str], str | None]]
"""Per dialect: the flags that set one setting, and the variable read without them."""

LAYERS: FlagTable = {
    "llama": ({"-ngl", "--gpu-layers", "--n-gpu-layers"}, "LLAMA_ARG_N_GPU_LAYERS"),
    "ollama": ({"--n-gpu-layers"}, None),
    "llama-cpp-python": ({"--n-gpu-layers"}, "N_GPU_LAYERS"),
}
DEVICE: FlagTable = {
    "llama": ({"-dev", "--device"}, "LLAMA_ARG_DEVICE"),
    "vllm": ({"--device"}, None),
}
SPLIT_MODE: FlagTable = {
    "llama": ({"-sm", "--split-mode"}, "LLAMA_ARG_SPLIT_MODE"),
    "llama-cpp-python": ({"--split-mode"}, "SPLIT_MODE"),
}
MAIN_GPU: FlagTable = {
    "llama": ({"-mg", "--main-gpu"}, "LLAMA_ARG_MAIN_GPU"),
    "llama-cpp-python": ({"--main-gpu"}, "MAIN_GPU"),
}
CONFIG_FILE: FlagTable = {"llama-cpp-python": ({"--config-file"}, "CONFIG_FILE")}
TENSOR_PARALLEL: FlagTable = {"vllm": ({"--tensor-parallel-size", "-tp"}, None)}
PIPELINE_PARALLEL: FlagTable = {"vllm": ({"--pipeline-parallel-size", "-pp"}, None)}
DATA_PARALLEL_LOCAL: FlagTable = {"vllm": ({"--data-parallel-size-local", "-dpl"}, None)}
DATA_PARALLEL: FlagTable = {"vllm": ({"--data-parallel-size", "-dp"}, None)}
PORT: FlagTable = {
    "llama": ({"--port"}, "LLAMA_ARG_PORT"),
    "llama-cpp-python": ({"--port"}, "PORT"),
    "ollama": ({"--port"}, None),
    "vllm": ({"--port"}, None),
}
HOST: FlagTable = {
    "llama": ({"--host"}, "LLAMA_ARG_HOST"),
    "llama-cpp-python": ({"--host"}, "HOST"),
    "vllm": ({"--host"}, None),
}
API_PREFIX: FlagTable = {"llama": ({"--api-prefix"}, "LLAMA_ARG_API_PREFIX")}
LOG_FILE: FlagTable = {"llama": ({"--log-file"}, "LLAMA_ARG_LOG_FILE")}
UNIX_SOCKET: FlagTable = {"vllm": ({"--uds"}, None)}
_NO_SETTING: tuple[set[str], None] = (set(), None)


def flag(
    args: Sequence[str], names: Collection[str], *, go: bool = False
) -> tuple[str, str] | None:
    """The last value given for any of `names`, and the flag as written ("-ngl 0", "-ngl=0").

    Names are compared with `_` read as `-` (vLLM and llama-cpp-python accept
    both); `go` also reads `-port` as `--port`, as Go's flag package does.
    """
    found: tuple[str, str] | None = None
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            break
        if not arg.startswith("-"):
            continue
        name, eq, value = arg.partition("=")
        key = name.replace("_", "-")
        if go and not key.startswith("--"):
            key = "-" + key
        if key not in names:
            continue
        if eq:
            found = (arg, value)
        elif i < len(args):
            found = (f"{name} {args[i]}", args[i])
            i += 1
    return found


def setting(
    engine: EngineArgs, env: Mapping[str, str] | None, names: Collection[str], variable: str | None
) -> tuple[str, str] | None:
    """A flag from the command line, else from the variable the engine reads it from."""
    found = flag(engine.args, names, go=engine.dialect == "ollama")
    if found is not None or env is None or variable is None:
        return found
    keys = [variable]
    if engine.dialect == "llama-cpp-python":
        keys.append(variable.lower())  # pydantic settings read either case
    for key in keys:
        if key in env:
            return f"{key}={env[key]}", env[key]
    return None


def lookup(
    table: FlagTable, engine: EngineArgs, env: Mapping[str, str] | None
) -> tuple[str, str] | None:
    """The setting `table` names in the engine's dialect, as written and its value."""
    names, variable = table.get(engine.dialect, _NO_SETTING)
    return setting(engine, env, names, variable) if names else None


def int_value(text: str) -> int | None:
    """A flag's value as a whole number; None for anything else ("all", "auto")."""
    try:
        return int(text.strip())
    except ValueError:
        return None
