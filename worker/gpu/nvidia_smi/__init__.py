"""NVIDIA GPUs through nvidia-smi's CSV queries (parsed in query_csv.py).

Processes come from `--query-compute-apps`, one row per process per GPU,
mapped to the GPU's physical index by its UUID.

In the worker the GPU query loops by itself (`--loop-ms`, loop.py): one
long-lived child instead of a spawn a tick, the tick taking its latest complete pass.
The compute-apps query cannot loop usefully: a GPU without processes prints no row, so a
pass with none is silent and cannot be told from a hung loop. It is run, with the GPU
query once beside it for a consistent pair, when a pass shows any GPU's used memory
changed (a process that starts or ends allocates or frees memory, a CUDA context alone
hundreds of MiB) and at least every APPS_MAX_AGE_S, which
bounds the one change this misses: a process that ends while another takes exactly its
memory on the same GPU within one interval. A list that has a GPU's processes hold more
than the GPU has in use is newer than its readings, and is read again (_ahead). Without
the loop (`placewatch sample`, a tool that refuses `--loop-ms`, a loop that hung or exited
until it gives a reading again), both queries run once a tick, as they always did.

Old drivers refuse fields they do not know (a 2017-era driver has no
`mig.mode.current`): the whole query fails. The source then reads
`nvidia-smi -q -x` instead, which every driver prints, and keeps to it. The
XML is also the only place nvidia-smi lists MIG instances, so it is read
beside the CSV on a node with MIG enabled, as often as the processes.

The health fields asked for are the ones every driver that knows `mig.mode.current` (the
query's oldest requirement, R450) also knows: clocks, ECC totals, retired pages, the clock
event mask by its old name `clocks_throttle_reasons.active` (R535 and later accept it and
print the header as `clocks_event_reasons.active`) and `pcie.link.gen.current` (recent
drivers call it deprecated beside `gpucurrent`, and still answer it). `remapped_rows.*`
is left out: the `--help-query-gpu` of R535 lists no such field (rows are remapped there
only through `--query-remapped-rows`), and the 590+ captures are the first with it, so
asking for it would make every node on an older driver refuse the whole query and fall
back to `-q -x` each tick: no looping query, and a far heavier read. Remapped rows (A100
and later) come from NVML, or from the XML where the source reads that.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import msgspec
from anyio import TASK_STATUS_IGNORED
from anyio.abc import TaskStatus

from placewatch.schemas import GpuSample, SourceStatus

from ...probe import ProbeRunner
from ...tool_loop import RESTART_FIRST_S, RESTART_MOST_S
from .. import ActivityWanted, SourceOptions, ToolSource
from .loop import GpuQueryLoop, Pass
from .pmon import attach_pmon, parse_pmon, pmon_argv
from .query_csv import (
    ComputeApp,
    attach_mig,
    attach_processes,
    is_apps_table,
    parse_compute_apps,
    parse_gpus,
)
from .query_xml import parse_xml

log = logging.getLogger(__name__)

# `nvidia-smi pmon -s u -d N` loops by itself as the GPU query does, but is not kept
# running: a child sampling every second on every node, for an answer needed only while a
# shard placed on GPUs serves (only then can it change a verdict); NVML, where it loads,
# gives the same samples in process. So pmon runs once (`-c 1`) on a tick that needs it.

APPS_MAX_AGE_S = 30.0
"""While the GPU readings stay the same, how long the processes last read are kept."""
MIB = 1 << 20

TOOL = "nvidia-smi"

GPU_FIELDS = (
    "index",
    "uuid",
    "name",
    "pci.bus_id",
    "utilization.gpu",
    "memory.total",
    "memory.used",
    "memory.free",
    "temperature.gpu",
    "power.draw",
    "enforced.power.limit",
    "mig.mode.current",
    "clocks.sm",
    "clocks.mem",
    "utilization.memory",
    "fan.speed",
    "ecc.errors.corrected.volatile.total",
    "ecc.errors.uncorrected.volatile.total",
    "ecc.errors.corrected.aggregate.total",
    "ecc.errors.uncorrected.aggregate.total",
    "retired_pages.single_bit_ecc.count",
    "retired_pages.double_bit.count",
    "retired_pages.pending",
    "clocks_throttle_reasons.active",
    "pcie.link.gen.current",
    "pcie.link.width.current",
    "driver_version",
)
APP_FIELDS = ("gpu_uuid", "pid", "process_name", "used_memory")


def gpu_query_argv(tool: str = TOOL) -> list[str]:
    return [tool, "--query-gpu=" + ",".join(GPU_FIELDS), "--format=csv,nounits"]


def apps_query_argv(tool: str = TOOL) -> list[str]:
    return [tool, "--query-compute-apps=" + ",".join(APP_FIELDS), "--format=csv,nounits"]


def xml_argv(tool: str = TOOL) -> list[str]:
    return [tool, "-q", "-x"]


def gpu_loop_argv(interval_s: float, tool: str = TOOL) -> list[str]:
    """The GPU query, looping every `interval_s`; `count` in every row tells a whole pass."""
    fields = ("count", *GPU_FIELDS)
    loop_ms = max(1, round(interval_s * 1000))
    return [tool, "--query-gpu=" + ",".join(fields), "--format=csv,nounits", f"--loop-ms={loop_ms}"]


def _refused(error: str | None) -> bool:
    """Whether nvidia-smi rejected the query itself, as drivers do for unknown fields."""
    said = (error or "").lower()
    return any(
        words in said
        for words in (
            "is not a valid field",
            "invalid combination",
            "unrecognized option",
            "unknown option",
        )
    )


def _memory(gpus: list[GpuSample]) -> tuple[tuple[str | None, int | None], ...]:
    """What the processes on the GPUs can change: each GPU's memory in use."""
    return tuple((g.uuid, g.memory_used_bytes) for g in gpus)


def _ahead(gpus: list[GpuSample], apps: list[ComputeApp]) -> bool:
    """Whether the process list is newer than the GPU readings it was read after: it has a
    GPU's processes hold more than the GPU has in use (beyond a MiB a process of rounding),
    so a process started between the two queries. Such a list is not kept for those
    readings: the process may end before the next pass shows its memory, the readings then
    the same as before, and the list would stand with it for APPS_MAX_AGE_S."""
    held: dict[str, tuple[int, int]] = {}
    for app in apps:
        if app.gpu_uuid is not None and app.used_bytes is not None:
            total, count = held.get(app.gpu_uuid, (0, 0))
            held[app.gpu_uuid] = (total + app.used_bytes, count + 1)
    for g in gpus:
        total, count = held.get(g.uuid or "", (0, 0))
        if g.memory_used_bytes is not None and total > g.memory_used_bytes + count * MIB:
            return True
    return False


class NvidiaSmiSource(ToolSource):
    """NVIDIA readings from nvidia-smi: a looping GPU query where `run` runs, else two
    queries a tick."""

    name = TOOL
    vendor = "nvidia"

    def __init__(
        self,
        runner: ProbeRunner,
        tool: str = TOOL,
        *,
        interval_s: float | None = None,
        restart_s: tuple[float, float] = (RESTART_FIRST_S, RESTART_MOST_S),
        apps_max_age_s: float = APPS_MAX_AGE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(runner, tool)
        self._xml_only = False
        self._clock = clock
        self._apps_max_age_s = apps_max_age_s
        self.loop = (
            None
            if interval_s is None
            else GpuQueryLoop(
                runner,
                gpu_loop_argv(interval_s, tool),
                interval_s,
                refuses=_refused,
                restart_s=restart_s,
                clock=clock,
            )
        )
        """The looping GPU query, read when `run` runs; None: one query a tick."""
        self._apps: list[ComputeApp] = []
        self._apps_for: tuple[tuple[str | None, int | None], ...] | None = None
        self._apps_at = 0.0
        self._mig: list[GpuSample] | None = None
        self._pmon_said: str | None = None

    @classmethod
    def build(cls, options: SourceOptions) -> NvidiaSmiSource:
        return cls(options.runner, interval_s=options.interval_s)

    async def run(self, *, task_status: TaskStatus[None] = TASK_STATUS_IGNORED) -> None:
        """The looping GPU query's child, started once this source is first asked to sample."""
        if self.loop is None:
            task_status.started()
            return
        await self.loop.run(task_status=task_status)

    async def sample(self, activity: ActivityWanted = "no") -> tuple[list[GpuSample], SourceStatus]:
        """The GPU readings (the loop's latest pass, else the queries once), and where
        `activity` is "any" and a GPU lists processes, `nvidia-smi pmon -c 1` for what each
        ran: one run of its own, made only while a shard placed on GPUs serves (see above)."""
        gpus, status = await self._readings()
        if activity != "any" or not any(g.processes for g in gpus):
            return gpus, status
        result = await self._runner.run(pmon_argv(self._tool))
        if not result.ok and result.error != self._pmon_said:
            # The readings stand without it: the processes' activity is left unknown.
            log.warning("%s pmon failed (%s); process activity is not read", TOOL, result.error)
        self._pmon_said = result.error
        latency = round((status.latency_ms or 0.0) + result.latency_ms, 3)
        status = msgspec.structs.replace(
            status, latency_ms=latency, degraded=status.degraded or result.stuck
        )
        return attach_pmon(gpus, parse_pmon(result.stdout)), status

    async def _readings(self) -> tuple[list[GpuSample], SourceStatus]:
        if self._xml_only:
            return await self._sample_xml()
        loop = self.loop
        if loop is not None and loop.refused is not None:
            log.info("%s cannot loop its GPU query (%s); querying once a tick", TOOL, loop.refused)
            self.loop = loop = None
        if loop is not None:
            latest = loop.fresh()
            if latest is not None:
                return await self._sample_pass(latest)
        gpus, status = await self._sample_once()
        if loop is None or loop.trouble is None:
            return gpus, status
        error = "; ".join(e for e in (loop.trouble, status.error) if e)
        return gpus, msgspec.structs.replace(
            status, ok=False, error=error, degraded=status.degraded or loop.degraded
        )

    async def _sample_once(self) -> tuple[list[GpuSample], SourceStatus]:
        """Both queries run once, as every tick did before the GPU query looped."""
        gpu_result = await self._runner.run(gpu_query_argv(self._tool))
        if not gpu_result.ok and _refused(gpu_result.error):
            log.info("%s refused the CSV query (%s); reading -q -x instead", TOOL, gpu_result.error)
            self._xml_only = True
            return await self._sample_xml()
        gpus = parse_gpus(gpu_result.stdout)
        if not gpu_result.ok and not gpus:
            return [], self._status(gpu_result.latency_ms, gpu_result.error, gpu_result.stuck)
        # A tool that failed after printing what it could (all but a GPU it could not
        # reach) still read that: it is kept, and the failure is the status's.
        partly = [] if gpu_result.ok else [f"{gpu_result.error}; the GPUs it printed are read"]
        return await self._with_processes(gpus, partly, gpu_result.latency_ms, reuse=False)

    async def _sample_pass(self, latest: Pass) -> tuple[list[GpuSample], SourceStatus]:
        """The loop's latest pass, with the processes it had (read again when they are old).
        When the pass shows a change, both queries run afresh instead: the pass may be most
        of an interval older than a process list read now, and a process that ended in
        between would leave its memory in the pass with no process to hold it (foreign
        memory, one tick of `unknown`)."""
        if self._apps_for is not None and _memory(list(latest.gpus)) != self._apps_for:
            return await self._sample_once()
        said = [f"{TOOL} printed {m!r}; the GPUs it printed are read" for m in latest.said[:1]]
        return await self._with_processes(list(latest.gpus), said, 0.0, reuse=True)

    async def _with_processes(
        self, gpus: list[GpuSample], partly: list[str], latency: float, *, reuse: bool
    ) -> tuple[list[GpuSample], SourceStatus]:
        """`gpus` with their processes and MIG instances, read again unless `reuse` and the
        GPUs' memory in use is what it was when they were last read, less than
        `apps_max_age_s` ago."""
        memory = _memory(gpus)
        age = self._clock() - self._apps_at
        kept = reuse and memory == self._apps_for and age < self._apps_max_age_s
        if not kept:
            apps_result = await self._runner.run(apps_query_argv(self._tool))
            latency += apps_result.latency_ms
            self._apps_for, self._mig = None, None
            if not apps_result.ok:
                if not is_apps_table(apps_result.stdout):
                    error = f"GPU readings only, no processes: {apps_result.error}"
                    return gpus, self._status(latency, error, apps_result.stuck)
                partly.append(f"{apps_result.error}; the processes it printed are read")
            self._apps = parse_compute_apps(apps_result.stdout)
            self._apps_at = self._clock()
            if apps_result.ok and not _ahead(gpus, self._apps):
                self._apps_for = memory
        gpus = attach_processes(gpus, self._apps)
        if not gpus:
            error = f"{TOOL} printed no GPU rows; run `{TOOL}` to see what the driver says"
            return [], self._status(latency, error)
        if any(g.mig_enabled for g in gpus):
            mig = self._mig
            if mig is None:
                xml_result = await self._runner.run(xml_argv(self._tool))
                latency += xml_result.latency_ms
                mig = parse_xml(xml_result.stdout) if xml_result.ok else []
                self._mig = mig if xml_result.ok else None
            gpus = attach_mig(gpus, mig)
        return gpus, self._status(latency, "; ".join(partly) or None)

    async def _sample_xml(self) -> tuple[list[GpuSample], SourceStatus]:
        result = await self._runner.run(xml_argv(self._tool))
        if not result.ok:
            return [], self._status(result.latency_ms, result.error, result.stuck)
        gpus = parse_xml(result.stdout)
        if not gpus:
            error = f"{TOOL} -q -x printed no GPU; run `{TOOL} -q` to see what the driver says"
            return [], self._status(result.latency_ms, error)
        return gpus, self._status(result.latency_ms)
