"""What a shard is told about the health of the GPUs it computes on.

The verdict says where a shard computes; it does not change when a GPU under it turns
unhealthy (an XID 79 leaves the shard's memory listed where it was). What changes is that
whoever routes to it must know the GPU needs a reset: its ComputeStatus lists the GPUs its
processes hold memory on that are unhealthy, and its reason gains one sentence per GPU with
the problems worker/gpu/health.py found, each of which says what to do. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from placewatch.schemas import DeviceUse, GpuHealth, GpuSample


def health_by_index(gpus: Iterable[GpuSample]) -> dict[int, GpuHealth]:
    """Each GPU's health by index, where its source read any."""
    return {g.index: g.health for g in gpus if g.health is not None}


def unhealthy(devices: Iterable[DeviceUse], health: Mapping[int, GpuHealth]) -> list[int]:
    """The GPUs among `devices` whose health says unhealthy, in index order. A GPU with no
    health reading is not unhealthy: nothing says it is."""
    held = {d.index for d in devices}
    return sorted(i for i in held if i in health and not health[i].healthy)


def with_health(reason: str, gpus: list[int], health: Mapping[int, GpuHealth]) -> str:
    """`reason`, followed by a sentence for each unhealthy GPU in `gpus` naming its problems."""
    sentences = [
        f"GPU {i} is unhealthy: {'; '.join(health[i].problems) or 'its driver reports a fault'}"
        for i in gpus
    ]
    return ". ".join([reason, *sentences]) if reason else ". ".join(sentences)
