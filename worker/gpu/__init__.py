"""GPU sources: one module per tool, each behind the small GpuSource interface.

A source turns a tool's raw output into GpuSample values through pure parse
functions, and reports how the probe went as a SourceStatus. The registry
(registry.py) lists every source, each vendor's in its order of preference;
a new source is a new module and a line there, not an edit across the worker.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal, Protocol, Self, runtime_checkable

from anyio.abc import TaskStatus

from placewatch.schemas import GpuSample, SourceStatus
from placewatch.schemas.messages import Vendor

from ..probe import ProbeResult, ProbeRunner

ActivityWanted = Literal["no", "in-process", "any"]
"""How far a GPU read goes for what each process ran (GpuProcess.sm_pct, .mem_pct): not at
all; only where it costs no tool run (NVML, microseconds); or through a tool run too
(`nvidia-smi pmon`, `amd-smi process`: a whole spawn a tick)."""

KFD_ROOT = Path("/sys/class/kfd/kfd")
"""The AMD KFD sysfs tree that per-process VRAM is read from."""

DRM_ROOT = Path("/sys/class/drm")
"""The DRM class folder that Intel GPUs are read from (cardN, their device and hwmon)."""


@dataclass(frozen=True)
class SourceOptions:
    """What a source may be built with: the runner of its tool, the KFD tree to read, the
    interval a tool that loops by itself repeats at (None: no tool loops), and the DRM class
    folder to read Intel GPUs from."""

    runner: ProbeRunner
    kfd_root: Path = KFD_ROOT
    interval_s: float | None = None
    drm_root: Path = DRM_ROOT


class GpuSource(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def vendor(self) -> Vendor: ...

    def unavailable(self) -> str | None:
        """Why this source cannot be used on this node (tool or library missing), else None."""
        ...

    async def sample(self, activity: ActivityWanted = "no") -> tuple[list[GpuSample], SourceStatus]:
        """This tick's GPUs and how the probe went; never raises for bad tool output. With
        `activity`, what each listed process ran on its GPU too, where the source can tell
        and as far as `activity` lets it go."""
        ...


@runtime_checkable
class LoopingSource(Protocol):
    """A source with a task of its own: a tool kept running that loops by itself."""

    async def run(self, *, task_status: TaskStatus[None] = ...) -> None:
        """Its child, kept while its readings are wanted; `sample` reads once without it."""
        ...


class ToolSource:
    """What every source that runs a vendor tool shares: its runner, PATH lookup, status."""

    name: ClassVar[str]
    vendor: ClassVar[Vendor]

    def __init__(self, runner: ProbeRunner, tool: str) -> None:
        self._runner = runner
        self._tool = tool

    def unavailable(self) -> str | None:
        return None if shutil.which(self._tool) else f"{self._tool} not found on PATH"

    def _status(
        self, latency_ms: float, error: str | None = None, stuck: bool = False
    ) -> SourceStatus:
        return SourceStatus(
            name=self.name,
            ok=error is None,
            latency_ms=round(latency_ms, 3),
            error=error,
            vendor=self.vendor,
            degraded=stuck,
        )


class AmdToolSource(ToolSource):
    """What rocm-smi's and amd-smi's sources share: their processes come from the KFD tree
    under `kfd_root`, and a tool that prints no GPU is answered with the same advice."""

    vendor: ClassVar[Vendor] = "amd"

    def __init__(
        self, runner: ProbeRunner, tool: str = "", kfd_root: Path | str = KFD_ROOT
    ) -> None:
        super().__init__(runner, tool or self.name)
        self._kfd_root = Path(kfd_root)

    @classmethod
    def build(cls, options: SourceOptions) -> Self:
        return cls(options.runner, kfd_root=options.kfd_root)

    def _printed_none(self, result: ProbeResult, gpus: str, look: str) -> str:
        """Why no GPU came of a run: the tool's own failure, or what to run and check."""
        if result.error is not None and not result.stdout.strip():
            return result.error
        said = f" ({result.error})" if result.error else ""
        return (
            f"{self._tool} printed no {gpus}{said}; run `{self._tool} {look}` to see what it "
            "says, and check that the amdgpu driver is loaded (lsmod | grep amdgpu) and that "
            "this user is in the render and video groups"
        )
