"""One process's command line and environment, as a placement on the GPUs it meant to use."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from placewatch.schemas import GpuSample, PlacementSpec

from ...engines import Launch, Server, engine_of, read_launch
from ...engines.evidence.source import LogSource
from .endpoint import bound_endpoint, health_url, serve_port
from .intent import intended_gpus


@dataclass(frozen=True)
class Discovered:
    """An engine process found on the node, as a placement on the GPUs it meant to use."""

    spec: PlacementSpec
    engine: str
    """The engine's name: "llama.cpp", "ollama", "vllm", "sglang"."""
    gpus_unknown: str | None = None
    """Why the intended GPUs cannot be told; `spec.gpus` means nothing when set."""
    cpu_on_purpose: str | None = None
    """What says the engine was meant for the CPU ("-ngl 0", "CUDA_VISIBLE_DEVICES=-1")."""
    gpu_request: str | None = None
    """What asks for GPUs ("-ngl 99") on a node where no GPU tool answered to say which;
    `gpus_unknown` then says so."""
    create_time: float = 0.0
    """The process's start, as psutil reports it (seconds since the epoch)."""
    log_prefix: str | None = None
    """The prefix of its lines in `spec.log_path` when that is another process's log: a
    llama-server router's child (`[PORT]`)."""
    server: Server | None = None
    """The router that started it, where that says what its models are (Ollama's server)."""
    model: str | None = None
    """The name that router knows its model by."""
    log: LogSource | None = None
    """How `spec.log_path` is opened, as it was found (log_path.py)."""
    unlogged: str | None = None
    """Why it has no log where its output goes to a pipe, and how to give it one."""


def classify(
    cmdline: Sequence[str],
    env: Mapping[str, str] | None,
    pid: int,
    gpus: Sequence[GpuSample],
    *,
    create_time: float = 0.0,
    tools_silent: Sequence[str] | None = None,
    log: LogSource | None = None,
    launch: Launch | None = None,
) -> Discovered | None:
    """The engine `cmdline` runs and the GPUs it meant to use, or None for anything else.

    `env` is the process's environment, None when it could not be read; `gpus`
    are the node's GPUs, and `tools_silent` the GPU sources that did not answer
    when none did (None when one did: `gpus` then says what there is). Pure:
    reads nothing but its arguments; `log` is where its output was found;
    `launch` what it runs where its router said so (Engine.router_child), else its command
    line is read. The shard's id is the engine's name and its port, or its pid when it
    serves on none. A router is no shard: it loads no model itself.
    """
    if launch is None:
        launch = read_launch(cmdline)
        launch = engine_of(launch).settle(launch, env) if launch is not None else None
    if launch is None or launch.router:
        return None
    port = serve_port(launch, env)
    stem = f"{launch.name}-{port}" if port is not None else f"{launch.name}-{pid}"
    intent = intended_gpus(launch, env, gpus, tools_silent)
    spec = PlacementSpec(
        id=stem,
        pid=pid,
        gpus=list(intent.gpus),
        engine=launch.engine,
        health_url=health_url(launch, env, port),
        log_path=log.path if log is not None else None,
        endpoint=bound_endpoint(launch, env, port),
    )
    return Discovered(
        spec=spec,
        engine=launch.engine,
        gpus_unknown=intent.unknown,
        cpu_on_purpose=intent.cpu,
        gpu_request=intent.gpu_request,
        create_time=create_time,
        log=log,
    )
