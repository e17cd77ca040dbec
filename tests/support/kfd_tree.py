"""A KFD sysfs tree in a folder, in the layout amdgpu's KFD keeps under /sys/class/kfd/kfd:
topology/nodes/<n>/{gpu_id,properties} and proc/<pid>/vram_<gpu_id>."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

# An MI300X's topology node, trimmed to a few of its properties (ROCm 6.2 kernel).
GPU_PROPERTIES = """cpu_cores_count 0
simd_count 1216
mem_banks_count 1
gfx_target_version 90402
vendor_id 4098
device_id 29857
location_id {location}
domain {domain}
drm_render_minor {minor}
hive_id 13826716282316393010
num_xcc 8
"""
CPU_PROPERTIES = """cpu_cores_count 96
simd_count 0
mem_banks_count 1
location_id 0
domain 0
drm_render_minor 0
"""


def make_kfd_tree(
    root: Path,
    gpus: Mapping[int, tuple[int, int]],
    processes: Mapping[int, Mapping[int, int]],
    cpu_nodes: tuple[int, ...] = (0,),
    domain: int = 0,
) -> Path:
    """A KFD tree: GPU nodes {node: (gpu_id, location_id)}, {pid: {gpu_id: bytes}}."""
    nodes = root / "topology" / "nodes"
    for node in cpu_nodes:
        (nodes / str(node)).mkdir(parents=True)
        (nodes / str(node) / "gpu_id").write_text("0\n")
        (nodes / str(node) / "properties").write_text(CPU_PROPERTIES)
    for node, (gpu_id, location) in gpus.items():
        (nodes / str(node)).mkdir(parents=True)
        (nodes / str(node) / "gpu_id").write_text(f"{gpu_id}\n")
        props = GPU_PROPERTIES.format(location=location, domain=domain, minor=128 + 8 * node)
        (nodes / str(node) / "properties").write_text(props)
    for pid, held in processes.items():
        where = root / "proc" / str(pid)
        where.mkdir(parents=True)
        (where / "pasid").write_text("32770\n")
        (where / "queues").mkdir()
        for gpu_id, used in held.items():
            (where / f"vram_{gpu_id}").write_text(f"{used}\n")
    (root / "proc").mkdir(parents=True, exist_ok=True)
    return root
