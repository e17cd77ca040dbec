"""KFD sysfs: per-process VRAM mapped from KFD gpu_ids to physical GPUs.

Trees are built in tmp_path (tests/support/kfd_tree.py) in the layout amdgpu's KFD keeps under
/sys/class/kfd/kfd: topology/nodes/<n>/{gpu_id,properties} and
proc/<pid>/vram_<gpu_id>.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placewatch.schemas import GpuSample
from placewatch.worker.gpu.kfd import (
    KfdTree,
    attach_kfd_processes,
    bus_id,
    parse_properties,
    read_kfd,
    read_topology,
)

from tests.conftest import examples
from tests.support.kfd_tree import make_kfd_tree

GiB = 1 << 30

# Node 1 sits on bus 0x22 and node 2 on bus 0x0c: PCI order is node 2, then node 1.
GPU_A, GPU_B = 41416, 14446
TWO_GPUS = {1: (GPU_A, 0x2200), 2: (GPU_B, 0x0C00)}


def test_location_id_unpacks_to_the_bus_id_rocm_smi_prints() -> None:
    assert bus_id(0x0C00) == "0000:0c:00.0"
    assert bus_id(0xE308, domain=2) == "0002:e3:01.0"
    assert bus_id(0x0C03 | (0x1F << 3)) == "0000:0c:1f.3"


def test_properties_are_name_value_lines() -> None:
    props = parse_properties("location_id 3072\ndomain 0\nbogus\nname gfx942 x\nhex 0x10\n")
    assert props == {"location_id": 3072, "domain": 0, "hex": 16}


def test_gpu_nodes_are_indexed_in_pci_order_not_node_order(tmp_path: Path) -> None:
    root = make_kfd_tree(tmp_path / "kfd", TWO_GPUS, {})
    gpus = read_topology(root)
    assert [(g.node, g.gpu_id, g.index, g.bus_id) for g in gpus] == [
        (2, GPU_B, 0, "0000:0c:00.0"),
        (1, GPU_A, 1, "0000:22:00.0"),
    ]
    assert [g.render_minor for g in gpus] == [144, 136]


def test_processes_are_attributed_by_gpu_id_and_unreadable_pids_skipped(tmp_path: Path) -> None:
    root = make_kfd_tree(
        tmp_path / "kfd",
        TWO_GPUS,
        {
            # llama-server on the GPU at 0c, its runtime opened the other GPU too (0 B).
            4242: {GPU_B: 96 * GiB, GPU_A: 0},
            5150: {GPU_A: 2 * GiB},
            6001: {GPU_A: GiB, 999: GiB},  # a gpu_id the topology does not have
        },
    )
    proc = root / "proc"
    # A process that exited between listing and reading: its directory is gone.
    (proc / "7007").symlink_to(proc / "no-such-pid")
    # A counter that cannot be read as a file.
    (proc / "8008").mkdir()
    (proc / "8008" / f"vram_{GPU_A}").mkdir()
    (proc / "not-a-pid").mkdir()
    tree = read_kfd(root)
    assert [(p.pid, p.index, p.bus_id, p.vram_bytes) for p in tree.processes] == [
        (4242, 0, "0000:0c:00.0", 96 * GiB),
        (5150, 1, "0000:22:00.0", 2 * GiB),
        (6001, 1, "0000:22:00.0", GiB),
    ]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a mode-000 directory anyway")
def test_a_pid_directory_without_permission_is_skipped(tmp_path: Path) -> None:
    root = make_kfd_tree(tmp_path / "kfd", TWO_GPUS, {4242: {GPU_B: GiB}, 5150: {GPU_A: GiB}})
    (root / "proc" / "5150").chmod(0)
    try:
        assert [p.pid for p in read_kfd(root).processes] == [4242]
    finally:
        (root / "proc" / "5150").chmod(0o755)


def test_a_missing_tree_gives_nothing_and_leaves_gpus_alone(tmp_path: Path) -> None:
    tree = read_kfd(tmp_path / "absent")
    assert tree == KfdTree()
    gpus = [GpuSample(index=0, vendor="amd", bus_id="0000:0c:00.0")]
    assert attach_kfd_processes(gpus, tree) == gpus


def test_cpu_only_topology_is_no_tree(tmp_path: Path) -> None:
    root = make_kfd_tree(tmp_path / "kfd", {}, {1: {}}, cpu_nodes=(0, 1))
    assert read_kfd(root) == KfdTree()


def test_processes_attach_by_bus_id_in_either_case(tmp_path: Path) -> None:
    root = make_kfd_tree(tmp_path / "kfd", TWO_GPUS, {4242: {GPU_B: 96 * GiB}, 5150: {GPU_A: GiB}})
    # rocm-smi prints bus ids in upper case, and in its own order.
    gpus = [
        GpuSample(index=0, vendor="amd", bus_id="0000:22:00.0"),
        GpuSample(index=1, vendor="amd", bus_id="0000:0C:00.0"),
    ]
    first, second = attach_kfd_processes(gpus, read_kfd(root))
    assert [(p.pid, p.used_bytes) for p in first.processes] == [(5150, GiB)]
    assert [(p.pid, p.used_bytes) for p in second.processes] == [(4242, 96 * GiB)]


def test_without_bus_ids_processes_attach_by_pci_order(tmp_path: Path) -> None:
    root = make_kfd_tree(tmp_path / "kfd", TWO_GPUS, {4242: {GPU_B: 96 * GiB}, 5150: {GPU_A: GiB}})
    # amd-smi metric prints no bus ids: its index is PCI order.
    gpus = [GpuSample(index=0, vendor="amd"), GpuSample(index=1, vendor="amd")]
    first, second = attach_kfd_processes(gpus, read_kfd(root))
    assert [p.pid for p in first.processes] == [4242]
    assert [p.pid for p in second.processes] == [5150]


def test_a_gpu_kfd_does_not_list_keeps_its_processes_unknown(tmp_path: Path) -> None:
    root = make_kfd_tree(tmp_path / "kfd", TWO_GPUS, {4242: {GPU_B: GiB}})
    gpus = [
        GpuSample(index=0, vendor="amd", bus_id="0000:0c:00.0"),
        GpuSample(index=1, vendor="amd", bus_id="0000:99:00.0"),
    ]
    known, unknown = attach_kfd_processes(gpus, read_kfd(root))
    assert [p.pid for p in known.processes] == [4242]
    assert unknown is gpus[1]


def test_partitioned_gpu_nodes_sharing_a_bus_id_attach_by_order(tmp_path: Path) -> None:
    # MI300X in DPX mode: two KFD nodes, one PCI function.
    root = make_kfd_tree(tmp_path / "kfd", {1: (111, 0x0C00), 2: (222, 0x0C00)}, {9: {222: GiB}})
    gpus = [
        GpuSample(index=0, vendor="amd", bus_id="0000:0c:00.0"),
        GpuSample(index=1, vendor="amd", bus_id="0000:0c:00.0"),
    ]
    first, second = attach_kfd_processes(gpus, read_kfd(root))
    assert first.processes == []
    assert [(p.pid, p.used_bytes) for p in second.processes] == [(9, GiB)]


def test_nodes_without_location_fall_back_to_node_order(tmp_path: Path) -> None:
    root = make_kfd_tree(tmp_path / "kfd", {1: (111, 0x2200), 2: (222, 0)}, {})
    assert [(g.node, g.index, g.bus_id) for g in read_topology(root)] == [
        (1, 0, "0000:22:00.0"),
        (2, 1, None),
    ]


contents = st.one_of(
    st.text(st.characters(blacklist_categories=["Cs"]), max_size=30),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.sampled_from(["0\n", "41416\n", "", "\x00", "location_id 3072\ndomain 0\n", "١٢"]),
)


@settings(max_examples=examples(60), deadline=None)
@given(
    gpu_ids=st.lists(contents, min_size=1, max_size=3),
    properties=st.lists(contents, min_size=1, max_size=3),
    vram=st.lists(st.tuples(st.sampled_from(["1", "2", "²", "x", "0"]), contents), max_size=4),
)
def test_any_tree_content_reads_without_raising(
    gpu_ids: list[str], properties: list[str], vram: list[tuple[str, str]]
) -> None:
    with tempfile.TemporaryDirectory() as where:
        root = Path(where)
        for n, (gpu_id, props) in enumerate(zip(gpu_ids, properties, strict=False)):
            node = root / "topology" / "nodes" / str(n)
            node.mkdir(parents=True)
            (node / "gpu_id").write_text(gpu_id)
            (node / "properties").write_text(props)
        pid = root / "proc" / "100"
        pid.mkdir(parents=True)
        for suffix, value in vram:
            (pid / f"vram_{suffix}").write_text(value)
        tree = read_kfd(root)
        assert all(p.vram_bytes > 0 and p.pid == 100 for p in tree.processes)
        assert [g.index for g in tree.gpus] == list(range(len(tree.gpus)))
        gpus = [GpuSample(index=i, vendor="amd") for i in range(3)]
        assert len(attach_kfd_processes(gpus, tree)) == 3
