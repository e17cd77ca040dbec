"""Discovery in the shard pass: when to walk the processes again, and what a walk keeps.

Walking every process costs tens of milliseconds on a busy node, so a full walk runs every
DISCOVERY_EVERY_S; between walks the last finding stands, and a discovered shard whose
process exits reads `gone` at the next tick. Each tick in between lists the node's pids
(psutil.pids(), one read of /proc) and reads the command line of those not seen at the last
look alone: where one runs an engine (a new llama-server, a router's child, Ollama's model)
that the worker's scope admits (scope.py), the walk runs at once, so a new engine is found
and judged in the tick after it starts.
A process is looked at twice, at first sight and at the next tick, since a fork shows its
parent's command line until it execs. An engine's intended GPUs are read against the GPUs
the tools list, so a walk also runs as soon as the tools start or stop answering.

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
import psutil

from placewatch.schemas import GpuSample, PlacementSpec

from .discover import Discovered, discover, runs_engine
from .liveness import Tracked, named
from .placements import Placement
from .scope import EVERY, ProcessScope

DISCOVERY_EVERY_S = 10.0

Walk = Callable[..., list[Discovered]]
"""discover(), or a stand-in with its signature."""


class NewProcesses:
    """The node's processes started since the last look: whether one runs an engine that
    `scope` admits (an engine out of it is none of this worker's: no walk for it). Blocking
    (it reads /proc): called in a worker thread."""

    def __init__(
        self,
        pids: Callable[[], Collection[int]] = psutil.pids,
        engine: Callable[[int], bool] = runs_engine,
        scope: ProcessScope = EVERY,
    ) -> None:
        self.pids = pids
        self.engine = engine
        self.scope = scope
        self._seen: set[int] = set()
        self._young: set[int] = set()
        """New at the last look: looked at once more, in case it execs since."""

    def reset(self) -> None:
        """Every process running now is seen (a full walk looks at them all)."""
        self._seen, self._young = set(self.pids()), set()

    def engine_started(self) -> bool:
        """Whether a process new since the last look (or new at it) runs an engine."""
        pids = set(self.pids())
        fresh = (pids - self._seen) | (self._young & pids)
        self._seen, self._young = pids, pids - self._seen
        return any(self.engine(pid) and self.scope.admits(pid) for pid in sorted(fresh))


class DiscoveryWalks:
    """The engines the last walk found, as placements; owned by one shard pass."""

    def __init__(
        self,
        clock: Callable[[], float] = time.time,
        every_s: float = DISCOVERY_EVERY_S,
        walk: Walk = discover,
        new: NewProcesses | None = None,
    ) -> None:
        self.clock = clock
        self.every_s = every_s
        self.walk = walk
        self.new = NewProcesses() if new is None else new
        self._found: list[Placement] | None = None
        self._at = 0.0
        self._silent: bool | None = None
        self._children_only = False

    async def found(
        self,
        gpus: Sequence[GpuSample],
        tools_silent: Sequence[str] | None,
        claimed: Collection[int],
        routers: Mapping[int, PlacementSpec] | None = None,
        *,
        children_only: bool = False,
    ) -> list[Placement]:
        """The engines found on the node, but those of `claimed` pids, walking again when
        it is time; `tools_silent` names the GPU sources that did not answer when none did;
        `routers` the placements that name a llama-server router, whose children they place;
        with `children_only` (discovery off), those children alone."""
        now = self.clock()
        silent = tools_silent is not None
        due = self._found is None or now - self._at >= self.every_s or silent != self._silent
        due = due or children_only != self._children_only
        if self._found is None or due or await anyio.to_thread.run_sync(self.new.engine_started):
            more: dict[str, object] = {"placed_routers": routers} if routers else {}
            if children_only:
                more["children_only"] = True
            self._children_only = children_only
            walk = functools.partial(self.walk, gpus, claimed, tools_silent=tools_silent, **more)
            found = [placement_of(d) for d in await anyio.to_thread.run_sync(self._walk, walk)]
            self._found = self._keep_told(found) if silent else found
            self._at, self._silent = now, silent
        return self._found

    def _walk(self, walk: Callable[[], list[Discovered]]) -> list[Discovered]:
        self.new.reset()  # first: a process started during the walk is new at the next look
        return walk()

    def _keep_told(self, found: list[Placement]) -> list[Placement]:
        """`found`, where an engine the last walk placed on GPUs the tools named keeps that."""
        told = {(p.spec.id, p.spec.pid): p for p in self._found or () if p.gpu_request is None}
        return [
            told.get((p.spec.id, p.spec.pid), p) if p.gpu_request is not None else p for p in found
        ]


def placement_of(d: Discovered) -> Placement:
    return Placement(
        d.spec,
        "discovered",
        d.gpus_unknown,
        d.cpu_on_purpose,
        d.gpu_request,
        d.log_prefix,
        d.server,
        d.model,
        log=d.log,
        unlogged=d.unlogged,
    )


def handed_over(tracked: Mapping[str, Tracked], pid: int | None) -> str | None:
    """Where a discovered shard's process went when a placement claims it now, as the gone
    status's reason says it; None where none does."""
    for sid, t in tracked.items():
        if pid and pid in (t.pid, t.placement.spec.pid):
            return f"its process {pid} runs on, watched as {named(sid, t.placement)}"
    return None
