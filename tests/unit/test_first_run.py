"""What `placewatch run` says at its start: how to look at what it publishes, and, when no GPU
tool answered, which and what to install."""

from __future__ import annotations

from placewatch.schemas import SourceStatus
from placewatch.worker.runtime import how_to_look, no_gpu_tool


def test_it_names_placewatch_watch_with_the_flags_that_reach_the_same_bus() -> None:
    assert how_to_look(["nats://127.0.0.1:4222"], "placewatch") == (
        "look with: placewatch watch (or, with the NATS CLI: nats sub -s nats://127.0.0.1:4222 "
        "'placewatch.>'; docs/operations.md#the-nats-cli)"
    )
    said = how_to_look(["nats://ops:secret@nats-1:4222", "nats://nats-2:4222"], "lab")
    assert said.startswith(
        "look with: placewatch watch --nats nats://***@nats-1:4222,nats://nats-2:4222 "
        "--prefix lab (or"
    ), said
    assert "secret" not in said and "'lab.>'" in said


def test_no_gpu_tool_names_each_and_what_to_install_and_is_silent_when_one_answered() -> None:
    failed = [
        SourceStatus(name="nvml", ok=False, error="NVML did not initialise: driver not loaded"),
        SourceStatus(name="nvidia-smi", ok=False, error="nvidia-smi not found on PATH"),
    ]
    said = no_gpu_tool(failed)
    assert said is not None
    assert said.startswith(
        "no GPU tool answered (nvml: NVML did not initialise: driver not loaded; nvidia-smi: "
        "nvidia-smi not found on PATH)"
    )
    assert (
        "Install the NVIDIA driver (nvidia-smi, NVML), ROCm (rocm-smi, amd-smi) or Intel's i915 "
        "or xe driver (xpu-smi on data-center GPUs), or run `placewatch doctor`"
    ) in said
    assert no_gpu_tool([*failed, SourceStatus(name="rocm-smi", ok=True)]) is None
