"""Intel's device masks translated to physical indices, or reported with a reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from placewatch.schemas import GpuSample
from placewatch.worker.gpu.masks import DeviceMask, translate

from tests.support.discovery import INTEL, PCI_ORDER

EXAMPLES = Path(__file__).parents[2] / "fixtures" / "intel-masks" / "examples.tsv"
ROWS = [line.split("\t") for line in EXAMPLES.read_text().splitlines() if line]
ONE = [INTEL[1]]
MAX = [
    GpuSample(
        index=i,
        vendor="intel",
        name="Intel(R) Data Center GPU Max 1550",
        bus_id=f"0000:{i + 0x18:02x}:00.0",
    )
    for i in range(2)
]
SYSFS_MAX = [GpuSample(index=0, vendor="intel", name="Intel GPU 8086:0bd5 (xe)")]


@pytest.mark.parametrize(("variable", "value", "expected", "source"), ROWS)
def test_the_upstream_examples(variable: str, value: str, expected: str, source: str) -> None:
    mask = translate({variable: value, **PCI_ORDER}, "intel", INTEL)
    kind, _, said = expected.partition(":")
    if kind == "gpus":
        wanted = tuple(int(i) for i in said.split(",")) if said else ()
        assert (mask.indices, mask.untranslatable) == (wanted, None), source
    else:
        assert mask.indices is None
        assert mask.untranslatable is not None and said in mask.untranslatable, source
        assert variable in mask.untranslatable or "sub-device" in mask.untranslatable


def test_every_source_of_the_examples_is_cited() -> None:
    readme = (EXAMPLES.parent / "README.md").read_text()
    cited = {source.split(" ")[0] for *_, source in ROWS}
    assert cited == {"EnvironmentVariables.md", "device_filter.cpp", "PROG.rst", "ggml-vulkan.cpp"}
    assert all(name in readme for name in cited)


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, DeviceMask(None, None)),
        ({"ONEAPI_DEVICE_SELECTOR": ""}, DeviceMask(None, None)),  # empty selects everything
        # positive
        (
            {"ONEAPI_DEVICE_SELECTOR": "level_zero:0,1"},
            DeviceMask("ONEAPI_DEVICE_SELECTOR", (0, 1)),
        ),
        ({"ONEAPI_DEVICE_SELECTOR": "level_zero:1"}, DeviceMask("ONEAPI_DEVICE_SELECTOR", (1,))),
        ({"ONEAPI_DEVICE_SELECTOR": "LEVEL_ZERO:1"}, DeviceMask("ONEAPI_DEVICE_SELECTOR", (1,))),
        # the backend's order, not the selector's
        (
            {"ONEAPI_DEVICE_SELECTOR": "level_zero:1,0"},
            DeviceMask("ONEAPI_DEVICE_SELECTOR", (0, 1)),
        ),
        # wildcards and device types
        ({"ONEAPI_DEVICE_SELECTOR": "level_zero:*"}, DeviceMask("ONEAPI_DEVICE_SELECTOR", (0, 1))),
        ({"ONEAPI_DEVICE_SELECTOR": "*:gpu"}, DeviceMask("ONEAPI_DEVICE_SELECTOR", (0, 1))),
        ({"ONEAPI_DEVICE_SELECTOR": "*:*"}, DeviceMask("ONEAPI_DEVICE_SELECTOR", (0, 1))),
        ({"ONEAPI_DEVICE_SELECTOR": "level_zero:cpu"}, DeviceMask("ONEAPI_DEVICE_SELECTOR", ())),
        ({"ONEAPI_DEVICE_SELECTOR": "cuda:*"}, DeviceMask("ONEAPI_DEVICE_SELECTOR", ())),
        # negative
        ({"ONEAPI_DEVICE_SELECTOR": "!level_zero:1"}, DeviceMask("ONEAPI_DEVICE_SELECTOR", (0,))),
        (
            {"ONEAPI_DEVICE_SELECTOR": "level_zero:*;!level_zero:0"},
            DeviceMask("ONEAPI_DEVICE_SELECTOR", (1,)),
        ),
        ({"ONEAPI_DEVICE_SELECTOR": "!level_zero:*"}, DeviceMask("ONEAPI_DEVICE_SELECTOR", ())),
        (
            {"ONEAPI_DEVICE_SELECTOR": "level_zero:*;!opencl:*"},
            DeviceMask("ONEAPI_DEVICE_SELECTOR", (0, 1)),
        ),
        ({"ONEAPI_DEVICE_SELECTOR": "level_zero:7"}, DeviceMask("ONEAPI_DEVICE_SELECTOR", ())),
        # DPC++ skips empty terms, reads a number at a term's start, and -1 as no device
        (
            {"ONEAPI_DEVICE_SELECTOR": "level_zero:0,,1"},
            DeviceMask("ONEAPI_DEVICE_SELECTOR", (0, 1)),
        ),
        ({"ONEAPI_DEVICE_SELECTOR": "level_zero:1st"}, DeviceMask("ONEAPI_DEVICE_SELECTOR", (1,))),
        ({"ONEAPI_DEVICE_SELECTOR": "level_zero:-1"}, DeviceMask("ONEAPI_DEVICE_SELECTOR", ())),
        # ZE_AFFINITY_MASK: renumbered from 0 in the driver's order
        ({"ZE_AFFINITY_MASK": "0,1"}, DeviceMask("ZE_AFFINITY_MASK", (0, 1))),
        ({"ZE_AFFINITY_MASK": "1,0"}, DeviceMask("ZE_AFFINITY_MASK", (0, 1))),
        ({"ZE_AFFINITY_MASK": "1"}, DeviceMask("ZE_AFFINITY_MASK", (1,))),
        ({"ZE_AFFINITY_MASK": "1,5"}, DeviceMask("ZE_AFFINITY_MASK", (1,))),
        # ONEAPI_DEVICE_SELECTOR counts what ZE_AFFINITY_MASK leaves
        (
            {"ZE_AFFINITY_MASK": "1", "ONEAPI_DEVICE_SELECTOR": "level_zero:0"},
            DeviceMask("ZE_AFFINITY_MASK+ONEAPI_DEVICE_SELECTOR", (1,)),
        ),
        (
            {"ZE_AFFINITY_MASK": "1", "ONEAPI_DEVICE_SELECTOR": "level_zero:1"},
            DeviceMask("ZE_AFFINITY_MASK+ONEAPI_DEVICE_SELECTOR", ()),
        ),
    ],
)
def test_level_zero_masks_in_bus_order(env: dict[str, str], expected: DeviceMask) -> None:
    assert translate({**env, **PCI_ORDER}, "intel", INTEL) == expected


@pytest.mark.parametrize(
    ("env", "reason"),
    [
        (
            {"ONEAPI_DEVICE_SELECTOR": "level_zero:0.1"},
            "ONEAPI_DEVICE_SELECTOR names a sub-device (level_zero:0.1), a tile of a GPU, "
            "not a whole GPU",
        ),
        (
            {"ZE_AFFINITY_MASK": "0.1"},
            "ZE_AFFINITY_MASK names a sub-device (0.1), a tile of a GPU, not a whole GPU",
        ),
        (
            {"ONEAPI_DEVICE_SELECTOR": "*:0"},
            "ONEAPI_DEVICE_SELECTOR=*:0 selects Intel GPUs through OpenCL, whose device order "
            "no GPU tool gives; select them as level_zero devices",
        ),
        (
            {"GGML_VK_VISIBLE_DEVICES": "0,2", "ONEAPI_DEVICE_SELECTOR": "level_zero:0"},
            "GGML_VK_VISIBLE_DEVICES=0,2 numbers Vulkan devices in the Vulkan loader's order, "
            "which counts every vendor's GPUs and CPU renderers and which no GPU tool gives, "
            "so which GPUs it names cannot be told",
        ),
    ],
)
def test_what_names_no_whole_gpu_in_a_known_order_is_reported(
    env: dict[str, str], reason: str
) -> None:
    mask = translate({**env, **PCI_ORDER}, "intel", INTEL)
    assert (mask.indices, mask.untranslatable) == (None, reason)


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("ONEAPI_DEVICE_SELECTOR", "gpu"),
        ("ONEAPI_DEVICE_SELECTOR", "vulkan:0"),
        ("ONEAPI_DEVICE_SELECTOR", "level_zero:"),
        ("ONEAPI_DEVICE_SELECTOR", "level_zero:zero"),
        ("ONEAPI_DEVICE_SELECTOR", "level_zero:a1"),
        ("ONEAPI_DEVICE_SELECTOR", "level_zero:99999999999"),
        ("ONEAPI_DEVICE_SELECTOR", "level_zero:0.1.2.3"),
        ("ZE_AFFINITY_MASK", ""),
        ("ZE_AFFINITY_MASK", "0,,1"),
        ("ZE_AFFINITY_MASK", "all"),
        ("ZE_AFFINITY_MASK", "-1"),
        ("ZE_AFFINITY_MASK", "0.*"),
    ],
)
def test_garbage_says_which_variable_is_wrong(variable: str, value: str) -> None:
    mask = translate({variable: value, **PCI_ORDER}, "intel", INTEL)
    assert mask.indices is None
    assert mask.untranslatable is not None
    assert mask.untranslatable.startswith(f"{variable}={value} is not a ")


def test_hostile_garbage_is_quoted_printable_and_short() -> None:
    value = "level_zero:\x1b[31m" + "9" * 5000
    mask = translate({"ONEAPI_DEVICE_SELECTOR": value}, "intel", INTEL)
    assert mask.untranslatable is not None
    assert mask.untranslatable.startswith("ONEAPI_DEVICE_SELECTOR=level_zero:?[31m999")
    assert "\x1b" not in mask.untranslatable
    assert len(mask.untranslatable) < 300


def test_indices_over_several_gpus_need_the_bus_order_said() -> None:
    mask = translate({"ONEAPI_DEVICE_SELECTOR": "level_zero:1"}, "intel", INTEL)
    assert (mask.indices, mask.untranslatable) == (
        None,
        "ONEAPI_DEVICE_SELECTOR=level_zero:1 numbers Level Zero devices in the driver's "
        "order, which is bus order only with ZE_ENABLE_PCI_ID_DEVICE_ORDER=1; set "
        "ZE_ENABLE_PCI_ID_DEVICE_ORDER=1",
    )
    mask = translate({"ZE_AFFINITY_MASK": "0"}, "intel", INTEL)
    assert mask.untranslatable is not None and "ZE_AFFINITY_MASK=0 numbers" in mask.untranslatable
    # wildcards name every device whatever the order; one GPU has one order
    assert translate({"ONEAPI_DEVICE_SELECTOR": "level_zero:*"}, "intel", INTEL).indices == (0, 1)
    assert translate({"ONEAPI_DEVICE_SELECTOR": "level_zero:0"}, "intel", ONE).indices == (1,)


def test_a_gpu_of_several_tiles_needs_the_composite_hierarchy_said() -> None:
    env = {"ONEAPI_DEVICE_SELECTOR": "level_zero:1", **PCI_ORDER}
    mask = translate(env, "intel", MAX)
    assert (mask.indices, mask.untranslatable) == (
        None,
        "ONEAPI_DEVICE_SELECTOR=level_zero:1 numbers Level Zero devices, and GPU 0 may have "
        "several tiles, each a device of its own unless ZE_FLAT_DEVICE_HIERARCHY=COMPOSITE; "
        "set ZE_FLAT_DEVICE_HIERARCHY=COMPOSITE",
    )
    composite = {**env, "ZE_FLAT_DEVICE_HIERARCHY": "COMPOSITE"}
    assert translate(composite, "intel", MAX).indices == (1,)
    sysfs = translate({"ZE_AFFINITY_MASK": "0"}, "intel", SYSFS_MAX)
    assert sysfs.untranslatable is not None and "several tiles" in sysfs.untranslatable


def test_the_other_vendors_masks_do_not_touch_intel_gpus() -> None:
    env = {"CUDA_VISIBLE_DEVICES": "0", "HIP_VISIBLE_DEVICES": "1"}
    assert translate(env, "intel", INTEL) == DeviceMask(None, None)
    both = [*INTEL, GpuSample(index=2, uuid="GPU-aaaa", name="NVIDIA L4")]
    cuda = {"ONEAPI_DEVICE_SELECTOR": "level_zero:0", "CUDA_VISIBLE_DEVICES": "0"}
    assert translate(cuda, "nvidia", both) == DeviceMask("CUDA_VISIBLE_DEVICES", (2,))
