"""One log, several runs of the engine: the evidence is the last run's, from its banner on,
with the lines it printed before its banner (argument warnings, GPU init) read into it."""

from __future__ import annotations

from pathlib import Path

import pytest

from placewatch.worker.engines.evidence.lives import BEFORE_BYTES, Lives, life_line, newest_life
from placewatch.worker.engines.evidence.read import EvidenceReader, read_text

from tests.conftest import needs_corpus
from tests.unit.engines.readings import LOGS, OWN, REAL

CPU_BUILD = REAL / "ngl99.log"
"""A real CPU-only b11434 given -ngl 99: `warning: no usable GPU found`."""
CUDA_FULL = OWN / "llamacpp-cuda-full-offload.log"
PARTIAL_LV4 = OWN / "llamacpp-partial-offload-lv4.log"


def appended(*paths: Path) -> str:
    return "".join(p.read_text() for p in paths)


def test_a_cuda_run_appended_after_a_cpu_run_reads_as_the_cuda_run_alone() -> None:
    alone = read_text(CUDA_FULL.read_text())
    after = read_text(appended(CPU_BUILD, CUDA_FULL))
    assert read_text(CPU_BUILD.read_text()).gpu_failed is not None
    assert after.gpu_failed is None
    assert after == alone
    assert (after.layers_offloaded, after.layers_total) == (33, 33)


def test_a_cpu_run_appended_after_a_cuda_run_keeps_its_own_warnings() -> None:
    """b11434 prints its `-ngl` warnings before its banner: they are the new run's."""
    after = read_text(appended(CUDA_FULL, CPU_BUILD))
    assert after == read_text(CPU_BUILD.read_text())
    assert after.gpu_failed == "warning: no usable GPU found, --gpu-layers option will be ignored"
    assert after.devices == ()


def test_gpu_init_lines_before_the_banner_are_the_new_run_s() -> None:
    """The b5400-era CUDA log prints ggml_cuda_init and its devices before `build:`."""
    after = read_text(appended(PARTIAL_LV4, CUDA_FULL))
    assert after.found_devices == read_text(CUDA_FULL.read_text()).found_devices
    assert after.layers_offloaded == 33


def test_a_run_of_the_same_build_counts_its_load_once() -> None:
    twice = read_text(appended(REAL / "lv4.log", REAL / "lv4.log"))
    assert twice == read_text((REAL / "lv4.log").read_text())


def test_the_banners_counted_are_the_runs_in_the_file() -> None:
    reader = EvidenceReader()
    for line in appended(CPU_BUILD, REAL / "lv4.log", CUDA_FULL).splitlines():
        reader.read(line)
    assert reader.lives.starts == 3


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        ("0.00.004.346 I srv  llama_server: initializing ...", "banner"),
        ("build: 4589 (eb7cf15a) with cc (Ubuntu 11.4.0) for x86_64-linux-gnu", "banner"),
        ("main: build = 2406 (48358b2e)", "banner"),
        ('time=2025-03-02T10:14:07Z level=INFO source=routes.go:1238 msg="Listening on '
         '127.0.0.1:11434 (version 0.5.12)"', "banner"),
        ("INFO 06-21 19:07:56 [api_server.py:1043] vLLM API server version 0.8.5", "banner"),
        ("warning: no usable GPU found, --gpu-layers option will be ignored", "before"),
        ("ggml_cuda_init: found 1 CUDA devices:", "before"),
        ("  Device 0: NVIDIA L40S, compute capability 8.9, VMM: yes", "before"),
        ("DEBUG 03-13 09:00:22 [__init__.py:159] Checking if CPU platform is available.",
         "before"),
        ("0.00.004.634 I cmn  common_param: common_params_print_info: build 11434 (unknown) "
         "with GNU 12.2.0 for Linux x86_64", None),
        ("0.00.017.075 I srv  llama_server: listening on http://127.0.0.1:41503", None),
        ("load_tensors: offloaded 33/33 layers to GPU", None),
    ],
)  # fmt: skip
def test_which_lines_start_a_run(line: str, kind: str | None) -> None:
    assert life_line(line, line.lower()) == kind


def test_lines_before_a_banner_end_at_a_finding_of_another_kind() -> None:
    lives = Lives()
    lives.see("warning: no usable GPU found", "warning: no usable gpu found")
    lives.see("load_tensors: offloaded 0/3 layers to GPU", "load_tensors: offloaded")
    lives.settled()
    assert lives.see("build: 1 (a) with cc", "build: 1 (a) with cc") == ["build: 1 (a) with cc"]


@needs_corpus
def test_a_corpus_cpu_fallback_then_a_real_b11434_run_reads_as_that_run() -> None:
    failed = LOGS / "llamacpp-b4199-cuda-init-failed-unknown-error-not-compiled-warning.log"
    assert read_text(failed.read_text()).gpu_failed is not None
    after = read_text(appended(failed, REAL / "lv4.log"))
    assert after == read_text((REAL / "lv4.log").read_text())


def test_the_newest_life_is_found_in_a_log_s_last_bytes_with_the_lines_before_its_banner() -> None:
    window = (
        b"ial line cut by the window\n"
        b"build: 4589 (eb7cf15a) with cc (Ubuntu 11.4.0) for x86_64-linux-gnu\n"
        b"load_tensors: offloaded 0/33 layers to GPU\n"
        b"ggml_cuda_init: found 1 CUDA devices:\n"
        b"build: 5400 (1a2b3c4d) with cc (GCC) 13.2.0 for x86_64-linux-gnu\n"
        b"load_tensors: offloaded 33/33 layers to GPU\n"
    )
    # Within BEFORE_BYTES of the banner: the window's first whole line, the old life with it;
    # reading on from there, the banner drops what came before it but its init line.
    assert newest_life(window) == window.index(b"build: 4589")
    far = b"x" * (BEFORE_BYTES + 100) + b"\n" + window
    start = newest_life(far)
    assert start is not None and far[start:].startswith(b"ial line")


def test_a_window_without_a_banner_or_with_only_its_words_has_no_newest_life() -> None:
    assert newest_life(b"load_tensors: offloaded 33/33 layers to GPU\n" * 1000) is None
    words = b"cmake build of the requests is initializing, listening\n" * 100_000
    assert newest_life(words) is None  # bounded: MAX_CANDIDATES lines looked at, no more
    assert newest_life(b"") is None
    assert newest_life(b"\0" * (4 << 20)) is None
