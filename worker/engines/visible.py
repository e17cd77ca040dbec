"""The GPUs a process may use, read from its device masks, as engines number them.

An engine picks GPUs by its runtime's numbers, which count the GPUs its device masks leave
(CUDA_VISIBLE_DEVICES, HIP_/ROCR_VISIBLE_DEVICES in the mask's order; ZE_AFFINITY_MASK and
ONEAPI_DEVICE_SELECTOR in Level Zero's); `Visible` turns them into the node's physical
indices, or says why that cannot be told.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from placewatch.schemas import GpuSample
from placewatch.worker.gpu.masks import DeviceMask, shown, translate

from .base import Intent

VENDORS = ("nvidia", "amd", "intel")
VENDOR_NAMES = {"nvidia": "NVIDIA", "amd": "AMD", "intel": "Intel"}
CUDA_AND_ROCM = ("nvidia", "amd")
"""The platforms vLLM and SGLang are read on."""

Device = tuple[str, int]
"""A GPU an engine picked: its vendor and its physical index."""


class Visible:
    """The GPUs a process may use, per vendor, in its runtime's order (physical indices)."""

    def __init__(self, env: Mapping[str, str], gpus: Sequence[GpuSample]) -> None:
        self.lists: dict[str, list[int]] = {}
        self.masks: dict[str, DeviceMask] = {}
        self.problems: dict[str, str] = {}
        self.empty_mask: Intent | None = None
        """What the masks say when they leave no GPU at all; None while one is left."""
        for vendor in VENDORS:
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
            self.empty_mask = mask_hides_all(env, list(self.masks.values()), gpus)
        self._order = {v: order_problem(env, v, gpus, m) for v, m in self.masks.items()}

    def vendor(self, vendor: str) -> list[int] | str:
        """The visible list of one vendor, or why it cannot be told."""
        if vendor in self.problems:
            return self.problems[vendor]
        if vendor not in self.lists:
            return f"this node has no {VENDOR_NAMES[vendor]} GPU"
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


def mask_hides_all(
    env: Mapping[str, str], masks: list[DeviceMask], gpus: Sequence[GpuSample]
) -> Intent:
    """A mask that leaves no GPU: the CPU on purpose when it says so ("", "-1"), else a mistake."""
    written = []
    on_purpose = False
    for mask in masks:
        for variable in (mask.variable or "").split("+"):
            if variable in env:
                value = env[variable]
                written.append(f"{variable}={shown(value)}")
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


def order_problem(
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
