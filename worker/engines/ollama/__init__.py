"""Ollama: each model runs in a runner process of its own.

`ollama serve` schedules and computes nothing, and `ollama run` is a client; each model runs
in `ollama runner` (older releases: `ollama_llama_server`), with its own
CUDA_VISIBLE_DEVICES (HIP_/ROCR_VISIBLE_DEVICES on AMD) and a port of its own. A runner
without `--model` is the short-lived probe newer releases start to find GPUs. Go's flag
package reads `-port` as `--port`.

Ollama passes `--n-gpu-layers 0` when the model's options say num_gpu 0; when it falls back to
the CPU itself (no usable GPU, too little free VRAM) it passes no layer count, so that case
stays a GPU placement. Newer releases pass no layer count at all (layers go in a load
request). A runner writes its stderr to a pipe its server copies to the server's own stderr,
and shares the server's stdout (llm/server.go): `ollama serve > ollama.log 2>&1` makes that
file the runner's stdout.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..base import STDERR, STDOUT, EngineLog, Intent, Launch, RequestLog
from ..flags import LAYERS, PORT, Dialect, flag, int_value, lookup, takes
from ..visible import Visible

NAME = "ollama"
OLLAMA = Dialect("ollama", {LAYERS: takes("--n-gpu-layers"), PORT: takes("--port")}, go=True)


class Ollama:
    name = NAME
    outputs = (STDERR, STDOUT)
    owns_log = False  # its runners share the server's log, which follows the server's life
    hosts_other_engines = True  # its runners' llama.cpp lines
    children_join_parent = False
    layers_flag: str | None = None  # its server picks the layers, from the free memory it sees
    lists_devices = False

    def launch(self, exe: str, args: tuple[str, ...]) -> Launch | None:
        if exe not in ("ollama", "ollama_llama_server"):
            return None
        if args[:1] == ("runner",):
            args = args[1:]
        elif exe == "ollama":
            return None  # `ollama serve` schedules; `ollama run` is a client
        if flag(args, {"--model"}, go=True) is None:
            return None  # the GPU discovery probe of newer releases: no model, gone in a second
        return Launch(NAME, "ollama-runner", args, OLLAMA, serves=True)

    def python_launch(
        self, module: str | None, script: str | None, args: tuple[str, ...]
    ) -> Launch | None:
        return None

    def cpu_flag(self, launch: Launch, env: Mapping[str, str] | None) -> str | None:
        layers = lookup(LAYERS, launch, env)
        return layers[0] if layers is not None and int_value(layers[1]) == 0 else None

    def gpus(self, launch: Launch, env: Mapping[str, str], visible: Visible) -> Intent:
        return visible.everything()  # its server gave it its own device mask

    def gpu_request(self, launch: Launch, env: Mapping[str, str] | None) -> str:
        said = lookup(LAYERS, launch, env)
        return said[0] if said else "an Ollama runner, which offloads what fits"

    def served_model(self, launch: Launch) -> str | None:
        return None

    def cpu_only_build_fix(self, backend: str | None) -> str | None:
        return None

    def log(self) -> EngineLog:
        from .log import LOG  # noqa: PLC0415 - compiled when a log is first read

        return LOG

    def requests(self) -> RequestLog | None:
        from .requests import REQUESTS  # noqa: PLC0415 - compiled when a log is first read

        return REQUESTS


ENGINE = Ollama()
