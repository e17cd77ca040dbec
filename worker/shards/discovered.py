"""Discovery in the shard pass: when to walk the processes again, and what a walk keeps.

Walking every process costs tens of milliseconds on a busy node, so a walk runs every
DISCOVERY_EVERY_S; between walks the last finding stands, and a discovered shard whose
process exits reads `gone` at the next tick. An engine's intended GPUs are read against
the GPUs the tools list, so a walk also runs as soon as the tools start or stop answering.

While they are silent, an engine found while they answered keeps the placement it was
found with: one failed nvidia-smi read must not turn the GPUs it meant to use into
"cannot tell" (which would also drop the verdict the shard pass holds, marked stale,
through up to three failed reads). Only an engine first seen while they are silent is
placed on GPUs no tool could name.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Collection, Mapping, Sequence

import anyio.to_thread

from placewatch.schemas import GpuSample, PlacementSpec

from .discover import Discovered, discover
from .placements import Placement

DISCOVERY_EVERY_S = 10.0

Walk = Callable[..., list[Discovered]]
"""discover(), or a stand-in with its signature."""


class DiscoveryWalks:
    """The engines the last walk found, as placements; owned by one shard pass."""

    def __init__(
        self,
        clock: Callable[[], float] = time.time,
        every_s: float = DISCOVERY_EVERY_S,
        walk: Walk = discover,
    ) -> None:
        self.clock = clock
        self.every_s = every_s
        self.walk = walk
        self._found: list[Placement] | None = None
        self._at = 0.0
        self._silent: bool | None = None

    async def found(
        self,
        gpus: Sequence[GpuSample],
        tools_silent: Sequence[str] | None,
        claimed: Collection[int],
        routers: Mapping[int, PlacementSpec] | None = None,
    ) -> list[Placement]:
        """The engines found on the node, but those of `claimed` pids, walking again when
        it is time; `tools_silent` names the GPU sources that did not answer when none did;
        `routers` the placements that name a llama-server router, whose children they place."""
        now = self.clock()
        silent = tools_silent is not None
        if self._found is None or now - self._at >= self.every_s or silent != self._silent:
            more = {"placed_routers": routers} if routers else {}
            walk = functools.partial(self.walk, gpus, claimed, tools_silent=tools_silent, **more)
            found = [placement_of(d) for d in await anyio.to_thread.run_sync(walk)]
            self._found = self._keep_told(found) if silent else found
            self._at, self._silent = now, silent
        return self._found

    def _keep_told(self, found: list[Placement]) -> list[Placement]:
        """`found`, where an engine the last walk placed on GPUs the tools named keeps that."""
        told = {(p.spec.id, p.spec.pid): p for p in self._found or () if p.gpu_request is None}
        return [
            told.get((p.spec.id, p.spec.pid), p) if p.gpu_request is not None else p for p in found
        ]


def placement_of(d: Discovered) -> Placement:
    return Placement(
        d.spec, "discovered", d.gpus_unknown, d.cpu_on_purpose, d.gpu_request, d.log_prefix, d.log
    )
