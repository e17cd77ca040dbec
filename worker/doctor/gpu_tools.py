"""The doctor's first check: does each GPU tool on the node answer, and what does it see?"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from placewatch.schemas import GpuSample

from ..config import GPU_SOURCES, Settings
from ..gpu import health
from ..gpu.registry import chains_for
from .report import Report, count

GPU_TOOLS = "GPU tools"

_TOOL_ADVICE = {
    "nvidia": "check that the NVIDIA driver is loaded (lsmod | grep nvidia; "
    "dmesg | grep -i -e NVRM -e Xid)",
    "amd": "check that amdgpu is loaded and that this user may open /dev/kfd and /dev/dri "
    "(the render and video groups)",
    "intel": "check that the i915 or xe driver is loaded (lsmod | grep -e i915 -e xe; "
    "dmesg | grep -i -e i915 -e xe) and that this user may open /dev/dri (the render and "
    "video groups)",
}
_STUCK = "a GPU is stuck in the driver: check dmesg for Xid errors; the GPU may need a reset"
_SICK = (
    "move its shards off it first; a gateway placing through FleetView.gpus_for offers it no more"
)
_INSTALL = (
    "install the NVIDIA driver (NVML, and nvidia-smi on the worker's PATH), or ROCm's "
    "rocm-smi or amd-smi on the worker's PATH; Intel GPUs are read from sysfs once the i915 "
    "or xe driver is loaded, and data-center ones (Max, Flex) through xpu-smi (intel/xpumanager's "
    "xpu-smi package) on the worker's PATH"
)


async def check_gpu_tools(settings: Settings, report: Report) -> list[GpuSample]:
    """One sample through each source on the node; the GPUs of each vendor's first answer."""
    gpus: list[GpuSample] = []
    present = False
    chains = chains_for(
        settings.probe_timeout, settings.kfd_root, settings.gpu_sources, drm_root=settings.drm_root
    )
    for chain in chains:
        vendor_gpus: list[GpuSample] = []
        for source in chain.candidates:
            name = f"GPU tool {source.name}"
            why = source.unavailable()
            if why is not None:
                report.skip(name, why)
                continue
            present = True
            found, status = await source.sample()
            took = f"{status.latency_ms or 0:.0f} ms"
            vendor_gpus = vendor_gpus or found
            if status.ok:
                report.ok(name, f"{_gpu_summary(found)}, in {took}")
                continue
            but = f"{_gpu_summary(found)}, but " if found else ""
            todo = _STUCK if status.degraded else _TOOL_ADVICE[chain.vendor]
            report.fail(name, f"{but}{status.error} (after {took})", todo)
        gpus += vendor_gpus
    if not present:
        _report_no_tools(settings.gpu_sources, report)
    gpus = [health.assess(g) for g in gpus]
    for g in gpus:
        if g.health is not None and not g.health.healthy:
            report.fail(
                f"{g.vendor} GPU {g.index}", f"unhealthy: {'; '.join(g.health.problems)}", _SICK
            )
    return gpus


def _report_no_tools(sources: Sequence[str], report: Report) -> None:
    """None of the sources the settings name is on the node: which to install, or to allow."""
    spoken = {"nvml": "NVML", "intel-sysfs": "Intel GPU in sysfs (i915, xe)"}
    names = [spoken.get(name, name) for name in sources]
    listed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
    todo = _INSTALL
    if set(sources) != set(GPU_SOURCES):
        todo += f"; or widen gpu_sources (now {','.join(sources)})"
    report.fail(GPU_TOOLS, f"none found: no {listed}", todo)


def _gpu_summary(gpus: Sequence[GpuSample]) -> str:
    """The GPUs a tool sees, by model, and the processes it lists on them."""
    if not gpus:
        return "no GPUs"
    names = Counter(g.name or f"{g.vendor} GPU" for g in gpus)
    models = ", ".join(f"{n}x {name}" if n > 1 else name for name, n in names.items())
    processes = sum(len(g.processes) for g in gpus)
    return f"{count(len(gpus), 'GPU')} ({models}), {count(processes, 'process', 'es')}"
