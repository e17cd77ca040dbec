"""Synthetic nvidia-smi output for a node of any size, in the exact format the worker asks for.

The real captures are of one or four GPUs; an 8-GPU node running 64 GPU
processes is made here by the same documented CSV format
(`--format=csv,nounits`, header with units in brackets).
"""

from __future__ import annotations

from pathlib import Path

from placewatch.gpu.nvidia_smi import APP_FIELDS, GPU_FIELDS

GPU_HEADER = (
    "index, uuid, name, pci.bus_id, utilization.gpu [%], memory.total [MiB], memory.used [MiB], "
    "memory.free [MiB], temperature.gpu, power.draw [W], enforced.power.limit [W], mig.mode.current"
)
APPS_HEADER = "gpu_uuid, pid, process_name, used_gpu_memory [MiB]"


def uuid(i: int) -> str:
    return f"GPU-{i:08x}-1b2c-4d3e-8f40-{i:012x}"


def query_gpu(gpus: int) -> str:
    rows = [GPU_HEADER]
    for i in range(gpus):
        used = 20000 + 997 * i
        rows.append(
            f"{i}, {uuid(i)}, NVIDIA H100 80GB HBM3, 00000000:{0x18 + 0x10 * i:02X}:00.0, "
            f"{(13 * i) % 100}, 81559, {used}, {81559 - used - 478}, {40 + i}, {300.0 + i:.2f}, 700.00, Disabled"
        )
    return "\n".join(rows) + "\n"


def query_apps(gpus: int, processes: int, first_pid: int = 40000) -> str:
    rows = [APPS_HEADER]
    for p in range(processes):
        rows.append(
            f"{uuid(p % gpus)}, {first_pid + p}, /opt/llama.cpp/bin/llama-server, {1024 + p}"
        )
    return "\n".join(rows) + "\n"


def write_fake_nvidia_smi(where: Path, gpus: int, processes: int) -> Path:
    """A bin/ folder whose nvidia-smi is the cheapest possible tool: sh and cat of the answer."""
    assert set(GPU_FIELDS) <= {c.split(" [")[0] for c in GPU_HEADER.split(", ")}
    assert set(APP_FIELDS) - {"used_memory"} <= {c.split(" [")[0] for c in APPS_HEADER.split(", ")}
    (where / "gpu.csv").write_text(query_gpu(gpus))
    (where / "apps.csv").write_text(query_apps(gpus, processes))
    bin_dir = where / "bin"
    bin_dir.mkdir(exist_ok=True)
    tool = bin_dir / "nvidia-smi"
    tool.write_text(
        "#!/bin/sh\n"
        f'case "$*" in *--query-gpu=*) exec cat "{where}/gpu.csv";; '
        f'*--query-compute-apps=*) exec cat "{where}/apps.csv";; esac\nexit 2\n'
    )
    tool.chmod(0o755)
    return bin_dir
