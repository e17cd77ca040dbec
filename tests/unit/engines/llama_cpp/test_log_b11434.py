"""llama.cpp as b11434 prints it, read from real captures (fixtures/engine-logs/real-b11434,
a CPU-only build loading tests/support/tiny_gguf.py's model): module tags before common/'s and
the server's lines, a verbosity of any width, two loads where `--fit` measures the model
first, and a build without GPU support that says so."""

from __future__ import annotations

import pytest

from placewatch.worker.engines.evidence.clean import clean_line
from placewatch.worker.engines.evidence.read import EvidenceReader, read_text

from tests.unit.engines.readings import LLAMA, REAL, Reading, mib, read_log, reading

TINY = mib(0.46)
"""The model's weights as b11434 says them: `CPU_Mapped model buffer size = 0.46 MiB`."""
NO_GPU = "warning: no usable GPU found, --gpu-layers option will be ignored"
WITHOUT_GPU = "warning: one possible reason is that llama.cpp was compiled without GPU support"
MAPPED = "load_tensors:   CPU_Mapped model buffer size =     0.46 MiB"
LAST_LAYER = "load_tensors: layer   2 assigned to device CPU, is_swa = 0"
DRY_RUN = "load_tensors:          CPU model buffer size =     0.00 MiB"
CPU_LISTED = "- CPU     : AMD EPYC (24105 MiB, 24105 MiB free)"
"""device_info's one entry on a CPU-only build: the CPU, which ggml lists last."""


def said_verbosity(n: int) -> str:
    return f"common_params_print_info: verbosity = {n} (adjust with the `-lv N` CLI arg)"


REAL_READINGS: dict[str, tuple[Reading, tuple[str, ...]]] = {
    # default -lv 3: the verbosity, and nothing of devices, layers or weights
    "default.log": (Reading(LLAMA, verbosity=3, known=False), (said_verbosity(3),)),
    # -lv 4: device_info lists only the CPU (no GPU to use), one CPU_Mapped buffer, no
    # offload line
    "lv4.log": (
        Reading(
            LLAMA, "CPU", gpu_bytes=0, cpu_bytes=TINY, verbosity=4, cpu_only=True,
            no_gpu_listed=True,
        ),
        (said_verbosity(4), CPU_LISTED, MAPPED),
    ),
    # -lv 5: --fit's dry run (a 0.00 MiB CPU buffer), then the load; layers 0..2 on the CPU
    "lv5.log": (
        Reading(
            LLAMA, "CPU", layers=(0, 3), gpu_bytes=0, cpu_bytes=TINY, verbosity=5,
            cpu_only=True, no_gpu_listed=True,
        ),
        (said_verbosity(5), CPU_LISTED, LAST_LAYER, DRY_RUN, LAST_LAYER, MAPPED),
    ),
    # -v: the same lines, at a verbosity of INT_MAX
    "verbose.log": (
        Reading(
            LLAMA, "CPU", layers=(0, 3), gpu_bytes=0, cpu_bytes=TINY, verbosity=2147483647,
            cpu_only=True, no_gpu_listed=True,
        ),
        (said_verbosity(2147483647), CPU_LISTED, LAST_LAYER, DRY_RUN, LAST_LAYER, MAPPED),
    ),
    # -ngl 99 on a build without GPU offload: the warnings, then -lv 3's silence
    "ngl99.log": (
        Reading(LLAMA, "CPU", failed=NO_GPU, verbosity=3, cpu_only=True),
        (NO_GPU, WITHOUT_GPU, said_verbosity(3)),
    ),
    "env-ngl99.log": (
        Reading(LLAMA, "CPU", failed=NO_GPU, verbosity=3, cpu_only=True),
        (NO_GPU, WITHOUT_GPU, said_verbosity(3)),
    ),
    # -ngl N -lv 4: the warnings (any N), then device_info's CPU (said already), the host
    # buffer
    **{
        name: (
            Reading(
                LLAMA, "CPU", failed=NO_GPU, gpu_bytes=0, cpu_bytes=TINY, verbosity=4,
                cpu_only=True, no_gpu_listed=True,
            ),
            (NO_GPU, WITHOUT_GPU, said_verbosity(4), MAPPED),
        )
        for name in ("ngl99-lv4.log", "ngl0-lv4.log", "env-ngl99-lv4.log")
    },
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(REAL_READINGS))
def test_real_b11434_log_reads_as_it_says(name: str) -> None:
    want, lines = REAL_READINGS[name]
    ev = read_log(REAL / name)
    assert reading(ev, want.failed) == want
    assert ev.lines == lines


def test_every_real_capture_has_a_reading_and_a_line_in_the_readme() -> None:
    logs = {p.name for p in REAL.glob("*.log")}
    assert logs == set(REAL_READINGS)
    readme = (REAL / "README.md").read_text()
    assert all(f"`{name}`" in readme for name in logs)


def test_default_verbosity_hides_the_load_lines_and_lv4_shows_them() -> None:
    assert read_log(REAL / "default.log").load_lines_hidden
    assert not read_log(REAL / "lv4.log").load_lines_hidden
    assert not read_log(REAL / "verbose.log").load_lines_hidden


@pytest.mark.parametrize(
    "prefix",
    [
        "0.00.005.961 I cmn  common_param: ",  # b11434
        "0.00.005.961 I cmn   common_param: ",  # one space more
        "I cmn  common_param: ",  # the level letter without a timestamp
        "cmn  common_param: ",  # no prefix at all
        "[47161] 0.00.005.961 I cmn  common_param: ",  # with its pid
    ],
)
def test_a_device_in_device_info_is_found_behind_its_module_tag(prefix: str) -> None:
    # common/common.cpp: common_params_print_info, `  - %-8s: %s (%zu MiB, %zu MiB free)`
    ev = read_text(f"{prefix}  - CUDA0   : NVIDIA RTX A4000 (16101 MiB, 15630 MiB free)\n")
    assert (ev.found_devices, ev.gpu_backend) == (("CUDA0",), "CUDA")
    assert ev.lines == ("- CUDA0   : NVIDIA RTX A4000 (16101 MiB, 15630 MiB free)",)


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("0.00.017.407 I slot   load_model: id  0 | task -1 | new slot", "id  0 | task -1"),
        ("0.00.017.318 I srv    load_model: initializing, n_slots = 4", "initializing"),
        ("0.04.002.218 I srv    operator(): operator(): cleaning up", "operator(): cleaning"),
        ("0.00.017.406 I spec common_specu: no implementations", "no implementations"),
        ("0.00.021.522 D que    start_loop: waiting for new tasks", "waiting for new tasks"),
    ],
)
def test_the_module_tag_and_function_come_off_every_module(line: str, said: str) -> None:
    assert clean_line(line).startswith(said)


def test_the_cpu_list_of_device_info_finds_no_gpu() -> None:
    ev = read_text("0.00.005.964 I cmn  common_param:   - CPU     : AMD EPYC (24105 MiB, ...)\n")
    assert not ev.known and ev.found_devices == ()


def test_a_restart_appended_to_the_same_log_replaces_the_weights_never_adds() -> None:
    # no `offloaded` line on a CPU-only build: only the load's first line starts it afresh
    text = (REAL / "lv4.log").read_text()
    assert read_text(text + text).cpu_weight_bytes == TINY
    assert read_text(text).cpu_weight_bytes == TINY


def test_fits_dry_run_is_replaced_by_the_real_load_as_it_streams_in() -> None:
    reader = EvidenceReader()
    weights = []
    for line in (REAL / "lv5.log").read_text().splitlines():
        reader.read(line)
        if "model buffer size" in line or "loading model tensors" in line:
            weights.append(reader.snapshot().cpu_weight_bytes)
    assert weights == [None, 0, None, TINY]  # load, dry run's 0.00 MiB, load, the model


@pytest.mark.parametrize("width", [0, 3, 4, 10, 2147483647, 9223372036854775807])
def test_a_verbosity_of_any_width_is_read(width: int) -> None:
    ev = read_text(f"0.00.004.699 I cmn  common_param: {said_verbosity(width)}\n")
    assert ev.verbosity == width


def test_the_compiled_without_gpu_support_line_is_kept_and_says_cpu_only() -> None:
    ev = read_text(WITHOUT_GPU + "\n")
    assert (ev.gpu_failed, ev.cpu_only_build, ev.lines) == (WITHOUT_GPU, True, (WITHOUT_GPU,))


def test_a_cuda_build_whose_init_failed_is_no_cpu_only_build() -> None:
    # b4199: CUDA init failed, then the same warning a CPU-only build prints
    ev = read_text(
        "ggml_cuda_init: failed to initialize CUDA: unknown error\n"
        "warning: not compiled with GPU offload support, --gpu-layers option will be ignored\n"
    )
    assert ev.gpu_failed == "ggml_cuda_init: failed to initialize CUDA: unknown error"
    assert (ev.gpu_backend, ev.cpu_only_build) == ("CUDA", False)


DEVICE_INFO = "0.00.004.268 I cmn  common_param: device_info:\n"
CPU_ENTRY = "0.00.004.274 I cmn  common_param:   - CPU     : AMD EPYC (24105 MiB, 24105 MiB free)\n"


def test_a_device_list_that_reaches_the_cpu_naming_no_gpu_leaves_none_to_use() -> None:
    ev = read_text(DEVICE_INFO + CPU_ENTRY)
    assert (ev.no_gpu_listed, ev.cpu_only_build, ev.backend, ev.known) == (True, True, "CPU", True)
    assert ev.lines == (CPU_LISTED,)


def test_a_device_list_naming_a_gpu_before_the_cpu_has_a_gpu_to_use() -> None:
    cuda = "0.00.004.270 I cmn  common_param:   - CUDA0   : NVIDIA L4 (22478 MiB, 22105 MiB free)\n"
    ev = read_text(DEVICE_INFO + cuda + CPU_ENTRY)
    assert (ev.no_gpu_listed, ev.cpu_only_build) == (False, False)
    assert (ev.found_devices, ev.gpu_backend, ev.backend) == (("CUDA0",), "CUDA", "CUDA")


def test_a_cuda_build_whose_init_failed_lists_only_the_cpu_and_is_no_cpu_only_build() -> None:
    ev = read_text(
        "ggml_cuda_init: failed to initialize CUDA: no CUDA-capable device is detected\n"
        + DEVICE_INFO
        + CPU_ENTRY
    )
    assert (ev.gpu_backend, ev.no_gpu_listed, ev.cpu_only_build) == ("CUDA", False, False)
    assert ev.gpu_failed is not None and ev.gpu_failed.startswith("ggml_cuda_init: failed")


def test_a_cpu_entry_outside_device_info_says_nothing() -> None:
    assert read_text(CPU_ENTRY + DEVICE_INFO).no_gpu_listed is False


def test_a_gpu_build_restarted_into_the_same_log_is_no_longer_without_a_gpu() -> None:
    # a CPU-only build's list, then a CUDA build's appended to the same file (`>> log`)
    cuda = "0.00.004.270 I cmn  common_param:   - CUDA0   : NVIDIA L4 (22478 MiB, 22105 MiB free)\n"
    ev = read_text(DEVICE_INFO + CPU_ENTRY + DEVICE_INFO + cuda + CPU_ENTRY)
    assert (ev.no_gpu_listed, ev.cpu_only_build) == (False, False)
    assert (ev.found_devices, ev.gpu_backend) == (("CUDA0",), "CUDA")
