"""The GPUs an engine meant to use, from its device mask and its own flags.

What is the same for every engine is here: a configuration file placewatch does not read,
the engine's own CPU flags (its folder's `cpu_flag`) or device masks that hide every GPU,
a node whose GPU tools did not answer, an environment that could not be read. Which GPUs its
flags then pick from those its device masks leave is its folder's `gpus`.

A device mask that cannot be translated, or runtime device numbers whose order is not the
bus order, are reported as unknown, never guessed. So is an engine meant for GPUs on a node
where no GPU tool answered: an empty list of GPUs then says only that the tools are silent
(NVML not loading, nvidia-smi stuck on a GPU fallen off the bus), not that there is nothing
but the CPU.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from placewatch.schemas import GpuSample
from placewatch.worker.gpu.masks import AMD_VARIABLES

from ...engines import Intent, Launch, engine_of
from ...engines.flags import CONFIG_FILE, lookup
from ...engines.visible import Visible


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
    engine = engine_of(launch)
    config = lookup(CONFIG_FILE, launch, env)
    if config is not None:
        return Intent(
            unknown=f"its settings come from {config[0]}, which placewatch does not read; "
            "place this shard in a shards file to say which GPUs it should use"
        )
    cpu = engine.cpu_flag(launch, env) or (
        _masks_hide_all(env) if tools_silent is not None else None
    )
    if cpu is not None:
        return Intent(cpu=cpu)
    if not gpus and tools_silent is not None:
        request = engine.gpu_request(launch, env)
        tools = f" ({', '.join(tools_silent)})" if tools_silent else ""
        return Intent(
            unknown=f"it asks for GPUs ({request}), but no GPU tool answered on this node"
            f"{tools}; run `placewatch doctor` to see why",
            gpu_request=request,
        )
    if not gpus:
        return Intent()  # the tools answered, and saw nothing else to compute on
    if env is None:
        masks: list[str] = []
        if any(g.vendor != "intel" for g in gpus):
            masks += ["CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"]
        if any(g.vendor == "intel" for g in gpus):
            masks += ["ONEAPI_DEVICE_SELECTOR", "ZE_AFFINITY_MASK"]
        return Intent(
            unknown=f"its environment could not be read for a device mask ({', '.join(masks)}); "
            "run the worker as root or as the engine's user, or place this shard in a shards file"
        )
    visible = Visible(env, gpus)
    if visible.empty_mask is not None:
        return visible.empty_mask
    return engine.gpus(launch, env, visible)


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
