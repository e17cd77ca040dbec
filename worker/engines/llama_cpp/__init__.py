"""llama.cpp: `llama-server`, `llama-cli`, and llama-cpp-python's server.

Read from llama.cpp's common/arg.cpp and tools/server (b11434) and llama-cpp-python's server
settings:

- `llama-server` serves HTTP (8080 by default) and answers GET /health with 2xx once its
  model is loaded (under `--api-prefix` when one is set); `llama-cli` serves nothing.
  llama-cpp-python runs as `python -m llama_cpp.server` (8000).
- Every llama.cpp flag can also come from a LLAMA_ARG_* variable; llama-cpp-python takes
  underscore flags and pydantic settings read in either case.
- `-ngl 0` and `--device none` keep the model on the CPU; `--device CUDA1,CUDA2` picks runtime
  devices (numbered within the device mask); `-sm none` uses only `-mg N` (default 0) of them;
  `SYCL0` and `Vulkan0` are ggml-sycl's and ggml-vulkan's devices (ggml-org/llama.cpp
  3c1bcf26 ggml-sycl.cpp and 80ec54e9 ggml-vulkan.cpp: the backend's name and the device's
  number). ggml-sycl numbers the Level Zero devices its mask leaves SYCL's default device
  first, then by compute units (dpct/helper.hpp's dev_mgr, 9c33b2cf), so a proper subset of
  several is not told; ggml-vulkan numbers the Vulkan loader's devices, never told;
  `-sm none -mg -1` uses no GPU. An absent `-ngl` is not the CPU on purpose: older builds
  defaulted to 0 layers, newer ones to all, and a forgotten `-ngl` is worth a fallback alert.
  llama-cpp-python's `n_gpu_layers` defaults to 0, so there no flag means the CPU.
- A draft model for speculative decoding (`-md FNAME`, `-hfd REPO`, or their variables; the
  names b11434 gives in its `--help`, `--spec-draft-*` and their older aliases) has
  layers and devices of its own: `-ngld N` (LLAMA_ARG_N_GPU_LAYERS_DRAFT; by default `auto`,
  not the model's `-ngl`) and `-devd` (by default the model's `--device`). A server at
  `-ngl 0` whose draft goes to a GPU asks for the GPU: it is not on the CPU on purpose.
- Router mode (no model of its own by flag, variable or built-in preset: b11434 then logs
  `starting server in router mode`, over `--models-dir DIR`, `--models-preset FILE`, their
  LLAMA_ARG_ variables, or its models cache when given none of them): it loads no model and
  starts a `llama-server` per model (`POST /models/load`), on a port of its own with
  `--alias NAME`, its output piped into the router's, each line prefixed `[PORT] `. Which
  it is set by its variables alone is told once its environment is read (`settle`).
- `--log-file FNAME` (or LLAMA_ARG_LOG_FILE) gets its common log; what it writes straight to
  stderr (its argument warnings) is not in it, so stderr is looked at first.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace

from placewatch.worker.gpu.masks import shown

from ..base import STDERR, STDOUT, EngineLog, Intent, Launch, RequestLog, ServerReports
from ..flags import (
    ALIAS,
    API_PREFIX,
    CONFIG_FILE,
    DEVICE,
    DOCKER_REPO,
    DRAFT_DEVICE,
    DRAFT_LAYERS,
    DRAFT_MODEL,
    HF_REPO,
    HOST,
    LAYERS,
    LOG_FILE,
    MAIN_GPU,
    MODEL,
    MODEL_URL,
    MODELS_DIR,
    MODELS_PRESET,
    PORT,
    SPLIT_MODE,
    Dialect,
    flag,
    int_value,
    lookup,
    lookup_any,
    takes,
)
from ..visible import VENDOR_NAMES, VENDORS, Device, Visible

NAME = "llama.cpp"
LLAMA = Dialect(
    "llama",
    {
        LAYERS: takes("-ngl", "--gpu-layers", "--n-gpu-layers", variable="LLAMA_ARG_N_GPU_LAYERS"),
        DEVICE: takes("-dev", "--device", variable="LLAMA_ARG_DEVICE"),
        SPLIT_MODE: takes("-sm", "--split-mode", variable="LLAMA_ARG_SPLIT_MODE"),
        MAIN_GPU: takes("-mg", "--main-gpu", variable="LLAMA_ARG_MAIN_GPU"),
        PORT: takes("--port", variable="LLAMA_ARG_PORT"),
        HOST: takes("--host", variable="LLAMA_ARG_HOST"),
        API_PREFIX: takes("--api-prefix", variable="LLAMA_ARG_API_PREFIX"),
        LOG_FILE: takes("--log-file", variable="LLAMA_ARG_LOG_FILE"),
        MODEL: takes(
            "-m",
            "--model",
            "-hf",
            "-hfr",
            "--hf-repo",
            "-mu",
            "--model-url",
            variable="LLAMA_ARG_MODEL",
        ),
        MODEL_URL: takes("-mu", "--model-url", variable="LLAMA_ARG_MODEL_URL"),
        HF_REPO: takes("-hf", "-hfr", "--hf-repo", variable="LLAMA_ARG_HF_REPO"),
        DOCKER_REPO: takes("-dr", "--docker-repo", variable="LLAMA_ARG_DOCKER_REPO"),
        MODELS_DIR: takes("--models-dir", variable="LLAMA_ARG_MODELS_DIR"),
        MODELS_PRESET: takes("--models-preset", variable="LLAMA_ARG_MODELS_PRESET"),
        ALIAS: takes("-a", "--alias"),
        DRAFT_MODEL: takes(
            "--spec-draft-model",
            "-md",
            "--model-draft",
            "--spec-draft-hf",
            "-hfd",
            "-hfrd",
            "--hf-repo-draft",
            variable="LLAMA_ARG_SPEC_DRAFT_MODEL",
        ),
        DRAFT_LAYERS: takes(
            "--spec-draft-ngl",
            "-ngld",
            "--gpu-layers-draft",
            "--n-gpu-layers-draft",
            variable="LLAMA_ARG_N_GPU_LAYERS_DRAFT",
        ),
        DRAFT_DEVICE: takes("--spec-draft-device", "-devd", "--device-draft"),
    },
)
MODELS = (MODEL, MODEL_URL, HF_REPO, DOCKER_REPO)
"""What names the model a server loads itself: a file, a URL, a repository."""
ROUTES = (MODELS_DIR, MODELS_PRESET)
"""What makes a server with no model of its own a router before its environment is read."""
_PRESET = re.compile(r"--[a-z][a-z0-9.-]{0,40}-(?:default|spec)")
"""The built-in presets that name a model without `-m` (b11434's --help: `--gpt-oss-20b-default`,
`--fim-qwen-7b-spec`, `--embd-gemma-default`, ...); `--spec-default` is a draft's settings."""
DRAFT_VARIABLES = ("LLAMA_ARG_SPEC_DRAFT_HF_REPO", "LLAMA_ARG_MODEL_DRAFT")
"""A draft model named by a variable other than LLAMA_ARG_SPEC_DRAFT_MODEL: a repository,
or the name builds before the `--spec-draft-*` flags read."""
PYTHON = Dialect(
    "llama-cpp-python",
    {
        LAYERS: takes("--n-gpu-layers", variable="N_GPU_LAYERS"),
        SPLIT_MODE: takes("--split-mode", variable="SPLIT_MODE"),
        MAIN_GPU: takes("--main-gpu", variable="MAIN_GPU"),
        CONFIG_FILE: takes("--config-file", variable="CONFIG_FILE"),
        PORT: takes("--port", variable="PORT"),
        HOST: takes("--host", variable="HOST"),
    },
    either_case=True,
)
_RUNTIME_DEVICE = re.compile(r"(cuda|rocm|hip|sycl|vulkan)(\d{1,3})")
_RUNTIME_VENDOR = {"cuda": "nvidia", "rocm": "amd", "hip": "amd", "sycl": "intel"}
BUILD_FIX = {
    "ROCm": "run a GPU build (e.g. -DGGML_HIP=ON, or a HIP release of llama.cpp)",
    "CUDA": "run a GPU build (e.g. -DGGML_CUDA=ON, or a CUDA release of llama.cpp)",
}
"""For a build with no GPU backend, which has no libggml-cuda.so for ldd to check."""


class LlamaCpp:
    name = NAME
    outputs = (STDERR, STDOUT)
    owns_log = True
    hosts_other_engines = False
    children_join_parent = False  # a router's children are a shard each
    layers_flag: str | None = "-ngl / --n-gpu-layers"
    lists_devices = True  # common/arg.cpp, b11434

    def launch(self, exe: str, args: tuple[str, ...]) -> Launch | None:
        if exe == "llama-server":
            if "--list-devices" in args:
                return None  # lists the devices it can use and exits: no server
            launch = Launch(NAME, "llama-server", args, LLAMA, True, 8080, True)
            return self.settle(launch, None)
        if exe == "llama-cli":
            return Launch(NAME, "llama-cli", args, LLAMA)
        return None

    def python_launch(
        self, module: str | None, script: str | None, args: tuple[str, ...]
    ) -> Launch | None:
        if module == "llama_cpp.server":
            return Launch(NAME, "llama-cpp-python", args, PYTHON, True, 8000)
        return None

    def settle(self, launch: Launch, env: Mapping[str, str] | None) -> Launch:
        """A llama-server is a router where it names no model of its own, by flag, preset or,
        once `env` is read, by variable; before `env` is read, only where it names a models
        folder or presets file (a variable may yet name its model)."""
        if launch.name != "llama-server":
            return launch
        if lookup_any(MODELS, launch, env) is not None or any(map(_preset, launch.args)):
            router = False
        else:  # no model of its own: by b11434, a router whatever else it is given
            router = env is not None or bool(lookup_any(ROUTES, launch, env))
        if router == launch.router:
            return launch
        return replace(launch, router=router, child_prefix=router)

    def cpu_flag(self, launch: Launch, env: Mapping[str, str] | None) -> str | None:
        said = _cpu_flag(launch, env)
        return None if said is None or draft_request(launch, env) else said

    def gpus(self, launch: Launch, env: Mapping[str, str], visible: Visible) -> Intent:
        return gpus(launch, env, visible)

    def gpu_request(self, launch: Launch, env: Mapping[str, str] | None) -> str:
        draft = draft_request(launch, env) if _cpu_flag(launch, env) else None
        if draft is not None:
            return draft
        said = lookup(LAYERS, launch, env) or lookup(DEVICE, launch, env)
        return said[0] if said else "no -ngl; recent llama.cpp builds offload by default"

    def served_model(self, launch: Launch) -> str | None:
        return served_model(launch)

    def router_child(self, router: Launch, argv0: str, launch: Launch) -> Launch | None:
        return launch

    def reports(self) -> ServerReports | None:
        return None

    def cpu_only_build_fix(self, backend: str | None) -> str | None:
        if backend is None:
            return f"{BUILD_FIX['CUDA']}; for AMD GPUs, {BUILD_FIX['ROCm'].removeprefix('run ')}"
        return BUILD_FIX.get(backend, BUILD_FIX["CUDA"])

    def log(self) -> EngineLog:
        from .log import LOG  # noqa: PLC0415 - compiled when a log is first read

        return LOG

    def requests(self) -> RequestLog | None:
        from .requests import REQUESTS  # noqa: PLC0415 - compiled when a log is first read

        return REQUESTS


ENGINE = LlamaCpp()


def _preset(arg: str) -> bool:
    return arg != "--spec-default" and _PRESET.fullmatch(arg) is not None


def _cpu_flag(launch: Launch, env: Mapping[str, str] | None) -> str | None:
    """What keeps the model itself on the CPU, as written; its draft's aside."""
    layers = lookup(LAYERS, launch, env)
    if layers is not None and int_value(layers[1]) == 0:
        return layers[0]
    if launch.dialect is PYTHON and layers is None and env is not None:
        return "no --n_gpu_layers (llama-cpp-python's default is 0 layers on the GPU)"
    device = lookup(DEVICE, launch, env)
    if device is not None and device[1].strip().lower() == "none":
        return device[0]
    split = lookup(SPLIT_MODE, launch, env)
    main = lookup(MAIN_GPU, launch, env)
    if split is not None and _split_none(split[1]) and main is not None:
        index = int_value(main[1])
        if index is not None and index < 0:
            return f"{split[0]} {main[0]}"  # no main GPU, no GPU at all
    return None


def draft_request(launch: Launch, env: Mapping[str, str] | None) -> str | None:
    """What asks for its draft model on a GPU, as written: its `-ngld`, or the draft alone,
    whose layers go to the GPU by default (`auto`); None for no draft, one at `-ngld 0`, or
    one on no device (`-devd none`, or `--device none`, which the draft follows)."""
    draft = lookup(DRAFT_MODEL, launch, env)
    if draft is None and env is not None:
        draft = next(((f"{v}={env[v]}", env[v]) for v in DRAFT_VARIABLES if v in env), None)
    if draft is None or not draft[1].strip():
        return None
    layers = lookup(DRAFT_LAYERS, launch, env)
    if layers is not None and int_value(layers[1]) == 0:
        return None
    device = lookup(DRAFT_DEVICE, launch, env) or lookup(DEVICE, launch, env)
    if device is not None and device[1].strip().lower() == "none":
        return None
    return layers[0] if layers is not None else f"{draft[0]}, its layers on the GPU by default"


def served_model(launch: Launch) -> str | None:
    """The model a router's child serves: its `--alias`, else its model file's name."""
    alias = flag(launch.args, LLAMA.settings[ALIAS][0])
    if alias is not None and alias[1]:
        return alias[1]
    model = flag(launch.args, LLAMA.settings[MODEL][0])
    if model is None or not model[1]:
        return None
    return model[1].replace("\\", "/").rsplit("/", 1)[-1].removesuffix(".gguf")


def _split_none(value: str) -> bool:
    """llama.cpp spells it `none`; llama-cpp-python takes LLAMA_SPLIT_MODE_NONE, 0."""
    return value.strip().lower() in ("none", "0")


def gpus(launch: Launch, env: Mapping[str, str], visible: Visible) -> Intent:
    """llama.cpp's device list (-dev), then -sm none's one main GPU (-mg) of it; for a model
    kept on the CPU whose draft goes to a GPU, the draft's (-devd, else -dev)."""
    draft_only = _cpu_flag(launch, env) is not None
    devices = _devices(launch, env, visible, draft_only)
    if isinstance(devices, str):
        return Intent(unknown=devices)
    split = None if draft_only else lookup(SPLIT_MODE, launch, env)
    if split is not None and _split_none(split[1]):
        main = _main_gpu(split[0], lookup(MAIN_GPU, launch, env), devices)
        if isinstance(main, str):
            return Intent(unknown=main)
        devices = [main]
    for vendor in dict.fromkeys(v for v, _ in devices):
        chosen = [i for v, i in devices if v == vendor]
        problem = visible.check_order(vendor, chosen) or _sycl_order(vendor, chosen, visible)
        if problem is not None:
            return Intent(unknown=problem)
    return Intent(gpus=tuple(sorted({i for _, i in devices})))


def _devices(
    launch: Launch, env: Mapping[str, str], visible: Visible, draft: bool = False
) -> list[Device] | str:
    """The devices -dev (with `draft`, -devd, else -dev) names in the runtime's numbering,
    else every visible one; or why not."""
    device = (lookup(DRAFT_DEVICE, launch, env) if draft else None) or lookup(DEVICE, launch, env)
    if device is None:
        everything = visible.everything()
        if everything.unknown is not None:
            return everything.unknown
        return [(v, i) for v in VENDORS for i in visible.lists.get(v, ())]
    devices: list[Device] = []
    for name in (n.strip() for n in device[1].split(",")):
        found = _RUNTIME_DEVICE.fullmatch(name.lower())
        if found is None:
            return (
                f"{shown(device[0])} names {shown(name)}, whose number is not a CUDA, ROCm or SYCL "
                "device number; place this shard in a shards file"
            )
        if found[1] == "vulkan":
            return (
                f"{device[0]} names {name}, a device in the Vulkan loader's order, which "
                "counts every vendor's GPUs and CPU renderers and which no GPU tool gives; "
                "place this shard in a shards file"
            )
        vendor = _RUNTIME_VENDOR[found[1]]
        runtime = visible.vendor(vendor)
        if isinstance(runtime, str):
            return runtime
        position = int(found[2])
        if position >= len(runtime):
            return (
                f"{device[0]} names {name}, but only {len(runtime)} "
                f"{VENDOR_NAMES[vendor]} GPU(s) are visible to it"
            )
        devices.append((vendor, runtime[position]))
    return devices


def _sycl_order(vendor: str, chosen: list[int], visible: Visible) -> str | None:
    """Why SYCL device numbers cannot be told: a proper subset of several Intel GPUs."""
    runtime = visible.lists.get(vendor, [])
    if vendor != "intel" or len(runtime) < 2 or set(chosen) >= set(runtime):
        return None
    return (
        f"ggml-sycl numbers the {len(runtime)} Intel GPUs visible to it SYCL's default device "
        "first, then by compute units, not bus order, so which it picked cannot be told; "
        "leave it one GPU (ONEAPI_DEVICE_SELECTOR=level_zero:N)"
    )


def _main_gpu(split: str, main: tuple[str, str] | None, devices: list[Device]) -> Device | str:
    """The one device `-sm none` computes on (`-mg`, default 0), or why it cannot be told."""
    index = int_value(main[1]) if main is not None else 0
    if len({v for v, _ in devices}) > 1:
        return f"{split} on NVIDIA and AMD GPUs: which is its first device depends on the build"
    if index is None or not 0 <= index < len(devices):
        return (
            f"{split} with {main[0] if main else 'main GPU 0'}, but it sees {len(devices)} GPU(s)"
        )
    return devices[index]
