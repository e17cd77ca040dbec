"""A GPU's health as the contract carries it: the driver's counts and placewatch's judgement.

Its own module because it is its own concern: which counts DCGM users watch a GPU by, and
what each means. What makes a GPU unhealthy is decided in the worker
(worker/gpu/health.py); where the counts travel (the inventory, not every tick) in lean.py.
"""

from __future__ import annotations

import msgspec

from .values import NonNegative, Time

CLOCK_EVENT_BITS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clocks_setting",
}
"""GpuHealth.clock_events' NVIDIA names, each with its bit in nvml.h's clock event reasons
(`nvmlClocksEventReason*`, `nvmlClocksThrottleReason*` before R535), which nvidia-smi's
masks and DCGM's DCGM_CLOCKS_THROTTLE_REASON_* copy one to one. What amd-smi or rocm-smi
names has no bit."""


class GpuHealth(msgspec.Struct, frozen=True, kw_only=True, gc=False, omit_defaults=True):
    """What DCGM users watch a GPU's health by, as far as its tool tells: a reading left out
    (null) is one the tool did not give. Counts are the driver's own; `problems` is
    placewatch's judgement of them (worker/gpu/health.py)."""

    healthy: bool = True
    """False when a fatal condition is seen (`problems` says which): the GPU needs a reset
    or a reboot, and nothing new should be placed on it."""
    problems: list[str] = msgspec.field(default_factory=list)
    """Why the GPU is unhealthy, each with what to do; empty while it is healthy."""
    xid_errors: NonNegative | None = None
    """Critical XID errors the driver reported since the worker started (NVML's event set;
    no tool prints them). Null where no event set could be registered."""
    last_xid: NonNegative | None = None
    """The last of them, by its number (79: fallen off the bus)."""
    last_xid_time: Time | None = None
    """When the worker read it."""
    fatal_xid: NonNegative | None = None
    """The last of them that needs a GPU reset (worker/gpu/health.py: RESET_XIDS), kept
    until the worker restarts: a later harmless XID does not hide it."""
    ecc_corrected_volatile: NonNegative | None = None
    """ECC errors corrected since the last driver load or GPU reset."""
    ecc_uncorrected_volatile: NonNegative | None = None
    """ECC errors not corrected since the last driver load or GPU reset."""
    ecc_corrected_aggregate: NonNegative | None = None
    """ECC errors corrected over the GPU's life (its inforom)."""
    ecc_uncorrected_aggregate: NonNegative | None = None
    """ECC errors not corrected over the GPU's life."""
    retired_pages_sbe: NonNegative | None = None
    """Memory pages retired for repeated single-bit errors (pre-A100 GPUs)."""
    retired_pages_dbe: NonNegative | None = None
    """Memory pages retired for double-bit errors (pre-A100 GPUs)."""
    retired_pages_pending: bool | None = None
    """A page retirement waits for the next driver load or reset."""
    remapped_rows_correctable: NonNegative | None = None
    """Memory rows remapped for correctable errors (A100 and later)."""
    remapped_rows_uncorrectable: NonNegative | None = None
    """Memory rows remapped for uncorrectable errors."""
    remapped_rows_pending: bool | None = None
    """A row remapping waits for a GPU reset."""
    remapped_rows_failed: bool | None = None
    """A row remapping failed: the GPU has no spare row left for a bad one."""
    clock_events: list[str] = msgspec.field(default_factory=list)
    """What holds the clocks down now (NVML's clock event reasons, once "throttle reasons"):
    "gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown",
    "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown", "sync_boost",
    "display_clocks_setting"; on AMD, what amd-smi or rocm-smi names."""
    pcie_gen: NonNegative | None = None
    """The PCIe link's current generation (an idle GPU may step down)."""
    pcie_width: NonNegative | None = None
    """The PCIe link's current width in lanes."""
    pcie_replays: NonNegative | None = None
    """PCIe packets replayed since the driver loaded: a rising count is a bad link."""
    recovery_action: str | None = None
    """What the driver itself says the GPU needs to recover (NVML's GPU recovery action,
    nvidia-smi's `gpu_recovery_action` from R570, its `reset_required` and
    `drain_and_reset_recommended` before): "none", "reset", "reboot", "drain_p2p",
    "drain_and_reset", ... Anything but "none" makes the GPU unhealthy, whatever happened
    before the worker started."""
