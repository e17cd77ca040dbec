"""What each engine says beyond its launch and its log: how its processes make shards, whose
word names a log, and the advice only it gives. The neutral modules ask these and name no
engine (test_no_engine_named.py)."""

from __future__ import annotations

import pytest

from placewatch.worker.engines import BY_NAME, ENGINES, RequestLine, engine_named, read_launch
from placewatch.worker.engines.evidence.read import read_text
from placewatch.worker.engines.llama_cpp import ENGINE as LLAMA_CPP_ENGINE
from placewatch.worker.engines.llama_cpp.requests import read_request

LOADED = "load_tensors: offloaded 2/33 layers to GPU"
DISCOVERY = (
    'time=2025-07-02T14:20:13.000Z level=INFO source=types.go:130 msg="inference compute" '
    'id=GPU-1a2b library=cuda variant=v12 compute=8.6 driver=12.4 name="NVIDIA A10" '
    'total="22.0 GiB" available="21.7 GiB"'
)


@pytest.mark.parametrize(
    ("cmdline", "model"),
    [
        (
            ["llama-server", "-m", "/models/Qwen3-8B-Q4_K_M.gguf", "--port", "4001"],
            "Qwen3-8B-Q4_K_M",
        ),
        (["llama-server", "-m", "/models/q.gguf", "--alias", "qwen", "--port", "4001"], "qwen"),
        (["llama-server", "--port", "4001"], None),
        (["vllm", "serve", "Qwen/Qwen3-8B"], None),
        (["ollama", "runner", "--model", "/blobs/sha256-1", "--port", "4001"], "sha256-1"),
        (["ollama", "runner", "--model", "/etc/passwd", "--port", "4001"], None),
    ],
)
def test_the_model_a_process_serves_names_it_under_its_router(
    cmdline: list[str], model: str | None
) -> None:
    launch = read_launch(cmdline)
    assert launch is not None
    assert BY_NAME[launch.engine].served_model(launch) == model


def test_only_vllms_children_are_part_of_it_whatever_their_command_line() -> None:
    assert {e.name: e.children_join_parent for e in ENGINES} == {
        "ollama": False, "vllm": True, "sglang": False, "llama.cpp": False,
    }  # fmt: skip


def test_an_ollama_finding_names_the_log_whatever_its_runners_said_before() -> None:
    assert [e.name for e in ENGINES if e.hosts_other_engines] == ["ollama"]
    assert read_text(f"{LOADED}\n{DISCOVERY}").engine == "ollama"
    assert read_text(f"{DISCOVERY}\n{LOADED}").engine == "ollama"
    assert read_text(LOADED).engine == "llama.cpp"


def test_a_cpu_only_llama_cpp_is_told_which_build_to_run_and_the_others_nothing() -> None:
    fix = LLAMA_CPP_ENGINE.cpu_only_build_fix
    assert fix("ROCm") == "run a GPU build (e.g. -DGGML_HIP=ON, or a HIP release of llama.cpp)"
    assert (
        fix("CUDA")
        == fix("unknown")
        == ("run a GPU build (e.g. -DGGML_CUDA=ON, or a CUDA release of llama.cpp)")
    )
    assert fix(None) == (
        "run a GPU build (e.g. -DGGML_CUDA=ON, or a CUDA release of llama.cpp); for AMD GPUs, "
        "a GPU build (e.g. -DGGML_HIP=ON, or a HIP release of llama.cpp)"
    )
    others = [e for e in ENGINES if e is not LLAMA_CPP_ENGINE]
    assert [e.cpu_only_build_fix(b) for e in others for b in ("CUDA", None)] == [None] * 6


def test_the_layers_flag_and_the_device_list_are_llama_cpps_alone() -> None:
    assert {e.name: e.layers_flag for e in ENGINES if e.layers_flag} == {
        "llama.cpp": "-ngl / --n-gpu-layers"
    }
    assert [e.name for e in ENGINES if e.lists_devices] == ["llama.cpp"]
    line = "CUDA0: NVIDIA A100-SXM4-80GB (81050 MiB, 80536 MiB free)"
    assert [e.log().listed_device(line) for e in ENGINES] == [
        None, None, None, ("CUDA0", "NVIDIA A100-SXM4-80GB"),
    ]  # fmt: skip


def test_a_name_no_engine_has_is_none() -> None:
    assert engine_named("llama.cpp") is LLAMA_CPP_ENGINE
    assert engine_named("the engine") is None
    assert engine_named(None) is None


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("0.03.049.435 I slot launch_slot_: id  3 | task 0 | processing task, is_child = 0",
         RequestLine("start", 3)),
        ("0.03.053.685 I slot print_timing: id  3 | task 0 |   total time =   4.17 ms /  34 tokens",
         RequestLine("end", 3, pytest.approx(0.00417))),  # type: ignore[arg-type]
        ("0.03.053.926 I slot      release: id  3 | task 0 | stop processing: n_tokens = 33",
         RequestLine("end", 3)),
        ("slot released | tid=\"1\" id_slot=1 id_task=2", RequestLine("end", 1)),
        ("0.03.053.685 I slot print_timing: id  3 | task 0 |   eval time = 4.17 ms", None),
        ("srv  update_slots: all slots are idle", None),
    ],
)  # fmt: skip
def test_llama_servers_request_lines(line: str, said: RequestLine | None) -> None:
    assert read_request(line) == said
