"""What the exporter serves, as tables: each GPU metric is one line of GPU_METRICS.

GPU metrics take dcgm-exporter's names, units and labels where DCGM has the field, so that
dashboards and alert rules written for dcgm-exporter read placewatch unchanged. Checked
against dcgm-exporter's etc/default-counters.csv (DCGM_FI_DEV_FB_USED and _FB_FREE in MiB,
DCGM_FI_DEV_POWER_USAGE in W, DCGM_FI_DEV_GPU_TEMP in C, DCGM_FI_DEV_GPU_UTIL in %) and the
label set of its exposition (`gpu`, `UUID`, `pci_bus_id`, `device`, `modelName`,
`Hostname`), as its own metrics-filter test shows it. The health fields are checked against
DCGM's dcgm_fields.h and dcgm-exporter's default-counters.csv of May 2026: clocks in MHz,
energy in mJ, the last XID's number as DCGM_FI_DEV_XID_ERRORS, DCGM's single-bit/double-bit
ECC for corrected/uncorrected, and the clock event reasons under DCGM 3.3's name
DCGM_FI_DEV_CLOCKS_EVENT_REASONS (DCGM_FI_DEV_CLOCK_THROTTLE_REASONS before it), which
dcgm-exporter watches. What DCGM has no field for is `placewatch_*`.

dcgm-exporter types its ECC, retired-page, remapped-row, replay and energy fields as counters
but names them without `_total`; an OpenMetrics scrape (what Prometheus asks for first)
requires a counter's samples to end in `_total`, so they are served as gauges under DCGM's
names: the name is what dashboards and rules match, and rate() reads a gauge the same way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from placewatch.schemas import GpuSample
from placewatch.schemas.health import CLOCK_EVENT_BITS

from .xpum import xpum_names

MIB = 1 << 20
MJ_PER_J = 1000

GPU_LABELS = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname")
"""dcgm-exporter's labels of a GPU metric, in its order. `Hostname` is the node's name as the
worker publishes it (dcgm-exporter's is the host it runs on, the same node)."""
DRIVER_LABEL = "DCGM_FI_DRIVER_VERSION"
"""The driver's version, after GPU_LABELS where the GPU's tool reads it: dcgm-exporter's
default counters (etc/default-counters.csv) put the field on every GPU series as a label."""
POD_LABELS = ("container", "namespace", "pod")
"""dcgm-exporter's Kubernetes labels (internal/pkg/transformation/const.go), last, on a GPU
that one pod holds."""


@dataclass(frozen=True)
class GpuMetric:
    """One sample per GPU: its name, the GpuSample field it reads (`health.x`: the field x
    of its GpuHealth), its help text, and how the value is converted: divided by `per` and
    rounded down (MIB: bytes as whole MiB, as DCGM reports framebuffer memory), or times
    `times` and rounded (joules as whole mJ). A flag reads 1 or 0; the clock event names
    read as their bitmask. A GPU whose field is None (the tool gave no reading, or no health
    was read at all) has no sample of the metric. `kind` "counter": a Prometheus counter,
    its name ending in `_total`."""

    name: str
    field: str
    help: str
    per: int = 1
    times: int = 1
    kind: Literal["gauge", "counter"] = "gauge"

    def value(self, g: GpuSample) -> float | None:
        value = read(g, self.field)
        if value is None:
            return None
        if isinstance(value, list):
            return clock_event_mask(value)
        if self.per != 1:
            return float(int(value) // self.per)
        if self.times != 1:
            return float(round(value * self.times))
        return float(value)


def read(g: GpuSample, field: str) -> float | bool | list[str] | None:
    """The value of `field` ("power_w", "health.pcie_replays") of `g`; None where it or its
    GpuHealth is absent."""
    held: object = g
    for part in field.split("."):
        held = getattr(held, part, None)
        if held is None:
            return None
    return held  # type: ignore[return-value]


def clock_event_mask(names: list[str]) -> float | None:
    """The clock event names as DCGM's bitmask; None for an empty list: GpuHealth cannot
    tell "nothing holds the clocks down" from "the tool does not say"."""
    if not names:
        return None
    return float(sum(bit for bit, name in CLOCK_EVENT_BITS.items() if name in names))


def _dcgm(name: str, field: str, help_: str, times: int = 1) -> GpuMetric:
    """A DCGM field's metric: a gauge, as placewatch serves every DCGM name (module doc)."""
    return GpuMetric(f"DCGM_FI_DEV_{name}", field, help_, times=times)


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
    _dcgm("SM_CLOCK", "sm_clock_mhz", "SM clock frequency (in MHz)."),
    _dcgm("MEM_CLOCK", "memory_clock_mhz", "Memory clock frequency (in MHz)."),
    _dcgm("MEM_COPY_UTIL", "memory_util_pct", "Memory utilization (in %)."),
    _dcgm(
        "TOTAL_ENERGY_CONSUMPTION",
        "energy_j",
        "Total energy consumption since the driver loaded (in mJ; a counter).",
        times=MJ_PER_J,
    ),
    _dcgm("FAN_SPEED", "fan_pct", "Fan speed (in %)."),
    GpuMetric(
        "DCGM_FI_DEV_FB_RESERVED",
        "memory_reserved_bytes",
        "Framebuffer memory reserved (in MiB).",
        MIB,
    ),
    _dcgm("MEMORY_TEMP", "memory_temperature_c", "Memory temperature (in C)."),
    _dcgm("ENC_UTIL", "encoder_util_pct", "Encoder utilization (in %)."),
    _dcgm("DEC_UTIL", "decoder_util_pct", "Decoder utilization (in %)."),
    _dcgm("XID_ERRORS", "health.last_xid", "Value of the last XID error encountered."),
    _dcgm("PCIE_REPLAY_COUNTER", "health.pcie_replays", "Total number of PCIe retries."),
    _dcgm(
        "ECC_SBE_VOL_TOTAL",
        "health.ecc_corrected_volatile",
        "Total number of single-bit volatile ECC errors.",
    ),
    _dcgm(
        "ECC_DBE_VOL_TOTAL",
        "health.ecc_uncorrected_volatile",
        "Total number of double-bit volatile ECC errors.",
    ),
    _dcgm(
        "ECC_SBE_AGG_TOTAL",
        "health.ecc_corrected_aggregate",
        "Total number of single-bit persistent ECC errors.",
    ),
    _dcgm(
        "ECC_DBE_AGG_TOTAL",
        "health.ecc_uncorrected_aggregate",
        "Total number of double-bit persistent ECC errors.",
    ),
    _dcgm(
        "RETIRED_SBE",
        "health.retired_pages_sbe",
        "Total number of retired pages due to single-bit errors.",
    ),
    _dcgm(
        "RETIRED_DBE",
        "health.retired_pages_dbe",
        "Total number of retired pages due to double-bit errors.",
    ),
    _dcgm(
        "RETIRED_PENDING",
        "health.retired_pages_pending",
        "Whether pages are pending retirement (1 or 0).",
    ),
    _dcgm(
        "CORRECTABLE_REMAPPED_ROWS",
        "health.remapped_rows_correctable",
        "Number of remapped rows for correctable errors.",
    ),
    _dcgm(
        "UNCORRECTABLE_REMAPPED_ROWS",
        "health.remapped_rows_uncorrectable",
        "Number of remapped rows for uncorrectable errors.",
    ),
    _dcgm(
        "ROW_REMAP_FAILURE", "health.remapped_rows_failed", "Whether remapping of rows has failed."
    ),
    _dcgm(
        "ROW_REMAP_PENDING", "health.remapped_rows_pending", "Whether remapping of rows is pending."
    ),
    _dcgm("PCIE_LINK_GEN", "health.pcie_gen", "PCIe current link generation."),
    _dcgm("PCIE_LINK_WIDTH", "health.pcie_width", "PCIe current link width (in lanes)."),
    _dcgm(
        "CLOCKS_EVENT_REASONS",
        "health.clock_events",
        "Current clock event reasons (bitmask of DCGM_CLOCKS_THROTTLE_REASON_*).",
    ),
    GpuMetric(
        "placewatch_gpu_healthy",
        "health.healthy",
        "1 while the GPU is healthy, 0 while a fatal condition is seen (a reset or reboot is "
        "needed; placewatch_gpu_problem says which).",
    ),
    GpuMetric(
        "placewatch_gpu_xid_errors_total",
        "health.xid_errors",
        "Critical XID errors the driver reported since the node's worker started.",
        kind="counter",
    ),
)
"""A new GPU field is a new line here; its labels are GPU_LABELS."""

GPU_PROBLEM = "placewatch_gpu_problem"
GPU_PROBLEM_HELP = (
    "1 for each fatal condition seen on the GPU, by kind (the first clause of its problem, "
    "without counts); the telemetry's health.problems says what to do."
)
GPU_PROBLEM_LABEL = "problem"
GPU_PROBLEM_LABELS = (*GPU_LABELS, GPU_PROBLEM_LABEL)
PROBLEM_CHARS = 80


def problem_kind(problem: str) -> str:
    """The `problem` label of a GpuHealth problem: its first clause (up to ": "), a leading
    count dropped ("2 uncorrected ECC error(s) since the last reset: reset ..." ->
    "uncorrected ECC error(s) since the last reset"), at most 80 characters. The problems
    worker/gpu/health.py writes are a fixed set whose only other number is an XID from its
    catalogue ("XID 79 (GPU has fallen off the bus)"), so the label takes a bounded set of
    values, while a count that rises does not make a new series."""
    clause = problem.split(": ", 1)[0]
    return re.sub(r"^\d+\s+", "", clause).strip()[:PROBLEM_CHARS]


GPU_STALE = "placewatch_gpu_stale"
GPU_STALE_HELP = (
    "1 while no GPU tool of its node answers: the GPU's series are what its inventory holds "
    "(its identity and health as last read, no reading); 0 while it is read."
)

SHARD_VERDICT = "placewatch_shard_verdict"
SHARD_GPU_BYTES = "placewatch_shard_gpu_bytes"
SHARD_UNHEALTHY_GPU = "placewatch_shard_unhealthy_gpu"
SHARD_STALE = "placewatch_shard_stale"
SHARD_EVIDENCE_AGE = "placewatch_shard_evidence_age_seconds"
GPU_SOURCE_UP = "placewatch_gpu_source_up"
NODE_BLIND = "placewatch_node_blind"
NODE_UP = "placewatch_node_up"
NODE_AGE = "placewatch_node_sample_age_seconds"
NODE_CLOCK_OFFSET = "placewatch_node_clock_offset_seconds"
PARTITION_PROBLEM = "placewatch_partition_problem"
UNREADABLE = "placewatch_unreadable_messages_total"
UNREADABLE_HELP = (
    "Messages the view did not read, by reason: schema (a worker of another schema), "
    "malformed (not the message its headers say), impostor (naming another node or shard "
    "than its subject's), partition (in another partition than the mapping gives its node)."
)
EXPORTER_SERVES = "placewatch_exporter_serves"
EXPORTER_SERVES_HELP = (
    "1, labelled with what this exporter serves: partition (P/N of the servers' mapping, "
    "empty for every partition) and nodes (its --nodes glob or --node, * for every node)."
)
EXPORTER_SERVES_LABELS = ("partition", "nodes")
PARTITION_PROBLEM_HELP = (
    "1 for each way the servers' partition mapping is not the one --partition was told "
    "(kind: unmapped, more_partitions, other_partitions, stream_copies); none while it is."
)

NODE_METRICS = {
    SHARD_VERDICT: (
        "The shard's current verdict, 1 (one series per shard, labelled with its verdict).",
        ("node", "shard", "verdict"),
    ),
    SHARD_GPU_BYTES: (
        "GPU memory the shard's processes hold on the GPU (bytes).",
        ("node", "shard", "gpu"),
    ),
    SHARD_UNHEALTHY_GPU: (
        "1 for each unhealthy GPU the shard's processes hold memory on (its ComputeStatus "
        "lists them in unhealthy_gpus).",
        ("node", "shard", "gpu"),
    ),
    SHARD_STALE: (
        "1 while the shard's verdict stands on evidence since lost (its ComputeStatus is "
        "stale), else 0.",
        ("node", "shard"),
    ),
    SHARD_EVIDENCE_AGE: (
        "Seconds since the evidence of the shard's verdict was last had (its ComputeStatus's "
        "stale_since), by the node's clock; 0 while it is fresh.",
        ("node", "shard"),
    ),
    GPU_SOURCE_UP: (
        "1 while the GPU tool answered at the node's last sample, 0 while it failed or is not "
        "found (the telemetry's sources say why).",
        ("node", "source", "vendor"),
    ),
    NODE_BLIND: (
        "1 while none of the node's GPU tools answers, where it has GPUs or a tool that "
        "failed: its GPUs' health is held as last read, and its shards' verdicts go stale.",
        ("node",),
    ),
    NODE_UP: (
        "1 while the node's last sample is younger than three of its intervals, else 0.",
        ("node",),
    ),
    NODE_AGE: (
        "Seconds since the node's last sample arrived (or the server stored it), by the "
        "exporter's clock.",
        ("node",),
    ),
    NODE_CLOCK_OFFSET: (
        "The node's clock minus the exporter's, from its last sample's time and arrival (the "
        "bus's latency included): how far off NTP left it.",
        ("node",),
    ),
}
"""The placewatch_* metrics of nodes and shards: help text and labels."""


def served() -> list[str]:
    """Every metric name the exporter serves (xpum.py's, for Intel GPUs, included)."""
    return (
        [m.name for m in GPU_METRICS]
        + xpum_names()
        + [
            GPU_PROBLEM,
            GPU_STALE,
            *NODE_METRICS,
            PARTITION_PROBLEM,
            UNREADABLE,
            EXPORTER_SERVES,
        ]
    )


def device(g: GpuSample) -> str:
    """dcgm-exporter's `device` label: `nvidia<N>`, the /dev node. The index is the vendor
    tool's (PCI bus) order, which the device minor number follows on most systems."""
    return f"{'nvidia' if g.vendor == 'nvidia' else g.vendor}{g.index}"
