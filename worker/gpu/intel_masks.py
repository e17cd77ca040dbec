"""Intel device masks: the physical Intel GPUs a process may use, from its environment.

Read from the sources that define them (tests/fixtures/intel-masks/README.md cites each):

- ZE_AFFINITY_MASK (the Level Zero specification): a comma-separated list of device
  ordinals `N` or sub-device ordinals `N.M`. The driver reports only those, renumbered from
  0 in its own order, not the mask's. That order is the driver's choice unless
  ZE_ENABLE_PCI_ID_DEVICE_ORDER=1 (lowest PCI bus id first); Intel's driver has defaulted
  to either over the years. Under ZE_FLAT_DEVICE_HIERARCHY=FLAT each tile of a multi-tile
  GPU (Data Center GPU Max) is a device of its own.
- ONEAPI_DEVICE_SELECTOR (DPC++'s runtime): `;`-separated filters `[!]backend:devices`,
  devices `,`-separated: `*`, `gpu`, `cpu`, `fpga`, an index, or a sub-device `N.M`, `N.*`,
  `*.*`. Accepting filters come first; `!` ones discard; only discarding filters accept
  everything else. Indices count the backend's devices: for `level_zero`, those Level Zero
  reports after ZE_AFFINITY_MASK. Devices keep the backend's order. An empty value selects
  everything.
- GGML_VK_VISIBLE_DEVICES (llama.cpp's Vulkan backend): indices into the Vulkan loader's
  list of physical devices, which counts every vendor's GPUs and CPU renderers in an order
  no GPU tool gives.

Only Level Zero indices are translated, and only where their order is certain: one Intel
GPU, or ZE_ENABLE_PCI_ID_DEVICE_ORDER=1 (and ZE_FLAT_DEVICE_HIERARCHY=COMPOSITE where a GPU
may have several tiles). Sub-devices, OpenCL indices and Vulkan indices are reported, never
guessed. A value no runtime accepts is reported naming its variable.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from placewatch.schemas import GpuSample

from .masks import DeviceMask, shown

BACKENDS = ("level_zero", "opencl", "cuda", "hip", "native_cpu", "*")
_INDEX = re.compile(r"\d{1,4}")
_STOI = re.compile(r"[+-]?\d{1,9}(?!\d)")
"""What std::stoi reads of a device term: a number at its start, the rest ignored."""
_SUB_DEVICE = re.compile(r"(?:\d{1,4}|\*)(?:\.(?:\d{1,4}|\*)){1,2}")


def translate_intel(env: Mapping[str, str], gpus: Sequence[GpuSample]) -> DeviceMask:
    """The physical indices of `gpus` (Intel's) a process with `env` may use, or why not."""
    if "GGML_VK_VISIBLE_DEVICES" in env:
        return DeviceMask(
            "GGML_VK_VISIBLE_DEVICES",
            None,
            f"GGML_VK_VISIBLE_DEVICES={shown(env['GGML_VK_VISIBLE_DEVICES'])} numbers Vulkan "
            "devices in the Vulkan loader's order, which counts every vendor's GPUs and CPU "
            "renderers and which no GPU tool gives, so which GPUs it names cannot be told",
        )
    devices = sorted(gpus, key=lambda g: (g.bus_id or "", g.index))
    used: list[str] = []
    if "ZE_AFFINITY_MASK" in env:
        picked = _affinity(env, devices)
        if isinstance(picked, str):
            return DeviceMask("ZE_AFFINITY_MASK", None, picked)
        devices = picked
        used.append("ZE_AFFINITY_MASK")
    selector = env.get("ONEAPI_DEVICE_SELECTOR", "")
    if selector.strip():
        picked = _selector(env, selector, devices)
        if isinstance(picked, str):
            return DeviceMask("ONEAPI_DEVICE_SELECTOR", None, picked)
        devices = picked
        used.append("ONEAPI_DEVICE_SELECTOR")
    if not used:
        return DeviceMask(None, None)
    return DeviceMask("+".join(used), tuple(g.index for g in devices))


def _order_problem(
    env: Mapping[str, str], variable: str, value: str, devices: Sequence[GpuSample]
) -> str | None:
    """Why Level Zero's device numbers are not bus order here, where they may not be."""
    said = f"{variable}={shown(value)}"
    tiled = [g for g in devices if _may_have_tiles(g)]
    if tiled and env.get("ZE_FLAT_DEVICE_HIERARCHY", "").strip().upper() != "COMPOSITE":
        return (
            f"{said} numbers Level Zero devices, and GPU {tiled[0].index} may have several "
            "tiles, each a device of its own unless ZE_FLAT_DEVICE_HIERARCHY=COMPOSITE; "
            "set ZE_FLAT_DEVICE_HIERARCHY=COMPOSITE"
        )
    if len(devices) > 1 and env.get("ZE_ENABLE_PCI_ID_DEVICE_ORDER", "").strip() != "1":
        return (
            f"{said} numbers Level Zero devices in the driver's order, which is bus order "
            "only with ZE_ENABLE_PCI_ID_DEVICE_ORDER=1; set ZE_ENABLE_PCI_ID_DEVICE_ORDER=1"
        )
    return None


def _may_have_tiles(gpu: GpuSample) -> bool:
    """A Data Center GPU Max (PCI device 0x0bd*), the Intel GPU made of several tiles."""
    name = (gpu.name or "").lower()
    return "gpu max" in name or "8086:0bd" in name


def _affinity(env: Mapping[str, str], devices: list[GpuSample]) -> list[GpuSample] | str:
    value = env["ZE_AFFINITY_MASK"]
    said = f"ZE_AFFINITY_MASK={shown(value)}"
    entries = [e.strip() for e in value.split(",")]
    if not value.strip() or "" in entries:
        return f"{said} is not a list of device ordinals (0,1 or 0.1) as Level Zero writes them"
    ordinals: set[int] = set()
    for entry in entries:
        if _SUB_DEVICE.fullmatch(entry) and "*" not in entry:
            return (
                f"ZE_AFFINITY_MASK names a sub-device ({entry}), a tile of a GPU, not a whole GPU"
            )
        if not _INDEX.fullmatch(entry):
            return f"{said} is not a list of device ordinals (0,1 or 0.1) as Level Zero writes them"
        ordinals.add(int(entry))
    problem = _order_problem(env, "ZE_AFFINITY_MASK", value, devices)
    if problem is not None:
        return problem
    # Reported in the driver's order, renumbered from 0; an ordinal past the last device
    # names nothing.
    return [g for i, g in enumerate(devices) if i in ordinals]


def _selector(
    env: Mapping[str, str], value: str, devices: list[GpuSample]
) -> list[GpuSample] | str:
    """ONEAPI_DEVICE_SELECTOR over the Level Zero devices left: DPC++'s parser's rules."""
    said = f"ONEAPI_DEVICE_SELECTOR={shown(value)}"
    garbage = (
        f"{said} is not a selector DPC++ accepts ([!]backend:devices, such as level_zero:0 "
        "or level_zero:*)"
    )
    accepted: set[int] = set()
    discarded: set[int] = set()
    discarding = False
    accepts = 0
    for raw in value.lower().split(";"):
        entry = raw.strip()
        if not entry:
            continue
        negative = entry.startswith("!")
        backend, colon, terms = entry.removeprefix("!").partition(":")
        if not colon or ":" in terms or backend not in BACKENDS or not terms:
            return garbage
        if discarding and not negative:
            return garbage  # DPC++ wants every discarding filter after the accepting ones
        discarding |= negative
        accepts += not negative
        for term in (t.strip() for t in terms.split(",") if t.strip()):
            picked = _term(env, value, backend, term, negative=negative, devices=devices)
            if picked is None:
                return garbage
            if isinstance(picked, str):
                return picked
            (discarded if negative else accepted).update(picked)
    if not accepts:
        accepted = set(range(len(devices)))  # only discarding filters: all else is accepted
    return [g for i, g in enumerate(devices) if i in accepted and i not in discarded]


def _term(
    env: Mapping[str, str],
    value: str,
    backend: str,
    term: str,
    *,
    negative: bool,
    devices: list[GpuSample],
) -> set[int] | str | None:
    """The Level Zero devices (positions in `devices`) one term selects; a reason where that
    cannot be told; None where DPC++ refuses the term."""
    intel = backend in ("level_zero", "opencl", "*")
    if _SUB_DEVICE.fullmatch(term):
        if not intel:
            return set()
        return (
            f"ONEAPI_DEVICE_SELECTOR names a sub-device ({backend}:{term}), a tile of a GPU, "
            "not a whole GPU"
        )
    number = _STOI.match(term)
    if "." in term or (term not in ("*", "gpu", "cpu", "fpga") and number is None):
        return None
    if term in ("cpu", "fpga") or (number is not None and int(number[0]) < 0):
        return set()  # no GPU; a negative index is no device
    # `*:N` accepts OpenCL's device N too, which may be another GPU.
    if backend == "opencl" or (backend == "*" and not negative and term not in {"*", "gpu"}):
        if negative:
            return set()  # discarding OpenCL's devices leaves Level Zero's
        return (
            f"ONEAPI_DEVICE_SELECTOR={shown(value)} selects Intel GPUs through OpenCL, whose "
            "device order no GPU tool gives; select them as level_zero devices"
        )
    if not intel:
        return set()  # another backend's devices: no Level Zero GPU
    if term in ("*", "gpu"):
        return set(range(len(devices)))
    problem = _order_problem(env, "ONEAPI_DEVICE_SELECTOR", value, devices)
    if problem is not None:
        return problem
    return {int(number[0]) if number else -1} & set(range(len(devices)))
