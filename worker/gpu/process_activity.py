"""Per-process GPU activity: what each process a GPU lists ran on it since the last read.

Memory held is not compute done: llama.cpp with 0 of 29 layers offloaded holds a 1.4 GiB
CUDA compute buffer and computes on the CPU. What the driver says a process ran (NVML's
per-process utilization samples, `nvidia-smi pmon`, amd-smi's engine time) is the
evidence beyond memory. Each source reads it its own way; this puts it on the processes
the GPU lists, the same for all of them.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from placewatch.schemas import GpuProcess, GpuSample

Usage = tuple[float | None, float | None]
"""(SM percent, memory-controller percent) of one process on one GPU; None: not given."""

NO_READING: Usage = (None, None)
IDLE: Usage = (0.0, 0.0)


def clamp_pct(value: float | None) -> int | None:
    """A whole percentage within [0, 100]: a sum over samples or a delta over a jittery clock
    can overshoot; a negative one is no reading. Whole, as the tools give it (NVML and pmon
    print integers) and as it travels (lean.py)."""
    if value is None or value < 0:
        return None
    return min(round(value), 100)


def attach_usage(gpu: GpuSample, usage: Mapping[int, Usage], unlisted: Usage) -> GpuSample:
    """`gpu` with each of its processes' usage by pid; a process the tool gave no sample
    for gets `unlisted` (IDLE where the tool lists only processes that ran, NO_READING where
    a missing sample says nothing)."""
    if not gpu.processes:
        return gpu
    processes = [_with(p, usage.get(p.pid, unlisted)) for p in gpu.processes]
    return msgspec.structs.replace(gpu, processes=processes)


def _with(process: GpuProcess, usage: Usage) -> GpuProcess:
    sm, mem = usage
    if sm is None and mem is None:
        return process
    return msgspec.structs.replace(process, sm_pct=clamp_pct(sm), mem_pct=clamp_pct(mem))
