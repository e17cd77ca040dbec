"""Ollama: each model runs in a process of its own, started by its server.

`ollama serve` schedules and computes nothing, and `ollama run` is a client. Since 0.30.0
(commit 9db4bdbad6a4981ad761aa2b603e69e8fb83212c, "Remove CGO engines, use llama-server
exclusively") each model runs in Ollama's own build of llama.cpp's server,
`<install>/lib/ollama/llama-server --model <blob> --port <random> --host 127.0.0.1 ...`
(llm/llama_server.go, checked at fb30760996871fa9460115c753afd2c60d4ab0f7, 0.33.0-rc2), with
its output piped into the server's stderr as it is. So the server is a router
(`Launch.router`): each such child is a shard named by its model under the server, the
server none. Its children without `--model` (`--verbose` until `system_info:`, then killed)
or with `--list-devices` are its GPU discovery probes (discover/llama_server.go), no shard. It
passes `-ngl` only where the model's options set num_gpu, `-ngl 0` meaning the CPU. Its
`/api/ps` says how much of each model it put in GPU memory (server.py).

Before 0.30 each model ran in `ollama runner` (older releases: `ollama_llama_server`), with
its own CUDA_VISIBLE_DEVICES (HIP_/ROCR_VISIBLE_DEVICES on AMD) and a port of its own. A
runner without `--model` is the short-lived probe those releases start to find GPUs. Go's
flag package reads `-port` as `--port`.

Ollama passes `--n-gpu-layers 0` when the model's options say num_gpu 0; when it falls back to
the CPU itself (no usable GPU, too little free VRAM) it passes no layer count, so that case
stays a GPU placement. Newer releases pass no layer count at all (layers go in a load
request). A runner writes its stderr to a pipe its server copies to the server's own stderr,
and shares the server's stdout (llm/server.go): `ollama serve > ollama.log 2>&1` makes that
file the runner's stdout.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..base import STDERR, STDOUT, EngineLog, Intent, Launch, RequestLog, ServerReports
from ..flags import LAYERS, MODEL, PORT, Dialect, flag, int_value, lookup, takes
from ..llama_cpp import ENGINE as LLAMA_CPP_ENGINE
from ..llama_cpp import LLAMA
from ..visible import Visible

NAME = "ollama"
OLLAMA = Dialect(
    "ollama",
    {LAYERS: takes("--n-gpu-layers"), PORT: takes("--port"), MODEL: takes("--model")},
    go=True,
)
SERVER_PORT = 11434
"""Its server's port without OLLAMA_HOST."""
CHILD = ("lib", "ollama", "llama-server")
"""Where its llama-server lies, below the folder of its executable's (ml/path.go,
llm/llama_binary.go): /usr/local/lib/ollama/llama-server, /usr/lib/ollama/llama-server."""


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
        if exe == "ollama" and args[:1] == ("serve",):
            return _server(args[1:])
        if args[:1] == ("runner",):
            args = args[1:]
        elif exe == "ollama":
            return None  # `ollama run` is a client
        if flag(args, {"--model"}, go=True) is None:
            return None  # the GPU discovery probe of newer releases: no model, gone in a second
        return Launch(NAME, "ollama-runner", args, OLLAMA, serves=True)

    def python_launch(
        self, module: str | None, script: str | None, args: tuple[str, ...]
    ) -> Launch | None:
        return _server(args[1:]) if script == "ollama" and args[:1] == ("serve",) else None

    def settle(self, launch: Launch, env: Mapping[str, str] | None) -> Launch:
        return launch

    def cpu_flag(self, launch: Launch, env: Mapping[str, str] | None) -> str | None:
        if launch.dialect is LLAMA:  # its llama-server: -ngl 0
            return LLAMA_CPP_ENGINE.cpu_flag(launch, env)
        layers = lookup(LAYERS, launch, env)
        return layers[0] if layers is not None and int_value(layers[1]) == 0 else None

    def gpus(self, launch: Launch, env: Mapping[str, str], visible: Visible) -> Intent:
        return visible.everything()  # its server gave it its own device mask

    def gpu_request(self, launch: Launch, env: Mapping[str, str] | None) -> str:
        said = lookup(LAYERS, launch, env)
        if said:
            return said[0]
        if launch.dialect is LLAMA:
            return "Ollama's llama-server without -ngl, which offloads what fits"
        return "an Ollama runner, which offloads what fits"

    def served_model(self, launch: Launch) -> str | None:
        """Its model file's name, `sha256-<hex>` (what names it where its server cannot say)."""
        model = flag(launch.args, launch.dialect.settings[MODEL][0], go=launch.dialect.go)
        if model is None or not model[1]:
            return None
        name = model[1].replace("\\", "/").rsplit("/", 1)[-1]
        return name if name.startswith("sha256") and len(name) <= 80 else None

    def router_child(self, router: Launch, argv0: str, launch: Launch) -> Launch | None:
        if launch.engine == NAME:
            return launch  # the runner of releases before 0.30
        parts = tuple(argv0.replace("\\", "/").lower().removesuffix(".exe").split("/"))
        if parts[-3:] != CHILD:
            return launch  # not Ollama's own build: a llama-server of its own
        if "--list-devices" in launch.args or flag(launch.args, LLAMA.settings[MODEL][0]) is None:
            return None  # a GPU discovery probe
        return Launch(NAME, "ollama", launch.args, LLAMA, serves=True, health=True)

    def reports(self) -> ServerReports | None:
        from .server import REPORTS  # noqa: PLC0415 - only where an Ollama server runs

        return REPORTS

    def cpu_only_build_fix(self, backend: str | None) -> str | None:
        return None

    def log(self) -> EngineLog:
        from .log import LOG  # noqa: PLC0415 - compiled when a log is first read

        return LOG

    def requests(self) -> RequestLog | None:
        from .requests import REQUESTS  # noqa: PLC0415 - compiled when a log is first read

        return REQUESTS


def _server(args: tuple[str, ...]) -> Launch:
    return Launch(NAME, "ollama", args, OLLAMA, serves=True, default_port=SERVER_PORT, router=True)


ENGINE = Ollama()
