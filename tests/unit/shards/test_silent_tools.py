"""A discovered engine asked for GPUs while no GPU tool answered: its own word, or nothing."""

from __future__ import annotations

from placewatch.schemas import PlacementSpec
from placewatch.worker.engines.evidence import EngineEvidence
from placewatch.worker.engines.evidence.read import read_text
from placewatch.worker.shards.placements import Placement
from placewatch.worker.shards.silent_tools import engine_says_cpu

UNTOLD = Placement(
    PlacementSpec(id="llama-server-8080", pid=42, engine="llama.cpp"),
    "discovered",
    gpus_unknown="it asks for GPUs (-ngl 99), but no GPU tool answered on this node (nvml)",
    gpu_request="-ngl 99",
)
# llama.cpp b11434 built without a GPU backend, started with -ngl 99 (its stderr).
NO_USABLE_GPU = (
    "warning: no usable GPU found, --gpu-layers option will be ignored\n"
    "warning: one possible reason is that llama.cpp was compiled without GPU support\n"
    "warning: consult docs/build.md for compilation instructions\n"
)


def test_the_engine_saying_no_usable_gpu_is_cpu_fallback_by_its_own_word() -> None:
    j = engine_says_cpu(UNTOLD, read_text(NO_USABLE_GPU))
    assert j is not None
    assert (j.verdict, j.backend, j.devices) == ("cpu_fallback", "CPU", ())
    assert j.reason == (
        "asked for GPUs (-ngl 99) but computing on the CPU: llama.cpp says 'warning: no usable "
        "GPU found, --gpu-layers option will be ignored'; run a GPU build (e.g. -DGGML_CUDA=ON, "
        "or a CUDA release of llama.cpp); for AMD GPUs, a GPU build (e.g. -DGGML_HIP=ON, or a "
        "HIP release of llama.cpp); the GPU tools did not answer either: run `placewatch doctor` "
        "on this node"
    )
    assert j.evidence == (
        "warning: no usable GPU found, --gpu-layers option will be ignored",
        "warning: one possible reason is that llama.cpp was compiled without GPU support",
    )


def test_a_build_listing_no_gpu_device_is_cpu_fallback_told_to_run_a_gpu_build() -> None:
    # b11434 at -lv 4 without -ngl: device_info names only the CPU, and no warning is printed
    said = read_text(
        "0.00.004.268 I cmn  common_param: device_info:\n"
        "0.00.004.274 I cmn  common_param:   - CPU     : AMD EPYC (24105 MiB, 24105 MiB free)\n"
    )
    j = engine_says_cpu(UNTOLD, said)
    assert j is not None and (j.verdict, j.backend) == ("cpu_fallback", "CPU")
    assert j.reason.startswith(
        "asked for GPUs (-ngl 99) but computing on the CPU: llama.cpp lists no GPU device, only "
        "the CPU; run a GPU build (e.g. -DGGML_CUDA=ON, "
    )
    assert j.evidence == ("- CPU     : AMD EPYC (24105 MiB, 24105 MiB free)",)


def test_an_engine_that_failed_its_gpu_backend_is_sent_to_its_libraries() -> None:
    said = EngineEvidence(
        engine="llama.cpp", gpu_failed="ggml_cuda_init: failed to initialize CUDA"
    )
    j = engine_says_cpu(UNTOLD, said)
    assert j is not None and j.verdict == "cpu_fallback"
    assert "check its CUDA/ROCm libraries with ldd on libggml-cuda.so" in j.reason


def test_zero_layers_offloaded_or_the_cpu_as_its_device_is_cpu_fallback() -> None:
    zero = engine_says_cpu(UNTOLD, EngineEvidence(layers_offloaded=0, layers_total=29))
    assert zero is not None and zero.verdict == "cpu_fallback"
    assert "llama.cpp offloaded 0 of 29 layers" in zero.reason
    assert (zero.layers_offloaded, zero.layers_total) == (0, 29)
    cpu = engine_says_cpu(UNTOLD, EngineEvidence(engine="vllm", backend="CPU"))
    assert cpu is not None and cpu.verdict == "cpu_fallback"
    assert "vllm reports the CPU as its compute device" in cpu.reason


def test_layers_on_gpus_say_nothing_of_which_gpus_so_the_verdict_stays() -> None:
    said = EngineEvidence(backend="CUDA", layers_offloaded=29, layers_total=29)
    assert engine_says_cpu(UNTOLD, said) is None
    assert engine_says_cpu(UNTOLD, None) is None
    assert engine_says_cpu(UNTOLD, EngineEvidence(verbosity=3)) is None  # nothing known


def test_a_shard_the_tools_could_tell_is_not_judged_here() -> None:
    placed = Placement(PlacementSpec(id="a", pid=42, gpus=[0]), "file")
    assert engine_says_cpu(placed, read_text(NO_USABLE_GPU)) is None
