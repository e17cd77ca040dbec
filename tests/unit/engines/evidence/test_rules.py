"""How one line's finding weighs against the lines before it: the strength of what says a
GPU backend is there, failures kept as first said, later loads replacing earlier ones."""

from __future__ import annotations

import pytest

from placewatch.worker.engines.evidence.read import read_text
from placewatch.worker.engines.evidence.rules import (
    MAX_LINE_CHARS,
    Strength,
    add_device,
    backend_of,
    cut_line,
    is_host_buffer,
    note_found_device,
    note_gpu_backend,
    note_gpu_failure,
    note_layers,
    note_new_load,
    note_weights,
)
from placewatch.worker.engines.evidence.state import EngineBackend, EvidenceState

from tests.unit.engines.readings import mib

CUDART_FAILED = (
    'msg="Unable to load cudart library /usr/lib/ollama/cuda_v13/libcudart.so.13: '
    'your nvidia driver is too old"'
)
CPU_ONLY = "warning: not compiled with GPU offload support, --gpu-layers option will be ignored"


def test_a_found_gpu_outranks_a_hint_and_use_outranks_both() -> None:
    ev = EvidenceState()
    note_gpu_backend(ev, "Vulkan", "hint")
    note_gpu_backend(ev, "CUDA", "found")
    assert (ev.backend, ev.gpu_backend) == ("Vulkan", "Vulkan")  # the first said stands
    note_gpu_backend(ev, "CUDA", "use")
    assert (ev.backend, ev.gpu_backend) == ("CUDA", "CUDA")


def test_the_cpu_is_no_gpu_backend() -> None:
    ev = EvidenceState()
    note_gpu_backend(ev, "CPU", "use")
    note_gpu_backend(ev, None, "use")
    assert ev == EvidenceState()


def test_using_a_gpu_after_zero_layers_keeps_the_cpu() -> None:
    ev = EvidenceState()
    assert note_layers(ev, 0, 29)
    note_gpu_backend(ev, "CUDA", "use")
    assert (ev.backend, ev.gpu_backend) == ("CPU", "CUDA")


def test_the_first_failure_line_is_kept_as_said() -> None:
    ev = EvidenceState()
    note_gpu_failure(ev, "ggml_cuda_init: failed to initialize CUDA: unknown error", "CUDA")
    note_gpu_failure(ev, CPU_ONLY, None)
    assert ev.gpu_failed == "ggml_cuda_init: failed to initialize CUDA: unknown error"
    assert (ev.backend, ev.gpu_backend) == ("CPU", "CUDA")


def test_a_failure_that_stops_the_engine_says_nothing_of_the_cpu() -> None:
    ev = EvidenceState()
    said = "No platform detected, vLLM is running on UnspecifiedPlatform"
    note_gpu_failure(ev, said, None, on_cpu=False)
    assert (ev.backend, ev.gpu_backend, ev.gpu_failed) == (None, None, said)


def test_a_long_failure_line_is_cut() -> None:
    ev = EvidenceState()
    note_gpu_failure(ev, "load_backend: failed to load " + "x" * 1000, None)
    assert ev.gpu_failed is not None and len(ev.gpu_failed) == MAX_LINE_CHARS
    assert ev.gpu_failed.endswith("…")
    assert cut_line("short") == "short"


@pytest.mark.parametrize("strength", ["found", "use"])
def test_a_discovery_failure_is_withdrawn_when_a_gpu_is_found(strength: Strength) -> None:
    ev = EvidenceState()
    note_gpu_failure(ev, CUDART_FAILED, "cudart")
    note_gpu_backend(ev, "CUDA", strength)
    assert (ev.gpu_failed, ev.backend, ev.gpu_backend) == (None, "CUDA", "CUDA")


def test_a_library_that_loads_does_not_withdraw_a_failure() -> None:
    ev = EvidenceState()
    note_gpu_failure(ev, CUDART_FAILED, None)
    note_gpu_backend(ev, "CUDA", "hint")
    assert (ev.gpu_failed, ev.backend, ev.gpu_backend) == (CUDART_FAILED, "CPU", "CUDA")


def test_a_cpu_only_build_stays_failed_whatever_is_found() -> None:
    ev = EvidenceState()
    note_gpu_failure(ev, CPU_ONLY, None)
    note_found_device(ev, "Vulkan0")
    assert (ev.gpu_failed, ev.backend, ev.gpu_backend) == (CPU_ONLY, "CPU", "Vulkan")
    assert ev.found_devices == ["Vulkan0"]


def test_a_layer_count_over_its_total_changes_nothing() -> None:
    ev = EvidenceState()
    assert not note_layers(ev, 34, 33)
    assert ev == EvidenceState()


def test_a_new_load_forgets_the_layers_and_weights_before_it() -> None:
    ev = EvidenceState()
    note_layers(ev, 33, 33)
    note_weights(ev, "CUDA0", mib(3872.00))
    note_new_load(ev)
    assert (ev.layers_offloaded, ev.layers_total) == (None, None)
    assert (ev.cpu_weight_bytes, ev.gpu_weight_bytes) == (None, None)
    assert (ev.backend, ev.devices) == ("CUDA", ["CUDA0"])  # what it runs on is still said


def test_weights_are_summed_per_side() -> None:
    ev = EvidenceState()
    for name, size in [("CUDA0", 3872.00), ("CPU_Mapped", 532.31), ("CUDA1", 3627.50)]:
        note_weights(ev, name, mib(size))
    assert (ev.gpu_weight_bytes, ev.cpu_weight_bytes) == (mib(3872.00, 3627.50), mib(532.31))
    assert (ev.devices, ev.backend) == (["CUDA0", "CUDA1"], "CUDA")


def test_host_weights_alone_say_the_cpu() -> None:
    ev = EvidenceState()
    note_weights(ev, "CPU", mib(8137.64))
    assert (ev.backend, ev.gpu_weight_bytes, ev.cpu_weight_bytes) == ("CPU", 0, mib(8137.64))


@pytest.mark.parametrize(
    ("name", "host"),
    [
        ("CPU", True), ("CPU_Mapped", True), ("CPU_REPACK", True), ("CUDA_Host", True),
        ("CUDA0", False), ("MTL0_Mapped", False), ("Metal", False), ("ROCm1", False),
    ],
)  # fmt: skip
def test_host_buffers_are_told_from_gpu_buffers(name: str, host: bool) -> None:
    assert is_host_buffer(name) is host


@pytest.mark.parametrize(
    ("name", "backend"),
    [
        ("cuda_v12", "CUDA"), ("cublas", "CUDA"), ("CUDA0", "CUDA"), ("rocm", "ROCm"),
        ("hip", "ROCm"), ("Vulkan0", "Vulkan"), ("MTL0_Mapped", "Metal"), ("metal", "Metal"),
        ("SYCL0", "SYCL"), ("oneapi", "SYCL"), ("cpu", None), ("opencl", None), ("", None),
    ],
)  # fmt: skip
def test_a_name_belongs_to_the_backend_it_begins_with(
    name: str, backend: EngineBackend | None
) -> None:
    assert backend_of(name) == backend


def test_a_device_is_named_once_and_the_list_is_bounded() -> None:
    names: list[str] = []
    for i in range(100):
        add_device(names, f"CUDA{i}")
        add_device(names, "CUDA0")
    assert names == [f"CUDA{i}" for i in range(64)]


# --- the rules over whole logs ---


def test_a_later_load_replaces_the_earlier_layers_and_weights() -> None:
    ev = read_text(
        "load_tensors: offloaded 33/33 layers to GPU\n"
        "load_tensors:        CUDA0 model buffer size =  3872.00 MiB\n"
        "load_tensors: loading model tensors, this can take a while... (mmap = true)\n"
        "load_tensors: offloaded 0/29 layers to GPU\n"
        "load_tensors:   CPU_Mapped model buffer size =  4403.49 MiB\n"
    )
    assert (ev.layers_offloaded, ev.layers_total) == (0, 29)
    assert (ev.gpu_weight_bytes, ev.cpu_weight_bytes) == (0, mib(4403.49))
    assert ev.backend == "CPU"


def test_cuda_init_failure_outranks_a_later_layer_count() -> None:
    ev = read_text(
        "ggml_cuda_init: failed to initialize CUDA: no CUDA-capable device is detected\n"
        "llm_load_tensors: offloaded 33/33 layers to GPU\n"
        "llm_load_tensors:        CPU buffer size =  8137.64 MiB\n"
    )
    assert ev.gpu_failed is not None and "no CUDA-capable device" in ev.gpu_failed
    assert ev.backend == "CPU"
    assert (ev.layers_offloaded, ev.gpu_weight_bytes) == (33, 0)


def test_a_cpu_only_build_is_not_withdrawn_by_a_later_device_line() -> None:
    ev = read_text(
        "warning: not compiled with GPU offload support, --gpu-layers option will be ignored\n"
        "ggml_vulkan: Found 1 Vulkan devices:\n"
        "ggml_vulkan: 0 = NVIDIA GeForce RTX 4060 (NVIDIA) | uma: 0 | fp16: 1 | warp size: 32\n"
    )
    assert ev.gpu_failed is not None
    assert ev.backend == "CPU"
