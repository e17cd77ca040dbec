"""SGLang: `python -m sglang.launch_server` and `sglang serve`.

Read from SGLang's server arguments (python/sglang/srt/server_args.py) and its launcher:

- It serves HTTP (30000 by default) and answers GET /health once its HTTP server is up,
  which it starts after the model loaded.
- Flags are argparse's: `_` and `-` alike; no variables. `--tp`/`--tp-size`/
  `--tensor-parallel-size` GPUs per pipeline stage, `--pp-size` stages, `--dp-size` copies:
  rank r computes on GPU `--base-gpu-id` + r x `--gpu-id-step`, counted among the GPUs its
  device mask leaves. `--device cpu` is the CPU.
- It logs to stdout (`[time TP0] message`), so stdout is looked at first.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..base import STDERR, STDOUT, EngineLog, Intent, Launch, RequestLog, ServerReports
from ..flags import (
    BASE_GPU,
    DATA_PARALLEL,
    DEVICE,
    HOST,
    PIPELINE_PARALLEL,
    PORT,
    TENSOR_PARALLEL,
    Dialect,
    int_value,
    lookup,
    takes,
)
from ..visible import CUDA_AND_ROCM, Visible

NAME = "sglang"
ONE_PLATFORM = (
    "SGLang runs on one platform and both NVIDIA and AMD GPUs are visible to it; set "
    "CUDA_VISIBLE_DEVICES or HIP_VISIBLE_DEVICES to the ones it should use"
)
GPU_STEP = "gpu_id_step"
SGLANG = Dialect(
    "sglang",
    {
        DEVICE: takes("--device"),
        TENSOR_PARALLEL: takes("--tp", "--tp-size", "--tensor-parallel-size"),
        PIPELINE_PARALLEL: takes("--pp", "--pp-size", "--pipeline-parallel-size"),
        DATA_PARALLEL: takes("--dp", "--dp-size", "--data-parallel-size"),
        BASE_GPU: takes("--base-gpu-id"),
        GPU_STEP: takes("--gpu-id-step"),
        PORT: takes("--port"),
        HOST: takes("--host"),
    },
)


class Sglang:
    name = NAME
    outputs = (STDOUT, STDERR)
    owns_log = True
    hosts_other_engines = False
    children_join_parent = False
    layers_flag: str | None = None
    lists_devices = False

    def launch(self, exe: str, args: tuple[str, ...]) -> Launch | None:
        return _serve(args[1:]) if exe == "sglang" and args[:1] == ("serve",) else None

    def python_launch(
        self, module: str | None, script: str | None, args: tuple[str, ...]
    ) -> Launch | None:
        if module == "sglang.launch_server":
            return _serve(args)
        if script == "sglang" and args[:1] == ("serve",):  # the console script run by Python
            return _serve(args[1:])
        return None

    def settle(self, launch: Launch, env: Mapping[str, str] | None) -> Launch:
        return launch

    def cpu_flag(self, launch: Launch, env: Mapping[str, str] | None) -> str | None:
        device = lookup(DEVICE, launch, env)
        return device[0] if device and device[1].strip().lower() == "cpu" else None

    def gpus(self, launch: Launch, env: Mapping[str, str], visible: Visible) -> Intent:
        platforms = [v for v in CUDA_AND_ROCM if visible.lists.get(v) or v in visible.problems]
        if not platforms:
            return Intent()
        if len(platforms) > 1:
            return Intent(unknown=ONE_PLATFORM)
        runtime = visible.vendor(platforms[0])
        if isinstance(runtime, str):
            return Intent(unknown=runtime)
        count = 1
        for name in (TENSOR_PARALLEL, PIPELINE_PARALLEL, DATA_PARALLEL):
            found = lookup(name, launch, env)
            count *= max(1, int_value(found[1]) or 1) if found else 1
        base = _number(lookup(BASE_GPU, launch, env), 0)
        step = _number(lookup(GPU_STEP, launch, env), 1)
        picked = [base + rank * step for rank in range(count)]
        if min(picked) < 0 or max(picked) >= len(runtime):
            return Intent(
                unknown=f"it takes GPUs {', '.join(map(str, picked))} of those visible to it, "
                f"but {len(runtime)} are visible"
            )
        chosen = [runtime[i] for i in picked]
        problem = visible.check_order(platforms[0], chosen)
        return Intent(unknown=problem) if problem else Intent(gpus=tuple(sorted(chosen)))

    def gpu_request(self, launch: Launch, env: Mapping[str, str] | None) -> str:
        said = lookup(DEVICE, launch, env)
        return said[0] if said else "SGLang without --device cpu"

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


def _serve(args: tuple[str, ...]) -> Launch:
    return Launch(NAME, "sglang", args, SGLANG, True, 30000, health=True)


def _number(found: tuple[str, str] | None, default: int) -> int:
    value = int_value(found[1]) if found else None
    return default if value is None else value


ENGINE = Sglang()
