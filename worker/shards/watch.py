"""One pass over every shard on the node: find it, attribute memory, read its engine, judge.

Runs once a tick after the GPUs were sampled. Placements come from the
shards file, the placements bucket and discovery, all live at once; a
placement in the file or the bucket claims its process, so discovery does
not report it a second time.
"""

from __future__ import annotations

import logging
import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import anyio.to_thread
import msgspec
import psutil

from placewatch.schemas import ComputeStatus, GpuSample, ShardBrief, SourceStatus

from ..config import Settings
from .attribution import ProcTable, owner
from .bucket import PlacementsBucket
from .discover import discover
from .engine_log import LogFollower
from .placements import Placement, ShardsFile
from .verdict import Judgement, Observation, judge

log = logging.getLogger(__name__)

HEALTH_TIMEOUT_S = 1.0
DISCOVERY_EVERY_S = 10.0
UNLISTED_BYTES = 1 << 30
"""Memory in use on a GPU that lists no process at all, above which someone this worker
cannot see holds it (a worker in a container without the host's PID namespace)."""


@dataclass
class Tracked:
    """What persists about one shard between ticks."""

    placement: Placement
    pid: int | None = None
    create_time: float | None = None
    started: int | None = None
    """The process's start time in clock ticks (/proc/PID/stat): a reused pid differs."""
    ready: bool = False
    follower: LogFollower | None = None


@dataclass
class ShardsView:
    """One pass's result: the GPUs with processes attributed, and every shard's status."""

    gpus: list[GpuSample]
    statuses: list[ComputeStatus] = field(default_factory=list)
    gone: list[ComputeStatus] = field(default_factory=list)
    """Shards no longer placed or found: their last status, now `gone`."""
    problems: list[SourceStatus] = field(default_factory=list)

    @property
    def briefs(self) -> list[ShardBrief]:
        return [
            ShardBrief(shard=s.shard, verdict=s.verdict, pid=s.pid, reason=s.reason)
            for s in self.statuses
        ]


class ShardWatch:
    def __init__(
        self,
        node: str,
        session: str,
        *,
        grace_s: float = 15.0,
        shards_file: ShardsFile | None = None,
        bucket: PlacementsBucket | None = None,
        discovery: bool = True,
        proc_root: Path = Path("/proc"),
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.node = node
        self.session = session
        self.grace_s = grace_s
        self.shards_file = shards_file
        self.bucket = bucket
        self.discovery = discovery
        self.clock = clock
        self.tracked: dict[str, Tracked] = {}
        self._reading_logs = threading.Lock()  # the tick and the log-follow loop, two threads
        self._found: list[Placement] | None = None
        self._found_at = 0.0
        self.table = ProcTable(proc_root)
        self._owners: dict[int, str | None] = {}
        self._owners_for: dict[int, str] = {}

    async def check(self, gpus: list[GpuSample], gpus_known: bool) -> ShardsView:
        placements, problems = self._placements()
        if self.discovery:
            placements += await self._discovered(gpus, placements)
        gone = self._sync(placements)
        table = self.table
        exited = table.refresh()
        if not self._settled(table):
            await anyio.to_thread.run_sync(self._resolve, table)
        await self._readiness()
        if self.following():
            await anyio.to_thread.run_sync(self.follow_logs)  # one thread hop for every log
        shard_pids = {t.pid: sid for sid, t in self.tracked.items() if t.pid}
        fresh = self._update_owners(gpus, shard_pids, exited)
        gpus, held = _attribute(gpus, self._owners)
        hidden = _hidden(gpus, table) if self.tracked else {}
        if fresh:  # every process the owners were worked out from was looked up this tick
            table.keep_only(table.used)
        now = datetime.now(UTC)
        statuses = []
        for sid, t in sorted(self.tracked.items()):
            evidence = t.follower.evidence if t.follower is not None else None
            obs = Observation(
                placement=t.placement,
                pid=t.pid,
                alive=t.pid is not None,
                ready=t.ready,
                gpus_known=gpus_known,
                held=held.get(sid, {}),
                hidden=hidden,
                evidence=evidence,
            )
            statuses.append(self._status(sid, t, judge(obs, gpus), now))
        return ShardsView(
            gpus=gpus,
            statuses=statuses,
            gone=[self._gone_status(p, now) for p in gone],
            problems=problems,
        )

    def _update_owners(
        self, gpus: list[GpuSample], shard_pids: dict[int, str], exited: bool
    ) -> bool:
        """Work out the shard of each GPU process not worked out before; True when all were.

        An owner stands while the shards' pids and every process it was worked out from
        (the process, its ancestors, its group's leader) stay the same, so the usual tick
        reads no /proc file at all. Everything is worked out again when one of them exited,
        when a shard's pid changed, or when a process left the GPUs' lists (so that the
        pidfds kept are those of processes still listed).
        """
        pids = {p.pid for g in gpus for p in g.processes}
        fresh = exited or shard_pids != self._owners_for or not self._owners.keys() <= pids
        if fresh:
            self._owners, self._owners_for = {}, shard_pids
        for pid in pids - self._owners.keys():
            self._owners[pid] = owner(pid, shard_pids, self.table) if shard_pids else None
        return fresh

    async def _discovered(
        self, gpus: list[GpuSample], placements: list[Placement]
    ) -> list[Placement]:
        """Engines nothing places. Walking every process costs tens of milliseconds on a
        busy node, so it runs every DISCOVERY_EVERY_S; between walks the last finding
        stands, and a discovered shard whose process exits reads `gone` at the next tick."""
        now = self.clock()
        # Placed shards claim their processes, also one placed since the last walk.
        claimed = {
            t.pid for t in self.tracked.values() if t.pid and t.placement.origin != "discovered"
        }
        claimed |= {p.spec.pid for p in placements if p.spec.pid}
        if self._found is None or now - self._found_at >= DISCOVERY_EVERY_S:
            found = await anyio.to_thread.run_sync(discover, gpus, claimed)
            self._found = [
                Placement(d.spec, "discovered", d.gpus_unknown, d.cpu_on_purpose) for d in found
            ]
            self._found_at = now
        taken = {p.spec.id for p in placements}
        return [p for p in self._found if p.spec.id not in taken and p.spec.pid not in claimed]

    def following(self) -> bool:
        """Whether any shard's log is followed."""
        return any(t.follower is not None for t in self.tracked.values())

    def follow_logs(self) -> bool:
        """Read what the shards' logs added since the last look; True when evidence changed.

        Blocking (file reads): call it from a thread. The worker calls it several
        times a second, so an engine's own word reaches the bus well inside an
        interval.
        """
        changed = False
        with self._reading_logs:
            for t in list(self.tracked.values()):
                if t.follower is not None and t.follower.update():
                    changed = True
        return changed

    def _placements(self) -> tuple[list[Placement], list[SourceStatus]]:
        placements: list[Placement] = []
        problems: list[SourceStatus] = []
        if self.shards_file is not None:
            self.shards_file.load()
            placements += [Placement(spec, "file") for spec in self.shards_file.specs]
            problems += [
                SourceStatus(name="shards-file", ok=False, error=p)
                for p in self.shards_file.problems
            ]
        if self.bucket is not None:
            ids = {p.spec.id for p in placements}
            for key, spec in sorted(self.bucket.specs.items()):
                if spec.id in ids:
                    problems.append(
                        SourceStatus(
                            name="placements-kv",
                            ok=False,
                            error=f"KV key {key} places {spec.id!r}, which the shards file "
                            "places too; the file's placement is used",
                        )
                    )
                    continue
                placements.append(Placement(spec, "kv"))
            problems += [
                SourceStatus(name="placements-kv", ok=False, error=p)
                for p in self.bucket.problems.values()
            ]
        return placements, problems

    def _sync(self, placements: list[Placement]) -> list[Placement]:
        """Track the current placements; return those that are no longer placed."""
        current = {p.spec.id: p for p in placements}
        gone = [t.placement for sid, t in self.tracked.items() if sid not in current]
        for placement in gone:
            del self.tracked[placement.spec.id]
        for sid, placement in current.items():
            t = self.tracked.get(sid)
            if t is None or t.placement.spec != placement.spec:
                previous = t
                t = self.tracked[sid] = Tracked(placement)
                if previous is not None and previous.placement.spec.pid == placement.spec.pid:
                    t.pid, t.create_time, t.started, t.ready = (
                        previous.pid,
                        previous.create_time,
                        previous.started,
                        previous.ready,
                    )
            else:
                t.placement = placement
            if placement.spec.log_path:
                if t.follower is None or str(t.follower.path) != placement.spec.log_path:
                    t.follower = LogFollower(placement.spec.log_path)
            else:
                t.follower = None
        return gone

    def _settled(self, table: ProcTable) -> bool:
        """Whether every shard still has the process it had (its start time, kept while
        its pidfd says it runs).

        The usual tick: nothing to look up, so no thread is needed for it.
        """
        return all(
            t.pid is not None
            and t.placement.spec.pid in (None, t.pid)
            and _same(table, t.pid, t.started)
            for t in self.tracked.values()
        )

    def _resolve(self, table: ProcTable) -> None:
        """Find each shard's process; notice one that exited or was replaced. Blocking."""
        candidates: list[tuple[float, int, str]] | None = None
        for t in self.tracked.values():
            spec = t.placement.spec
            pid = spec.pid
            if pid is None and spec.match:
                if t.pid is not None and _same(table, t.pid, t.started):
                    continue
                if candidates is None:
                    candidates = _command_lines()
                pattern = re.compile(spec.match)
                pid = next((p for _, p, cmd in candidates if pattern.search(cmd)), None)
            if pid is None:
                t.pid = t.create_time = t.started = None
                t.ready = False
                continue
            if pid == t.pid and _same(table, pid, t.started):
                continue
            try:
                created = psutil.Process(pid).create_time()
            except psutil.Error:
                created = None
            started = table.started(pid)
            if created is None or started is None:
                t.pid = t.create_time = t.started = None
                t.ready = False
                continue
            t.pid, t.create_time, t.started, t.ready = pid, created, started, False

    async def _readiness(self) -> None:
        now = self.clock()
        for t in self.tracked.values():
            if t.ready or t.pid is None:
                continue
            # The start time the OS keeps: a restarted worker, or a one-off
            # `placewatch sample`, judges a long-running shard at once.
            graced = t.create_time is not None and now - t.create_time >= self.grace_s
            url = t.placement.spec.health_url
            if not url:
                t.ready = graced
                continue
            answer = await anyio.to_thread.run_sync(_health, url)
            # Discovery only guesses a health URL from the command line: one that
            # nothing answers on is a wrong guess, and the grace period decides.
            guessed = t.placement.origin == "discovered"
            t.ready = answer == "ok" or (guessed and answer == "unreachable" and graced)

    def _status(self, sid: str, t: Tracked, j: Judgement, now: datetime) -> ComputeStatus:
        return ComputeStatus(
            node=self.node,
            shard=sid,
            session=self.session,
            time=now,
            pid=t.pid if t.pid is not None else t.placement.spec.pid,
            placed_gpus=list(t.placement.spec.gpus),
            backend=j.backend,
            devices=list(j.devices),
            layers_offloaded=j.layers_offloaded,
            layers_total=j.layers_total,
            verdict=j.verdict,
            reason=j.reason,
            evidence=list(j.evidence),
        )

    def _gone_status(self, placement: Placement, now: datetime) -> ComputeStatus:
        what = (
            "its process exited"
            if placement.origin == "discovered"
            else "its placement was removed"
        )
        return ComputeStatus(
            node=self.node,
            shard=placement.spec.id,
            session=self.session,
            time=now,
            pid=placement.spec.pid,
            placed_gpus=list(placement.spec.gpus),
            verdict="gone",
            reason=f"no longer watched: {what}",
        )


def _same(table: ProcTable, pid: int, started: int | None) -> bool:
    """Whether `pid` runs and is the process that started then (a reused pid is not)."""
    return started is not None and table.started(pid) == started


def _command_lines() -> list[tuple[float, int, str]]:
    """(start time, pid, command line) of every readable process, oldest first."""
    found = []
    me = psutil.Process().pid
    for proc in psutil.process_iter(["cmdline", "create_time"]):
        cmdline = proc.info.get("cmdline")
        if proc.pid == me or not cmdline:
            continue
        found.append((proc.info.get("create_time") or 0.0, proc.pid, " ".join(cmdline)))
    return sorted(found)


def _health(url: str) -> Literal["ok", "not ready", "unreachable"]:
    """What a health URL says: 2xx, another status (503 while loading), or nothing at all."""
    try:
        with urllib.request.urlopen(url, timeout=HEALTH_TIMEOUT_S) as response:  # noqa: S310
            return "ok" if 200 <= int(response.status) < 300 else "not ready"
    except urllib.error.HTTPError:
        return "not ready"
    except (OSError, ValueError):
        return "unreachable"


def _attribute(
    gpus: list[GpuSample], owners: dict[int, str | None]
) -> tuple[list[GpuSample], dict[str, dict[int, int | None]]]:
    """GPUs with each process's shard and foreign memory; what each shard holds per GPU."""
    held: dict[str, dict[int, int | None]] = {}
    out = []
    for gpu in gpus:
        processes = []
        ours = 0
        for p in gpu.processes:
            sid = owners.get(p.pid)
            if sid is not None:
                per_gpu = held.setdefault(sid, {})
                before = per_gpu.get(gpu.index, 0)
                per_gpu[gpu.index] = (
                    None if before is None or p.used_bytes is None else before + p.used_bytes
                )
                ours += p.used_bytes or 0
                p = msgspec.structs.replace(p, shard=sid)  # noqa: PLW2901
            processes.append(p)
        foreign = None if gpu.memory_used_bytes is None else max(gpu.memory_used_bytes - ours, 0)
        out.append(msgspec.structs.replace(gpu, processes=processes, foreign_bytes=foreign))
    return out, held


def _hidden(gpus: list[GpuSample], table: ProcTable) -> dict[int, str]:
    """GPUs whose memory may belong to processes this worker cannot see."""
    hidden = {}
    for gpu in gpus:
        unseen = [p.pid for p in gpu.processes if not table.visible(p.pid)]
        if unseen:
            hidden[gpu.index] = (
                f"lists {len(unseen)} process(es) (pid {unseen[0]}...) that are not in this "
                "worker's /proc"
            )
        elif not gpu.processes and (gpu.memory_used_bytes or 0) > UNLISTED_BYTES:
            hidden[gpu.index] = (
                f"has {(gpu.memory_used_bytes or 0) / (1 << 30):.1f} GiB in use by processes "
                "the driver does not list to this worker"
            )
    return hidden


def shard_watch(
    settings: Settings, session: str, bucket: PlacementsBucket | None = None
) -> ShardWatch:
    """The watch a worker's settings describe."""
    return ShardWatch(
        settings.node,
        session,
        grace_s=settings.grace,
        shards_file=ShardsFile(settings.shards) if settings.shards else None,
        bucket=bucket,
        discovery=settings.discover,
    )
