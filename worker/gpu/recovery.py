"""What the NVIDIA driver says a GPU needs to recover, by the words GpuHealth gives it.

From R570 the driver keeps one GPU recovery action (nvml.h's nvmlDeviceGpuRecoveryAction_t,
read with nvmlDeviceGetFieldValues and NVML_FI_DEV_GET_GPU_RECOVERY_ACTION; nvidia-smi's
`gpu_recovery_action`, which prints it as "None", "Reset", "Reboot", "Drain P2P", "Drain
and Reset"). Before, nvidia-smi printed two flags, `reset_required` and
`drain_and_reset_recommended` (R570 prints "Requested functionality has been deprecated"
there). Pure.
"""

from __future__ import annotations

from . import values

FIELD_GPU_RECOVERY_ACTION = 230
"""NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, the field id nvmlDeviceGetFieldValues reads it by."""

ACTIONS: dict[int, str] = {
    0: "none",
    1: "reset",
    2: "reboot",
    3: "drain_p2p",
    4: "drain_and_reset",
    5: "recover_imex_domain",
    6: "bus_reset",
    7: "system_reboot",
}
"""nvml.h's NVML_GPU_RECOVERY_ACTION_* by the words nvidia-smi prints ("GPU reset" is
"Reset", "node reboot" "Reboot")."""


def from_code(code: object) -> str | None:
    """The action NVML's code names; an unknown code by its number, for the operator."""
    if not isinstance(code, int) or code < 0:
        return None
    return ACTIONS.get(code, f"action_{code}")


def from_words(text: str | None) -> str | None:
    """The action as nvidia-smi prints it ("Drain and Reset" -> "drain_and_reset"); None
    where it prints none ([N/A], "Requested functionality has been deprecated")."""
    words = "_".join((text or "").lower().split())
    if words == "none":  # the driver's word for no action, not a missing value here
        return words
    if not words or values.is_missing(text) or "deprecated" in words:
        return None
    return words


def from_flags(reset_required: bool | None, drain_and_reset: bool | None) -> str | None:
    """The action the flags of drivers before R570 say: a drain and reset, a reset, none."""
    if drain_and_reset:
        return "drain_and_reset"
    if reset_required:
        return "reset"
    if reset_required is None and drain_and_reset is None:
        return None
    return "none"
