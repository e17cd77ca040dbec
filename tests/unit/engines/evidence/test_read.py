"""Reading an engine's output line by line: each line to its engine's reader, the finding
lines kept, bounded, and nothing raised whatever the text."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placewatch.worker.engines.evidence import EngineEvidence
from placewatch.worker.engines.evidence.read import MAX_LINES, EvidenceReader, read_text
from placewatch.worker.engines.evidence.rules import MAX_LINE_CHARS

from tests.conftest import corpus_files, examples, needs_corpus
from tests.unit.engines.llama_cpp import test_log as test_llama_cpp
from tests.unit.engines.ollama import test_log as test_ollama
from tests.unit.engines.readings import LLAMA, LOGS, OLLAMA, OWN, Reading, read_log
from tests.unit.engines.vllm import test_log as test_vllm

CORPUS_READINGS = (
    test_llama_cpp.CORPUS_READINGS | test_ollama.CORPUS_READINGS | test_vllm.CORPUS_READINGS
)
OWN_READINGS = test_llama_cpp.OWN_READINGS | test_ollama.OWN_READINGS | test_vllm.OWN_READINGS
FULL_OFFLOAD = OWN / "llamacpp-cuda-full-offload.log"


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
def test_corpus_log_keeps_its_finding_lines_bounded(path: Path) -> None:
    ev = read_log(path)
    assert len(ev.lines) <= MAX_LINES
    assert all(len(line) <= MAX_LINE_CHARS for line in ev.lines)
    if ev.gpu_failed is not None:
        assert ev.gpu_failed in ev.lines  # the failure line is part of the evidence


@needs_corpus
@pytest.mark.parametrize(
    "name", [n for n, r in CORPUS_READINGS.items() if r == Reading(known=False)]
)
def test_corpus_log_with_nothing_relevant_is_a_fresh_evidence(name: str) -> None:
    assert read_log(LOGS / name) == EngineEvidence()


def test_every_own_fixture_has_a_reading_and_a_line_in_the_readme() -> None:
    logs = {p.name for p in OWN.glob("*.log")}
    assert logs == set(OWN_READINGS)
    readme = (OWN / "README.md").read_text()
    assert all(f"`{name}`" in readme for name in logs)


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
    fresh = EvidenceReader()
    fresh.read(line)
    assert fresh.snapshot() == EngineEvidence()
    full = EvidenceReader()
    for said in FULL_OFFLOAD.read_text().splitlines():
        full.read(said)
    before = full.snapshot()
    full.read(line)
    if "loading model tensors" in line:
        # a new load starts afresh: its layers and weights are not said yet; the rest stands
        assert full.snapshot() == replace(
            before,
            layers_offloaded=None,
            layers_total=None,
            cpu_weight_bytes=None,
            gpu_weight_bytes=None,
        )
    else:
        assert full.snapshot() == before


def test_missing_lines_are_unknown_never_cpu() -> None:
    ev = read_text("main: loading model\nsrv    load_model: loading model 'x.gguf'\n")
    assert not ev.known
    assert ev.backend is None


def test_finding_lines_are_cut_and_only_the_newest_are_kept() -> None:
    reader = EvidenceReader()
    for n in range(1, 40):
        reader.read(f"load_tensors: offloaded {n}/40 layers to GPU " + "x" * 1000)
    ev = reader.snapshot()
    assert len(ev.lines) == MAX_LINES
    assert all(len(line) == MAX_LINE_CHARS for line in ev.lines)
    assert ev.lines[-1].startswith("load_tensors: offloaded 39/40 layers")
    assert ev.layers_offloaded == 39


def test_read_text_starts_from_fresh_evidence() -> None:
    first = read_text("load_tensors: offloaded 1/2 layers to GPU\n")
    second = read_text("load_tensors: offloaded 2/2 layers to GPU\n")
    assert (first.layers_offloaded, second.layers_offloaded) == (1, 2)
    assert second.lines == ("load_tensors: offloaded 2/2 layers to GPU",)


def test_a_runner_line_in_ollamas_log_is_ollamas() -> None:
    ev = read_text(
        "Apr 18 19:28:59 quorra ollama[1170]: load_tensors: offloaded 33/33 layers to GPU\n"
    )
    assert (ev.engine, ev.layers_offloaded, ev.layers_total) == (OLLAMA, 33, 33)


def test_ollama_once_said_stays_the_engine_and_llama_cpp_gives_way_to_it() -> None:
    runner = "load_tensors: offloaded 33/33 layers to GPU\n"
    server = (
        'time=2024-07-05T02:37:04Z level=INFO source=server.go:368 msg="starting llama server" '
        'cmd="/tmp/ollama1/runners/cuda_v12/ollama_llama_server --n-gpu-layers 33"\n'
    )
    assert read_text(runner).engine == LLAMA
    assert read_text(runner + server).engine == OLLAMA
    assert read_text(server + runner).engine == OLLAMA


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


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.text(max_size=300), max_size=30))
def test_reading_never_raises_on_arbitrary_text(lines: list[str]) -> None:
    reader = EvidenceReader()
    for line in lines:
        reader.read(line)
    check_invariants(reader.snapshot())


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


@settings(max_examples=examples(500), deadline=None)
@given(st.lists(engine_lines(), max_size=40))
def test_reading_never_raises_on_lines_built_from_real_fragments(lines: list[str]) -> None:
    reader = EvidenceReader()
    for line in lines:
        reader.read(line)
        check_invariants(reader.snapshot())
