"""Device masks: which physical GPUs a process may use, from its environment.

CUDA_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES and ROCR_VISIBLE_DEVICES hold
indices or UUIDs in the *runtime's* numbering, which is not always the
physical (PCI bus) order that nvidia-smi and rocm-smi print:

- CUDA numbers devices fastest first unless CUDA_DEVICE_ORDER=PCI_BUS_ID.
  On a node of identical GPUs the two orders agree (ties fall back to bus
  order), so an unset order is translated there; an explicit FASTEST_FIRST,
  or an unset order over mixed GPUs, is reported as untranslatable.
- CUDA stops reading the list at the first invalid entry
  ("0,2,-1,1" means 0 and 2); UUIDs may be given as unique prefixes.
- MIG instances (MIG-... UUIDs) are slices of a GPU, not GPUs: reported as
  such rather than guessed to a parent.
- Intel's masks (ZE_AFFINITY_MASK, ONEAPI_DEVICE_SELECTOR, GGML_VK_VISIBLE_DEVICES) are
  read in intel_masks.py.
- On AMD, ROCR_VISIBLE_DEVICES filters first, then HIP_VISIBLE_DEVICES (or
  CUDA_VISIBLE_DEVICES, which HIP honours too) indexes into what is left.
  ROCm accepts UUIDs as "GPU-<hex>", the hex of rocm-smi's Unique ID.

A mask that cannot be translated is never guessed: it says why.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from placewatch.schemas import GpuSample

AMD_VARIABLES = ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")
_SHOWN = 80
"""The most of a value a reason quotes: it is the process owner's text."""


def shown(value: str) -> str:
    """A variable's value, or a flag's, as a reason may quote it: printable, and cut short."""
    text = "".join(c if c.isprintable() else "?" for c in value)
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "..."


@dataclass(frozen=True)
class DeviceMask:
    """What a process's environment says about its GPUs of one vendor.

    `indices` is None when no variable restricts it (every GPU) or when the
    mask could not be translated; `untranslatable` then says why. An empty
    tuple is a mask that hides every GPU: the CPU on purpose.
    """

    variable: str | None
    indices: tuple[int, ...] | None
    untranslatable: str | None = None

    @property
    def masked(self) -> bool:
        return self.variable is not None


def translate(env: Mapping[str, str], vendor: str, gpus: Sequence[GpuSample]) -> DeviceMask:
    """The physical indices a process with `env` may use among this node's `gpus`."""
    mine = sorted((g for g in gpus if g.vendor == vendor), key=lambda g: g.index)
    if vendor == "amd":
        return _amd(env, mine)
    if vendor == "intel":
        from .intel_masks import translate_intel  # noqa: PLC0415 - it imports DeviceMask

        return translate_intel(env, mine)
    return _nvidia(env, mine)


def _nvidia(env: Mapping[str, str], gpus: list[GpuSample]) -> DeviceMask:
    variable = "CUDA_VISIBLE_DEVICES"
    if variable not in env:
        return DeviceMask(None, None)
    entries = _entries(env[variable])
    order = env.get("CUDA_DEVICE_ORDER", "").strip().upper()
    uses_indices = any(_is_index(e) for e in entries)
    if uses_indices and order == "FASTEST_FIRST":
        return DeviceMask(
            variable, None, "CUDA_DEVICE_ORDER=FASTEST_FIRST numbers GPUs by speed, not bus order"
        )
    if uses_indices and order != "PCI_BUS_ID" and len({g.name for g in gpus}) > 1:
        return DeviceMask(
            variable,
            None,
            "CUDA_DEVICE_ORDER is unset (fastest first) on a node of mixed GPUs; "
            "set CUDA_DEVICE_ORDER=PCI_BUS_ID",
        )
    return _select(variable, entries, gpus, lambda g: g.uuid)


def _amd(env: Mapping[str, str], gpus: list[GpuSample]) -> DeviceMask:
    visible = gpus
    used: list[str] = []
    if "ROCR_VISIBLE_DEVICES" in env:
        mask = _select(
            "ROCR_VISIBLE_DEVICES", _entries(env["ROCR_VISIBLE_DEVICES"]), gpus, _amd_uuid
        )
        if mask.indices is None:
            return mask
        by_index = {g.index: g for g in gpus}
        visible = [by_index[i] for i in mask.indices]  # in ROCR's order: HIP counts in it
        used.append("ROCR_VISIBLE_DEVICES")
    for variable in ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"):
        if variable in env:
            mask = _select(variable, _entries(env[variable]), visible, _amd_uuid)
            if mask.indices is None:
                return mask
            return DeviceMask("+".join([*used, variable]), mask.indices)
    if used:
        return DeviceMask(used[0], tuple(g.index for g in visible))
    return DeviceMask(None, None)


def _amd_uuid(gpu: GpuSample) -> str | None:
    """rocm-smi's Unique ID (0x1a2b...) in the form ROCm masks take (GPU-1a2b...)."""
    if not gpu.uuid:
        return None
    hexpart = gpu.uuid.lower().removeprefix("gpu-").removeprefix("0x")
    return f"GPU-{hexpart}"


def _entries(value: str) -> list[str]:
    return [e.strip() for e in value.split(",")] if value.strip() else []


def _is_index(entry: str) -> bool:
    return entry.lstrip("-").isdigit()


def _select(
    variable: str,
    entries: list[str],
    gpus: list[GpuSample],
    uuid_of: Callable[[GpuSample], str | None],
) -> DeviceMask:
    """Entries in runtime order -> physical indices; stops at the first invalid entry."""
    chosen: list[int] = []
    for entry in entries:
        if entry.upper().startswith("MIG-"):
            return DeviceMask(
                variable, None, f"{variable} names a MIG instance ({entry}), not a whole GPU"
            )
        if _is_index(entry):
            position = int(entry)
            if not 0 <= position < len(gpus):
                break  # the runtime ignores this entry and everything after it
            found = gpus[position]
        else:
            wanted = entry.lower()
            if not wanted.startswith("gpu-"):
                wanted = "gpu-" + wanted
            matches = [g for g in gpus if (uuid_of(g) or "").lower().startswith(wanted)]
            if len(matches) != 1:
                break  # unknown or ambiguous UUID: invalid, as the runtime treats it
            found = matches[0]
        if found.index in chosen:
            break  # a repeated device is invalid to CUDA
        chosen.append(found.index)
    return DeviceMask(variable, tuple(chosen))
