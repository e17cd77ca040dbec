"""vLLM: `vllm serve`, its Python entry points, and batch jobs.

Read from vLLM's engine arguments and entry points:

- `vllm serve` (the console script, which runs as `python <venv>/bin/vllm serve` too),
  `python -m vllm.entrypoints.cli.main serve`, or the older
  `python -m vllm.entrypoints.openai.api_server` serve HTTP (8000) and answer GET /health
  once ready; `run-batch` serves nothing, and `vllm chat` or `vllm complete` are clients.
- It takes the first tensor-parallel x pipeline-parallel x local data-parallel visible GPUs;
  `--device cpu` (releases that had the flag) is the CPU. `_` and `-` are alike in flag names;
  no variables.
- It logs to stdout (its logger's stream handler), so stdout is looked at first.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..base import STDERR, STDOUT, EngineLog, Intent, Launch, RequestLog, ServerReports
from ..flags import (
    DATA_PARALLEL,
    DATA_PARALLEL_LOCAL,
    DEVICE,
    HOST,
    PIPELINE_PARALLEL,
    PORT,
    TENSOR_PARALLEL,
    UNIX_SOCKET,
    Dialect,
    int_value,
    lookup,
    takes,
)
from ..visible import CUDA_AND_ROCM, Visible

NAME = "vllm"
VLLM = Dialect(
    "vllm",
    {
        DEVICE: takes("--device"),
        TENSOR_PARALLEL: takes("--tensor-parallel-size", "-tp"),
        PIPELINE_PARALLEL: takes("--pipeline-parallel-size", "-pp"),
        DATA_PARALLEL_LOCAL: takes("--data-parallel-size-local", "-dpl"),
        DATA_PARALLEL: takes("--data-parallel-size", "-dp"),
        PORT: takes("--port"),
        HOST: takes("--host"),
        UNIX_SOCKET: takes("--uds"),
    },
)
_SERVERS = ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server")


class Vllm:
    name = NAME
    outputs = (STDOUT, STDERR)
    owns_log = True
    hosts_other_engines = False
    children_join_parent = True  # its API servers, engine cores and workers
    layers_flag: str | None = None
    lists_devices = False

    def launch(self, exe: str, args: tuple[str, ...]) -> Launch | None:
        return _cli(args) if exe == "vllm" else None

    def python_launch(
        self, module: str | None, script: str | None, args: tuple[str, ...]
    ) -> Launch | None:
        if script is not None:
            return _cli(args) if script == "vllm" else None  # the console script
        if module == "vllm.entrypoints.cli.main":
            return _cli(args)
        if module in _SERVERS:
            return Launch(NAME, "vllm", args, VLLM, True, 8000, health=True, binds_all=True)
        if module == "vllm.entrypoints.openai.run_batch":
            return Launch(NAME, "vllm-run-batch", args, VLLM)
        return None

    def settle(self, launch: Launch, env: Mapping[str, str] | None) -> Launch:
        return launch

    def cpu_flag(self, launch: Launch, env: Mapping[str, str] | None) -> str | None:
        device = lookup(DEVICE, launch, env)
        return device[0] if device and device[1].strip().lower() == "cpu" else None

    def gpus(self, launch: Launch, env: Mapping[str, str], visible: Visible) -> Intent:
        return gpus(launch, env, visible)

    def gpu_request(self, launch: Launch, env: Mapping[str, str] | None) -> str:
        said = lookup(DEVICE, launch, env)
        return said[0] if said else "vLLM without --device cpu"

    def served_model(self, launch: Launch) -> str | None:
        return None

    def router_child(self, router: Launch, argv0: str, launch: Launch) -> Launch | None:
        return launch

    def reports(self) -> ServerReports | None:
        return None

    def cpu_only_build_fix(self, backend: str | None) -> str | None:
        return None

    def log(self) -> EngineLog:
        from .log import LOG  # noqa: PLC0415 - compiled when a log is first read

        return LOG

    def requests(self) -> RequestLog | None:
        return None  # the logs in the shared corpus carry no request lines


def _cli(args: tuple[str, ...]) -> Launch | None:
    if args[:1] == ("serve",):
        return Launch(NAME, "vllm", args[1:], VLLM, True, 8000, health=True, binds_all=True)
    if args[:1] == ("run-batch",):
        return Launch(NAME, "vllm-run-batch", args[1:], VLLM)
    return None  # `vllm chat`, `vllm complete`: clients of a server


ENGINE = Vllm()


def gpus(launch: Launch, env: Mapping[str, str], visible: Visible) -> Intent:
    """vLLM takes the first tensor x pipeline x local data parallel visible GPUs."""
    platforms = [v for v in CUDA_AND_ROCM if visible.lists.get(v) or v in visible.problems]
    if len(platforms) > 1:
        return Intent(
            unknown="vLLM runs on one platform and both NVIDIA and AMD GPUs are visible to it; "
            "set CUDA_VISIBLE_DEVICES or HIP_VISIBLE_DEVICES to the ones it should use"
        )
    if not platforms:
        return Intent()
    vendor = platforms[0]
    runtime = visible.vendor(vendor)
    if isinstance(runtime, str):
        return Intent(unknown=runtime)
    count = 1
    for table in (TENSOR_PARALLEL, PIPELINE_PARALLEL):
        found = lookup(table, launch, env)
        count *= max(1, int_value(found[1]) or 1) if found else 1
    local = lookup(DATA_PARALLEL_LOCAL, launch, env) or lookup(DATA_PARALLEL, launch, env)
    count *= max(1, int_value(local[1]) or 1) if local else 1
    chosen = runtime[:count]
    problem = visible.check_order(vendor, chosen)
    if problem is not None:
        return Intent(unknown=problem)
    return Intent(gpus=tuple(sorted(chosen)))
