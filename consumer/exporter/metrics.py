"""What the exporter serves, as tables: each GPU metric is one line of GPU_METRICS.

GPU metrics take dcgm-exporter's names, units and labels where DCGM has the field, so that
dashboards and alert rules written for dcgm-exporter read placewatch unchanged. Checked
against dcgm-exporter's etc/default-counters.csv (DCGM_FI_DEV_FB_USED and _FB_FREE in MiB,
DCGM_FI_DEV_POWER_USAGE in W, DCGM_FI_DEV_GPU_TEMP in C, DCGM_FI_DEV_GPU_UTIL in %) and the
label set of its exposition (`gpu`, `UUID`, `pci_bus_id`, `device`, `modelName`,
`Hostname`), as its own metrics-filter test shows it. What DCGM has no field for is
`placewatch_*`.
"""

from __future__ import annotations

from dataclasses import dataclass

from placewatch.schemas import GpuSample

MIB = 1 << 20

GPU_LABELS = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname")
"""dcgm-exporter's labels of a GPU metric, in its order. `Hostname` is the node's name as the
worker publishes it (dcgm-exporter's is the host it runs on, the same node)."""


@dataclass(frozen=True)
class GpuMetric:
    """One gauge per GPU: its name, the GpuSample field it reads, its help text, and `per`:
    the field's value is divided by it and rounded down (MIB: bytes as whole MiB, as DCGM
    reports framebuffer memory). A GPU whose field is None (the tool gave no reading) has
    no sample of the metric."""

    name: str
    field: str
    help: str
    per: int = 1

    def value(self, g: GpuSample) -> float | None:
        value: float | None = getattr(g, self.field)
        if value is None or self.per == 1:
            return value
        return float(int(value) // self.per)


GPU_METRICS: tuple[GpuMetric, ...] = (
    GpuMetric("DCGM_FI_DEV_GPU_UTIL", "utilization_pct", "GPU utilization (in %)."),
    GpuMetric("DCGM_FI_DEV_FB_USED", "memory_used_bytes", "Framebuffer memory used (in MiB).", MIB),
    GpuMetric("DCGM_FI_DEV_FB_FREE", "memory_free_bytes", "Framebuffer memory free (in MiB).", MIB),
    GpuMetric("DCGM_FI_DEV_GPU_TEMP", "temperature_c", "GPU temperature (in C)."),
    GpuMetric("DCGM_FI_DEV_POWER_USAGE", "power_w", "Power draw (in W)."),
    GpuMetric(
        "placewatch_gpu_foreign_bytes",
        "foreign_bytes",
        "Memory used on the GPU that no shard of its node holds (in bytes): another tenant "
        "or a leaked process; placement cannot hand it out.",
    ),
)
"""A new GPU field is a new line here; its labels are GPU_LABELS."""

SHARD_VERDICT = "placewatch_shard_verdict"
SHARD_GPU_BYTES = "placewatch_shard_gpu_bytes"
NODE_UP = "placewatch_node_up"
NODE_AGE = "placewatch_node_sample_age_seconds"

NODE_METRICS = {
    SHARD_VERDICT: (
        "The shard's current verdict, 1 (one series per shard, labelled with its verdict).",
        ("node", "shard", "verdict"),
    ),
    SHARD_GPU_BYTES: (
        "GPU memory the shard's processes hold on the GPU (bytes).",
        ("node", "shard", "gpu"),
    ),
    NODE_UP: (
        "1 while the node's last sample is younger than three of its intervals, else 0.",
        ("node",),
    ),
    NODE_AGE: ("Seconds since the node's last sample was taken.", ("node",)),
}
"""The placewatch_* metrics of nodes and shards: help text and labels."""


def served() -> list[str]:
    """Every metric name the exporter serves."""
    return [m.name for m in GPU_METRICS] + list(NODE_METRICS)


def device(g: GpuSample) -> str:
    """dcgm-exporter's `device` label: `nvidia<N>`, the /dev node. The index is the vendor
    tool's (PCI bus) order, which the device minor number follows on most systems."""
    return f"{'nvidia' if g.vendor == 'nvidia' else g.vendor}{g.index}"
