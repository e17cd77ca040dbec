"""The GPUs an engine meant to use, from its device mask and its own flags.

What the flags mean, per engine (read from llama.cpp's common/arg.cpp,
Ollama's llm/server.go, llama-cpp-python's server settings and vLLM's engine
arguments):

- llama.cpp (llama-server, llama-cli): `-ngl 0` and `--device none` keep the
  model on the CPU; `--device CUDA1,CUDA2` picks runtime devices (numbered
  within the device mask); `-sm none` uses only `-mg N` (default 0) of them.
  An absent `-ngl` is not the CPU on purpose: older builds defaulted to 0
  layers, newer ones to all, and a forgotten `-ngl` is worth a fallback alert.
- llama-cpp-python (`python -m llama_cpp.server`): `n_gpu_layers` defaults
  to 0, so no flag means the CPU.
- Ollama: each runner has its own CUDA_VISIBLE_DEVICES (HIP_/ROCR_VISIBLE_DEVICES
  on AMD). Ollama passes `--n-gpu-layers 0` when the model's options say
  num_gpu 0; when it falls back to the CPU itself (no usable GPU, too little
  free VRAM) it passes no layer count, so that case stays a GPU placement.
  Newer releases pass no layer count at all (layers go in a load request).
- vLLM: the first tensor-parallel x pipeline-parallel x local data-parallel
  visible GPUs; `--device cpu` (releases that had the flag) is the CPU.

A device mask that cannot be translated, or runtime device numbers whose
order is not the bus order, are reported as unknown, never guessed. So is an
engine meant for GPUs on a node where no GPU tool answered: an empty list of
GPUs then says only that the tools are silent (NVML not loading, nvidia-smi
stuck on a GPU fallen off the bus), not that there is nothing but the CPU.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from placewatch.schemas import GpuSample
from placewatch.worker.gpu.masks import AMD_VARIABLES, DeviceMask, translate

from .flags import (
    CONFIG_FILE,
    DATA_PARALLEL,
    DATA_PARALLEL_LOCAL,
    DEVICE,
    LAYERS,
    MAIN_GPU,
    PIPELINE_PARALLEL,
    SPLIT_MODE,
    TENSOR_PARALLEL,
    int_value,
    lookup,
)
from .launch import Launch

_RUNTIME_DEVICE = re.compile(r"(cuda|rocm|hip)(\d+)")
_VENDORS = ("nvidia", "amd")
_VENDOR_NAMES = {"nvidia": "NVIDIA", "amd": "AMD"}

_Device = tuple[str, int]
"""A GPU an engine picked: its vendor and its physical index."""


@dataclass(frozen=True)
class Intent:
    """The GPUs an engine meant to use, or why they cannot be told, or what says the CPU."""

    gpus: tuple[int, ...] = ()
    unknown: str | None = None
    """Why the GPUs cannot be told; `gpus` means nothing when set."""
    cpu: str | None = None
    """What says the engine was meant for the CPU, as written ("-ngl 0")."""
    gpu_request: str | None = None
    """What asks for GPUs ("-ngl 99"), set when no GPU tool answered to say which GPUs there
    are: `unknown` says so, and the engine's own word may still tell that it runs on the CPU."""


def intended_gpus(
    launch: Launch,
    env: Mapping[str, str] | None,
    gpus: Sequence[GpuSample],
    tools_silent: Sequence[str] | None = None,
) -> Intent:
    """The GPUs of `gpus` the engine meant to use; `env` is None when it could not be read.

    `tools_silent` names the GPU sources that did not answer when none did, so that `gpus`
    (empty) says nothing; None when one answered.
    """
    config = lookup(CONFIG_FILE, launch, env)
    if config is not None:
        return Intent(
            unknown=f"its settings come from {config[0]}, which placewatch does not read; "
            "place this shard in a shards file to say which GPUs it should use"
        )
    cpu = cpu_flag(launch, env) or (_masks_hide_all(env) if tools_silent is not None else None)
    if cpu is not None:
        return Intent(cpu=cpu)
    if not gpus and tools_silent is not None:
        return _untold(launch, env, tools_silent)
    if not gpus:
        return Intent()  # the tools answered, and saw nothing else to compute on
    if env is None:
        return Intent(
            unknown="its environment could not be read for a device mask "
            "(CUDA_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES); run the worker as root or as the "
            "engine's user, or place this shard in a shards file"
        )
    visible = _Visible(env, gpus)
    if visible.empty_mask is not None:
        return visible.empty_mask
    if launch.dialect == "vllm":
        return _vllm_gpus(launch, env, visible)
    if launch.dialect in ("llama", "llama-cpp-python"):
        return _llama_gpus(launch, env, visible)
    return visible.everything()


def cpu_flag(launch: Launch, env: Mapping[str, str] | None) -> str | None:
    """The engine's own flag (or variable) that keeps the model on the CPU, as written."""
    if launch.dialect == "vllm":
        device = lookup(DEVICE, launch, env)
        return device[0] if device and device[1].strip().lower() == "cpu" else None
    layers = lookup(LAYERS, launch, env)
    if layers is not None and int_value(layers[1]) == 0:
        return layers[0]
    if launch.dialect == "llama-cpp-python" and layers is None and env is not None:
        return "no --n_gpu_layers (llama-cpp-python's default is 0 layers on the GPU)"
    device = lookup(DEVICE, launch, env)
    if device is not None and device[1].strip().lower() == "none":
        return device[0]
    split = lookup(SPLIT_MODE, launch, env)
    main = lookup(MAIN_GPU, launch, env)
    if split is not None and _split_none(split[1]) and main is not None:
        index = int_value(main[1])
        if index is not None and index < 0:
            return f"{split[0]} {main[0]}"  # llama.cpp: no main GPU, no GPU at all
    return None


def _untold(launch: Launch, env: Mapping[str, str] | None, silent: Sequence[str]) -> Intent:
    """Meant for GPUs, on a node whose GPU tools did not answer to say which GPUs it has."""
    said = lookup(LAYERS, launch, env) or lookup(DEVICE, launch, env)
    if said is not None:
        request = said[0]
    elif launch.dialect == "vllm":
        request = "vLLM without --device cpu"
    elif launch.dialect == "ollama":
        request = "an Ollama runner, which offloads what fits"
    else:
        request = "no -ngl; recent llama.cpp builds offload by default"
    tools = f" ({', '.join(silent)})" if silent else ""
    return Intent(
        unknown=f"it asks for GPUs ({request}), but no GPU tool answered on this node{tools}; "
        "run `placewatch doctor` to see why",
        gpu_request=request,
    )


def _masks_hide_all(env: Mapping[str, str] | None) -> str | None:
    """The device masks as written when they hide every GPU of either vendor ("", "-1"),
    read without knowing the node's GPUs. NVIDIA's runtime reads CUDA_VISIBLE_DEVICES; ROCm
    filters by ROCR_VISIBLE_DEVICES, then indexes by HIP_VISIBLE_DEVICES, or else
    CUDA_VISIBLE_DEVICES."""
    if env is None:
        return None

    def hides(variable: str) -> bool:
        first = env[variable].split(",")[0].strip() if variable in env else None
        return first is not None and (first == "" or (first[:1] == "-" and first[1:].isdigit()))

    nvidia = hides("CUDA_VISIBLE_DEVICES")
    amd_index = "HIP_VISIBLE_DEVICES" if "HIP_VISIBLE_DEVICES" in env else "CUDA_VISIBLE_DEVICES"
    amd = hides("ROCR_VISIBLE_DEVICES") or hides(amd_index)
    if not (nvidia and amd):
        return None
    written = [f"{v}={env[v]}" for v in AMD_VARIABLES if v in env and hides(v)]
    return " ".join(written)


def _split_none(value: str) -> bool:
    """llama.cpp spells it `none`; llama-cpp-python takes LLAMA_SPLIT_MODE_NONE, 0."""
    return value.strip().lower() in ("none", "0")


class _Visible:
    """The GPUs a process may use, per vendor, in its runtime's order (physical indices)."""

    def __init__(self, env: Mapping[str, str], gpus: Sequence[GpuSample]) -> None:
        self.lists: dict[str, list[int]] = {}
        self.masks: dict[str, DeviceMask] = {}
        self.problems: dict[str, str] = {}
        self.empty_mask: Intent | None = None
        """What the masks say when they leave no GPU at all; None while one is left."""
        for vendor in _VENDORS:
            mine = sorted((g for g in gpus if g.vendor == vendor), key=lambda g: g.index)
            if not mine:
                continue
            mask = translate(env, vendor, gpus)
            self.masks[vendor] = mask
            if mask.untranslatable is not None:
                self.problems[vendor] = mask.untranslatable
            elif mask.indices is not None:
                self.lists[vendor] = list(mask.indices)
            else:
                self.lists[vendor] = [g.index for g in mine]
        if self.masks and not self.problems and not any(self.lists.values()):
            self.empty_mask = _mask_hides_all(env, list(self.masks.values()), gpus)
        self._order = {v: _order_problem(env, v, gpus, m) for v, m in self.masks.items()}

    def vendor(self, vendor: str) -> list[int] | str:
        """The visible list of one vendor, or why it cannot be told."""
        if vendor in self.problems:
            return self.problems[vendor]
        if vendor not in self.lists:
            return f"this node has no {_VENDOR_NAMES[vendor]} GPU"
        return self.lists[vendor]

    def everything(self) -> Intent:
        if self.problems:
            return Intent(unknown=next(iter(self.problems.values())))
        return Intent(gpus=tuple(sorted(i for lst in self.lists.values() for i in lst)))

    def check_order(self, vendor: str, chosen: Collection[int]) -> str | None:
        """Why picking `chosen` by runtime number cannot be told, when it is a proper subset."""
        if set(chosen) >= set(self.lists.get(vendor, ())):
            return None  # every visible GPU: the order does not matter
        return self._order.get(vendor)


def _mask_hides_all(
    env: Mapping[str, str], masks: list[DeviceMask], gpus: Sequence[GpuSample]
) -> Intent:
    """A mask that leaves no GPU: the CPU on purpose when it says so ("", "-1"), else a mistake."""
    written = []
    on_purpose = False
    for mask in masks:
        for variable in (mask.variable or "").split("+"):
            if variable in env:
                value = env[variable]
                written.append(f"{variable}={value}")
                first = value.split(",")[0].strip()
                on_purpose |= first == "" or (first.startswith("-") and first[1:].isdigit())
    text = " ".join(dict.fromkeys(written))
    if on_purpose:
        return Intent(cpu=text)
    indices = ", ".join(str(g.index) for g in sorted(gpus, key=lambda g: g.index))
    return Intent(
        unknown=f"{text} names no GPU of this node (GPUs {indices}); check the mask, "
        "or the GPU tools' list of this node's GPUs"
    )


def _order_problem(
    env: Mapping[str, str], vendor: str, gpus: Sequence[GpuSample], mask: DeviceMask
) -> str | None:
    """Why runtime device numbers are not bus order here, when they may not be.

    A mask lists devices in its own order, which translate() already read.
    Unmasked, CUDA numbers devices fastest first unless
    CUDA_DEVICE_ORDER=PCI_BUS_ID; on identical GPUs ties fall back to bus order.
    """
    if vendor != "nvidia" or mask.masked:
        return None
    order = env.get("CUDA_DEVICE_ORDER", "").strip().upper()
    if order == "PCI_BUS_ID":
        return None
    if order == "FASTEST_FIRST":
        return (
            "CUDA_DEVICE_ORDER=FASTEST_FIRST numbers GPUs by speed, not bus order, "
            "so which one it picked cannot be told"
        )
    if len({g.name for g in gpus if g.vendor == "nvidia"}) > 1:
        return (
            "CUDA_DEVICE_ORDER is unset (fastest first) on a node of mixed GPUs, so which "
            "GPU it picked cannot be told; set CUDA_DEVICE_ORDER=PCI_BUS_ID"
        )
    return None


def _llama_gpus(launch: Launch, env: Mapping[str, str], visible: _Visible) -> Intent:
    """llama.cpp's device list (-dev), then -sm none's one main GPU (-mg) of it."""
    devices = _llama_devices(launch, env, visible)
    if isinstance(devices, str):
        return Intent(unknown=devices)
    split = lookup(SPLIT_MODE, launch, env)
    if split is not None and _split_none(split[1]):
        main = _main_gpu(split[0], lookup(MAIN_GPU, launch, env), devices)
        if isinstance(main, str):
            return Intent(unknown=main)
        devices = [main]
    for vendor in dict.fromkeys(v for v, _ in devices):
        problem = visible.check_order(vendor, [i for v, i in devices if v == vendor])
        if problem is not None:
            return Intent(unknown=problem)
    return Intent(gpus=tuple(sorted({i for _, i in devices})))


def _llama_devices(
    launch: Launch, env: Mapping[str, str], visible: _Visible
) -> list[_Device] | str:
    """The devices -dev names in the runtime's numbering, else every visible one; or why not."""
    device = lookup(DEVICE, launch, env)
    if device is None:
        everything = visible.everything()
        if everything.unknown is not None:
            return everything.unknown
        return [(v, i) for v in _VENDORS for i in visible.lists.get(v, ())]
    devices: list[_Device] = []
    for name in (n.strip() for n in device[1].split(",")):
        found = _RUNTIME_DEVICE.fullmatch(name.lower())
        if found is None:
            return (
                f"{device[0]} names {name}, whose number is not a CUDA or ROCm "
                "device number; place this shard in a shards file"
            )
        vendor = "nvidia" if found[1] == "cuda" else "amd"
        runtime = visible.vendor(vendor)
        if isinstance(runtime, str):
            return runtime
        position = int(found[2])
        if position >= len(runtime):
            return (
                f"{device[0]} names {name}, but only {len(runtime)} "
                f"{_VENDOR_NAMES[vendor]} GPU(s) are visible to it"
            )
        devices.append((vendor, runtime[position]))
    return devices


def _main_gpu(split: str, main: tuple[str, str] | None, devices: list[_Device]) -> _Device | str:
    """The one device `-sm none` computes on (`-mg`, default 0), or why it cannot be told."""
    index = int_value(main[1]) if main is not None else 0
    if len({v for v, _ in devices}) > 1:
        return f"{split} on NVIDIA and AMD GPUs: which is its first device depends on the build"
    if index is None or not 0 <= index < len(devices):
        return (
            f"{split} with {main[0] if main else 'main GPU 0'}, but it sees {len(devices)} GPU(s)"
        )
    return devices[index]


def _vllm_gpus(launch: Launch, env: Mapping[str, str], visible: _Visible) -> Intent:
    """vLLM takes the first tensor x pipeline x local data parallel visible GPUs."""
    platforms = [v for v in _VENDORS if visible.lists.get(v) or v in visible.problems]
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
