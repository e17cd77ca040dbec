"""A llama-server on an Intel GPU, found by its Level Zero mask and SYCL device, judged as a
CUDA one is: where its processes hold memory against where its mask and flags place it."""

from __future__ import annotations

import pytest

from placewatch.schemas import GpuSample
from placewatch.worker.shards.discover import classify
from placewatch.worker.shards.discovered import placement_of
from placewatch.worker.shards.verdict import Judgement, Observation, judge

from tests.support.discovery import A100X4, INTEL, MODEL, PCI_ORDER, SERVER

GiB = 1 << 30
SYCL_ON_GPU_1 = (
    [SERVER, "-m", MODEL, "-ngl", "99", "--device", "SYCL0"],
    {"ONEAPI_DEVICE_SELECTOR": "level_zero:1", **PCI_ORDER},
)
CUDA_ON_GPU_1 = (
    [SERVER, "-m", MODEL, "-ngl", "99", "--device", "CUDA0"],
    {"CUDA_VISIBLE_DEVICES": "1"},
)


def judged(
    cmdline: list[str], env: dict[str, str], gpus: list[GpuSample], held: dict[int, int | None]
) -> tuple[list[int], Judgement]:
    d = classify(cmdline, env, 4242, gpus)
    assert d is not None
    obs = Observation(placement_of(d), 4242, alive=True, ready=True, gpus_known=True, held=held)
    return d.spec.gpus, judge(obs, gpus)


def test_a_shard_its_mask_places_on_intel_gpu_1_computes_there() -> None:
    placed, j = judged(*SYCL_ON_GPU_1, INTEL, {1: 6 * GiB})
    assert placed == [1]
    assert (j.verdict, j.reason) == ("gpu", "holds 6.0 GiB on GPU 1 as placed")
    assert [(d.index, d.used_bytes) for d in j.devices] == [(1, 6 * GiB)]


@pytest.mark.parametrize(
    ("shard", "gpus", "masks"),
    [
        (SYCL_ON_GPU_1, INTEL, "ONEAPI_DEVICE_SELECTOR / ZE_AFFINITY_MASK"),
        (CUDA_ON_GPU_1, A100X4, "CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES"),
    ],
)
def test_memory_on_the_other_gpu_is_misplaced_naming_the_vendors_masks(
    shard: tuple[list[str], dict[str, str]], gpus: list[GpuSample], masks: str
) -> None:
    placed, j = judged(*shard, gpus, {0: 6 * GiB})
    assert placed == [1]
    assert (j.verdict, j.reason) == (
        "misplaced",
        f"placed on GPU 1 but holds 6.0 GiB on GPU 0: check its {masks} and device options",
    )


def test_a_mask_whose_order_cannot_be_told_leaves_the_verdict_unknown_saying_why() -> None:
    cmdline, env = SYCL_ON_GPU_1
    unordered = {k: v for k, v in env.items() if k not in PCI_ORDER}
    _, j = judged(cmdline, unordered, INTEL, {0: 6 * GiB})
    assert j.verdict == "unknown"
    assert "ONEAPI_DEVICE_SELECTOR=level_zero:1 numbers Level Zero devices" in j.reason
    assert "set ZE_ENABLE_PCI_ID_DEVICE_ORDER=1" in j.reason
