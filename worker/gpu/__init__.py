"""GPU sources: one module per tool, each behind the small GpuSource interface.

A source turns a tool's raw output into GpuSample values through pure parse
functions, and reports how the probe went as a SourceStatus. The registry
(registry.py) orders the sources of each vendor by preference; a new source
is a new module and a line there, not an edit across the worker.
"""

from __future__ import annotations

from typing import Protocol

from placewatch.schemas import GpuSample, SourceStatus


class GpuSource(Protocol):
    name: str
    vendor: str

    def unavailable(self) -> str | None:
        """Why this source cannot be used on this node (tool or library missing), else None."""
        ...

    async def sample(self) -> tuple[list[GpuSample], SourceStatus]:
        """This tick's GPUs and how the probe went; never raises for bad tool output."""
        ...
