"""The node's GPUs and host read together: every vendor's GPUs in one order, and the statuses
of a vendor this node has no tool for left out unless no vendor has one."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import anyio
import psutil

from placewatch.schemas import GpuSample, HostSample, SourceStatus
from placewatch.schemas.messages import Vendor
from placewatch.worker.gpu import ActivityWanted
from placewatch.worker.gpu.drm_fdinfo import DrmUsage
from placewatch.worker.gpu.registry import VendorChain
from placewatch.worker.host import HostSampler
from placewatch.worker.sampler import NodeReading, NodeSampler

from tests.support.drm_proc import RENDER, add_process, fdinfo


@dataclass
class StandIn:
    """A GPU source that answers what it is given, without a tool."""

    name: str
    vendor: Vendor
    gpus: list[GpuSample] = field(default_factory=list)
    missing: str | None = None
    error: str | None = None

    def unavailable(self) -> str | None:
        return self.missing

    async def sample(self, activity: ActivityWanted = "no") -> tuple[list[GpuSample], SourceStatus]:
        status = SourceStatus(
            name=self.name, ok=self.error is None, error=self.error, vendor=self.vendor
        )
        return list(self.gpus), status


def gpu(vendor: Vendor, index: int) -> GpuSample:
    return GpuSample(index=index, vendor=vendor, uuid=f"{vendor}-{index}")


def read(*chains: VendorChain) -> NodeReading:
    return anyio.run(NodeSampler(list(chains), HostSampler()).sample, backend="asyncio")


def nvidia(*sources: StandIn) -> VendorChain:
    return VendorChain("nvidia", list(sources))


def amd(*sources: StandIn) -> VendorChain:
    return VendorChain("amd", list(sources))


NO_NVML = StandIn("nvml", "nvidia", missing="nvidia-ml-py is not installed")
NO_ROCM_SMI = StandIn("rocm-smi", "amd", missing="rocm-smi not found on PATH")
NO_AMD_SMI = StandIn("amd-smi", "amd", missing="amd-smi not found on PATH")


def test_gpus_are_sorted_by_vendor_then_index() -> None:
    reading = read(
        nvidia(StandIn("nvidia-smi", "nvidia", [gpu("nvidia", 1), gpu("nvidia", 0)])),
        amd(StandIn("rocm-smi", "amd", [gpu("amd", 1), gpu("amd", 0)])),
    )
    assert [g.uuid for g in reading.gpus] == ["amd-0", "amd-1", "nvidia-0", "nvidia-1"]
    assert [(s.name, s.ok) for s in reading.sources] == [("nvidia-smi", True), ("rocm-smi", True)]


def test_a_vendor_without_a_tool_is_left_out_of_the_statuses() -> None:
    reading = read(
        nvidia(NO_NVML, StandIn("nvidia-smi", "nvidia", [gpu("nvidia", 0)])),
        amd(NO_ROCM_SMI, NO_AMD_SMI),
    )
    assert [g.uuid for g in reading.gpus] == ["nvidia-0"]
    assert [(s.name, s.ok) for s in reading.sources] == [("nvidia-smi", True)]


def test_with_no_tool_at_all_every_missing_tool_is_said() -> None:
    reading = read(
        nvidia(NO_NVML, StandIn("nvidia-smi", "nvidia", missing="nvidia-smi not found on PATH")),
        amd(NO_ROCM_SMI, NO_AMD_SMI),
    )
    assert reading.gpus == []
    assert [(s.name, s.vendor, s.error) for s in reading.sources] == [
        ("nvml", "nvidia", "nvidia-ml-py is not installed"),
        ("nvidia-smi", "nvidia", "nvidia-smi not found on PATH"),
        ("rocm-smi", "amd", "rocm-smi not found on PATH"),
        ("amd-smi", "amd", "amd-smi not found on PATH"),
    ]
    assert not reading.gpus_known


def test_a_failing_tool_is_present_and_said_though_it_read_nothing() -> None:
    reading = read(
        nvidia(StandIn("nvidia-smi", "nvidia", error="nvidia-smi exited 9: driver mismatch")),
        amd(NO_ROCM_SMI, NO_AMD_SMI),
    )
    assert [(s.name, s.error) for s in reading.sources] == [
        ("nvidia-smi", "nvidia-smi exited 9: driver mismatch"),
    ]
    assert not reading.gpus_known


def test_a_tool_that_answers_with_no_gpus_makes_the_gpus_known() -> None:
    reading = read(nvidia(StandIn("nvidia-smi", "nvidia")))
    assert reading.gpus == []
    assert reading.gpus_known


def test_gpus_known_from_gpus_or_a_source_that_answered() -> None:
    host = HostSample()
    failed = SourceStatus(name="nvml", ok=False, error="NVML failed: Unknown Error")
    answered = SourceStatus(name="nvidia-smi", ok=True)
    assert NodeReading([gpu("nvidia", 0)], host, [failed]).gpus_known
    assert NodeReading([], host, [failed, answered]).gpus_known
    assert not NodeReading([], host, [failed]).gpus_known
    assert not NodeReading([], host, []).gpus_known


def test_the_host_is_read_with_the_gpus() -> None:
    reading = read()
    assert reading.host.cpu_count == psutil.cpu_count(logical=True)
    assert reading.host.memory_total_bytes == psutil.virtual_memory().total
    assert (reading.gpus, reading.sources) == ([], [])


def test_intel_gpus_get_their_processes_from_fdinfo_and_an_unread_holder_says_so(
    tmp_path: Path,
) -> None:
    intel = GpuSample(index=0, vendor="intel", bus_id="0000:03:00.0", memory_used_bytes=1 << 30)
    nv = GpuSample(index=0, vendor="nvidia", bus_id="0000:03:00.0")
    add_process(tmp_path, 300, {3: (RENDER, fdinfo("xe-dgpu.txt"))})
    chains = [
        VendorChain("intel", [StandIn("intel-sysfs", "intel", [intel])]),
        nvidia(StandIn("nvml", "nvidia", [nv])),
    ]
    sampler = NodeSampler(chains, HostSampler(), DrmUsage(tmp_path))
    reading = anyio.run(sampler.sample, backend="asyncio")
    assert [(g.vendor, [(p.pid, p.used_bytes) for p in g.processes]) for g in reading.gpus] == [
        ("intel", [(300, 23992 * 1024)]),
        ("nvidia", []),  # NVIDIA's driver writes no usage stats
    ]
    assert reading.foreign_unknown == frozenset()
    (tmp_path / "301").mkdir()
    (tmp_path / "301" / "fd").write_text("")  # a process whose descriptors cannot be listed
    reading = anyio.run(sampler.sample, backend="asyncio")
    assert reading.foreign_unknown == frozenset({"0000:03:00.0"})
