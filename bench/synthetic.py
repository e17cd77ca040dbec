"""Synthetic nvidia-smi output for a node of any size, in the exact format the worker asks for.

The real captures are of one or four GPUs; an 8-GPU node running 64 GPU
processes is made here by the same documented CSV format
(`--format=csv,nounits`, header with units in brackets).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import msgspec

from placewatch.schemas import (
    ComputeStatus,
    DeviceUse,
    GpuHealth,
    HostSample,
    NodeInventory,
    NodeSample,
    NodeTelemetry,
    ShardBrief,
    SourceStatus,
    lean,
)
from placewatch.worker.gpu.nvidia_smi import APP_FIELDS
from placewatch.worker.gpu.nvidia_smi.query_csv import (
    attach_processes,
    parse_compute_apps,
    parse_gpus,
)

GPU_HEADER = (
    "index, uuid, name, pci.bus_id, utilization.gpu [%], memory.total [MiB], memory.used [MiB], "
    "memory.free [MiB], temperature.gpu, power.draw [W], enforced.power.limit [W], "
    "mig.mode.current, clocks.current.sm [MHz], clocks.current.memory [MHz], "
    "utilization.memory [%], fan.speed [%], ecc.errors.corrected.volatile.total, "
    "ecc.errors.uncorrected.volatile.total, ecc.errors.corrected.aggregate.total, "
    "ecc.errors.uncorrected.aggregate.total, retired_pages.single_bit_ecc.count, "
    "retired_pages.double_bit.count, retired_pages.pending, clocks_event_reasons.active, "
    "pcie.link.gen.current, pcie.link.width.current"
)
"""The GPU query's fields as a driver of 2026 (590) echoes them (the names it prefers, with units)."""
HEALTH_CELLS = "1980, 2619, 5, [N/A], 0, 0, 0, 0, [N/A], [N/A], [N/A], 0x0000000000000000, 5, 16"
"""A healthy H100's: no ECC errors, no page retirement (remapped rows instead), no fan."""
APPS_HEADER = "gpu_uuid, pid, process_name, used_gpu_memory [MiB]"


def uuid(i: int) -> str:
    return f"GPU-{i:08x}-1b2c-4d3e-8f40-{i:012x}"


def query_gpu(gpus: int, used_mib: int | None = None) -> str:
    rows = [GPU_HEADER]
    for i in range(gpus):
        used = 20000 + 997 * i if used_mib is None else used_mib
        rows.append(
            f"{i}, {uuid(i)}, NVIDIA H100 80GB HBM3, 00000000:{0x18 + 0x10 * i:02X}:00.0, "
            f"{(13 * i) % 100}, 81559, {used}, {81559 - used - 478}, {40 + i}, {300.0 + i:.2f}, 700.00, Disabled, "
            + HEALTH_CELLS
        )
    return "\n".join(rows) + "\n"


def query_apps(gpus: int, processes: int, first_pid: int = 40000) -> str:
    return query_apps_of([(p % gpus, first_pid + p) for p in range(processes)])


def query_apps_of(holders: list[tuple[int, int]]) -> str:
    """The compute-apps answer listing each (GPU index, pid) in `holders`."""
    rows = [APPS_HEADER]
    for n, (gpu, pid) in enumerate(holders):
        rows.append(f"{uuid(gpu)}, {pid}, /opt/llama.cpp/bin/llama-server, {1024 + n}")
    return "\n".join(rows) + "\n"


def counted(answer: str) -> str:
    """A `--query-gpu` answer with `count` first, as nvidia-smi prints it when asked for it."""
    header, *rows = answer.splitlines()
    return "".join(
        f"{line}\n" for line in [f"count, {header}", *(f"{len(rows)}, {r}" for r in rows)]
    )


def write_fake_nvidia_smi(where: Path, gpus: int, apps: str, *, python: str | None = None) -> Path:
    """A bin/ folder whose nvidia-smi prints the answers in nvidia-smi's exact format.

    By default the tool is the cheapest one possible, `sh` and `cat` of the answer:
    its spawn cost is a floor. With `python` (an interpreter's path) it is that
    interpreter started bare (`-I -S`) reading the answer instead: a dynamically
    linked program that maps a few MB of shared code and reads files, as
    nvidia-smi does with libnvidia-ml before it talks to the driver.

    Both loop as nvidia-smi does when the GPU query has `--loop-ms=N` (the worker's
    looping query, which asks for `count` first): the header once, then the rows every
    N ms, the answer read again for each pass. The `sh` tool runs `cat` and `sleep` for
    each pass; the interpreter reads the file and sleeps in process, as nvidia-smi reads
    the driver's library in process, without its reads of each GPU.
    """
    # Every field the worker asks for is answered (under the name the driver prefers).
    first = parse_gpus(query_gpu(1))[0]
    assert (first.sm_clock_mhz, first.health and first.health.pcie_width) == (1980, 16), first
    assert set(APP_FIELDS) - {"used_memory"} <= {c.split(" [")[0] for c in APPS_HEADER.split(", ")}
    answer = query_gpu(gpus)
    (where / "gpu.csv").write_text(answer)
    header, rows = counted(answer).split("\n", 1)
    (where / "gpu-count-header.csv").write_text(header + "\n")
    (where / "gpu-count-rows.csv").write_text(rows)
    (where / "apps.csv").write_text(apps)
    bin_dir = where / "bin"
    bin_dir.mkdir(exist_ok=True)
    tool = bin_dir / "nvidia-smi"
    if python is None:
        tool.write_text(
            "#!/bin/sh\n"
            'case "$*" in *--query-gpu=*--loop-ms=*)\n'
            "  ms=${*##*--loop-ms=}; ms=${ms%% *}\n"
            "  s=$((ms / 1000)).$(printf %03d $((ms % 1000)))\n"
            f'  cat "{where}/gpu-count-header.csv"\n'
            f'  while cat "{where}/gpu-count-rows.csv"; do sleep "$s"; done;;\n'
            f'*--query-gpu=*) exec cat "{where}/gpu.csv";;\n'
            f'*--query-compute-apps=*) exec cat "{where}/apps.csv";; esac\nexit 2\n'
        )
    else:
        tool.write_text(
            f"#!{python} -IS\n"
            "import sys, time\n"
            "args = ' '.join(sys.argv[1:])\n"
            f"where = {str(where)!r}\n"
            "if '--loop-ms=' not in args:\n"
            "    name = 'gpu.csv' if '--query-gpu=' in args else 'apps.csv'\n"
            "    sys.stdout.write(open(where + '/' + name).read())\n"
            "    sys.exit(0)\n"
            "seconds = int(args.split('--loop-ms=')[1].split()[0]) / 1000\n"
            "sys.stdout.write(open(where + '/gpu-count-header.csv').read())\n"
            "while True:\n"
            "    with open(where + '/gpu-count-rows.csv') as rows:\n"
            "        sys.stdout.write(rows.read())\n"
            "    sys.stdout.flush()\n"
            "    time.sleep(seconds)\n"
        )
    tool.chmod(0o755)
    return bin_dir


HEALTHY = GpuHealth(
    xid_errors=0,
    ecc_corrected_volatile=0,
    ecc_uncorrected_volatile=0,
    ecc_corrected_aggregate=0,
    ecc_uncorrected_aggregate=0,
    remapped_rows_correctable=0,
    remapped_rows_uncorrectable=0,
    remapped_rows_pending=False,
    remapped_rows_failed=False,
    pcie_gen=5,
    pcie_width=16,
    pcie_replays=0,
)
"""A healthy H200's health as NVML reads it: every count zero, the link at 5.0 x16."""


def node_sample(
    node: str = "gpu-node-0001", gpus: int = 8, shards: int = 16, *, readings: bool = True
) -> NodeSample:
    """A busy node's sample: `gpus` GPUs with 4 processes per shard (each attributed to its
    shard, with what it ran since the last read), the host, the shards' briefs (with their
    SM use and requests served) and the source's status. With `readings`, each GPU's
    health and the readings DCGM users watch (clocks, memory utilization, energy), as
    NVML gives them on an H200; without, the message the fleet-scale size targets were set
    on."""
    per_shard = 4
    holders = [
        (s % gpus, 40000 + s * per_shard + k) for s in range(shards) for k in range(per_shard)
    ]
    found = attach_processes(
        parse_gpus(query_gpu(gpus)), parse_compute_apps(query_apps_of(holders))
    )
    owner = {pid: f"shard-{(pid - 40000) // per_shard:02d}" for _, pid in holders}
    found = [
        msgspec.structs.replace(
            g,
            processes=[
                msgspec.structs.replace(
                    p, shard=owner[p.pid], sm_pct=30 + p.pid % 61, mem_pct=5 + p.pid % 37
                )
                for p in g.processes
            ],
            foreign_bytes=0,
        )
        for g in found
    ]
    found = [
        msgspec.structs.replace(
            g,
            sm_clock_mhz=1980,
            memory_clock_mhz=3201,
            memory_util_pct=float(10 + g.index),
            energy_j=81_234_567.891 + g.index,
            driver_version="580.159.04",
            health=HEALTHY,
        )
        if readings
        else msgspec.structs.replace(
            g, sm_clock_mhz=None, memory_clock_mhz=None, memory_util_pct=None, health=None
        )
        for g in found
    ]
    return NodeSample(
        node=node,
        session="5f1c9a2e7b3d",
        seq=0,
        time=datetime.now(UTC),
        interval_s=2.0,
        gpus=found,
        host=HostSample(
            cpu_pct=37.5,
            cpu_count=192,
            memory_total_bytes=2_164_000_000_000,
            memory_available_bytes=1_530_000_000_000,
            load_1m=41.2,
        ),
        shards=[
            ShardBrief(
                shard=f"shard-{s:02d}",
                verdict="gpu",
                pid=40000 + s * per_shard,
                reason=f"holds 4.1 GiB on GPU {s % gpus} as placed",
                sm_pct=min(100, 4 * (30 + s)),
                requests=3 + s,
            )
            for s in range(shards)
        ],
        sources=[SourceStatus(name="nvml", ok=True, latency_ms=1.184, vendor="nvidia")],
    )


def node_messages(
    node: str = "gpu-node-0001", gpus: int = 8, shards: int = 16
) -> tuple[NodeInventory, NodeTelemetry]:
    """node_sample() as the node publishes it: its inventory and its telemetry."""
    return lean.split(node_sample(node, gpus, shards))


def node_telemetry(node: str = "gpu-node-0001", gpus: int = 8, shards: int = 16) -> NodeTelemetry:
    """node_sample()'s telemetry, as the node publishes it every interval."""
    return node_messages(node, gpus, shards)[1]


ENGINES = ("llama_cpp", "vllm", "ollama", "sglang")


def shard_statuses(
    sample: NodeSample, fallback: frozenset[str] = frozenset()
) -> list[ComputeStatus]:
    """Each shard's status as its worker publishes it: on its GPU, computing there, except the
    shards named in `fallback`, which came up on the CPU (cpu_fallback, as llama.cpp says it)."""
    statuses = []
    for i, b in enumerate(sample.shards):
        gpu = i % max(len(sample.gpus), 1)
        falls = b.shard in fallback
        statuses.append(
            ComputeStatus(
                node=sample.node,
                shard=b.shard,
                session=sample.session,
                time=sample.time,
                pid=b.pid,
                placed_gpus=[gpu],
                backend="CPU" if falls else "CUDA",
                devices=[] if falls else [DeviceUse(index=gpu, used_bytes=4_400_000_000)],
                verdict="cpu_fallback" if falls else "gpu",
                reason=f"placed on GPU {gpu} but computing on the CPU: its log says 0 of 33 layers offloaded"
                if falls
                else f"holds 4.1 GiB on GPU {gpu} as placed",
                evidence=["load_tensors: offloaded 0/33 layers to GPU"] if falls else [],
                engine=ENGINES[i % len(ENGINES)],
            )
        )
    return statuses
