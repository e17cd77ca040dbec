"""Judging a llama.cpp build's `--list-devices` output (stderr merged in), with no process run.

Outputs are the fake builds' of tests/support/doctor.py, the backend-failed fixture of
tests/fixtures/engine-logs, and real captures of ../shared/corpus/engine-logs where present.
"""

from __future__ import annotations

from pathlib import Path

from placewatch.worker.doctor import Check, Engine
from placewatch.worker.doctor.engines import list_devices_check

from tests.conftest import CORPUS, FIXTURES, needs_corpus
from tests.support.doctor import CUDA_BACKEND_FAILED, TWO_CUDA_DEVICES

BUILD = Engine("/opt/llama.cpp/bin/llama-server")
LABEL = "llama-server (/opt/llama.cpp/bin/llama-server)"
CUDA_ADVICE = (
    "check the CUDA runtime (libcudart, libcublas) of the version it was built for, and a "
    "driver new enough for it (the CUDA Version nvidia-smi prints)"
)
NOT_BUILT_FOR_THEM = (
    "check that it was built for them (-DGGML_CUDA=ON, -DGGML_HIP=ON) and that its "
    "libggml-cuda.so (or libggml-hip.so) is beside it; run ldd on that library"
)


def merged(output: tuple[str, str]) -> str:
    """(stderr, stdout) as the pre-flight reads them: ggml's lines come first."""
    return output[0] + output[1]


def test_two_a100s_listed_are_ok_with_their_model() -> None:
    check = list_devices_check(BUILD, merged(TWO_CUDA_DEVICES), None, 2)
    assert check == Check(
        "engine pre-flight",
        "ok",
        f"{LABEL}: CUDA0 NVIDIA A100-SXM4-80GB, CUDA1 NVIDIA A100-SXM4-80GB",
    )


def test_the_shards_a_build_runs_are_named_after_it() -> None:
    build = Engine(BUILD.path, ("llama-8b-a", "llama-8b-b"))
    check = list_devices_check(build, merged(TWO_CUDA_DEVICES), None, 2)
    assert check.found.startswith(f"{LABEL} of llama-8b-a, llama-8b-b: CUDA0 ")


@needs_corpus
def test_an_rtx_5090_listed_after_ggmls_uma_line_is_ok() -> None:
    text = (
        CORPUS / "engine-logs" / "llamacpp-b7166-list-devices-cuda0-uma-2025-11.log"
    ).read_text()
    check = list_devices_check(BUILD, text, None, 1)
    assert check == Check("engine pre-flight", "ok", f"{LABEL}: CUDA0 NVIDIA GeForce RTX 5090")


@needs_corpus
def test_an_empty_vulkan_list_on_a_node_with_gpus_fails_asking_how_it_was_built() -> None:
    text = (
        CORPUS / "engine-logs" / "llamacpp-b9592-vulkan-list-devices-empty-2026-06.log"
    ).read_text()
    check = list_devices_check(BUILD, text, None, 2)
    assert check == Check(
        "engine pre-flight",
        "fail",
        f"{LABEL}: lists no GPU device, though the GPU tools see 2 GPUs",
        NOT_BUILT_FOR_THEM,
    )


def test_a_build_older_than_list_devices_is_skipped_with_what_to_read_instead() -> None:
    error = "llama-server exited 1: error: invalid argument: --list-devices"
    check = list_devices_check(BUILD, "error: invalid argument: --list-devices\n", error, 2)
    assert check == Check(
        "engine pre-flight",
        "skip",
        f"{LABEL}: this build has no --list-devices (an older llama.cpp)",
        "read the GPU lines it prints at start (ggml_cuda_init, offloaded N/M layers)",
    )


def test_a_build_that_timed_out_silent_fails_pointing_at_a_stuck_gpu() -> None:
    error = "llama-server timed out after 30 s and was killed"
    check = list_devices_check(BUILD, "", error, 8)
    assert check == Check(
        "engine pre-flight",
        "fail",
        f"{LABEL}: {error}",
        "check dmesg for Xid errors (a GPU stuck in the driver), or raise --timeout",
    )


def test_a_cuda_backend_that_did_not_load_fails_with_the_library_to_ldd() -> None:
    check = list_devices_check(BUILD, merged(CUDA_BACKEND_FAILED), None, 2)
    assert check == Check(
        "engine pre-flight",
        "fail",
        f"{LABEL}: its GPU backend failed: load_backend: failed to load "
        "/opt/llama.cpp/lib/libggml-cuda.so: libcublas.so.12: cannot open shared object file: "
        "No such file or directory",
        "run ldd /opt/llama.cpp/lib/libggml-cuda.so and install what it lists as not found; "
        f"{CUDA_ADVICE}",
    )


def test_a_failed_gpu_backend_on_a_node_without_gpus_is_skipped() -> None:
    text = (FIXTURES / "engine-logs" / "llamacpp-cuda-backend-failed-to-load.log").read_text()
    check = list_devices_check(BUILD, text, None, 0)
    assert check.outcome == "skip"
    assert check.todo is None
    assert check.found.startswith(f"{LABEL}: its GPU backend failed: load_backend: failed to load")
    assert check.found.endswith("; the GPU tools see no GPU here")


def test_a_hip_backend_that_did_not_load_asks_for_the_rocm_runtime() -> None:
    text = (
        "load_backend: failed to load /opt/llama.cpp/lib/libggml-hip.so: libamdhip64.so.6: "
        "cannot open shared object file: No such file or directory\n"
        "Available devices:\n"
    )
    check = list_devices_check(BUILD, text, None, 4)
    assert check.outcome == "fail"
    assert check.todo == (
        "run ldd /opt/llama.cpp/lib/libggml-hip.so and install what it lists as not found; "
        "check the ROCm runtime (libamdhip64, libhipblas, librocblas) it was built for"
    )


def test_a_backend_failure_naming_no_library_asks_to_run_it_at_lv_4() -> None:
    text = "ggml_cuda_init: failed to initialize CUDA: no CUDA-capable device is detected\n"
    check = list_devices_check(BUILD, text, None, 1)
    assert check.outcome == "fail"
    assert check.todo == (
        f"{CUDA_ADVICE}, that the engine may open the GPU devices (/dev/nvidia*, /dev/kfd in a "
        "container), and run it with -lv 4"
    )


def test_no_device_and_an_error_says_the_error() -> None:
    error = "llama-server exited 127: cannot run /opt/llama.cpp/bin/llama-server: Exec format error"
    text = "cannot run /opt/llama.cpp/bin/llama-server: Exec format error\n"
    check = list_devices_check(BUILD, text, error, 2)
    assert check == Check(
        "engine pre-flight",
        "fail",
        f"{LABEL}: lists no GPU device, though the GPU tools see 2 GPUs ({error})",
        NOT_BUILT_FOR_THEM,
    )


def test_no_device_on_a_node_without_gpus_is_skipped() -> None:
    check = list_devices_check(BUILD, "Available devices:\n", None, 0)
    assert check == Check(
        "engine pre-flight", "skip", f"{LABEL}: lists no GPU device; the GPU tools see none"
    )


def test_devices_listed_then_a_crash_fails_asking_to_read_the_last_lines() -> None:
    error = "llama-server exited 134: GGML_ASSERT failed"
    check = list_devices_check(BUILD, merged(TWO_CUDA_DEVICES), error, 2)
    assert check == Check(
        "engine pre-flight",
        "fail",
        f"{LABEL}: lists CUDA0 NVIDIA A100-SXM4-80GB, CUDA1 NVIDIA A100-SXM4-80GB, then {error}",
        "run /opt/llama.cpp/bin/llama-server --list-devices and read what it prints last",
    )


def test_a_build_without_a_gpu_backend_is_told_to_run_a_gpu_build(tmp_path: Path) -> None:
    """A real CPU-only b11434 prints only `Available devices:`; nothing beside it either."""
    binary = tmp_path / "llama-server"
    binary.touch()
    check = list_devices_check(Engine(str(binary)), "Available devices:\n", None, 2)
    assert check == Check(
        "engine pre-flight",
        "fail",
        f"llama-server ({binary}): lists no GPU device, though the GPU tools see 2 GPUs; it has "
        "no GPU backend (compiled without GPU support)",
        "run a GPU build of llama.cpp (e.g. -DGGML_CUDA=ON, or a CUDA release; -DGGML_HIP=ON "
        "for AMD GPUs)",
    )
    assert "ldd" not in (check.todo or "")


def test_a_backend_library_beside_it_that_lists_nothing_is_asked_about(tmp_path: Path) -> None:
    binary = tmp_path / "llama-server"
    binary.touch()
    (tmp_path / "libggml-vulkan.so").touch()
    check = list_devices_check(Engine(str(binary)), "Available devices:\n", None, 2)
    assert check.todo == NOT_BUILT_FOR_THEM
