"""Device masks translated to physical indices, or reported as untranslatable."""

from __future__ import annotations

import pytest

from placewatch.schemas import GpuSample
from placewatch.worker.gpu.masks import DeviceMask, translate

A100 = "NVIDIA A100-SXM4-80GB"
NODE = [
    GpuSample(index=i, uuid=f"GPU-{i}{i}aa0000-0000-0000-0000-00000000000{i}", name=A100)
    for i in range(4)
]
MIXED = [
    GpuSample(index=0, uuid="GPU-aaaa", name="NVIDIA GeForce RTX 4090"),
    GpuSample(index=1, uuid="GPU-bbbb", name="NVIDIA RTX A4000"),
]
AMD = [
    GpuSample(index=i, uuid=f"0x{i}f00d", vendor="amd", name="AMD Instinct MI300X")
    for i in range(4)
]


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, DeviceMask(None, None)),
        ({"CUDA_VISIBLE_DEVICES": "2"}, DeviceMask("CUDA_VISIBLE_DEVICES", (2,))),
        ({"CUDA_VISIBLE_DEVICES": "3,1"}, DeviceMask("CUDA_VISIBLE_DEVICES", (3, 1))),
        ({"CUDA_VISIBLE_DEVICES": ""}, DeviceMask("CUDA_VISIBLE_DEVICES", ())),
        ({"CUDA_VISIBLE_DEVICES": "-1"}, DeviceMask("CUDA_VISIBLE_DEVICES", ())),
        # CUDA stops at the first invalid entry.
        ({"CUDA_VISIBLE_DEVICES": "0,2,-1,1"}, DeviceMask("CUDA_VISIBLE_DEVICES", (0, 2))),
        ({"CUDA_VISIBLE_DEVICES": "1,7,2"}, DeviceMask("CUDA_VISIBLE_DEVICES", (1,))),
        # UUIDs, in full or as a unique prefix, with or without GPU-.
        (
            {"CUDA_VISIBLE_DEVICES": "GPU-22aa0000-0000-0000-0000-000000000002"},
            DeviceMask("CUDA_VISIBLE_DEVICES", (2,)),
        ),
        ({"CUDA_VISIBLE_DEVICES": "GPU-33,GPU-00"}, DeviceMask("CUDA_VISIBLE_DEVICES", (3, 0))),
        ({"CUDA_VISIBLE_DEVICES": "11aa"}, DeviceMask("CUDA_VISIBLE_DEVICES", (1,))),
        ({"CUDA_VISIBLE_DEVICES": "GPU-,1"}, DeviceMask("CUDA_VISIBLE_DEVICES", ())),  # ambiguous
        (
            {"CUDA_VISIBLE_DEVICES": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"},
            DeviceMask("CUDA_VISIBLE_DEVICES", (1,)),
        ),
    ],
)
def test_cuda_visible_devices(env: dict[str, str], expected: DeviceMask) -> None:
    assert translate(env, "nvidia", NODE) == expected


def test_mig_uuids_are_reported_not_guessed() -> None:
    mask = translate(
        {"CUDA_VISIBLE_DEVICES": "MIG-4b2a9f60-1234-5678-9abc-def012345678"}, "nvidia", NODE
    )
    assert mask.indices is None
    assert mask.untranslatable == (
        "CUDA_VISIBLE_DEVICES names a MIG instance (MIG-4b2a9f60-1234-5678-9abc-def012345678), not a whole GPU"
    )


def test_fastest_first_is_untranslatable() -> None:
    mask = translate(
        {"CUDA_VISIBLE_DEVICES": "1", "CUDA_DEVICE_ORDER": "FASTEST_FIRST"}, "nvidia", NODE
    )
    assert mask.indices is None
    assert mask.untranslatable and "FASTEST_FIRST" in mask.untranslatable


def test_unset_order_on_mixed_gpus_is_untranslatable_but_bus_order_is_fine() -> None:
    mask = translate({"CUDA_VISIBLE_DEVICES": "0"}, "nvidia", MIXED)
    assert mask.indices is None
    assert mask.untranslatable and "CUDA_DEVICE_ORDER=PCI_BUS_ID" in mask.untranslatable
    fixed = translate(
        {"CUDA_VISIBLE_DEVICES": "0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}, "nvidia", MIXED
    )
    assert fixed == DeviceMask("CUDA_VISIBLE_DEVICES", (0,))
    # UUIDs name a GPU whatever the order.
    assert translate({"CUDA_VISIBLE_DEVICES": "GPU-bbbb"}, "nvidia", MIXED).indices == (1,)


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, DeviceMask(None, None)),
        ({"HIP_VISIBLE_DEVICES": "2,3"}, DeviceMask("HIP_VISIBLE_DEVICES", (2, 3))),
        ({"ROCR_VISIBLE_DEVICES": "1,3"}, DeviceMask("ROCR_VISIBLE_DEVICES", (1, 3))),
        # HIP counts within what ROCR left visible, in ROCR's order.
        (
            {"ROCR_VISIBLE_DEVICES": "3,1", "HIP_VISIBLE_DEVICES": "1"},
            DeviceMask("ROCR_VISIBLE_DEVICES+HIP_VISIBLE_DEVICES", (1,)),
        ),
        ({"ROCR_VISIBLE_DEVICES": "GPU-2f00d"}, DeviceMask("ROCR_VISIBLE_DEVICES", (2,))),
        ({"CUDA_VISIBLE_DEVICES": "0"}, DeviceMask("CUDA_VISIBLE_DEVICES", (0,))),  # HIP honours it
        ({"HIP_VISIBLE_DEVICES": ""}, DeviceMask("HIP_VISIBLE_DEVICES", ())),
    ],
)
def test_amd_masks(env: dict[str, str], expected: DeviceMask) -> None:
    assert translate(env, "amd", AMD) == expected


def test_a_vendor_mask_does_not_apply_to_the_other_vendor() -> None:
    node = NODE + AMD
    assert translate({"HIP_VISIBLE_DEVICES": "1"}, "nvidia", node) == DeviceMask(None, None)
    assert translate({"CUDA_VISIBLE_DEVICES": "1"}, "nvidia", node).indices == (1,)
