"""Every process's DRM clients read from a /proc in a folder (tests/support/drm_proc.py):
deduplicated, bounded, and put on the GPUs by bus id."""

from __future__ import annotations

import os
from pathlib import Path

from placewatch.schemas import GpuProcess, GpuSample
from placewatch.worker.gpu import kfd
from placewatch.worker.gpu.amd_smi import parse_amd_smi_processes
from placewatch.worker.gpu.drm_fdinfo import (
    MAX_FDINFO_BYTES,
    DrmUsage,
    ProcessUse,
    attach_drm_processes,
    read_fdinfo,
)
from placewatch.worker.gpu.rocm_smi import parse_rocm_smi

from tests.support.drm_proc import RENDER, add_process, fdinfo
from tests.support.kfd_tree import make_kfd_tree

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
XE = fdinfo("xe-dgpu.txt")
KiB = 1 << 10


def test_one_client_through_several_descriptors_and_processes_counts_once(tmp_path: Path) -> None:
    add_process(tmp_path, 300, {3: (RENDER, XE), 7: (RENDER, XE)})  # a dup()
    add_process(tmp_path, 301, {4: ("/dev/dri/card0", XE)})  # inherited by a child
    add_process(tmp_path, 302, {3: (RENDER, fdinfo("xe-dgpu.txt", client_id="4"))})
    reading = read_fdinfo(tmp_path)
    assert {k: pid for k, (pid, _) in reading.clients.items()} == {
        ("0000:03:00.0", 3): 300,
        ("0000:03:00.0", 4): 302,
    }
    assert reading.unread is None


def test_only_descriptors_of_dri_card_and_render_nodes_count(tmp_path: Path) -> None:
    add_process(
        tmp_path,
        300,
        {
            3: ("/tmp/dev/dri/renderD128", XE),
            4: ("/dev/dri/renderD128/../../../etc/shadow", XE),
            5: ("/dev/dri/by-path/pci-0000:03:00.0-render", XE),
            6: ("anon_inode:[eventfd]", XE),
        },
        other_fds=3,
    )
    assert read_fdinfo(tmp_path).clients == {}


def test_an_fdinfo_that_is_a_link_is_not_followed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_text(XE)
    proc = tmp_path / "proc"
    add_process(proc, 300, {})
    os.symlink(RENDER, proc / "300" / "fd" / "3")
    os.symlink(elsewhere, proc / "300" / "fdinfo" / "3")
    assert read_fdinfo(proc).clients == {}


def test_an_fdinfo_that_is_a_fifo_does_not_block_the_read(tmp_path: Path) -> None:
    add_process(tmp_path, 300, {})
    os.symlink(RENDER, tmp_path / "300" / "fd" / "3")
    os.mkfifo(tmp_path / "300" / "fdinfo" / "3")  # no writer: a blocking open would wait
    add_process(tmp_path, 301, {3: (RENDER, XE)})
    assert list(read_fdinfo(tmp_path).clients) == [("0000:03:00.0", 3)]


def test_an_oversized_fdinfo_is_left_out(tmp_path: Path) -> None:
    padded = XE + "drm-padding:\t" + "x" * MAX_FDINFO_BYTES + "\n"
    add_process(tmp_path, 300, {3: (RENDER, padded)})
    assert read_fdinfo(tmp_path).clients == {}


def test_a_process_past_the_descriptor_bound_is_said_unread(tmp_path: Path) -> None:
    add_process(tmp_path, 300, {}, other_fds=20)
    add_process(tmp_path, 301, {3: (RENDER, XE)})
    reading = read_fdinfo(tmp_path, max_fds=8)
    assert reading.unread == "pid 300 holds more than 8 descriptors"
    assert list(reading.clients) == [("0000:03:00.0", 3)]


def test_the_read_stops_at_its_descriptor_budget_and_says_so(tmp_path: Path) -> None:
    add_process(tmp_path, 300, {3: (RENDER, XE)}, other_fds=5)
    add_process(tmp_path, 301, {3: (RENDER, fdinfo("xe-dgpu.txt", client_id="4"))})
    whole = read_fdinfo(tmp_path, budget=7)
    assert (len(whole.clients), whole.unread) == (2, None)
    cut = read_fdinfo(tmp_path, budget=6)
    assert list(cut.clients) == [("0000:03:00.0", 3)]
    assert cut.unread == "more than 6 descriptors on the node"


def test_links_read_before_are_not_read_again_until_a_full_read(tmp_path: Path) -> None:
    add_process(tmp_path, 300, {}, other_fds=1)  # fd 3: an ordinary file
    first = read_fdinfo(tmp_path)
    assert (first.clients, list(first.links.values())) == ({}, [{"3": False}])
    os.unlink(tmp_path / "300" / "fd" / "3")  # closed, and the number reused for the GPU
    os.symlink(RENDER, tmp_path / "300" / "fd" / "3")
    (tmp_path / "300" / "fdinfo" / "3").write_text(XE)
    os.symlink(RENDER, tmp_path / "300" / "fd" / "4")  # a new descriptor is read at once
    (tmp_path / "300" / "fdinfo" / "4").write_text(fdinfo("xe-dgpu.txt", client_id="4"))
    second = read_fdinfo(tmp_path, links=first.links)
    assert list(second.clients) == [("0000:03:00.0", 4)]
    assert list(read_fdinfo(tmp_path).clients) == [("0000:03:00.0", 3), ("0000:03:00.0", 4)]


def test_a_process_that_exited_is_skipped_and_one_unreadable_is_said(tmp_path: Path) -> None:
    (tmp_path / "300").mkdir()  # gone: its fd folder with it
    add_process(tmp_path, 302, {})
    os.symlink(RENDER, tmp_path / "302" / "fd" / "3")  # closed after its link was read
    (tmp_path / "301").mkdir()
    (tmp_path / "301" / "fd").write_text("")  # cannot be listed
    (tmp_path / "self").mkdir()
    assert (
        read_fdinfo(tmp_path).unread == "pid 301's descriptors could not be read (Not a directory)"
    )
    (tmp_path / "301" / "fd").unlink()
    assert read_fdinfo(tmp_path).unread is None
    assert read_fdinfo(tmp_path / "none").unread is not None


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _rewrite(root: Path, pid: int, fd: int, text: str) -> None:
    (root / str(pid) / "fdinfo" / str(fd)).write_text(text)


def test_i915_busy_is_the_busiest_compute_engine_over_its_capacity(tmp_path: Path) -> None:
    clock = Clock()
    add_process(tmp_path, 300, {3: (RENDER, fdinfo("i915-dgpu.txt"))})
    usage = DrmUsage(tmp_path, clock)
    (first,), _ = usage.read()
    assert (first.pid, first.pdev, first.memory_bytes) == (300, "0000:03:00.0", 4198400 * KiB)
    assert first.busy_pct is None  # one read: nothing to compare
    clock.now += 2.0
    # compute: 4 engines, 6 s of busy time in 2 s: 75 %; render 0.5 s in 2 s: 25 %
    _rewrite(
        tmp_path,
        300,
        3,
        fdinfo("i915-dgpu.txt", engine_render="2073979900 ns", engine_compute="16047118432 ns"),
    )
    (second,), unread = usage.read()
    assert second.busy_pct == 75.0 and unread is None


def test_xe_busy_is_cycles_over_the_gpus_own_clock(tmp_path: Path) -> None:
    clock = Clock()
    add_process(tmp_path, 300, {3: (RENDER, XE)})
    usage = DrmUsage(tmp_path, clock)
    usage.read()
    clock.now += 1.0
    _rewrite(
        tmp_path,
        300,
        3,
        fdinfo(
            "xe-dgpu.txt",
            cycles_rcs="48257900",
            total_cycles_rcs="7755183225",
            total_cycles_ccs="7755183225",
        ),
    )
    (use,), _ = usage.read()
    assert use.busy_pct == 20.0  # 20M of 100M cycles on rcs; ccs idle


def test_xe_idle_reads_zero_but_amdgpu_idle_is_no_reading(tmp_path: Path) -> None:
    clock = Clock()
    add_process(tmp_path, 300, {3: (RENDER, XE)})
    add_process(tmp_path, 301, {3: ("/dev/dri/renderD129", fdinfo("amdgpu.txt"))})
    usage = DrmUsage(tmp_path, clock)
    usage.read()
    clock.now += 1.0
    _rewrite(tmp_path, 300, 3, fdinfo("xe-dgpu.txt", total_cycles_rcs="7755183225"))
    uses, _ = usage.read()
    # amdgpu schedules no HIP work (ROCm/amdsmi#130): its 0 ns says nothing
    assert [(u.pid, u.busy_pct) for u in uses] == [(300, 0.0), (301, None)]
    clock.now += 1.0
    _rewrite(tmp_path, 301, 3, fdinfo("amdgpu.txt", engine_gfx="501532177 ns"))
    uses, _ = usage.read()
    assert [(u.pid, u.busy_pct) for u in uses] == [(300, None), (301, 50.0)]


def test_a_counter_that_goes_back_gives_no_reading_and_keeps_the_larger(tmp_path: Path) -> None:
    clock = Clock()
    add_process(tmp_path, 300, {3: (RENDER, fdinfo("i915-dgpu.txt"))})
    usage = DrmUsage(tmp_path, clock)
    usage.read()
    clock.now += 1.0
    _rewrite(tmp_path, 300, 3, fdinfo("i915-dgpu.txt", engine_render="73979900 ns"))
    assert usage.read()[0][0].busy_pct is None
    clock.now += 1.0
    _rewrite(tmp_path, 300, 3, fdinfo("i915-dgpu.txt", engine_render="1573979900 ns"))
    assert usage.read()[0][0].busy_pct == 50.0  # 1 s over 2 s since the larger value


def _intel(bus: str = "0000:03:00.0") -> GpuSample:
    return GpuSample(index=0, vendor="intel", bus_id=bus)


def test_processes_attach_to_the_gpu_with_their_pci_address() -> None:
    uses = [
        ProcessUse(300, "0000:03:00.0", 4 * KiB, 12.4),
        ProcessUse(301, "0000:03:00.0", 0, None),  # holds the file, nothing on the GPU
        ProcessUse(302, "0000:04:00.0", 8 * KiB, None),
    ]
    a, b = attach_drm_processes([_intel(), _intel("0000:05:00.0")], uses)
    assert a.processes == [GpuProcess(pid=300, used_bytes=4 * KiB, sm_pct=12)]
    assert b.processes == []


def test_a_process_its_source_listed_keeps_its_bytes_and_gains_its_busy_time() -> None:
    gpu = GpuSample(
        index=0, vendor="amd", bus_id="0000:0C:00.0", processes=[GpuProcess(pid=300, used_bytes=5)]
    )
    (attached,) = attach_drm_processes([gpu], [ProcessUse(300, "0000:0c:00.0", 7, 40.0)])
    assert attached.processes == [GpuProcess(pid=300, used_bytes=5, sm_pct=40)]


def test_kfd_and_fdinfo_agree_on_memory_on_the_mi300x_captures(tmp_path: Path) -> None:
    """The rocm-smi MI300X capture's GPUs; the processes amd-smi's capture lists on GPU 0
    (amd-smi reads fdinfo) written as KFD's vram files and as amdgpu's fdinfo."""
    gpus = parse_rocm_smi((FIXTURES / "rocm-smi" / "mi300x-style.json").read_text())
    listed = parse_amd_smi_processes((FIXTURES / "amd-smi" / "mi300x-process.json").read_text())
    tree = make_kfd_tree(
        tmp_path / "kfd",
        {1: (4242, 0x0C00), 2: (4343, 0x2200)},
        {pid: {4242: vram or 0} for _, pid, vram, _ in listed},
    )
    for client, (_, pid, vram, _) in enumerate(listed, start=10):
        text = fdinfo(
            "amdgpu.txt", client_id=str(client), resident_vram=f"{(vram or 0) // KiB} KiB"
        )
        add_process(tmp_path / "proc", pid, {3: (RENDER, text)})
    by_kfd = kfd.attach_kfd_processes(gpus, kfd.read_kfd(tree))
    uses, unread = DrmUsage(tmp_path / "proc").read()
    by_fdinfo = attach_drm_processes(gpus, uses)
    assert [[(p.pid, p.used_bytes) for p in g.processes] for g in by_kfd] == [
        [(4242, 103079215104)],
        [],
    ]
    assert [[(p.pid, p.used_bytes) for p in g.processes] for g in by_fdinfo] == [
        [(4242, 103079215104)],
        [],
    ]
    assert unread is None
