"""Reading an engine's flag from its command line, or else from the variable it reads.

Each engine spells its flags its own way, and says how in its folder: its `Dialect`, for each
setting (the names below), the flags that set it and the variable read when no flag does.
The ways flags are read differ too:

- llama.cpp: every flag can also come from a LLAMA_ARG_* variable, which the command line
  overrides.
- llama-cpp-python: underscore flags (`--n_gpu_layers`), and pydantic settings that read the
  variable in either case (N_GPU_LAYERS, n_gpu_layers): `either_case`.
- Ollama: Go's flag package, which reads `-port` as `--port`: `go`.
- vLLM, SGLang: `_` and `-` alike in flag names; no variables.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

LAYERS = "layers"
DEVICE = "device"
SPLIT_MODE = "split_mode"
MAIN_GPU = "main_gpu"
CONFIG_FILE = "config_file"
TENSOR_PARALLEL = "tensor_parallel"
PIPELINE_PARALLEL = "pipeline_parallel"
DATA_PARALLEL_LOCAL = "data_parallel_local"
DATA_PARALLEL = "data_parallel"
BASE_GPU = "base_gpu"
PORT = "port"
HOST = "host"
API_PREFIX = "api_prefix"
LOG_FILE = "log_file"
UNIX_SOCKET = "unix_socket"
MODEL = "model"
MODELS_DIR = "models_dir"
MODELS_PRESET = "models_preset"
MODEL_URL = "model_url"
HF_REPO = "hf_repo"
DOCKER_REPO = "docker_repo"
DRAFT_MODEL = "draft_model"
DRAFT_LAYERS = "draft_layers"
DRAFT_DEVICE = "draft_device"
ALIAS = "alias"

Setting = tuple[frozenset[str], "str | None"]
"""The flags that set one setting, and the variable read without them."""


def takes(*flags: str, variable: str | None = None) -> Setting:
    return frozenset(flags), variable


@dataclass(frozen=True)
class Dialect:
    """Whose flags these are, and how they are read."""

    name: str
    settings: Mapping[str, Setting] = field(default_factory=dict)
    go: bool = False
    """Go's flag package: `-port` is `--port`."""
    either_case: bool = False
    """Its variables are read in either case (pydantic settings)."""


class EngineArgs(Protocol):
    """An engine's own arguments, and whose flags they are."""

    @property
    def args(self) -> tuple[str, ...]: ...

    @property
    def dialect(self) -> Dialect: ...


_NO_SETTING: Setting = (frozenset(), None)


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
    found = flag(engine.args, names, go=engine.dialect.go)
    if found is not None or env is None or variable is None:
        return found
    keys = [variable]
    if engine.dialect.either_case:
        keys.append(variable.lower())
    for key in keys:
        if key in env:
            return f"{key}={env[key]}", env[key]
    return None


def lookup(name: str, engine: EngineArgs, env: Mapping[str, str] | None) -> tuple[str, str] | None:
    """The setting `name` in the engine's dialect, as written and its value."""
    flags, variable = engine.dialect.settings.get(name, _NO_SETTING)
    return setting(engine, env, flags, variable) if flags else None


def lookup_any(
    names: Sequence[str], engine: EngineArgs, env: Mapping[str, str] | None
) -> tuple[str, str] | None:
    """The first of the settings `names` given (a model named by path, URL or repository),
    as written and its value; an empty value is none."""
    for name in names:
        found = lookup(name, engine, env)
        if found is not None and found[1].strip():
            return found
    return None


def int_value(text: str) -> int | None:
    """A flag's value as a whole number; None for anything else ("all", "auto")."""
    try:
        return int(text.strip())
    except ValueError:
        return None
