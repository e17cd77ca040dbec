"""NVIDIA GPUs through nvidia-smi's CSV queries (parsed in nvidia_smi_csv.py).

Processes come from `--query-compute-apps`, one row per process per GPU,
mapped to the GPU's physical index by its UUID.

Old drivers refuse fields they do not know (a 2017-era driver has no
`mig.mode.current`): the whole query fails. The source then reads
`nvidia-smi -q -x` instead, which every driver prints, and keeps to it. The
XML is also the only place nvidia-smi lists MIG instances, so it is read
beside the CSV on a node with MIG enabled.
"""

from __future__ import annotations

import logging

from placewatch.schemas import GpuSample, SourceStatus

from ..probe import ProbeRunner
from . import SourceOptions, ToolSource
from .nvidia_smi_csv import (
    attach_mig,
    attach_processes,
    is_apps_table,
    parse_compute_apps,
    parse_gpus,
)
from .nvidia_smi_xml import parse_xml

log = logging.getLogger(__name__)

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
)
APP_FIELDS = ("gpu_uuid", "pid", "process_name", "used_memory")


def gpu_query_argv(tool: str = TOOL) -> list[str]:
    return [tool, "--query-gpu=" + ",".join(GPU_FIELDS), "--format=csv,nounits"]


def apps_query_argv(tool: str = TOOL) -> list[str]:
    return [tool, "--query-compute-apps=" + ",".join(APP_FIELDS), "--format=csv,nounits"]


def xml_argv(tool: str = TOOL) -> list[str]:
    return [tool, "-q", "-x"]


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


class NvidiaSmiSource(ToolSource):
    """NVIDIA readings from two nvidia-smi queries a tick."""

    name = TOOL
    vendor = "nvidia"

    def __init__(self, runner: ProbeRunner, tool: str = TOOL) -> None:
        super().__init__(runner, tool)
        self._xml_only = False

    @classmethod
    def build(cls, options: SourceOptions) -> NvidiaSmiSource:
        return cls(options.runner)

    async def sample(self) -> tuple[list[GpuSample], SourceStatus]:
        if self._xml_only:
            return await self._sample_xml()
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
        apps_result = await self._runner.run(apps_query_argv(self._tool))
        latency = gpu_result.latency_ms + apps_result.latency_ms
        if not apps_result.ok:
            if not is_apps_table(apps_result.stdout):
                error = f"GPU readings only, no processes: {apps_result.error}"
                return gpus, self._status(latency, error, apps_result.stuck)
            partly.append(f"{apps_result.error}; the processes it printed are read")
        gpus = attach_processes(gpus, parse_compute_apps(apps_result.stdout))
        if not gpus:
            error = f"{TOOL} printed no GPU rows; run `{TOOL}` to see what the driver says"
            return [], self._status(latency, error)
        if any(g.mig_enabled for g in gpus):
            xml_result = await self._runner.run(xml_argv(self._tool))
            latency += xml_result.latency_ms
            gpus = attach_mig(gpus, parse_xml(xml_result.stdout) if xml_result.ok else [])
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
