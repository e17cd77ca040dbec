"""Engine evidence from startup logs: every real log read as a person reads it.

Real logs in ../shared/corpus/engine-logs (llama.cpp from 2023's cuBLAS builds to b10906 and
its forks, Ollama 0.1.32 to 0.32, vLLM 0.5 to V1; PROVENANCE.md says where each came from)
and the project's own fixtures, made by hand in each engine's documented format.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placewatch.shards.engine_log import EngineEvidence, read_line, read_text
from placewatch.shards.engine_log.parse import MAX_LINE_CHARS, MAX_LINES

from tests.conftest import CORPUS, FIXTURES, corpus_files, needs_corpus

MiB = 1 << 20
GiB = 1 << 30
OWN = FIXTURES / "engine-logs"
LOGS = CORPUS / "engine-logs"


def mib(*sizes: float) -> int:
    return sum(round(s * MiB) for s in sizes)


def gib(*sizes: float) -> int:
    return sum(round(s * GiB) for s in sizes)


@dataclass(frozen=True)
class Reading:
    """What a log says; `failed` is a distinctive part of the engine's failure line."""

    engine: str | None = None
    backend: str | None = None
    gpu_backend: str | None = None
    layers: tuple[int | None, int | None] = (None, None)
    failed: str | None = None
    devices: tuple[str, ...] = ()
    found: tuple[str, ...] = ()
    gpu_bytes: int | None = None
    cpu_bytes: int | None = None
    verbosity: int | None = None
    overrides: int | None = None
    known: bool = True


def reading(ev: EngineEvidence, failed: str | None) -> Reading:
    said = ev.gpu_failed
    return Reading(
        engine=ev.engine,
        backend=ev.backend,
        gpu_backend=ev.gpu_backend,
        layers=(ev.layers_offloaded, ev.layers_total),
        failed=failed if said is not None and failed is not None and failed in said else said,
        devices=tuple(ev.devices),
        found=tuple(ev.found_devices),
        gpu_bytes=ev.gpu_weight_bytes,
        cpu_bytes=ev.cpu_weight_bytes,
        verbosity=ev.verbosity,
        overrides=ev.cpu_override_tensors,
        known=ev.known,
    )


LLAMA, OLLAMA, VLLM = "llama.cpp", "ollama", "vllm"
GPU_6DE = "GPU-d6de3398-9932-6902-11ec-fee8e424c8a2"

CORPUS_READINGS: dict[str, Reading] = {
    # ggml's CPU-variant scoring at debug level: CPU backends only, nothing about a GPU
    "ggml-backend-load-best-cpu-variants-scores-debug.log": Reading(known=False),
    # ik_llama.cpp, one A6000: 62/62 offloaded, weights on CUDA0 and a small CPU buffer
    "iklamacpp-cuda-full-offload-62of62.log": Reading(
        LLAMA, "CUDA", "CUDA", (62, 62), devices=("CUDA0",), found=("CUDA0",),
        gpu_bytes=mib(17284.05), cpu_bytes=mib(499.50),
    ),
    # ik_llama.cpp over six GPUs (no init lines in the excerpt): 62/62, weights on CUDA0..5
    "iklamacpp-multigpu-full-offload-62of62.log": Reading(
        LLAMA, "CUDA", "CUDA", (62, 62),
        devices=("CUDA0", "CUDA1", "CUDA2", "CUDA3", "CUDA4", "CUDA5"),
        gpu_bytes=mib(18870.27, 14712.18, 18390.22, 14712.18, 18390.22, 18390.22),
        cpu_bytes=mib(1190.00),
    ),
    # ik_llama.cpp -ot: eight expert tensors overridden to the CPU, no layer or buffer lines
    "iklamacpp-tensor-override-to-cpu.log": Reading(LLAMA, overrides=8, known=False),
    # koboldcpp on an M1 Max: 81/81 on Metal, Metal init after the load lines
    "koboldcpp-metal-full-offload-81of81-2024.log": Reading(
        LLAMA, "Metal", "Metal", (81, 81), devices=("Metal",),
        gpu_bytes=mib(24200.12), cpu_bytes=mib(82.03),
    ),
    # 2023 cuBLAS build without -ngl: "[cublas] offloading 0 layers", total unknown
    "llamacpp-2023-05-cublas-offloading-0-layers.log": Reading(LLAMA, "CPU", "CUDA", (0, None)),
    # A100 found, then abort: built for no arch <= 750 (a crash, not a CPU run)
    "llamacpp-2025-08-not-compiled-any-cuda-arch-le-750-abort.log": Reading(
        LLAMA, "CUDA", "CUDA", failed="not compiled with any CUDA arch <= 750",
        found=("CUDA0",),
    ),
    # "E" level prefix: libggml-cuda.so has no ggml_backend_init (CPU lib too: not a GPU fact)
    "llamacpp-2026-E-prefix-load-backend-cuda-failed.log": Reading(
        LLAMA, "CPU", "CUDA", failed="ggml_backend_init in llama.cpp/build/libggml-cuda.so"
    ),
    # default -lv 3 after b9181: says its verbosity and nothing of devices or layers
    "llamacpp-2026-default-verbosity3-no-load-tensors-lines-mtp.log": Reading(
        LLAMA, verbosity=3, known=False
    ),
    # proposed --list-devices JSON: CUDA0 is a GPU
    "llamacpp-2026-list-devices-json-format.log": Reading(
        LLAMA, "CUDA", "CUDA", found=("CUDA0",)
    ),
    # M2 Pro: 66/66, MTL0_Mapped weights, CPU_Mapped for the rest
    "llamacpp-2026-metal-full-offload-66of66-mtl0-mapped.log": Reading(
        LLAMA, "Metal", "Metal", (66, 66), devices=("MTL0",),
        gpu_bytes=mib(14803.73), cpu_bytes=mib(644.14),
    ),
    # tensor-parallel Meta() device: layers 0..4 off the CPU, backend not named
    "llamacpp-2026-tp-meta-device-debug-lines.log": Reading(LLAMA, layers=(5, 5)),
    # build 1971 at -ngl 0: 0/33, all weights in the CPU buffer
    "llamacpp-all-on-cpu-ngl0-build1971.log": Reading(
        LLAMA, "CPU", layers=(0, 33), gpu_bytes=0, cpu_bytes=mib(11712.97)
    ),
    # build 1069, ROCm named through ggml_init_cublas; 32 repeating + non-repeating offloaded
    "llamacpp-b1069-rocm-init-cublas-found-rocm-device-2023-08.log": Reading(
        LLAMA, "ROCm", "ROCm", (33, None), found=("ROCm0",)
    ),
    # b10906: only "loading model tensors", which says nothing yet
    "llamacpp-b10906-load-tensors-line-visible-2026-09.log": Reading(known=False),
    # b2406: a CUDA build that found no device, CUDA disabled
    "llamacpp-b2406-init-cublas-no-cuda-devices-disabled-2024-03.log": Reading(
        LLAMA, "CPU", "CUDA", failed="no CUDA devices found, CUDA will be disabled"
    ),
    # b2416 SYCL table: one level_zero GPU, an Arc A770
    "llamacpp-b2416-sycl-found-1-device-table-2024-03.log": Reading(
        LLAMA, "SYCL", "SYCL", found=("SYCL0",)
    ),
    # b3618 MSVC CPU build: not compiled with GPU offload support
    "llamacpp-b3618-not-compiled-gpu-offload-windows-2024-08.log": Reading(
        LLAMA, "CPU", failed="not compiled with GPU offload support"
    ),
    # b4199 CUDA build whose CUDA init failed, then the misleading warning: the cause is kept
    "llamacpp-b4199-cuda-init-failed-unknown-error-not-compiled-warning.log": Reading(
        LLAMA, "CPU", "CUDA", failed="failed to initialize CUDA: unknown error"
    ),
    # b4568: RTX 4090 found and used, then the model file is missing
    "llamacpp-b4568-using-device-cuda0-model-missing.log": Reading(
        LLAMA, "CUDA", "CUDA", devices=("CUDA0",), found=("CUDA0",)
    ),
    # b4603 backend-DL build: libggml-cuda.so unusable
    "llamacpp-b4603-load-backend-cuda-failed-find-init.log": Reading(
        LLAMA, "CPU", "CUDA", failed="ggml_backend_init in ./libggml-cuda.so"
    ),
    # b4833: two GPUs found, --device CUDA0 used (its layer lines are not in the excerpt)
    "llamacpp-b4833-cuda-using-device-but-layers-on-cpu-ggml-cpu-off-2025-03.log": Reading(
        LLAMA, "CUDA", "CUDA", devices=("CUDA0",), found=("CUDA0", "CUDA1")
    ),
    # b4895 CI on a V100, timestamped: 13/13, CUDA0 and CPU_Mapped weights
    "llamacpp-b4895-ggml-ci-cuda-v100-full-offload-timestamped-2025-03.log": Reading(
        LLAMA, "CUDA", "CUDA", (13, 13), devices=("CUDA0",), found=("CUDA0",),
        gpu_bytes=mib(40.73), cpu_bytes=mib(23.11),
    ),
    # b5192 -ot: 95/95 "offloaded" yet 194 GiB of experts in CPU (and CUDA_Host) buffers
    "llamacpp-b5192-cuda-95of95-but-experts-on-cpu-ot.log": Reading(
        LLAMA, "CUDA", "CUDA", (95, 95), devices=("CUDA0",), found=("CUDA0",),
        gpu_bytes=mib(39273.87), cpu_bytes=mib(630.59, 198451.27),
    ),
    # b5897: no CPU backend, the model does not load; nothing about a GPU
    "llamacpp-b5897-no-cpu-backend-found.log": Reading(known=False),
    # b5954 Vulkan on Strix Halo (uma: 1)
    "llamacpp-b5954-vulkan-device-strix-halo-uma-2025-07.log": Reading(
        LLAMA, "Vulkan", "Vulkan", found=("Vulkan0",)
    ),
    # b6448 CPU-only build with -ngl 99: no usable GPU found
    "llamacpp-b6448-no-usable-gpu-cpu-only-build-server-2025-09.log": Reading(
        LLAMA, "CPU", failed="no usable GPU found"
    ),
    # b7166 --list-devices: CUDA0 listed (free > total, a UMA misreading)
    "llamacpp-b7166-list-devices-cuda0-uma-2025-11.log": Reading(
        LLAMA, "CUDA", "CUDA", found=("CUDA0",)
    ),
    # build 853, ggmlv3: the older --n-gpu-layers wording, markdown bold around it
    "llamacpp-b853-not-compiled-n-gpu-layers-ggmlv3-2023-07.log": Reading(
        LLAMA, "CPU", failed="not compiled with GPU offload support, --n-gpu-layers"
    ),
    # b9570 at -lv 3: device_info lists Vulkan0 (and the CPU, which is not a GPU)
    "llamacpp-b9570-vulkan-device-info-verbosity3-2026-06.log": Reading(
        LLAMA, "Vulkan", "Vulkan", found=("Vulkan0",), verbosity=3
    ),
    # b9592 --list-devices with an empty list: line by line, an empty list says nothing
    "llamacpp-b9592-vulkan-list-devices-empty-2026-06.log": Reading(known=False),
    # cortex: CUDA init failed, yet "offloaded 13/33"; only a CPU weight buffer
    "llamacpp-cortex-cuda-init-failed-offloaded-13of33-but-cpu-2024-10.log": Reading(
        LLAMA, "CPU", "CUDA", (13, 33), failed="no CUDA-capable device is detected",
        gpu_bytes=0, cpu_bytes=mib(8137.64),
    ),
    # llava, two 3090s found, main device 0, but 0/35 offloaded
    "llamacpp-cublas-zero-offload-llava-2023-10.log": Reading(
        LLAMA, "CPU", "CUDA", (0, 35), devices=("CUDA0",), found=("CUDA0", "CUDA1")
    ),
    # H800 found, 0/33 offloaded, all weights in the CPU buffer
    "llamacpp-cuda-found-zero-offload-2024-04.log": Reading(
        LLAMA, "CPU", "CUDA", (0, 33), found=("CUDA0",), gpu_bytes=0, cpu_bytes=mib(5459.93)
    ),
    # two runs pasted together: the earliest Vulkan line, then a ROCm build's device
    "llamacpp-early-vulkan-and-rocm-device-lines-2024-01.log": Reading(
        LLAMA, "Vulkan", "Vulkan", found=("ROCm0",)
    ),
    # easy-llama: layers 28..32 on the CPU, 0/33, CPU_Mapped weights
    "llamacpp-easyllama-all-cpu-0of33-cpu-mapped-2025.log": Reading(
        LLAMA, "CPU", layers=(0, 33), gpu_bytes=0, cpu_bytes=mib(5459.93)
    ),
    # a fork at default -lv 3; --fit aborting its own fitting is not a GPU failure
    "llamacpp-fork-2026-default-verbosity3-fit-params-abort-windows.log": Reading(
        LLAMA, verbosity=3, known=False
    ),
    # CI on a Mac: 13/13 on Metal_Mapped
    "llamacpp-ggml-ci-metal-full-offload-metal-mapped-timestamped-2025.log": Reading(
        LLAMA, "Metal", "Metal", (13, 13), devices=("Metal",),
        gpu_bytes=mib(40.73), cpu_bytes=mib(23.11),
    ),
    # ggmlv3 cuBLAS, RTX 4090 found, 0/35 offloaded ("VRAM used" is scratch, not weights)
    "llamacpp-ggmlv3-cublas-zero-offload-2023-06.log": Reading(
        LLAMA, "CPU", "CUDA", (0, 35), found=("CUDA0",)
    ),
    # indented by the reporter: layers 0..3 assigned to the CPU
    "llamacpp-indented-layers-assigned-cpu-is-swa-2025.log": Reading(LLAMA, "CPU", layers=(0, 4)),
    # docker-compose prefix: layer 0 assigned to the CPU
    "llamacpp-layers-assigned-cpu-is-swa-docker-2025.log": Reading(LLAMA, "CPU", layers=(0, 1)),
    # a library user at verbose level: CUDA registered, CUDA0 used, KV on CUDA0
    "llamacpp-libapi-cuda-register-backend-verbose.log": Reading(
        LLAMA, "CUDA", "CUDA", devices=("CUDA0",), found=("CUDA0",)
    ),
    # --list-devices with two CUDA GPUs and two RPC servers (remote: not this node's GPUs)
    "llamacpp-list-devices-cuda-plus-rpc-anonymized-2025-01.log": Reading(
        LLAMA, "CUDA", "CUDA", found=("CUDA0", "CUDA1")
    ),
    # llava-cli: "not compiled with GPU offload support" though Vulkan0 is found
    "llamacpp-llava-vulkan-not-compiled-warning-2024-09.log": Reading(
        LLAMA, "CPU", "Vulkan", failed="not compiled with GPU offload support",
        found=("Vulkan0",),
    ),
    # the CPU backend library failed to load: nothing about a GPU
    "llamacpp-load-backend-cpu-failed-register-backend-2025-06.log": Reading(known=False),
    # a recent llama-server: no usable GPU found
    "llamacpp-no-usable-gpu-found-warning-2026.log": Reading(
        LLAMA, "CPU", failed="no usable GPU found"
    ),
    # llama-cpp-python 2023: CUDA, 1/35 offloaded
    "llamacpp-python-cuda-partial-offload-1of35-2023-09.log": Reading(
        LLAMA, "CUDA", "CUDA", (1, 35)
    ),
    # llama-cpp-python in docker, a wheel without CUDA: layers 0..11 on the CPU
    "llamacpp-python-docker-layers-assigned-to-cpu-2025.log": Reading(
        LLAMA, "CPU", layers=(0, 12)
    ),
    # excerpt from layer 3: on the CPU, but the count cannot start mid-way
    "llamacpp-python-layers-assigned-cpu-is-swa-2025.log": Reading(LLAMA, "CPU"),
    # ramalama: layers on CUDA0, then 29/29 with CUDA0 and CPU_Mapped weights
    "llamacpp-ramalama-layer-assigned-cuda0-full-offload-29of29-2025-02.log": Reading(
        LLAMA, "CUDA", "CUDA", (29, 29), devices=("CUDA0",),
        gpu_bytes=mib(1918.35), cpu_bytes=mib(308.23),
    ),
    # HIP build: two ROCm devices, ROCm in system_info
    "llamacpp-rocm-2-devices-found-2026.log": Reading(
        LLAMA, "ROCm", "ROCm", found=("ROCm0", "ROCm1")
    ),
    # b4589 in docker: one 3090 found, ends before the load
    "llamacpp-server-b4589-cuda-docker-llamaswap-2025-01.log": Reading(
        LLAMA, "CUDA", "CUDA", found=("CUDA0",)
    ),
    # b4393 MSVC: one 4050 found
    "llamacpp-server-cuda-init-build4393-2024-12.log": Reading(
        LLAMA, "CUDA", "CUDA", found=("CUDA0",)
    ),
    # build 0: 4070 SUPER found and used
    "llamacpp-server-cuda-using-device-build0-2025-07.log": Reading(
        LLAMA, "CUDA", "CUDA", devices=("CUDA0",), found=("CUDA0",)
    ),
    # SYCL table: two GPU rows (level_zero, opencl), a CPU and an FPGA emulator that are not
    "llamacpp-sycl-4-devices-incl-opencl-cpu-2024-03.log": Reading(
        LLAMA, "SYCL", "SYCL", found=("SYCL0", "SYCL1")
    ),
    # FreeBSD Vulkan: RTX 2060 found, 0/36 offloaded (no -ngl)
    "llamacpp-vulkan-found-but-0of36-offloaded-freebsd-2025-01.log": Reading(
        LLAMA, "CPU", "Vulkan", (0, 36), found=("Vulkan0",)
    ),
    # Vulkan docker image: the backend loads, but no devices
    "llamacpp-vulkan-no-devices-found-docker-2025-12.log": Reading(
        LLAMA, "CPU", "Vulkan", failed="ggml_vulkan: No devices found"
    ),
    # llamafile: 31/31 on a 4080
    "llamafile-cuda-full-offload-31of31.log": Reading(
        LLAMA, "CUDA", "CUDA", (31, 31), devices=("CUDA0",), found=("CUDA0",),
        gpu_bytes=mib(7317.71), cpu_bytes=mib(297.00),
    ),
    # llama.node: layers 0..4 on Vulkan0
    "llamanode-layers-assigned-vulkan0-is-swa.log": Reading(
        LLAMA, "Vulkan", "Vulkan", (5, 5), devices=("Vulkan0",)
    ),
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
    # sd.cpp, pasted as one line: Vulkan finds no devices, the CPU backend runs
    "sdcpp-vulkan-no-devices-cpu-fallback-2026-07.log": Reading(
        LLAMA, "CPU", "Vulkan", failed="ggml_vulkan: No devices found"
    ),
    # vLLM CPU build: the CUDA platform check fails for want of NVML
    "vllm-0.11-cpu-build-cuda-platform-not-available-debug-2025-11.log": Reading(
        VLLM, "CPU", "CUDA", failed="NVML Shared Library Not Found"
    ),
    # TorchServe-wrapped vLLM 0.6: device_config=cuda
    "vllm-0.6-engine-config-device-config-cuda-2024-10.log": Reading(VLLM, "CUDA", "CUDA"),
    # vLLM 0.7.4 at DEBUG: CUDA confirmed and detected
    "vllm-0.7.4-platform-detection-debug-cuda-2025-03.log": Reading(VLLM, "CUDA", "CUDA"),
    # vLLM 0.8.5 on a P40: no platform detected (it stops; not a CPU run)
    "vllm-0.8.5-no-platform-detected-unspecified-2025-06.log": Reading(
        VLLM, failed="No platform detected"
    ),
    # V0 engine on device_config=cuda:1
    "vllm-v0-device-config-cuda1-2025-02.log": Reading(
        VLLM, "CUDA", "CUDA", devices=("cuda:1",)
    ),
    # V0 memory profiling: 12.55 GiB of weights, KV blocks on cuda (CPU blocks are swap)
    "vllm-v0-memory-profiling-cuda-blocks-cpu-blocks-2025-03.log": Reading(
        VLLM, "CUDA", "CUDA", gpu_bytes=gib(12.55)
    ),
    # TP workers each loading 1.5874 GiB of weights; no backend named
    "vllm-v0-tp-workers-loading-weights-took-2024-08.log": Reading(
        VLLM, gpu_bytes=7 * gib(1.5874), known=False
    ),
    # V1 worker TP0: 12.66 GiB of weights loaded; no backend named
    "vllm-v1-worker-tp0-model-loading-took-gib-2026-05.log": Reading(
        VLLM, gpu_bytes=gib(12.66), known=False
    ),
}  # fmt: skip


@needs_corpus
def test_every_corpus_log_has_an_expected_reading() -> None:
    on_disk = {p.name for p in LOGS.glob("*.log")}
    assert on_disk == set(CORPUS_READINGS), "a log without expectations, or one that is gone"


@needs_corpus
@pytest.mark.parametrize(
    "path",
    [p for p in corpus_files("engine-logs") if p.suffix == ".log"],
    ids=lambda p: p.name,
)
def test_corpus_log_reads_as_a_person_reads_it(path: Path) -> None:
    want = CORPUS_READINGS[path.name]
    ev = read_text(path.read_text(encoding="utf-8"))
    assert reading(ev, want.failed) == want
    assert len(ev.lines) <= MAX_LINES
    assert all(len(line) <= MAX_LINE_CHARS for line in ev.lines)
    if ev.gpu_failed is not None:
        assert ev.gpu_failed in ev.lines  # the failure line is part of the evidence


@needs_corpus
@pytest.mark.parametrize(
    "name", [n for n, r in CORPUS_READINGS.items() if r == Reading(known=False)]
)
def test_corpus_log_with_nothing_relevant_is_a_fresh_evidence(name: str) -> None:
    assert read_text((LOGS / name).read_text(encoding="utf-8")) == EngineEvidence()


# --- the project's own fixtures ---

OWN_READINGS: dict[str, Reading] = {
    "llamacpp-cuda-full-offload.log": Reading(
        LLAMA, "CUDA", "CUDA", (33, 33), devices=("CUDA0", "CUDA1"),
        found=("CUDA0", "CUDA1"), gpu_bytes=mib(3872.00, 3627.50), cpu_bytes=mib(532.31),
    ),
    "llamacpp-zero-offload-cuda-compute-buffer.log": Reading(
        LLAMA, "CPU", "CUDA", (0, 29), devices=("CUDA0",), found=("CUDA0",),
        gpu_bytes=0, cpu_bytes=mib(4403.49),
    ),
    "llamacpp-cuda-backend-failed-to-load.log": Reading(
        LLAMA, "CPU", "CUDA", failed="libggml-cuda.so: libcublas.so.12: cannot open"
    ),
    "ollama-library-cpu-fallback.log": Reading(
        OLLAMA, "CPU", "CUDA", (0, 33), failed="cuda driver library init failure: 999"
    ),
    "llamacpp-partial-offload-lv4.log": Reading(
        LLAMA, "CUDA", "CUDA", (8, 13), devices=("CUDA0",), found=("CUDA0",),
        gpu_bytes=mib(412.50), cpu_bytes=mib(391.20), verbosity=4,
    ),
    "llamacpp-ot-experts-on-cpu.log": Reading(
        LLAMA, "CUDA", "CUDA", (49, 49), devices=("CUDA0",),
        gpu_bytes=mib(11263.45), cpu_bytes=mib(42105.77), overrides=9,
    ),
    "vllm-rocm-platform-detection.log": Reading(VLLM, "ROCm", "ROCm"),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(OWN_READINGS))
def test_own_fixture_reads_as_made(name: str) -> None:
    want = OWN_READINGS[name]
    ev = read_text((OWN / name).read_text(encoding="utf-8"))
    assert reading(ev, want.failed) == want


def test_every_own_fixture_has_a_reading_and_a_line_in_the_readme() -> None:
    logs = {p.name for p in OWN.glob("*.log")}
    assert logs == set(OWN_READINGS)
    readme = (OWN / "README.md").read_text()
    assert all(f"`{name}`" in readme for name in logs)


def test_zero_layers_outrank_a_cuda_compute_buffer() -> None:
    ev = read_text((OWN / "llamacpp-zero-offload-cuda-compute-buffer.log").read_text())
    assert ev.backend == "CPU"
    assert ev.layers_offloaded == 0
    assert ev.gpu_failed is None  # its CUDA backend works; it was just given no layers


def test_partial_offload_reads_layer_by_layer_as_it_streams_in() -> None:
    ev = EngineEvidence()
    seen = []
    for line in (OWN / "llamacpp-partial-offload-lv4.log").read_text().splitlines():
        read_line(ev, line)
        if "assigned to device" in line:
            seen.append((ev.backend, ev.layers_offloaded, ev.layers_total))
    assert seen[4] == ("CPU", 0, 5)  # layers 0..4 on the CPU: nothing on a GPU yet
    assert seen[5] == ("CUDA", 1, 6)
    assert seen[-1] == ("CUDA", 8, 13)
    assert sum("assigned to device" in line for line in ev.lines) == 2  # one per run


# --- single lines ---


@pytest.mark.parametrize(
    "line",
    [
        "",
        "   ",
        "llama_context: n_ctx_per_seq = 32768",
        '[GIN] 2025/07/01 - 18:00:09 | 200 |      50.263µs | 127.0.0.1 | HEAD     "/"',
        "srv  update_slots: all slots are idle",
        "load_tensors: loading model tensors, this can take a while... (mmap = true)",
        "load_backend: loaded CPU backend from /usr/lib/ollama/libggml-cpu-haswell.so",
        "register_backend: registered backend CPU (1 devices)",
        'msg="offloading output layer to CPU"',
        "DEBUG 03-13 09:00:22 [__init__.py:188] Neuron platform is not available because: x",
    ],
)
def test_a_line_that_says_nothing_leaves_the_evidence_unchanged(line: str) -> None:
    ev = EngineEvidence()
    read_line(ev, line)
    assert ev == EngineEvidence()
    full = read_text((OWN / "llamacpp-cuda-full-offload.log").read_text())
    before = read_text((OWN / "llamacpp-cuda-full-offload.log").read_text())
    read_line(full, line)
    if "loading model tensors" not in line:  # a new load starts afresh, by design
        assert full == before


def test_missing_lines_are_unknown_never_cpu() -> None:
    ev = read_text("main: loading model\nsrv    load_model: loading model 'x.gguf'\n")
    assert not ev.known
    assert ev.backend is None


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


def test_colour_codes_timestamps_and_trailing_space_are_stripped() -> None:
    ev = EngineEvidence()
    read_line(ev, "\x1b[32m0.00.305.668 I load_tensors: offloaded 13/13 layers to GPU\x1b[0m   ")
    assert ev.lines == ["load_tensors: offloaded 13/13 layers to GPU"]
    read_line(ev, "2025-03-05 08:58:54 ggml_cuda_init: failed to initialize CUDA: unknown error")
    assert ev.gpu_failed == "ggml_cuda_init: failed to initialize CUDA: unknown error"


def test_finding_lines_are_cut_and_only_the_newest_are_kept() -> None:
    ev = EngineEvidence()
    for n in range(1, 40):
        read_line(ev, f"load_tensors: offloaded {n}/40 layers to GPU " + "x" * 1000)
    assert len(ev.lines) == MAX_LINES
    assert all(len(line) == MAX_LINE_CHARS for line in ev.lines)
    assert ev.lines[-1].startswith("load_tensors: offloaded 39/40 layers")
    assert ev.layers_offloaded == 39


def test_cuda_init_failure_outranks_a_later_layer_count() -> None:
    ev = read_text(
        "ggml_cuda_init: failed to initialize CUDA: no CUDA-capable device is detected\n"
        "llm_load_tensors: offloaded 33/33 layers to GPU\n"
        "llm_load_tensors:        CPU buffer size =  8137.64 MiB\n"
    )
    assert ev.gpu_failed is not None and "no CUDA-capable device" in ev.gpu_failed
    assert ev.backend == "CPU"
    assert (ev.layers_offloaded, ev.gpu_weight_bytes) == (33, 0)


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


def test_a_cpu_only_build_is_not_withdrawn_by_a_later_device_line() -> None:
    ev = read_text(
        "warning: not compiled with GPU offload support, --gpu-layers option will be ignored\n"
        "ggml_vulkan: Found 1 Vulkan devices:\n"
        "ggml_vulkan: 0 = NVIDIA GeForce RTX 4060 (NVIDIA) | uma: 0 | fp16: 1 | warp size: 32\n"
    )
    assert ev.gpu_failed is not None
    assert ev.backend == "CPU"


def test_vllm_checking_rocm_after_cuda_was_confirmed_is_not_a_failure() -> None:
    ev = read_text(
        "DEBUG 03-13 09:00:22 [__init__.py:73] Confirmed CUDA platform is available.\n"
        "DEBUG 03-13 09:00:22 [__init__.py:95] ROCm platform is not available because: "
        "No module named 'amdsmi'\n"
        "INFO 03-13 09:00:22 [__init__.py:256] Automatically detected platform cuda.\n"
    )
    assert (ev.engine, ev.backend, ev.gpu_failed) == ("vllm", "CUDA", None)


def test_vllm_cpu_platform_is_the_cpu() -> None:
    ev = read_text("INFO 11-12 10:58:45 [__init__.py:224] Automatically detected platform cpu.\n")
    assert (ev.engine, ev.backend) == ("vllm", "CPU")


def test_llvmpipe_is_not_a_gpu() -> None:
    ev = read_text(
        "ggml_vulkan: 0 = llvmpipe (LLVM 17.0.6, 256 bits) (llvmpipe) | uma: 0 | fp16: 1\n"
    )
    assert not ev.known


def test_ollama_cpu_runner_computes_on_the_cpu() -> None:
    ev = read_text(
        'time=2024-07-05T02:37:04Z level=INFO source=server.go:368 msg="starting llama server" '
        'cmd="/tmp/ollama1/runners/cpu_avx2/ollama_llama_server --model /m --port 38971"\n'
    )
    assert (ev.engine, ev.backend) == ("ollama", "CPU")


def test_read_text_starts_from_fresh_evidence() -> None:
    first = read_text("load_tensors: offloaded 1/2 layers to GPU\n")
    second = read_text("load_tensors: offloaded 2/2 layers to GPU\n")
    assert (first.layers_offloaded, second.layers_offloaded) == (1, 2)
    assert first.lines is not second.lines


# --- never raises, whatever the text ---


def check_invariants(ev: EngineEvidence) -> None:
    if ev.layers_offloaded is not None:
        assert ev.layers_offloaded >= 0
        if ev.layers_total is not None:
            assert ev.layers_offloaded <= ev.layers_total
    assert ev.layers_total is None or ev.layers_total >= 0
    assert ev.gpu_weight_bytes is None or ev.gpu_weight_bytes >= 0
    assert ev.cpu_weight_bytes is None or ev.cpu_weight_bytes >= 0
    assert ev.backend in {None, "CUDA", "ROCm", "Vulkan", "Metal", "SYCL", "CPU"}
    assert len(ev.lines) <= MAX_LINES
    assert all(len(line) <= MAX_LINE_CHARS for line in ev.lines)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(max_size=300), max_size=30))
def test_read_line_never_raises_on_arbitrary_text(lines: list[str]) -> None:
    ev = EngineEvidence()
    for line in lines:
        read_line(ev, line)
    check_invariants(ev)


PREFIXES = [
    "", "  ", "> ", "**", "│ ", "E ", "0.00.305.668 I ", "[47161] 0.01.057.524 D ",
    "2024-10-11T12:45:53.660Z [CORTEX]::Error: ", "llama-1  | ",
    "Apr 18 19:28:59 quorra ollama[1170]: ", "2025-03-05 08:58:54 ",
    "time=2025-02-07T09:38:48.650Z level=INFO source=types.go:131 ",
    "(Worker_TP0 pid=34322) INFO 05-06 20:59:59 [gpu_model_runner.py:4879] ",
    "INFO 03-13 09:00:22 [__init__.py:256] ", "\x1b[31m",
]  # fmt: skip
TEMPLATES = [
    "load_tensors: offloaded {a}/{b} layers to GPU",
    "llm_load_tensors: offloading {a} repeating layers to GPU",
    "load_tensors: offloading output layer to GPU",
    "llama_model_load_internal: [cublas] offloading {a} layers to GPU",
    "load_tensors: layer {a} assigned to device {dev}, is_swa = 0",
    "load_tensors: {dev} model buffer size = {a}.{b} MiB",
    "llm_load_tensors: {dev} buffer size = {a} MiB",
    "llama_context: {dev} compute buffer size = {a}.00 MiB",
    "init: {dev} KV buffer size = {a}.00 MiB",
    "ggml_cuda_init: found {a} CUDA devices:",
    "ggml_cuda_init: found {a} ROCm devices (Total VRAM: {b} MiB):",
    "  Device {a}: NVIDIA GeForce RTX 4090, compute capability 8.9, VMM: yes",
    "  Device {a}: AMD Radeon RX 7900 XT, gfx1100 (0x1100), VMM: no",
    "llama_model_load_from_file_impl: using device {dev} (GPU) - {a} MiB free",
    "  {dev}: NVIDIA RTX ({a} MiB, {b} MiB free)",
    "ggml_vulkan: {a} = AMD Radeon (RADV) | uma: 0",
    "| {a}|[level_zero:gpu:0]|  Intel(R) Arc(TM) A770 Graphics|  1.3|  512|  1024|  32|  {b}|",
    "ggml_cuda_init: failed to initialize CUDA: unknown error",
    "warning: no usable GPU found, --gpu-layers option will be ignored",
    "load_backend: failed to load /x/libggml-{lib}.so",
    "load_backend: loaded {lib} backend from /x",
    'msg="inference compute" id={a} library={lib} name={dev} total="{a} GiB"',
    'msg="offload to {lib}" layers.requested=-1 layers.model={b} layers.offload={a}',
    "msg=offload library={lib} layers.model={b} layers.offload={a} layers.split=",
    'msg="starting llama server" cmd="/x/runners/{lib}/ollama_llama_server --n-gpu-layers {a}"',
    'msg=load request="{{Operation:fit GPULayers:{a}[ID:GPU-1 Layers:{b}(0..{a})]}}"',
    'msg="model weights" buffer={dev} size="{a}.{b} GiB"',
    'msg="new model will fit in available VRAM in single GPU, loading" gpu={a}',
    'msg="Dynamic LLM libraries" runners=[{lib}]',
    'msg="no compatible GPUs were discovered"',
    "Automatically detected platform {lib}.",
    "CUDA platform is not available because: x",
    "Confirmed ROCm platform is available.",
    "Initializing an LLM engine with config: device_config={lib}:{a}, x",
    "Model loading took {a}.{b} GiB memory and 3.1 seconds",
    "model weights take {a}.{b}GiB; non_torch_memory takes 0.16GiB",
    "log_info: verbosity = {a} (adjust with the `-lv N` CLI arg)",
]  # fmt: skip
DEVICES = ["CPU", "CPU_Mapped", "CUDA0", "CUDA_Host", "ROCm1", "Vulkan0", "MTL0_Mapped", "Meta()"]
LIBS = ["cuda", "CUDA", "rocm", "vulkan", "metal", "cpu", "cpu_avx2", "hip", "sycl", "x"]
NUMBERS = st.one_of(st.integers(0, 200), st.integers(-5, 10**30), st.just(99999))


@st.composite
def engine_lines(draw: st.DrawFn) -> str:
    template = draw(st.sampled_from(TEMPLATES))
    line = template.format(
        a=draw(NUMBERS), b=draw(NUMBERS), dev=draw(st.sampled_from(DEVICES)),
        lib=draw(st.sampled_from(LIBS)),
    )  # fmt: skip
    cut = draw(st.integers(0, len(line)))
    return draw(st.sampled_from(PREFIXES)) + (line if draw(st.booleans()) else line[:cut])


@settings(max_examples=500, deadline=None)
@given(st.lists(engine_lines(), max_size=40))
def test_read_line_never_raises_on_lines_built_from_real_fragments(lines: list[str]) -> None:
    ev = EngineEvidence()
    for line in lines:
        read_line(ev, line)
        check_invariants(ev)
