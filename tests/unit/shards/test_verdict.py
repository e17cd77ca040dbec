"""Verdicts exactly as DESIGN.md names them, each with a reason a person can act on."""

from __future__ import annotations

import pytest

from placewatch.schemas import GpuSample, PlacementSpec
from placewatch.worker.engines.evidence import EngineEvidence
from placewatch.worker.engines.evidence.read import read_text
from placewatch.worker.shards.placements import Placement
from placewatch.worker.shards.verdict import Observation, judge

from tests.unit.engines.readings import REAL, read_log

GiB = 1 << 30
GPUS = [GpuSample(index=i, uuid=f"GPU-{i}", vendor="nvidia") for i in range(4)]


def obs(gpus: list[int], held: dict[int, int | None] | None = None, **kw: object) -> Observation:
    placement = kw.pop("placement", None) or Placement(
        PlacementSpec(id="s", pid=42, gpus=gpus), "file"
    )
    base: dict[str, object] = dict(pid=42, alive=True, ready=True, gpus_known=True, held=held or {})
    base.update(kw)
    return Observation(placement=placement, **base)  # type: ignore[arg-type]


def test_holding_memory_on_every_placed_gpu_is_gpu() -> None:
    j = judge(obs([0, 1], {0: 20 * GiB, 1: 19 * GiB}), GPUS)
    assert j.verdict == "gpu"
    assert j.backend == "CUDA"
    assert [(d.index, d.uuid, d.used_bytes) for d in j.devices] == [
        (0, "GPU-0", 20 * GiB),
        (1, "GPU-1", 19 * GiB),
    ]
    assert j.reason == "holds 39.0 GiB on GPUs 0, 1 as placed"


def test_holding_nothing_on_its_gpu_is_cpu_fallback_with_what_to_check() -> None:
    j = judge(obs([1]), GPUS)
    assert j.verdict == "cpu_fallback"
    assert j.backend == "CPU"
    assert j.reason.startswith(
        "placed on GPU 1 but computing on the CPU: its processes hold no memory there"
    )
    assert "ldd" in j.reason and "-lv 4" in j.reason and "placewatch doctor" in j.reason


def test_some_but_not_all_placed_gpus_is_partial() -> None:
    j = judge(obs([0, 1], {0: GiB}), GPUS)
    assert j.verdict == "partial"
    assert "none on GPU 1" in j.reason


def test_memory_outside_the_placement_is_misplaced() -> None:
    j = judge(obs([1], {0: 8 * GiB}), GPUS)
    assert j.verdict == "misplaced"
    assert j.reason.startswith("placed on GPU 1 but holds 8.0 GiB on GPU 0")
    assert "CUDA_VISIBLE_DEVICES" in j.reason


def test_below_the_floor_is_not_holding() -> None:
    spec = PlacementSpec(id="s", pid=42, gpus=[0], min_gpu_bytes=4 * GiB)
    assert (
        judge(obs([0], {0: GiB}, placement=Placement(spec, "file")), GPUS).verdict == "cpu_fallback"
    )
    assert judge(obs([0], {0: 4 * GiB}, placement=Placement(spec, "file")), GPUS).verdict == "gpu"


def test_listed_without_a_size_counts_as_holding() -> None:
    assert judge(obs([0], {0: None}), GPUS).verdict == "gpu"


def test_empty_placement_is_cpu_on_purpose() -> None:
    placement = Placement(
        PlacementSpec(id="s", pid=42, gpus=[]), "discovered", cpu_on_purpose="-ngl 0"
    )
    j = judge(obs([], placement=placement), GPUS)
    assert (j.verdict, j.backend, j.reason) == (
        "cpu",
        "CPU",
        "placed on the CPU on purpose (-ngl 0)",
    )


def test_not_ready_is_starting_and_exited_is_gone() -> None:
    assert judge(obs([0], ready=False), GPUS).verdict == "starting"
    gone = judge(obs([0], alive=False), GPUS)
    assert (gone.verdict, gone.reason) == (
        "gone",
        "pid 42 is not running; nothing computes for this shard",
    )
    unmatched = Placement(PlacementSpec(id="s", match="llama-server.*8081", gpus=[0]), "file")
    gone = judge(obs([0], alive=False, pid=None, placement=unmatched), GPUS)
    assert (
        gone.reason
        == "no running process matches 'llama-server.*8081'; start the engine or fix the pattern"
    )


def test_hidden_pids_read_unknown_never_cpu_fallback() -> None:
    j = judge(
        obs([1], hidden={1: "lists 2 process(es) (pid 9...) that are not in this worker's /proc"}),
        GPUS,
    )
    assert j.verdict == "unknown"
    assert "--pid=host" in j.reason


def test_no_gpu_tool_and_no_engine_word_is_unknown() -> None:
    assert judge(obs([0], gpus_known=False), GPUS).verdict == "unknown"


def test_untranslatable_mask_is_unknown() -> None:
    placement = Placement(
        PlacementSpec(id="s", pid=42, gpus=[0]), "discovered", gpus_unknown="MIG instance"
    )
    j = judge(obs([0], placement=placement), GPUS)
    assert j.verdict == "unknown" and "MIG instance" in j.reason


def evidence(**kw: object) -> EngineEvidence:
    return EngineEvidence(engine="llama.cpp", lines=("line",), **kw)  # type: ignore[arg-type]


def test_engine_saying_zero_layers_outranks_its_cuda_compute_buffer() -> None:
    # llama.cpp with 0 of 29 layers offloaded still allocates over 1 GiB on the GPU.
    j = judge(
        obs(
            [0],
            {0: 1200 << 20},
            evidence=evidence(backend="CUDA", layers_offloaded=0, layers_total=29),
        ),
        GPUS,
    )
    assert j.verdict == "cpu_fallback"
    assert (j.layers_offloaded, j.layers_total) == (0, 29)
    assert "offloaded 0 of 29 layers" in j.reason
    assert j.evidence == ("line",)


def test_engine_backend_failure_is_cpu_fallback_quoting_the_engine() -> None:
    ev = evidence(
        gpu_failed="ggml_cuda_init: failed to initialize CUDA: no CUDA-capable device is detected"
    )
    j = judge(obs([0], {0: GiB}, evidence=ev), GPUS)
    assert j.verdict == "cpu_fallback"
    assert "no CUDA-capable device is detected" in j.reason and "ldd" in j.reason


def test_partial_offload_by_the_engines_account() -> None:
    j = judge(
        obs(
            [0],
            {0: 6 * GiB},
            evidence=evidence(backend="CUDA", layers_offloaded=20, layers_total=33),
        ),
        GPUS,
    )
    assert j.verdict == "partial"
    assert "offloaded only 20 of 33 layers" in j.reason


def test_full_offload_with_experts_on_the_cpu_is_partial() -> None:
    ev = evidence(
        backend="CUDA",
        layers_offloaded=95,
        layers_total=95,
        cpu_weight_bytes=120 * GiB,
        gpu_weight_bytes=20 * GiB,
    )
    j = judge(obs([0], {0: 22 * GiB}, evidence=ev), GPUS)
    assert j.verdict == "partial"
    assert "-ot" in j.reason


def test_full_offload_keeping_only_embeddings_on_the_cpu_is_gpu() -> None:
    ev = evidence(
        backend="CUDA",
        layers_offloaded=33,
        layers_total=33,
        cpu_weight_bytes=280 << 20,
        gpu_weight_bytes=4 * GiB,
    )
    assert judge(obs([0], {0: 5 * GiB}, evidence=ev), GPUS).verdict == "gpu"


@pytest.mark.parametrize(
    "vendor, backend", [("nvidia", "CUDA"), ("amd", "ROCm"), ("intel", "unknown")]
)
def test_backend_follows_the_gpus_vendor(vendor: str, backend: str) -> None:
    gpus = [GpuSample(index=0, vendor=vendor)]  # type: ignore[arg-type]
    assert judge(obs([0], {0: GiB}), gpus).backend == backend


@pytest.mark.parametrize(
    ("vendor", "said"), [("intel", "SYCL"), ("intel", "Vulkan"), ("amd", "Vulkan")]
)
def test_backend_is_the_engines_sycl_or_vulkan_where_it_says_so(vendor: str, said: str) -> None:
    gpus = [GpuSample(index=0, vendor=vendor)]  # type: ignore[arg-type]
    j = judge(obs([0], {0: GiB}, evidence=evidence(backend=said)), gpus)
    assert (j.verdict, j.backend) == ("gpu", said)


# --- real llama-server b11434 logs (fixtures/engine-logs/real-b11434), a CPU-only build ---

ON_CPU = "placed on GPU 0 but computing on the CPU"
NO_GPU = "'warning: no usable GPU found, --gpu-layers option will be ignored'"
GPU_BUILD = "run a GPU build (e.g. -DGGML_CUDA=ON, or a CUDA release of llama.cpp)"
DOCTOR = "run `placewatch doctor` on this node"
REAL_VERDICTS = {
    "default.log": (
        "cpu_fallback",
        f"{ON_CPU}: its processes hold no memory there, so its GPU backend did not load; check "
        "its CUDA/ROCm libraries with ldd on libggml-cuda.so (or libggml-hip.so), run it with "
        f"-lv 4 to see where its layers go, or {DOCTOR}",
    ),
    # device_info lists only the CPU: why it offloaded 0 layers at -lv 5, named first
    **{
        name: (
            "cpu_fallback",
            f"{ON_CPU}: llama.cpp lists no GPU device, only the CPU; {GPU_BUILD}, or {DOCTOR}",
        )
        for name in ("lv4.log", "lv5.log", "verbose.log")
    },
    **{
        name: ("cpu_fallback", f"{ON_CPU}: llama.cpp says {NO_GPU}; {GPU_BUILD}, or {DOCTOR}")
        for name in (
            "ngl99.log", "env-ngl99.log", "ngl99-lv4.log", "ngl0-lv4.log", "env-ngl99-lv4.log"
        )
    },
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(REAL_VERDICTS))
def test_a_real_b11434_log_placed_on_gpu_0_that_holds_nothing_there(name: str) -> None:
    j = judge(obs([0], evidence=read_log(REAL / name)), GPUS)
    assert (j.verdict, j.reason) == REAL_VERDICTS[name]
    assert j.backend == "CPU"


def test_a_cpu_only_build_is_told_to_use_a_gpu_build_not_to_check_libraries() -> None:
    j = judge(obs([0], {0: GiB}, evidence=read_log(REAL / "ngl99.log")), GPUS)
    assert j.verdict == "cpu_fallback"
    assert "-DGGML_CUDA=ON" in j.reason and "ldd" not in j.reason
    amd = [GpuSample(index=0, vendor="amd")]
    assert "-DGGML_HIP=ON" in judge(obs([0], evidence=read_log(REAL / "ngl99.log")), amd).reason


def test_a_cuda_build_that_also_warns_of_no_gpu_support_is_told_to_check_its_libraries() -> None:
    # b4199: its CUDA init failed, then the warning a CPU-only build prints
    ev = read_text(
        "ggml_cuda_init: failed to initialize CUDA: unknown error\n"
        "warning: not compiled with GPU offload support, --gpu-layers option will be ignored\n"
    )
    j = judge(obs([0], evidence=ev), GPUS)
    assert j.verdict == "cpu_fallback"
    assert "ldd on libggml-cuda.so" in j.reason and "GPU build" not in j.reason


def test_default_verbosity_without_gpu_tools_is_unknown_naming_the_flag_to_add() -> None:
    j = judge(obs([0], gpus_known=False, evidence=read_log(REAL / "default.log")), GPUS)
    assert (j.verdict, j.reason) == (
        "unknown",
        "the GPU tools did not answer and llama.cpp runs at verbosity 3, which hides where its "
        "layers go: run it with -lv 4 (or LLAMA_ARG_LOG_VERBOSITY=4); see `sources` in the "
        f"telemetry, or {DOCTOR}",
    )
    # the line the reason rests on, though it says nothing of where the engine computes
    assert j.evidence == (
        "common_params_print_info: verbosity = 3 (adjust with the `-lv N` CLI arg)",
    )
    assert (j.layers_offloaded, j.layers_total, j.backend) == (None, None, "unknown")


HIDDEN = (
    "llama.cpp runs at verbosity 3, which hides where its layers go: run it with -lv 4 "
    "(or LLAMA_ARG_LOG_VERBOSITY=4)"
)


def test_memory_alone_at_default_verbosity_is_gpu_naming_the_flag_that_would_confirm_it() -> None:
    # a CUDA build at 0 layers holds a compute buffer too: only its load lines would tell
    j = judge(obs([0], {0: GiB}, evidence=read_log(REAL / "default.log")), GPUS)
    assert (j.verdict, j.backend) == ("gpu", "CUDA")
    assert j.reason == f"holds 1.0 GiB on GPU 0 as placed; {HIDDEN}"
    lv4 = EngineEvidence(engine="llama.cpp", verbosity=4)
    assert (
        judge(obs([0], {0: GiB}, evidence=lv4), GPUS).reason == "holds 1.0 GiB on GPU 0 as placed"
    )


def test_gpus_that_cannot_be_told_at_default_verbosity_name_the_flag_to_add() -> None:
    placement = Placement(
        PlacementSpec(id="llama-server-8080", pid=42), "discovered", gpus_unknown="no tool said"
    )
    j = judge(obs([], placement=placement, evidence=read_log(REAL / "default.log")), GPUS)
    assert (j.verdict, j.reason) == (
        "unknown",
        f"cannot tell which GPUs it was meant for: no tool said; {HIDDEN}",
    )
    assert j.evidence == (
        "common_params_print_info: verbosity = 3 (adjust with the `-lv N` CLI arg)",
    )
    assert judge(obs([], placement=placement), GPUS).reason == (
        "cannot tell which GPUs it was meant for: no tool said"
    )


def test_a_build_listing_no_gpu_device_is_told_so_before_its_zero_layers() -> None:
    ev = EngineEvidence(
        engine="llama.cpp", backend="CPU", layers_offloaded=0, layers_total=3,
        no_gpu_listed=True, cpu_only_build=True, verbosity=5,
    )  # fmt: skip
    j = judge(obs([0], {0: GiB}, evidence=ev), GPUS)
    assert (j.verdict, j.backend, j.layers_offloaded, j.layers_total) == (
        "cpu_fallback",
        "CPU",
        0,
        3,
    )
    assert j.reason == (
        f"{ON_CPU}: llama.cpp lists no GPU device, only the CPU; {GPU_BUILD}, or {DOCTOR}"
    )


def test_default_verbosity_with_hidden_pids_is_unknown_naming_the_flag_to_add() -> None:
    hidden = {0: "lists 2 process(es) (pid 9...) that are not in this worker's /proc"}
    j = judge(obs([0], hidden=hidden, evidence=read_log(REAL / "default.log")), GPUS)
    assert j.verdict == "unknown"
    assert j.reason.endswith(
        "run the worker in the host's PID namespace (--pid=host); llama.cpp runs at verbosity 3, "
        "which hides where its layers go: run it with -lv 4 (or LLAMA_ARG_LOG_VERBOSITY=4)"
    )


def test_a_verbosity_that_shows_the_load_lines_names_no_flag() -> None:
    ev = EngineEvidence(engine="llama.cpp", verbosity=4)
    j = judge(obs([0], gpus_known=False, evidence=ev), GPUS)
    assert j.verdict == "unknown" and "-lv" not in j.reason
    zero = evidence(backend="CPU", layers_offloaded=0, layers_total=29, verbosity=2147483647)
    assert "-lv" not in judge(obs([0], evidence=zero), GPUS).reason
