"""A shard's GPUs' health in its status: which are unhealthy, and one sentence for each."""

from __future__ import annotations

from placewatch.schemas import DeviceUse, GpuHealth, GpuSample
from placewatch.worker.shards.gpu_health import health_by_index, unhealthy, with_health

XID = "XID 79 (GPU has fallen off the bus): reset the GPU or reboot the node"
ECC = "2 uncorrected ECC error(s) since the last reset: reset the GPU or reboot the node"


def test_only_gpus_the_shard_holds_memory_on_and_judged_unhealthy_count() -> None:
    health = health_by_index(
        [
            GpuSample(index=0, health=GpuHealth(healthy=False, problems=[XID])),
            GpuSample(index=1, health=GpuHealth()),
            GpuSample(index=2),  # no health read: not unhealthy
            GpuSample(index=3, health=GpuHealth(healthy=False, problems=[XID, ECC])),
        ]
    )
    assert sorted(health) == [0, 1, 3]
    devices = [DeviceUse(index=i) for i in (3, 1, 2)]
    assert unhealthy(devices, health) == [3]
    assert unhealthy([DeviceUse(index=0), DeviceUse(index=3)], health) == [0, 3]
    assert unhealthy([], health) == []


def test_the_reason_gains_a_sentence_per_unhealthy_gpu_with_its_problems() -> None:
    health = {
        0: GpuHealth(healthy=False, problems=[XID]),
        3: GpuHealth(healthy=False, problems=[XID, ECC]),
    }
    assert with_health("holds 8.0 GiB on GPUs 0, 3 as placed", [0, 3], health) == (
        f"holds 8.0 GiB on GPUs 0, 3 as placed. GPU 0 is unhealthy: {XID}. "
        f"GPU 3 is unhealthy: {XID}; {ECC}"
    )
    assert with_health("", [0], health) == f"GPU 0 is unhealthy: {XID}"
