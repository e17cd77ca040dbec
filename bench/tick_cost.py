"""The CPU one sampling tick costs the worker's own process, against spawning the GPU tool.

An 8-GPU node with 64 GPU processes: the nvidia-smi path (the worker parses
two CSV queries; the tool runs as a child) and the NVML path (in process, no
child). The tool here is the cheapest one possible, `sh` and `cat` of the
answer, so the spawn figure is a floor: a real nvidia-smi costs more.

    python bench/tick_cost.py [--ticks N]
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.synthetic import query_apps, query_gpu, write_fake_nvidia_smi  # noqa: E402
from placewatch.gpu.nvidia_smi import (  # noqa: E402
    NvidiaSmiSource,
    attach_processes,
    parse_compute_apps,
    parse_gpus,
)
from placewatch.gpu.nvml import NvmlSource  # noqa: E402
from placewatch.gpu.registry import VendorChain  # noqa: E402
from placewatch.host import HostSampler  # noqa: E402
from placewatch.probe import ProbeRunner, use_pidfd_child_watcher  # noqa: E402
from placewatch.sampler import NodeSampler  # noqa: E402
from tests.fake_nvml import FakeNvml  # noqa: E402

GPUS, PROCESSES = 8, 64


def cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


async def ticks(sampler: NodeSampler, n: int) -> tuple[float, float]:
    """Own and children's CPU seconds per tick over n ticks."""
    await sampler.sample()  # warm up: imports, first host window
    own, children = cpu(resource.RUSAGE_SELF), cpu(resource.RUSAGE_CHILDREN)
    for _ in range(n):
        telemetry = (await sampler.sample()).telemetry
        assert len(telemetry.gpus) == GPUS, telemetry.sources
        assert sum(len(g.processes) for g in telemetry.gpus) == PROCESSES
    return (
        (cpu(resource.RUSAGE_SELF) - own) / n,
        (cpu(resource.RUSAGE_CHILDREN) - children) / n,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=300)
    n = parser.parse_args().ticks
    use_pidfd_child_watcher()  # as the worker does
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["PATH"] = (
            f"{write_fake_nvidia_smi(Path(tmp), GPUS, PROCESSES)}:{os.environ['PATH']}"
        )
        smi = NodeSampler(
            "bench", 2.0, [VendorChain("nvidia", [NvidiaSmiSource(ProbeRunner())])], HostSampler()
        )
        smi_own, smi_children = anyio.run(ticks, smi, n, backend="asyncio")
    gpus = attach_processes(
        parse_gpus(query_gpu(GPUS)), parse_compute_apps(query_apps(GPUS, PROCESSES))
    )
    nvml = NodeSampler(
        "bench", 2.0, [VendorChain("nvidia", [NvmlSource(FakeNvml(gpus))])], HostSampler()
    )
    nvml_own, nvml_children = anyio.run(ticks, nvml, n, backend="asyncio")

    spawn = smi_children  # two nvidia-smi runs a tick
    print(f"tick cost, {GPUS} GPUs, {PROCESSES} GPU processes, {n} ticks, CPU ms per tick")
    print(f"{'path':<28}{'worker':>10}{'tool spawns':>14}{'worker/spawn':>15}")
    print(
        f"{'nvidia-smi (2 queries)':<28}{smi_own * 1e3:>10.3f}{smi_children * 1e3:>14.3f}{smi_own / spawn:>15.3f}"
    )
    print(
        f"{'NVML in process':<28}{nvml_own * 1e3:>10.3f}{nvml_children * 1e3:>14.3f}{nvml_own / spawn:>15.3f}"
    )


if __name__ == "__main__":
    main()
