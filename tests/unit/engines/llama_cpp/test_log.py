"""llama.cpp, its forks and ggml: every real log read as a person reads it, and the lines
that say where the layers went as they stream in."""

from __future__ import annotations

import pytest

from placewatch.worker.engines.evidence.read import EvidenceReader, read_text
from placewatch.worker.engines.llama_cpp.log import listed_device

from tests.conftest import needs_corpus
from tests.unit.engines.readings import LLAMA, LOGS, OWN, Reading, mib, read_log, reading

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
        LLAMA, "CPU", failed="not compiled with GPU offload support", cpu_only=True
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
    # b6448 CPU-only build with -ngl 99: no usable GPU found, compiled without GPU support
    "llamacpp-b6448-no-usable-gpu-cpu-only-build-server-2025-09.log": Reading(
        LLAMA, "CPU", failed="no usable GPU found", cpu_only=True
    ),
    # b7166 --list-devices: CUDA0 listed (free > total, a UMA misreading)
    "llamacpp-b7166-list-devices-cuda0-uma-2025-11.log": Reading(
        LLAMA, "CUDA", "CUDA", found=("CUDA0",)
    ),
    # build 853, ggmlv3: the older --n-gpu-layers wording, markdown bold around it
    "llamacpp-b853-not-compiled-n-gpu-layers-ggmlv3-2023-07.log": Reading(
        LLAMA, "CPU", failed="not compiled with GPU offload support, --n-gpu-layers",
        cpu_only=True,
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
    # a recent llama-server: no usable GPU found, compiled without GPU support
    "llamacpp-no-usable-gpu-found-warning-2026.log": Reading(
        LLAMA, "CPU", failed="no usable GPU found", cpu_only=True
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
    # sd.cpp, pasted as one line: Vulkan finds no devices, the CPU backend runs
    "sdcpp-vulkan-no-devices-cpu-fallback-2026-07.log": Reading(
        LLAMA, "CPU", "Vulkan", failed="ggml_vulkan: No devices found"
    ),
}  # fmt: skip


@needs_corpus
@pytest.mark.parametrize("name", sorted(CORPUS_READINGS))
def test_llama_cpp_log_reads_as_a_person_reads_it(name: str) -> None:
    want = CORPUS_READINGS[name]
    assert reading(read_log(LOGS / name), want.failed) == want


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
    "llamacpp-partial-offload-lv4.log": Reading(
        LLAMA, "CUDA", "CUDA", (8, 13), devices=("CUDA0",), found=("CUDA0",),
        gpu_bytes=mib(412.50), cpu_bytes=mib(391.20), verbosity=4,
    ),
    # --fit's dry run first (0.00 MiB buffers), then the real load: the second replaces it
    "llamacpp-partial-offload-lv5.log": Reading(
        LLAMA, "CUDA", "CUDA", (8, 13), devices=("CUDA0",), found=("CUDA0",),
        gpu_bytes=mib(412.50), cpu_bytes=mib(391.20), verbosity=5,
    ),
    "llamacpp-ot-experts-on-cpu.log": Reading(
        LLAMA, "CUDA", "CUDA", (49, 49), devices=("CUDA0",),
        gpu_bytes=mib(11263.45), cpu_bytes=mib(42105.77), overrides=9,
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(OWN_READINGS))
def test_own_llama_cpp_fixture_reads_as_made(name: str) -> None:
    want = OWN_READINGS[name]
    assert reading(read_log(OWN / name), want.failed) == want


def test_zero_layers_outrank_a_cuda_compute_buffer() -> None:
    ev = read_log(OWN / "llamacpp-zero-offload-cuda-compute-buffer.log")
    assert ev.backend == "CPU"
    assert ev.layers_offloaded == 0
    assert ev.gpu_failed is None  # its CUDA backend works; it was just given no layers


def test_partial_offload_reads_layer_by_layer_as_it_streams_in() -> None:
    # b11434 at -lv 5 loads twice (--fit's dry run, then the model), each layer by layer
    reader = EvidenceReader()
    seen = []
    for line in (OWN / "llamacpp-partial-offload-lv5.log").read_text().splitlines():
        reader.read(line)
        if "assigned to device" in line:
            ev = reader.snapshot()
            seen.append((ev.backend, ev.layers_offloaded, ev.layers_total))
    assert len(seen) == 26
    for load in (seen[:13], seen[13:]):
        assert load[4] == ("CPU", 0, 5)  # layers 0..4 on the CPU: nothing on a GPU yet
        assert load[5] == ("CUDA", 1, 6)
        assert load[-1] == ("CUDA", 8, 13)
    lines = reader.snapshot().lines
    assert sum("assigned to device" in line for line in lines) == 4  # one per run, per load


def test_llvmpipe_is_not_a_gpu() -> None:
    ev = read_text(
        "ggml_vulkan: 0 = llvmpipe (LLVM 17.0.6, 256 bits) (llvmpipe) | uma: 0 | fp16: 1\n"
    )
    assert not ev.known


def test_verbosity_3_says_nothing_of_where_it_computes() -> None:
    ev = read_text("log_info: verbosity = 3 (adjust with the `-lv N` CLI arg)\n")
    assert (ev.engine, ev.verbosity, ev.known) == (LLAMA, 3, False)


def test_the_2023_cublas_wording_counts_layers_and_says_cuda() -> None:
    ev = read_text("llama_model_load_internal: [cublas] offloading 0 layers to GPU\n")
    assert (ev.layers_offloaded, ev.layers_total) == (0, None)
    assert (ev.backend, ev.gpu_backend) == ("CPU", "CUDA")


def test_sycl_lists_its_cpu_and_fpga_emulators_which_are_not_gpus() -> None:
    # b2416's table on an Arc A770 with an i5-9600K
    ev = read_text(
        "| 0|[level_zero:gpu:0]|               Intel(R) Arc(TM) A770 Graphics|       1.3|"
        "        512|    1024|     32|    16225243136|\n"
        "| 2|    [opencl:cpu:0]|     Intel(R) Core(TM) i5-9600K CPU @ 3.70GHz|       3.0|"
        "          6|    8192|     64|    16498610176|\n"
        "| 3|    [opencl:acc:0]|               Intel(R) FPGA Emulation Device|       1.2|"
        "          6|67108864|     64|    16498610176|\n"
    )
    assert ev.found_devices == ("SYCL0",)
    assert (ev.backend, ev.gpu_backend) == ("SYCL", "SYCL")


def test_a_crash_in_the_gpu_kernels_is_not_a_cpu_run() -> None:
    # the build has no kernels for this GPU's architecture (Ollama on a GTX 1060, 2025)
    ev = read_text("CUDA error: no kernel image is available for execution on the device\n")
    assert ev.gpu_failed == "CUDA error: no kernel image is available for execution on the device"
    assert ev.backend is None


@pytest.mark.parametrize(
    ("line", "listed"),
    [
        (
            "CUDA0: NVIDIA A100-SXM4-80GB (81050 MiB, 80536 MiB free)",
            ("CUDA0", "NVIDIA A100-SXM4-80GB"),
        ),
        ("  - Vulkan0 : AMD Radeon 8060S (RADV GFX1151)", None),  # not cleaned: indented
        (
            "- Vulkan0 : AMD Radeon 8060S (RADV GFX1151)",
            ("Vulkan0", "AMD Radeon 8060S (RADV GFX1151)"),
        ),
        ("Available devices:", None),
    ],
)
def test_a_listed_device_is_read_with_its_model_and_without_its_memory(
    line: str, listed: tuple[str, str] | None
) -> None:
    assert listed_device(line) == listed
