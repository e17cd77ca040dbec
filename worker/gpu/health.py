"""Whether a GPU is fit to compute on, judged from the health readings its source gave.

The sources read counts (GpuHealth); this module alone says what they mean, the same way
for every vendor and tool. A GPU is unhealthy on a condition that needs a reset or a
reboot before it computes right again, each named with what to do:

- a critical XID that NVIDIA's XID catalogue resolves with a GPU reset or a reboot
  (RESET_XIDS), seen since the worker started;
- an uncorrected ECC error since the last driver load or reset (volatile: a reset clears
  it; the aggregate count stays for the GPU's life and does not alone make it unhealthy);
- a failed row remapping, or a row remapping or page retirement still pending (the bad
  memory stays in use until the GPU is reset).
- a recovery the driver itself asks for (GpuHealth.recovery_action: a reset, a reboot, a
  drain), which also covers what happened before the worker started.

Corrected errors, replays and clock events are readings, not faults: alert rules watch
their rates (docs/prometheus/placewatch-rules.yml). Pure: no I/O.
"""

from __future__ import annotations

import msgspec

from placewatch.schemas import GpuHealth, GpuSample

RESET_XIDS: dict[int, str] = {
    46: "GPU stopped processing",
    48: "double-bit ECC error",
    61: "internal micro-controller breakpoint",
    62: "internal micro-controller halt",
    64: "ECC page retirement or row remapping failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
    140: "unrecovered ECC error",
    154: "GPU recovery action changed: reset required",
}
"""Critical XIDs after which the GPU must be reset (or the node rebooted) to compute right,
by NVIDIA's XID catalogue and its health checks. Others (13 graphics engine exception, 31
MMU fault, 43 a stopped application, 45 preemptive cleanup) are an application's fault:
counted, not a GPU fault."""

RESET = "reset the GPU (nvidia-smi -r, with nothing running on it) or reboot the node"

RECOVERY: dict[str, str] = {
    "reset": RESET,
    "reboot": "reboot the node",
    "system_reboot": "reboot the node",
    "bus_reset": "reset the GPU's PCIe bus or reboot the node",
    "drain_p2p": "stop its peer-to-peer work, then reset it",
    "drain_and_reset": "drain its work, then " + RESET,
    "recover_imex_domain": "recover its IMEX domain (nvidia-imex)",
}
"""What to do for each recovery action the driver asks for (nvml.h's
nvmlDeviceGpuRecoveryAction_t, by the words nvidia-smi prints)."""


def problems(health: GpuHealth, vendor: str = "nvidia") -> list[str]:
    """The fatal conditions `health` shows, each with what to do; empty when none."""
    found = []
    if health.fatal_xid is not None:
        what = RESET_XIDS.get(health.fatal_xid, "needs a GPU reset")
        found.append(f"XID {health.fatal_xid} ({what}): {RESET}")
    action = health.recovery_action
    if action is not None and action != "none":
        found.append(
            f"the driver asks for a GPU recovery ({action}): "
            + RECOVERY.get(action, "see the driver's documentation of this recovery action")
        )
    if health.ecc_uncorrected_volatile:
        n = health.ecc_uncorrected_volatile
        if vendor == "nvidia":
            found.append(f"{n} uncorrected ECC error(s) since the last reset: {RESET}")
        else:  # amdgpu's RAS counts run from the driver's load
            found.append(
                f"{n} uncorrected ECC error(s) since the amdgpu driver loaded: drain the GPU, "
                "then reset it (amd-smi reset -G) or reboot; the count clears when the driver "
                "loads again"
            )
    if health.remapped_rows_failed:
        found.append(
            "a row remapping failed (no spare memory row left): drain the GPU and have it replaced"
        )
    if health.remapped_rows_pending:
        found.append(f"a row remapping is pending: {RESET} to apply it")
    if health.retired_pages_pending:
        found.append(f"a page retirement is pending: {RESET} to apply it")
    return found


def assess(gpu: GpuSample) -> GpuSample:
    """`gpu` with its health judged: `healthy` and `problems` set from its readings."""
    if gpu.health is None:
        return gpu
    found = problems(gpu.health, gpu.vendor)
    if found == gpu.health.problems and gpu.health.healthy == (not found):
        return gpu
    health = msgspec.structs.replace(gpu.health, healthy=not found, problems=found)
    return msgspec.structs.replace(gpu, health=health)
