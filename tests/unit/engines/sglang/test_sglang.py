"""SGLang, the engine added as a folder and a registry line: its launch, its arguments, its
log (fixtures/engine-logs/sglang, constructed from SGLang's source; its README names each
line's file and commit) and the verdicts they give, like vLLM's."""

from __future__ import annotations

import pytest

from placewatch.schemas import PlacementSpec
from placewatch.worker.engines import SGLANG, read_launch
from placewatch.worker.engines.evidence.clean import clean_line
from placewatch.worker.engines.evidence.read import read_text
from placewatch.worker.shards.discover import classify
from placewatch.worker.shards.placements import Placement
from placewatch.worker.shards.verdict import Observation, judge

from tests.support.discovery import A100X4, AMD, BOTH, found
from tests.unit.engines.readings import OWN, gib
from tests.unit.shards.test_verdict import GPUS

LOGS = OWN / "sglang"
MODEL = ["--model-path", "meta-llama/Llama-3.1-8B-Instruct"]


@pytest.mark.parametrize(
    "cmdline",
    [
        ["python3", "-m", "sglang.launch_server", *MODEL],
        ["/opt/venv/bin/python3.12", "-u", "-m", "sglang.launch_server", *MODEL],
        ["sglang", "serve", *MODEL],
        ["/opt/venv/bin/sglang", "serve", *MODEL],
        ["python3", "/opt/venv/bin/sglang", "serve", *MODEL],
    ],
)
def test_its_launches_are_sglang_serving_on_30000(cmdline: list[str]) -> None:
    launch = read_launch(cmdline)
    assert launch is not None
    assert (launch.engine, launch.name, launch.serves, launch.default_port) == (
        SGLANG,
        "sglang",
        True,
        30000,
    )
    d = found(cmdline)
    assert d.spec.id == "sglang-30000"
    assert d.spec.health_url == "http://127.0.0.1:30000/health"


@pytest.mark.parametrize(
    "cmdline", [["sglang", "version"], ["python3", "-m", "sglang.bench_serving"], ["sglang"]]
)
def test_its_tools_and_clients_are_no_shard(cmdline: list[str]) -> None:
    assert read_launch(cmdline) is None


@pytest.mark.parametrize(
    ("args", "env", "gpus", "want"),
    [
        ([], {}, A100X4, [0]),
        (["--tp", "2"], {}, A100X4, [0, 1]),
        (["--tp-size", "2", "--base-gpu-id", "2"], {}, A100X4, [2, 3]),
        (["--tensor-parallel-size=2", "--gpu-id-step", "2"], {}, A100X4, [0, 2]),
        (["--tp", "2", "--pp-size", "2"], {}, A100X4, [0, 1, 2, 3]),
        (["--tp", "2", "--dp-size", "2"], {}, A100X4, [0, 1, 2, 3]),
        (["--tp", "2"], {"CUDA_VISIBLE_DEVICES": "3,1"}, A100X4, [1, 3]),
        (["--tp", "2"], {"HIP_VISIBLE_DEVICES": "1,3"}, AMD, [1, 3]),
        (["--port", "31000"], {}, A100X4, [0]),
    ],
)
def test_the_gpus_its_arguments_pick(
    args: list[str], env: dict[str, str], gpus: list[object], want: list[int]
) -> None:
    d = found(["sglang", "serve", *MODEL, *args], env, gpus)  # type: ignore[arg-type]
    assert d.gpus_unknown is None
    assert d.spec.gpus == want


def test_more_gpus_than_are_visible_cannot_be_told() -> None:
    d = found(["sglang", "serve", *MODEL, "--tp", "2", "--base-gpu-id", "3"])
    assert d.gpus_unknown == "it takes GPUs 3, 4 of those visible to it, but 4 are visible"


def test_both_vendors_visible_cannot_be_told() -> None:
    d = found(["sglang", "serve", *MODEL], {}, BOTH)
    assert d.gpus_unknown is not None and "one platform" in d.gpus_unknown


def test_device_cpu_is_the_cpu_on_purpose() -> None:
    d = found(["python3", "-m", "sglang.launch_server", *MODEL, "--device", "cpu"])
    assert (d.cpu_on_purpose, d.spec.gpus) == ("--device cpu", [])


def test_a_node_whose_tools_are_silent_says_what_asks_for_gpus() -> None:
    d = classify(["sglang", "serve", *MODEL], {}, 4242, [], tools_silent=["nvml"])
    assert d is not None
    assert d.gpu_request == "SGLang without --device cpu"


def test_its_log_prefix_is_taken_off() -> None:
    assert clean_line("[2026-08-10 09:47:14 DP0 TP0 EP0] Load weight end.") == "Load weight end."
    assert clean_line("[08-10 09:47:14 TP1] Memory pool end.") == "Memory pool end."
    assert clean_line("[12:00:01] server_args=ServerArgs()") == "server_args=ServerArgs()"


def test_a_cuda_run_reads_cuda_with_its_weights() -> None:
    ev = read_text((LOGS / "tp2-cuda.log").read_text())
    assert (ev.engine, ev.backend, ev.gpu_backend) == ("sglang", "CUDA", "CUDA")
    assert ev.gpu_weight_bytes == gib(7.59)
    assert ev.lines[-1].startswith("Load weight end. type=LlamaForCausalLM")


def test_a_cpu_run_reads_cpu() -> None:
    ev = read_text((LOGS / "cpu.log").read_text())
    assert (ev.engine, ev.backend, ev.gpu_backend, ev.gpu_weight_bytes) == (
        "sglang",
        "CPU",
        None,
        None,
    )


def test_a_restart_into_the_same_log_is_the_new_run() -> None:
    both = (LOGS / "cpu.log").read_text() + (LOGS / "tp2-cuda.log").read_text()
    assert read_text(both) == read_text((LOGS / "tp2-cuda.log").read_text())


def placed(gpus: list[int], held: dict[int, int | None], log: str) -> Observation:
    return Observation(
        placement=Placement(PlacementSpec(id="s", pid=42, gpus=gpus, engine=SGLANG), "file"),
        pid=42,
        alive=True,
        ready=True,
        gpus_known=True,
        held=held,
        evidence=read_text((LOGS / log).read_text()),
    )


def test_verdicts_like_vllm_s() -> None:
    gpus = found(["sglang", "serve", *MODEL]).spec.gpus
    assert gpus == [0]
    on_both = judge(placed([0, 1], {0: gib(20), 1: gib(20)}, "tp2-cuda.log"), GPUS)
    assert (on_both.verdict, on_both.backend) == ("gpu", "CUDA")
    nothing = judge(placed([0, 1], {}, "tp2-cuda.log"), GPUS)
    assert nothing.verdict == "cpu_fallback"
    told_cpu = judge(placed([0], {}, "cpu.log"), GPUS)
    assert (told_cpu.verdict, told_cpu.backend) == ("cpu_fallback", "CPU")


def test_sglang_0_5_23_one_gpu_reads_cuda_from_its_dict_and_its_pool() -> None:
    ev = read_text((LOGS / "0.5.23-cuda-tp1.log").read_text())
    assert (ev.engine, ev.backend, ev.gpu_backend) == ("sglang", "CUDA", "CUDA")
    assert ev.gpu_weight_bytes == gib(15.41)
    assert ev.lines[0].startswith("server_args={'model_path': 'Qwen/Qwen3-8B'")
    assert ev.lines[-1].endswith("available_gpu_mem=10.21 GB")


def test_sglang_0_5_23_on_the_cpu_reads_cpu() -> None:
    ev = read_text((LOGS / "0.5.23-cpu.log").read_text())
    assert (ev.engine, ev.backend, ev.gpu_backend, ev.gpu_weight_bytes) == (
        "sglang",
        "CPU",
        None,
        None,
    )
    assert ev.lines[-1].endswith("available_cpu_mem=206.40 GB")


def test_sglang_0_5_23_ranks_with_attention_cp_and_moe_dp_are_read() -> None:
    ev = read_text((LOGS / "0.5.23-tp2-attn-cp-moe-dp.log").read_text())
    assert (ev.engine, ev.backend, ev.gpu_weight_bytes) == ("sglang", "CUDA", gib(28.56))
    assert clean_line("[2026-10-14 11:05:40 ATTN_CP1 MOE_DP1 TP1] Memory pool end.") == (
        "Memory pool end."
    )
    assert clean_line("[2026-10-14 11:05:40.123 DP0 PP1 TP1 EP1] x") == "x"


def test_sglang_0_5_23_dict_banner_starts_a_life() -> None:
    cpu = (LOGS / "0.5.23-cpu.log").read_text()
    cuda = (LOGS / "0.5.23-cuda-tp1.log").read_text()
    assert read_text(cpu + cuda) == read_text(cuda)
    assert read_text(cuda + cpu) == read_text(cpu)


def test_sglang_0_5_23_pool_on_the_gpu_without_its_arguments_reads_a_gpu() -> None:
    ev = read_text(
        "[2026-10-14 09:30:31] max_total_num_tokens=373010, chunked_prefill_size=8192, "
        "context_len=40960, available_gpu_mem=10.21 GB\n"
    )
    assert (ev.engine, ev.backend) == ("sglang", "CUDA")
