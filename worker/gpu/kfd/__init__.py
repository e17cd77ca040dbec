"""Per-process VRAM on AMD GPUs from the KFD sysfs tree.

The amdgpu kernel driver's compute side (KFD) keeps, for every process that
opened /dev/kfd, `proc/<pid>/vram_<gpu_id>`: the bytes of VRAM it holds on
that GPU. Reading it costs no tool run; rocm-smi's `--showpids` reads the
same files.

A `gpu_id` is KFD's own hash of the device, not the index rocm-smi prints.
It is mapped to the physical GPU through the topology, one node per CPU
socket and GPU under `topology/nodes/<n>/`:

- `gpu_id` is 0 on CPU nodes; those are skipped.
- `properties` holds `location_id` (the PCI bus/device/function packed as
  `bus << 8 | device << 3 | function`) and, in newer kernels, `domain` (the
  PCI segment; 0 where absent). Together they give the bus id, `0000:0c:00.0`, that
  rocm-smi prints as `PCI Bus` and amd-smi as `bdf`: a GPU is matched by bus
  id wherever both sides have one.
- Where a GPU has no bus id (amd-smi's metric output prints none) the match
  falls back to order: GPU nodes sorted by bus id are PCI order, the order in
  which rocm-smi and amd-smi number their GPUs. Without a location_id on
  every node, the node numbers (KFD's enumeration order) are used instead.

Several nodes may share one bus id (the compute partitions of an MI300X in
CPX or DPX mode live on one PCI function); such a bus id is ambiguous, and
those GPUs are matched by order.

Every process's runtime (ROCr) opens every GPU it can see, so KFD keeps a
`vram_<gpu_id>` of 0 on GPUs the process never allocated on. Those are left
out: listing them would put every ROCm process on every GPU.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import msgspec

from placewatch.schemas import GpuProcess, GpuSample

from .. import KFD_ROOT


@dataclass(frozen=True)
class KfdGpu:
    """One GPU node of the KFD topology."""

    node: int
    gpu_id: int
    index: int
    """Position in PCI order among the GPU nodes: rocm-smi's and amd-smi's index."""
    bus_id: str | None
    render_minor: int | None = None


@dataclass(frozen=True)
class KfdProcess:
    """VRAM one process holds on one GPU."""

    pid: int
    index: int
    bus_id: str | None
    vram_bytes: int


@dataclass(frozen=True)
class KfdTree:
    """What the KFD tree says; empty `gpus` means there is no tree to read."""

    gpus: tuple[KfdGpu, ...] = ()
    processes: tuple[KfdProcess, ...] = ()


def bus_id(location_id: int, domain: int = 0) -> str:
    """The PCI address `dddd:bb:dd.f` packed in a KFD node's location_id."""
    bus = (location_id >> 8) & 0xFF
    device = (location_id >> 3) & 0x1F
    function = location_id & 0x7
    return f"{domain:04x}:{bus:02x}:{device:02x}.{function:x}"


def parse_properties(text: str) -> dict[str, int]:
    """A topology node's `properties`: one `name value` pair a line, values integers."""
    found: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 2:
            continue
        name, value = parts
        try:
            found[name] = int(value, 16) if value.lower().startswith("0x") else int(value)
        except ValueError:
            continue
    return found


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None


def _read_int(path: Path) -> int | None:
    text = _read_text(path)
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:
        return None


def _numbered(where: Path) -> list[tuple[int, Path]]:
    """The entries of `where` named by a non-negative integer, in number order."""
    try:
        names = os.listdir(where)
    except OSError:
        return []
    return sorted((int(name), where / name) for name in names if name.isascii() and name.isdigit())


def read_topology(root: Path | str = KFD_ROOT) -> tuple[KfdGpu, ...]:
    """The GPU nodes under `root`/topology/nodes, indexed in PCI order."""
    found: list[tuple[int, int, str | None, int | None]] = []
    for node, path in _numbered(Path(root) / "topology" / "nodes"):
        gpu_id = _read_int(path / "gpu_id")
        if not gpu_id:
            continue  # a CPU node (gpu_id 0), or a node that cannot be read
        props = parse_properties(_read_text(path / "properties") or "")
        location = props.get("location_id")
        bus = bus_id(location, props.get("domain", 0)) if location else None
        found.append((node, gpu_id, bus, props.get("drm_render_minor")))
    if all(bus is not None for _, _, bus, _ in found):
        found.sort(key=lambda n: str(n[2]))
    return tuple(
        KfdGpu(node=node, gpu_id=gpu_id, index=i, bus_id=bus, render_minor=minor)
        for i, (node, gpu_id, bus, minor) in enumerate(found)
    )


def read_kfd(root: Path | str = KFD_ROOT) -> KfdTree:
    """Every process's VRAM per GPU under `root`; never raises.

    No tree (not an AMD node, or /sys not mounted into a container) gives an
    empty KfdTree. A pid directory that cannot be read (another user's process
    on a hardened kernel, or one that exited while it was read) is skipped.
    """
    gpus = read_topology(root)
    if not gpus:
        return KfdTree()
    by_gpu_id = {g.gpu_id: g for g in gpus}
    processes: list[KfdProcess] = []
    for pid, path in _numbered(Path(root) / "proc"):
        try:
            names = sorted(os.listdir(path))
        except OSError:
            continue
        for name in names:
            if not name.startswith("vram_"):
                continue
            gpu_id = name.removeprefix("vram_")
            gpu = by_gpu_id.get(int(gpu_id)) if gpu_id.isascii() and gpu_id.isdigit() else None
            used = _read_int(path / name)
            if gpu is None or used is None or used <= 0:
                continue
            processes.append(KfdProcess(pid, gpu.index, gpu.bus_id, used))
    return KfdTree(gpus, tuple(processes))


def _normal(bus: str | None) -> str | None:
    """A bus id in one spelling: rocm-smi prints `0000:A3:00.0`, amd-smi and KFD `0000:a3:00.0`."""
    return bus.strip().lower() if bus and bus.strip() else None


def attach_kfd_processes(gpus: list[GpuSample], tree: KfdTree) -> list[GpuSample]:
    """Each GPU with the processes KFD counts on it: by bus id, else by PCI order.

    A GPU whose bus id KFD does not know is left as it is, and so is every GPU
    when the tree has no GPUs: there is nothing to say about their processes,
    which is not the same as saying there are none.
    """
    if not tree.gpus:
        return gpus
    buses = Counter(_normal(g.bus_id) for g in tree.gpus)
    by_bus = {_normal(g.bus_id): g.index for g in tree.gpus if buses[_normal(g.bus_id)] == 1}
    held: dict[int, list[GpuProcess]] = {}
    for process in tree.processes:
        held.setdefault(process.index, []).append(
            GpuProcess(pid=process.pid, used_bytes=process.vram_bytes)
        )
    attached = []
    for gpu in gpus:
        bus = _normal(gpu.bus_id)
        if bus is not None and bus in by_bus:
            index: int | None = by_bus[bus]
        elif bus is not None and None not in buses and bus not in buses:
            index = None  # KFD lists every GPU by bus id, and not this one
        else:
            index = gpu.index if gpu.index < len(tree.gpus) else None
        attached.append(
            gpu if index is None else msgspec.structs.replace(gpu, processes=held.get(index, []))
        )
    return attached
