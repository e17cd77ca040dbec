"""vLLM: every real log read as a person reads it, from 0.5's engine config to V1's
workers, and the platform checks it makes in turn."""

from __future__ import annotations

import pytest

from placewatch.worker.engines.evidence.read import read_text

from tests.conftest import needs_corpus
from tests.unit.engines.readings import LOGS, OWN, VLLM, Reading, gib, read_log, reading

CORPUS_READINGS: dict[str, Reading] = {
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
@pytest.mark.parametrize("name", sorted(CORPUS_READINGS))
def test_vllm_log_reads_as_a_person_reads_it(name: str) -> None:
    want = CORPUS_READINGS[name]
    assert reading(read_log(LOGS / name), want.failed) == want


OWN_READINGS: dict[str, Reading] = {
    "vllm-rocm-platform-detection.log": Reading(VLLM, "ROCm", "ROCm"),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(OWN_READINGS))
def test_own_vllm_fixture_reads_as_made(name: str) -> None:
    want = OWN_READINGS[name]
    assert reading(read_log(OWN / name), want.failed) == want


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


def test_vllm_sums_the_weights_each_tensor_parallel_worker_loads() -> None:
    ev = read_text(
        "(VllmWorkerProcess pid=1222519) INFO 08-17 23:29:21 model_runner.py:266] "
        "Loading model weights took 1.5874 GB\n"
        "(VllmWorkerProcess pid=1222523) INFO 08-17 23:29:22 model_runner.py:266] "
        "Loading model weights took 1.5874 GB\n"
    )
    assert (ev.engine, ev.gpu_weight_bytes) == ("vllm", 2 * gib(1.5874))
    assert not ev.known  # weights alone do not name the platform


TODAY = OWN / "vllm"
"""vLLM 0.34.0's default log, synthesized from its format strings (vllm/README.md there)."""


def test_vllm_0_34_on_cuda_reads_cuda_without_its_platform_line() -> None:
    ev = read_log(TODAY / "0.34-cuda-default.log")
    assert reading(ev, None) == Reading(VLLM, "CUDA", "CUDA", gpu_bytes=gib(15.27))
    assert ev.lines[0].startswith("Initializing a V1 LLM engine (v0.34.0) with config: ")
    assert ev.lines[1:] == (
        "Model loading took 15.27 GiB memory and 5.104932 seconds",
        "Available KV cache memory: 53.43 GiB",
        "GPU KV cache size: 389,056 tokens, Maximum concurrency for 40,960 tokens per request: "
        "9.50x",
    )


def test_vllm_0_34_on_the_cpu_reads_cpu_and_its_weights_in_host_memory() -> None:
    ev = read_log(TODAY / "0.34-cpu-default.log")
    assert reading(ev, None) == Reading(VLLM, "CPU", cpu_bytes=gib(1.12))
    assert ev.lines[-1].startswith("CPU KV cache size: 245,056 tokens")


@pytest.mark.parametrize(
    ("line", "backend"),
    [
        ("(EngineCore_DP0 pid=7) INFO 08-22 10:15:44 [kv_cache_utils.py:1168] GPU KV cache "
         "size: 389,056 tokens, Maximum concurrency for 40,960 tokens per request: 9.50x", "CUDA"),
        ("(EngineCore pid=7) INFO 08-22 10:15:44 [kv_cache_utils.py:1168] CPU KV cache size: "
         "5 tokens, Maximum concurrency for 40 tokens per request: 0.12x", "CPU"),
        ("(Worker_TP1 pid=9) INFO 08-22 10:15:44 [gpu_worker.py:795] Available KV cache "
         "memory: 53.43 GiB", "CUDA"),
        ("(Worker pid=9) INFO 08-22 12:40:31 [cpu_worker.py:255] Explicitly set (4.00/62.70) "
         "GiB for KV cache on node 0.", "CPU"),
        ("(EngineCore pid=7) INFO 08-22 10:15:17 [core.py:153] Initializing a V1 LLM engine "
         "(v0.34.0) with config: kv_cache_dtype=auto, device_config=xpu, seed=0", "SYCL"),
    ],
)  # fmt: skip
def test_vllm_today_says_its_device_where_its_kv_cache_goes(line: str, backend: str) -> None:
    ev = read_text(line + "\n")
    assert (ev.engine, ev.backend) == ("vllm", backend)


def test_vllm_0_34_logo_starts_a_life() -> None:
    cpu = (TODAY / "0.34-cpu-default.log").read_text()
    cuda = (TODAY / "0.34-cuda-default.log").read_text()
    assert read_text(cpu + cuda) == read_text(cuda)
    assert read_text(cuda + cpu) == read_text(cpu)


def test_vllm_without_its_logo_starts_a_life_at_its_server_version_line() -> None:
    cpu = (TODAY / "0.34-cpu-default.log").read_text()
    restarted = (
        "(APIServer pid=4000) INFO 08-22 13:00:00 [startup.py:38] vLLM server version 0.34.0, "
        "serving model Qwen/Qwen3-8B\n"
    )
    ev = read_text(cpu + restarted)
    assert (ev.engine, ev.backend, ev.lines) == (None, None, ())
