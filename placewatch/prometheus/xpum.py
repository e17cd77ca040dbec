"""An Intel GPU's readings under the names of Intel's own exporter, where it has one.

intel/xpumanager's Prometheus exporter (rest/prometheus_exporter/prometheus_exporter_types.py
at v1.3.7, 57e44f5) serves `xpum_*` metrics; dashboards and alert rules written for it read
placewatch's Intel GPUs unchanged under these names, units and extra labels: ratios in 0..1
where xpumanager divides a percentage by 100 (`scale=0.01`), energy in joules, memory in
bytes, temperature and frequency with its `location` (and `type`) labels. A reading xpumanager
does not export keeps its DCGM name (metrics.py), as on every other vendor's GPU. The GPU's
own labels stay dcgm-exporter's (`gpu`, `UUID`, `pci_bus_id`, ..., `Hostname`, the pod's),
so one GPU's series join the node's and the shard's whatever its vendor.
"""

from __future__ import annotations

from dataclasses import dataclass

from placewatch.schemas import GpuSample


@dataclass(frozen=True)
class XpumMetric:
    """The xpumanager name one DCGM-named reading takes on an Intel GPU: its name, help,
    extra labels and the factor its value is multiplied by."""

    name: str
    help: str
    labels: tuple[tuple[str, str], ...] = ()
    times: float = 1.0

    def value(self, g: GpuSample, field: str) -> float | None:
        """The reading `field` of `g` (every one renamed is a number of GpuSample itself)."""
        found = getattr(g, field, None)
        if not isinstance(found, int | float) or isinstance(found, bool):
            return None
        return float(found) * self.times


_TEMPERATURE = "Avg GPU temperature (in Celsius degree), per tile"

XPUM_NAMES: dict[str, XpumMetric] = {
    "DCGM_FI_DEV_GPU_UTIL": XpumMetric(
        "xpum_engine_ratio", "GPU active time of the elapsed time (in %), per GPU tile", times=0.01
    ),
    "DCGM_FI_DEV_POWER_USAGE": XpumMetric(
        "xpum_power_watts", "Avg GPU power (in watts), per GPU and per card"
    ),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": XpumMetric(
        "xpum_energy_joules", "Total GPU energy consumption since boot (in Joules), per GPU"
    ),
    "DCGM_FI_DEV_GPU_TEMP": XpumMetric(
        "xpum_temperature_celsius", _TEMPERATURE, (("location", "gpu"),)
    ),
    "DCGM_FI_DEV_MEMORY_TEMP": XpumMetric(
        "xpum_temperature_celsius", _TEMPERATURE, (("location", "mem"),)
    ),
    "DCGM_FI_DEV_SM_CLOCK": XpumMetric(
        "xpum_frequency_mhz",
        "Avg (GPU) frequency (in MHz), per GPU tile",
        (("location", "gpu"), ("type", "actual")),
    ),
    "DCGM_FI_DEV_FB_USED": XpumMetric(
        "xpum_memory_used_bytes", "Used GPU memory (in bytes), per GPU tile"
    ),
    "DCGM_FI_DEV_MEM_COPY_UTIL": XpumMetric(
        "xpum_memory_bandwidth_ratio",
        "Avg memory throughput / max memory bandwidth (in %), per GPU tile",
        times=0.01,
    ),
}
"""DCGM's name -> xpumanager's, for the readings its exporter serves. Each reads the DCGM
metric's field as it is held (memory in bytes, energy in joules), not DCGM's unit."""


def xpum_names() -> list[str]:
    """Every xpumanager name placewatch serves, once each."""
    return sorted({m.name for m in XPUM_NAMES.values()})
