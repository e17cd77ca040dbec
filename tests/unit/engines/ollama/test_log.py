"""Ollama: every real server log read as a person reads it (its own logfmt lines and its
runners' llama.cpp lines), from 0.1.32's cudart detection to 0.32's discovery."""

from __future__ import annotations

import pytest

from placewatch.worker.engines.evidence.read import read_text

from tests.conftest import needs_corpus
from tests.unit.engines.readings import (
    LLAMA,
    LOGS,
    OLLAMA,
    OWN,
    Reading,
    gib,
    mib,
    read_log,
    reading,
)

GPU_6DE = "GPU-d6de3398-9932-6902-11ec-fee8e424c8a2"

CORPUS_READINGS: dict[str, Reading] = {
    # Ollama 0.1.32: NVIDIA detected through cudart (the log alone looks like a GPU)
    "ollama-0.1.32-cudart-detection-lines-2024-04.log": Reading(OLLAMA, "CUDA", "CUDA"),
    # Ollama 0.1.48 on Android: library=cpu, offload to cpu 0/33, the CPU runner
    "ollama-0.1.48-cpu-only-inference-compute-offload-to-cpu-2024-07.log": Reading(
        OLLAMA, "CPU", layers=(0, 33)
    ),
    # Ollama 0.12: the scheduler sees one GPU's free memory; nothing says what it runs on
    "ollama-0.12-engine-loading-model-gpu-memory-2025-09.log": Reading(
        OLLAMA, found=("GPU-7a420261-3e37-b15a-2f9b-2fd7da322dbe",), known=False
    ),
    # Ollama 0.12.5's new discovery: CUDA0, a GTX 1060
    "ollama-0.12.5-new-discovery-inference-compute-cuda0-2025-10.log": Reading(
        OLLAMA, "CUDA", "CUDA", found=("CUDA0",)
    ),
    # Ollama 0.20.6 after a driver update: CUDA init fails, 0/33, weights on the CPU
    "ollama-0.20.6-cuda-forward-compat-fail-offloaded-0of33-2026-05.log": Reading(
        OLLAMA, "CPU", "CUDA", (0, 33), failed="forward compatibility was attempted",
        gpu_bytes=0, cpu_bytes=gib(6.1),
    ),
    # 0.32.14 skips the A6000, then the quoted 0.30.10 log finds it as CUDA0: latest wins
    "ollama-0.32.14-skipping-cuda-device-cc-not-compiled-silent-cpu-2026-08.log": Reading(
        OLLAMA, "CUDA", "CUDA", found=("CUDA0",)
    ),
    # Ollama 0.5.13 on Windows: the 4070 SUPER found, an unsupported Radeon iGPU skipped
    "ollama-0.5.13-gpu-discovery-inference-compute-windows-2025-03.log": Reading(
        OLLAMA, "CUDA", "CUDA", found=("GPU-eca11db2-5a89-550c-36c9-adedf39c9da1",)
    ),
    # a broken libcuda ("file too short"): no compatible GPUs, library=cpu
    "ollama-0.5.7-cudart-file-too-short-cpu-fallback-2025-02.log": Reading(
        OLLAMA, "CPU", "CUDA", failed="file too short"
    ),
    # a distro build with only the CPU runner
    "ollama-0.5.7-dynamic-llm-libraries-cpu-only-2025-01.log": Reading(
        OLLAMA, "CPU", failed="runners=[cpu]"
    ),
    # the new engine with only the CPU backend: 8.3 GiB of weights on the CPU
    "ollama-0.6.3-new-engine-model-weights-buffer-cpu-2025-04.log": Reading(
        OLLAMA, "CPU", gpu_bytes=0, cpu_bytes=gib(8.3)
    ),
    # discovery finds the 4090 (the CPU run the issue reports is not in the log)
    "ollama-0.6.6-inference-compute-cuda-but-cpu-2025-04.log": Reading(
        OLLAMA, "CUDA", "CUDA", found=("GPU-a91a72c4-6733-ae33-c532-f159bfc07477",)
    ),
    # ROCm runner: 7900 XT, load request fits 15 layers on it (total not said)
    "ollama-2025-11-rocm-runner-fit-partial-15-layers.log": Reading(
        OLLAMA, "ROCm", "ROCm", (15, None), devices=("GPU-4171ddc6812fc283",),
        found=("ROCm0",),
    ),
    # test fixture: a GB10 iGPU line and, from another machine, a library=cpu line
    "ollama-2026-07-inference-compute-igpu-gb10-and-cpu-fixture.log": Reading(
        OLLAMA, "CUDA", "CUDA", found=("CUDA0",)
    ),
    # test fixture: a T4 line and, from another machine, a library=cpu line
    "ollama-2026-10-inference-compute-gpu-vs-cpu-lines-verbatim-fixture.log": Reading(
        OLLAMA, "CUDA", "CUDA", found=("CUDA0",)
    ),
    # the cuda_v12 discovery times out, cuda_v13 then finds the GPU: no failure remains
    "ollama-2026-llama-server-gpu-discovery-watchdog-timeout.log": Reading(
        OLLAMA, "CUDA", "CUDA"
    ),
    # AMD: no suitable ROCm, falling back to CPU, library=cpu
    "ollama-amd-no-suitable-rocm-falling-back-to-cpu-2025-02.log": Reading(
        OLLAMA, "CPU", "ROCm", failed="no suitable rocm found, falling back to CPU"
    ),
    # test fixture: no compatible GPUs, library=cpu
    "ollama-apptest-inference-compute-cpu.log": Reading(
        OLLAMA, "CPU", failed="no compatible GPUs were discovered"
    ),
    # test fixture: a CUDA and a ROCm GPU discovered; the first backend found stands
    "ollama-apptest-inference-compute-cuda-plus-rocm.log": Reading(
        OLLAMA, "CUDA", "CUDA", found=(GPU_6DE, "GPU-9abb57639fa80c50")
    ),
    # test fixture: macOS, library=metal
    "ollama-apptest-inference-compute-metal.log": Reading(
        OLLAMA, "Metal", "Metal", found=("Metal0",)
    ),
    # no compatible GPU library for the load, only the CPU backend loads
    "ollama-compatible-gpu-libraries-empty-cpu-backend-only-2025-08.log": Reading(
        OLLAMA, "CPU", failed='compatible gpu libraries" compatible=[]'
    ),
    # CUDA driver init failure 999, no compatible GPUs, library=cpu
    "ollama-cuda-init-failure-999-cpu-fallback-2025-08.log": Reading(
        OLLAMA, "CPU", "CUDA", failed="cuda driver library init failure: 999"
    ),
    # the token embeddings are always on the CPU: one tensor line says nothing
    "ollama-debug-created-tensor-buffer-type-cpu-2025-05.log": Reading(known=False),
    # KV cache and compute buffer on the CPU only, one graph split: all on the CPU
    "ollama-did-not-use-gpu-cpu-kv-2025-02.log": Reading(LLAMA, "CPU"),
    # docs: discovery finds an L4 as CUDA0, the runner uses it, offloading 32 repeating
    "ollama-docs-l4-inference-compute-and-runner-device-lines.log": Reading(
        OLLAMA, "CUDA", "CUDA", (32, None), devices=("CUDA0",), found=("CUDA0",)
    ),
    # driver too old for both CUDA libraries: library=cpu, offload 0/29, CPU backend only
    "ollama-driver-too-old-no-compatible-gpus-cpu-fallback-2025-10.log": Reading(
        OLLAMA, "CPU", "CUDA", (0, 29), failed="your nvidia driver is too old or missing"
    ),
    # the runner's llama.cpp lines: 81/81 across CUDA0 and CUDA2
    "ollama-embedded-llamacpp-multigpu-full-offload-81of81-2025-08.log": Reading(
        LLAMA, "CUDA", "CUDA", (81, 81), devices=("CUDA0", "CUDA2"),
        gpu_bytes=mib(24277.75, 46151.91), cpu_bytes=mib(1064.62),
    ),
    # quoted runner lines: 31/33, CUDA_Host and CUDA0 weights
    "ollama-embedded-llamacpp-partial-31of33-quoted-2025-01.log": Reading(
        LLAMA, "CUDA", "CUDA", (31, 33), devices=("CUDA0",),
        gpu_bytes=mib(3627.97), cpu_bytes=mib(809.84),
    ),
    # the new engine: 40/41 (output layer on the CPU), weights on CUDA1, CUDA0 and the CPU
    "ollama-engine-partial-40of41-output-layer-cpu-multigpu-2025-07.log": Reading(
        OLLAMA, "CUDA", "CUDA", (40, 41), devices=("CUDA1", "CUDA0"),
        gpu_bytes=gib(11.0, 11.0), cpu_bytes=gib(2.1),
    ),
    # go runner with --n-gpu-layers 25, then its CUDA init and backend
    "ollama-go-runner-load-backend-cuda-2025-03.log": Reading(
        OLLAMA, "CUDA", "CUDA", (25, None), found=("CUDA0",)
    ),
    # discovery finds a 2080 Ti; the model fits in it
    "ollama-gpu-discovery-fit-single-gpu-2025-05.log": Reading(
        OLLAMA, "CUDA", "CUDA", devices=(GPU_6DE,), found=(GPU_6DE,)
    ),
    # discovery finds a 4090 D
    "ollama-inference-compute-cuda-discovery-2025-02.log": Reading(
        OLLAMA, "CUDA", "CUDA", found=("GPU-2ef77503-2f4c-3683-b2c4-50548cd200d8",)
    ),
    # two V100s, neither with room for one layer
    "ollama-insufficient-vram-cpu-fallback-2025-02.log": Reading(
        OLLAMA, "CPU", failed="insufficient VRAM to load any model layers"
    ),
    # test fixture of llama-server's lines: 33/33 on CUDA0
    "ollama-llamaserver-runner-test-sample-33of33.log": Reading(
        LLAMA, "CUDA", "CUDA", (33, 33), devices=("CUDA0",),
        gpu_bytes=mib(852.89), cpu_bytes=mib(308.23),
    ),
    # a GTX 1060 found, then the kernels are missing for its arch (a crash)
    "ollama-no-kernel-image-arch-mismatch-2025-07.log": Reading(
        OLLAMA, "CUDA", "CUDA", failed="no kernel image is available",
        found=("GPU-8020c948-dcac-7cc5-4991-07408ef9edad",),
    ),
    # quoted journald: offload library=cpu 0/49, runner without GPU layers
    "ollama-offload-library-cpu-0-layers-2025-06.log": Reading(OLLAMA, "CPU", layers=(0, 49)),
    # OLLAMA_DEBUG: offload to cuda, 33/33 planned
    "ollama-offload-to-cuda-full-33of33-2025-02.log": Reading(OLLAMA, "CUDA", "CUDA", (33, 33)),
    # offload to cuda 29/29, the cuda_v12_avx runner with --n-gpu-layers 29
    "ollama-offload-to-cuda-runner-cmd-2024-12.log": Reading(OLLAMA, "CUDA", "CUDA", (29, 29)),
    # 44 of 81 layers across four GPUs (tensor split 11,11,11,11)
    "ollama-partial-44of81-four-gpu-tensor-split-2025-02.log": Reading(
        OLLAMA, "CUDA", "CUDA", (44, 81)
    ),
    # 48 of 49 layers, runner --n-gpu-layers 48
    "ollama-partial-offload-48of49-runner-cmd-2025-08.log": Reading(
        OLLAMA, "CUDA", "CUDA", (48, 49)
    ),
    # runner on an RTX 2060: 5/37, 511 MiB on CUDA0 and 3.5 GiB in CPU_Mapped
    "ollama-partial-offload-5of37-cuda0-cpu-mapped-2025-05.log": Reading(
        OLLAMA, "CUDA", "CUDA", (5, 37), devices=("CUDA0",), found=("CUDA0",),
        gpu_bytes=mib(511.43), cpu_bytes=mib(3565.00),
    ),
    # the scheduler fits the model on one GPU; nothing names the backend
    "ollama-ps-100pct-gpu-but-cpu-inference-2025-01.log": Reading(
        OLLAMA, devices=("GPU-85fa3824-d8bd-9487-b237-e98ece392daf",)
    ),
    # `ollama ps` said GPU, the runner's layers 12..18 say CPU (excerpt mid-way)
    "ollama-ps-gpu-but-layers-assigned-cpu-2025-04.log": Reading(OLLAMA, "CPU"),
    # ROCm gfx1103 discovered (the 0/35 of the issue title is not in the log)
    "ollama-rocm-gfx1103-inference-compute-but-0of35-2025-09.log": Reading(
        OLLAMA, "ROCm", "ROCm", found=("ROCm0",)
    ),
    # early SYCL list: two A770 entries, an FPGA emulator and the Ryzen; device 0 is main
    "ollama-sycl-pr-found-4-sycl-devices-main-device-2024-03.log": Reading(
        LLAMA, "SYCL", "SYCL", devices=("SYCL0",), found=("SYCL0", "SYCL2")
    ),
    # Windows Vulkan: an Arc 130V iGPU, the Vulkan backend loaded
    "ollama-vulkan-intel-arc-igpu-load-backend-2025-11.log": Reading(
        LLAMA, "Vulkan", "Vulkan", found=("Vulkan0",)
    ),
    # the Vulkan PR: an A770 discovered and the model fits in it (log alone looks like GPU)
    "ollama-vulkan-pr-gpu-found-but-runs-cpu-2024-12.log": Reading(
        OLLAMA, "Vulkan", "Vulkan", devices=("Vulkan0",), found=("Vulkan0",)
    ),
    # a CPU-only runner: no offload lines at all, only a CPU weight buffer
    "ollama-windows-gpu-not-found-cpu-only-no-offload-line-2024-08.log": Reading(
        LLAMA, "CPU", gpu_bytes=0, cpu_bytes=mib(8137.64)
    ),
}  # fmt: skip


@needs_corpus
@pytest.mark.parametrize("name", sorted(CORPUS_READINGS))
def test_ollama_log_reads_as_a_person_reads_it(name: str) -> None:
    want = CORPUS_READINGS[name]
    assert reading(read_log(LOGS / name), want.failed) == want


OWN_READINGS: dict[str, Reading] = {
    "ollama-library-cpu-fallback.log": Reading(
        OLLAMA, "CPU", "CUDA", (0, 33), failed="cuda driver library init failure: 999"
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(OWN_READINGS))
def test_own_ollama_fixture_reads_as_made(name: str) -> None:
    want = OWN_READINGS[name]
    assert reading(read_log(OWN / name), want.failed) == want


def test_ollama_discovery_failure_is_withdrawn_when_another_library_finds_the_gpu() -> None:
    ev = read_text(
        'time=2025-10-03T13:16:39Z level=DEBUG source=gpu.go:593 msg="Unable to load cudart '
        'library /usr/lib/ollama/cuda_v13/libcudart.so.13: your nvidia driver is too old"\n'
        'time=2025-10-03T13:16:39Z level=INFO source=types.go:131 msg="inference compute" '
        "id=GPU-2ef77503-2f4c-3683-b2c4-50548cd200d8 library=cuda variant=v12 compute=8.9\n"
    )
    assert ev.gpu_failed is None
    assert ev.backend == "CUDA"
    assert ev.engine == "ollama"


def test_ollama_cpu_runner_computes_on_the_cpu() -> None:
    ev = read_text(
        'time=2024-07-05T02:37:04Z level=INFO source=server.go:368 msg="starting llama server" '
        'cmd="/tmp/ollama1/runners/cpu_avx2/ollama_llama_server --model /m --port 38971"\n'
    )
    assert (ev.engine, ev.backend) == ("ollama", "CPU")
