"""The shard pass: once a tick, every shard on the node found, attributed and judged.

It runs after the GPUs and the host were read, on those readings. Placements
come from the shards file, the placements bucket and discovery, all live at
once; a placement in the file or the bucket claims its process, so discovery
does not report it a second time. Each shard's engine log is followed by
EngineLogs, which hands the pass what each log says so far.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

import anyio.to_thread

from placewatch.schemas import ComputeStatus, GpuHealth, GpuSample, ShardBrief, SourceStatus
from placewatch.schemas.printable import printable

from ..deadline import NEVER, Deadline
from ..engines import ModelClaim, owns_log
from ..engines.evidence import EngineEvidence
from ..engines.evidence.follow import EngineLogs, Evidence, Log
from ..gpu import ActivityWanted
from . import liveness
from .activity import Activity, ActivityWindows, Read, shard_usage
from .attribution import Held, ProcTable, attribute, owner, unseen_holders
from .claims import ServerClaims, SharedServerLogs
from .discover import discover
from .discover.log_path import log_source
from .discovered import DiscoveryWalks, NewProcesses
from .gpu_health import health_by_index
from .liveness import ROUTER, Tracked, find_processes, settled
from .lost_evidence import held, log_note, rotated
from .placements import Placement, PlacementFeed, ShardsFile, placed
from .readiness import ReadinessChecks
from .refused import RefusedValues, at_most, refusals_told, refused_values, shared_reasons
from .scope import EVERY, ProcessScope
from .served import node_address
from .silent_tools import engine_says_cpu
from .status import gone_status, judged_status, printable_problem
from .verdict import GpuIds, Judgement, Observation, gpu_ids, judge

log = logging.getLogger(__name__)

REPORT_IT = "please report it with the output of `placewatch sample --json`"


@dataclass(frozen=True)
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
            ShardBrief(
                shard=s.shard,
                verdict=s.verdict,
                pid=s.pid,
                reason=s.reason,
                sm_pct=s.sm_pct,
                requests=s.requests,
            )
            for s in self.statuses
        ]


@dataclass(frozen=True)
class _Attributed:
    """The GPUs with each process's shard, what each shard holds, and the GPUs whose memory
    may be held by processes this worker cannot see."""

    gpus: list[GpuSample]
    held: Held
    unseen: dict[int, str]
    gpus_known: bool
    """A GPU tool answered this tick."""
    ids: GpuIds
    """What judge() reads of the GPUs themselves."""


class ShardPass:
    def __init__(
        self,
        node: str,
        session: str,
        *,
        grace_s: float = 15.0,
        shards_file: ShardsFile | None = None,
        bucket: PlacementFeed | None = None,
        discovery: bool = True,
        logs: EngineLogs | None = None,
        proc_root: Path = Path("/proc"),
        clock: Callable[[], float] = time.time,
        scope: ProcessScope = EVERY,
        late_s: float = 0.0,
        advertise_host: str | None = None,
    ) -> None:
        self.node = node
        self.session = session
        self.grace_s = grace_s
        self.shards_file = shards_file
        self.bucket = bucket
        self.discovery = discovery
        self.logs = logs
        self.clock = clock
        self.late_s = late_s
        self.advertise_host = advertise_host
        """The host a shard bound to every address is published at (None: found, served.py)."""
        self._address: str | None = None
        """How long GPU readings may be missing before a verdict is held stale (held())."""
        self.tracked: dict[str, Tracked] = {}
        self.shared: dict[str, str] = {}
        """Shards refused this tick for naming a process another shard holds -> that shard."""
        self.refusals: dict[str, str] = {}
        """Each of those -> why, as its status and `sources` say."""
        self.shared_logs: dict[str, str] = {}
        """Each shard whose log another shard's process writes too -> what to say of it."""
        self.refused_values = RefusedValues(node, session)
        self.table = ProcTable(proc_root)
        self.scope = scope
        """The processes discovery and `match` consider (scope.py)."""
        self.walks = DiscoveryWalks(
            clock, walk=functools.partial(discover, scope=scope), new=NewProcesses(scope=scope)
        )
        self._owners: dict[int, str | None] = {}
        self._owners_for: dict[int, str] = {}
        self._logs_wanted: dict[str, Log] = {}
        self.windows = ActivityWindows()
        self.checks = ReadinessChecks()
        self.claims, self.server_logs = ServerClaims(), SharedServerLogs()
        self.gpu_health: dict[int, GpuHealth] = {}
        """Each GPU's health as the GPU tools last told it: it stands while they fail (a GPU
        fallen off the bus may take its tool down with it)."""

    @property
    def address(self) -> str:
        """The node's address for others, found once (a socket's source address)."""
        if self._address is None:
            self._address = node_address(self.advertise_host)
        return self._address

    @property
    def wants_activity(self) -> ActivityWanted:
        """How far the next GPU read should go for what each process ran: through a tool run
        ("any") while a shard placed on GPUs serves (a request in its log in the window: only
        then can activity change its verdict); in process (NVML) while one runs; else not."""
        judged = [
            sid for sid, t in self.tracked.items() if t.pid and t.ready and t.placement.spec.gpus
        ]
        if not judged:
            return "no"
        serving = self.logs.serving if self.logs is not None else {}
        since = time.monotonic() - self.windows.window_s
        if any(sid in serving and serving[sid].since(since) for sid in judged):
            return "any"
        return "in-process"

    async def judge(
        self,
        gpus: list[GpuSample],
        gpus_known: bool,
        read_at: float | None = None,
        silent: Sequence[str] = (),
        *,
        deadline: Deadline = NEVER,
        foreign_unknown: Collection[str] = (),
    ) -> ShardsView:
        """Every shard's status on these GPU readings; `gpus_known`: a GPU tool answered;
        `read_at`: when the reading began (time.monotonic()), now when not given; `silent`:
        the GPU sources that did not answer, named in what a shard they leave untold says;
        `deadline`: the tick's, by which what the engines answer (their logs, a health URL,
        a router server) stops being waited for; `foreign_unknown`: bus ids of the GPUs whose
        foreign memory cannot be told."""
        placements, problems = placed(self.shards_file, self.bucket)
        if self.discovery or any(t.router and t.pid for t in self.tracked.values()):
            # with discovery off, a placed router's children are still found: it places them
            placements += await self._discovered(gpus, None if gpus_known else silent, placements)
        placements, over = at_most(placements)
        problems += over
        gone = self._track(placements)
        exited = self.table.refresh()
        if not settled(self.tracked.values(), self.table):
            await anyio.to_thread.run_sync(
                find_processes, self.tracked.values(), self.table, self.scope
            )
        self.shared = liveness.shared_processes(self.tracked)
        owning = {s: t for s, t in self.tracked.items() if owns_log(t.placement.spec.engine)}
        self.shared_logs = liveness.shared_logs(owning, self.shared)
        self.refusals = shared_reasons(self.shared, self.tracked)
        problems += refusals_told(self.refusals, self.tracked)
        await self.checks.settle(self.tracked, self.clock(), self.grace_s, deadline)
        evidence = await self._evidence(deadline)
        claims = await self.claims.read(self.tracked, deadline)
        seen = self._attribute(gpus, gpus_known, exited, foreign_unknown)
        if gpus_known:
            self.gpu_health = health_by_index(gpus)
        now, at = datetime.now(UTC), time.monotonic() if read_at is None else read_at
        activity = self._activity(seen, at)
        statuses = [
            judged_status(
                sid,
                t,
                self._judge_one(sid, t, seen, evidence.get(sid), now, activity.get(sid), claims),
                node=self.node,
                session=self.session,
                now=now,
                activity=activity.get(sid),
                gpu_health=self.gpu_health,
                address=self.address,
            )
            for sid, t in sorted(self.tracked.items())
        ]
        refused, removed = self.refused_values.pass_(
            refused_values(self.node, self.shards_file, self.bucket), set(self.tracked), now
        )
        return ShardsView(
            gpus=seen.gpus,
            statuses=sorted([*statuses, *refused], key=lambda s: s.shard),
            gone=[
                *(self._gone(p, now) for p in gone),
                *removed,
            ],
            problems=[printable_problem(p) for p in problems],
        )

    def _gone(self, gone: Tracked, now: datetime) -> ComputeStatus:
        return gone_status(
            gone,
            node=self.node,
            session=self.session,
            now=now,
            tracked=self.tracked,
            address=self.address,
        )

    def _activity(self, seen: _Attributed, at: float) -> dict[str, Activity]:
        """What each shard's processes ran on its GPUs while its engine served; a tick whose
        GPU tools did not answer adds no read."""
        usage = shard_usage(seen.gpus) if seen.gpus_known else {}
        serving = self.logs.serving if self.logs is not None else {}
        now = time.monotonic()
        self.windows.forget(set(self.tracked))
        found = {}
        for sid, t in self.tracked.items():
            sm, mem = usage.get(sid, ({}, {}))
            found[sid] = self.windows.observe(
                sid,
                pid=t.pid,
                read=Read(at, sm, mem) if seen.gpus_known else None,
                serving=serving.get(sid),
                placed=set(t.placement.spec.gpus),
                now=now,
            )
        return found

    def _judge_one(  # noqa: PLR0917 - one shard's every input, named at the one call
        self,
        sid: str,
        t: Tracked,
        seen: _Attributed,
        evidence: EngineEvidence | None,
        now: datetime,
        activity: Activity | None = None,
        claims: Mapping[str, ModelClaim] | None = None,
    ) -> Judgement:
        """One shard's verdict. Nothing about one shard stops the others: an error checking or
        judging it makes it `unknown`, saying what went wrong, and a verdict evidence gave
        stands through it as through any loss of evidence (lost_evidence.py)."""
        if sid in self.refusals:
            refused = Judgement("unknown", f"placement refused: {self.refusals[sid]}")
            return held(t, refused, seen.gpus_known, now, self.late_s)
        if t.error is not None:
            lost = Judgement("unknown", f"placewatch could not check this shard: {t.error}")
            return held(t, lost, seen.gpus_known, now, self.late_s)
        if sid in self.shared_logs:
            return held(
                t, Judgement("unknown", self.shared_logs[sid]), seen.gpus_known, now, self.late_s
            )
        if t.router:
            return Judgement("unknown", f"pid {t.pid} is a {ROUTER}")
        obs = Observation(
            placement=replace(t.placement, cpu_on_purpose=t.cpu_flag)
            if t.cpu_flag
            else t.placement,
            pid=t.pid,
            alive=t.pid is not None,
            ready=t.ready,
            gpus_known=seen.gpus_known,
            held=seen.held.get(sid, {}),
            hidden=seen.unseen,
            evidence=evidence,
            activity=activity,
            claim=(claims or {}).get(sid),
        )
        try:
            judged = _judged(t, obs, seen)
        except Exception as exc:  # a defect for one shard's input must not hide the others
            said = f"{type(exc).__name__}: {exc}"
            if t.said != said:
                log.exception("shard %s could not be judged", printable(sid))
                t.said = said
            lost = Judgement(
                "unknown", f"placewatch could not judge this shard ({said}); {REPORT_IT}"
            )
            return held(t, lost, seen.gpus_known, now, self.late_s)
        return log_note(
            held(t, rotated(judged, evidence), seen.gpus_known, now, self.late_s),
            evidence,
            t.placement.unlogged,
        )

    def _attribute(
        self,
        gpus: list[GpuSample],
        gpus_known: bool,
        exited: bool,
        foreign_unknown: Collection[str] = (),
    ) -> _Attributed:
        shard_pids = {
            t.pid: sid for sid, t in self.tracked.items() if t.pid and sid not in self.shared
        }
        fresh = self._update_owners(gpus, shard_pids, exited)
        gpus, held = attribute(gpus, self._owners, foreign_unknown)
        unseen = unseen_holders(gpus, self.table) if self.tracked else {}
        if fresh:  # every process the owners were worked out from was looked up this tick
            self.table.keep_only(self.table.used)
        return _Attributed(gpus, held, unseen, gpus_known, gpu_ids(gpus))

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

    async def _evidence(self, deadline: Deadline) -> Evidence:
        """What each followed log says; a tick with no log to follow, now or before, asks
        nothing of EngineLogs."""
        unread = self.server_logs.unread(self.tracked) | self.shared_logs.keys()
        wanted = {
            sid: Log(
                log_source(path, t.placement.log, t.pid),
                t.pid if owns_log(t.placement.spec.engine) else None,
                t.placement.log_prefix,
                t.started,
            )
            for sid, t in self.tracked.items()
            if (path := t.placement.spec.log_path) and sid not in unread
        }
        if self.logs is None or not (wanted or self._logs_wanted):
            return {}
        self._logs_wanted = wanted
        return await self.logs.read(wanted, deadline=deadline)

    async def _discovered(
        self, gpus: list[GpuSample], silent: Sequence[str] | None, placements: list[Placement]
    ) -> list[Placement]:
        """Engines nothing places (discovered.py says how often the processes are walked)."""
        # Placed shards claim their processes, also one placed since the last walk; a placed
        # router places its children.
        claimed = {
            t.pid for t in self.tracked.values() if t.pid and t.placement.origin != "discovered"
        }
        claimed |= {p.spec.pid for p in placements if p.spec.pid}
        routers = {t.pid: t.placement.spec for t in self.tracked.values() if t.router and t.pid}
        found = await self.walks.found(
            gpus, silent, claimed, routers, children_only=not self.discovery
        )
        taken = {p.spec.id for p in placements}
        return [p for p in found if p.spec.id not in taken and p.spec.pid not in claimed]

    def _track(self, placements: list[Placement]) -> list[Tracked]:
        """Track the current placements; return those that are no longer placed."""
        current = {p.spec.id: p for p in placements}
        gone = [t for sid, t in self.tracked.items() if sid not in current]
        for dropped in gone:
            del self.tracked[dropped.placement.spec.id]
        for sid, placement in current.items():
            t = self.tracked.get(sid)
            if t is None or t.placement.spec != placement.spec:
                previous = t
                t = self.tracked[sid] = Tracked(placement)
                if previous is not None and previous.placement.spec.pid == placement.spec.pid:
                    p = previous  # the same process: what was read of it once holds
                    t.pid, t.create_time, t.started = p.pid, p.create_time, p.started
                    t.ready, t.container = p.ready, p.container
                    t.cpu_flag, t.router = p.cpu_flag, p.router  # its own flags too
            else:
                t.placement = placement
        return gone


def _judged(t: Tracked, obs: Observation, seen: _Attributed) -> Judgement:
    """What judge() says of this tick's observation of `t`. judge() is pure, and from one
    tick to the next a shard's observation is mostly the same (its processes, the memory they
    hold, what its log said): then the last tick's judgement is given again, without building
    its reason anew (a third of what judging a node's shards cost)."""
    last = t.judged
    if last is not None and last[1] == seen.ids and last[0] == obs:
        return last[2]
    judged = judge(obs, seen.gpus)
    if obs.alive and obs.ready:  # a discovered engine the GPU tools left untold
        judged = engine_says_cpu(t.placement, obs.evidence) or judged
    t.judged = (obs, seen.ids, judged)
    return judged
