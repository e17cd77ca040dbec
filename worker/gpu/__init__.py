"""GPU sources: one module per tool, each behind the small GpuSource interface.

A source turns a tool's raw output into GpuSample values through pure parse
functions, and reports how the probe went as a SourceStatus. A new source is
a new module and a line in `default_sources`, not an edit across the worker.
"""

from __future__ import annotations

from typing import Protocol

from placewatch.schemas import GpuSample, SourceStatus

from ..probe import ProbeRunner
from .nvidia_smi import NvidiaSmiSource


class GpuSource(Protocol):
    name: str
    vendor: str

    async def sample(self) -> tuple[list[GpuSample], SourceStatus]:
        """This tick's GPUs and how the probe went; never raises for bad tool output."""
        ...


def default_sources(runner: ProbeRunner) -> list[GpuSource]:
    """The sources a node is probed with, one per vendor."""
    return [NvidiaSmiSource(runner)]
