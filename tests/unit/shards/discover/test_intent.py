"""The GPUs an engine meant to use: the CPU on purpose, the device mask, the engine's flags."""

from __future__ import annotations

import pytest

from placewatch.schemas import GpuSample
from placewatch.worker.shards.discover import classify

from tests.support.discovery import (
    A100X4,
    AMD,
    BOTH,
    INTEL,
    MIXED,
    MODEL,
    OLLAMA_BLOB,
    PCI_ORDER,
    SERVER,
    found,
)

# --- the CPU on purpose -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("cmdline", "env", "says"),
    [
        ([SERVER, "-m", MODEL, "-ngl", "0"], {}, "-ngl 0"),
        ([SERVER, "-m", MODEL, "-ngl=0"], {}, "-ngl=0"),
        ([SERVER, "-m", MODEL, "--n-gpu-layers", "0"], {}, "--n-gpu-layers 0"),
        ([SERVER, "-m", MODEL, "--n-gpu-layers=0"], {}, "--n-gpu-layers=0"),
        ([SERVER, "-m", MODEL, "--gpu-layers", "0"], {}, "--gpu-layers 0"),
        ([SERVER, "-m", MODEL, "--gpu-layers=0"], {}, "--gpu-layers=0"),
        ([SERVER, "-m", MODEL, "-ngl", "99", "-ngl", "0"], {}, "-ngl 0"),  # the last one counts
        ([SERVER, "-m", MODEL, "--device", "none"], {}, "--device none"),
        ([SERVER, "-m", MODEL, "-dev", "none"], {}, "-dev none"),
        ([SERVER, "-m", MODEL, "-dev=none"], {}, "-dev=none"),
        ([SERVER, "-m", MODEL, "-sm", "none", "-mg", "-1"], {}, "-sm none -mg -1"),
        ([SERVER, "-m", MODEL], {"LLAMA_ARG_N_GPU_LAYERS": "0"}, "LLAMA_ARG_N_GPU_LAYERS=0"),
        ([SERVER, "-m", MODEL], {"LLAMA_ARG_DEVICE": "none"}, "LLAMA_ARG_DEVICE=none"),
        (["llama-cli", "-m", MODEL, "-ngl", "0"], {}, "-ngl 0"),
        (
            ["ollama", "runner", "--model", OLLAMA_BLOB, "--n-gpu-layers", "0", "--port", "1"],
            {},
            "--n-gpu-layers 0",
        ),
        (
            ["python", "-m", "llama_cpp.server", "--model", MODEL, "--n_gpu_layers", "0"],
            {},
            "--n_gpu_layers 0",
        ),
        (
            ["python", "-m", "llama_cpp.server", "--model", MODEL],
            {},
            "no --n_gpu_layers (llama-cpp-python's default is 0 layers on the GPU)",
        ),
        (["vllm", "serve", "m", "--device", "cpu"], {}, "--device cpu"),
        (["vllm", "serve", "m", "--device=cpu"], {}, "--device=cpu"),
        ([SERVER, "-m", MODEL], {"CUDA_VISIBLE_DEVICES": ""}, "CUDA_VISIBLE_DEVICES="),
        ([SERVER, "-m", MODEL], {"CUDA_VISIBLE_DEVICES": "-1"}, "CUDA_VISIBLE_DEVICES=-1"),
    ],
)
def test_cpu_on_purpose_is_said_by_the_flag_as_written(
    cmdline: list[str], env: dict[str, str], says: str
) -> None:
    d = found(cmdline, env)
    assert (d.spec.gpus, d.cpu_on_purpose, d.gpus_unknown) == ([], says, None)


def test_amd_mask_that_hides_every_gpu_is_the_cpu_on_purpose() -> None:
    d = found([SERVER, "-m", MODEL], {"HIP_VISIBLE_DEVICES": "-1"}, AMD)
    assert (d.spec.gpus, d.cpu_on_purpose) == ([], "HIP_VISIBLE_DEVICES=-1")


@pytest.mark.parametrize(
    "cmdline",
    [
        [SERVER, "-m", MODEL, "-ngl", "99"],
        [SERVER, "-m", MODEL, "-ngl", "-1"],
        [SERVER, "-m", MODEL, "-ngl", "all"],
        [SERVER, "-m", MODEL, "-ngl", "auto"],
        [SERVER, "-m", MODEL],  # an unset -ngl is the build's default, not a choice of the CPU
        [SERVER, "-m", "model-ngl-0.gguf"],
        ["ollama", "runner", "--model", OLLAMA_BLOB, "--port", "1"],  # Ollama's own CPU fallback
        ["vllm", "serve", "m", "--device", "cuda", "-tp", "4"],
    ],
)
def test_layer_counts_other_than_zero_keep_the_gpus(cmdline: list[str]) -> None:
    d = found(cmdline)
    assert (d.spec.gpus, d.cpu_on_purpose, d.gpus_unknown) == ([0, 1, 2, 3], None, None)


# --- the intended GPUs ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cmdline", "env", "gpus", "expected"),
    [
        ([SERVER, "-m", MODEL], {}, A100X4, [0, 1, 2, 3]),
        ([SERVER, "-m", MODEL], {"CUDA_VISIBLE_DEVICES": "2"}, A100X4, [2]),
        ([SERVER, "-m", MODEL], {"CUDA_VISIBLE_DEVICES": "3,1"}, A100X4, [1, 3]),
        (
            [SERVER, "-m", MODEL],
            {"CUDA_VISIBLE_DEVICES": "GPU-22aa0000-0000-0000-0000-000000000002"},
            A100X4,
            [2],
        ),
        ([SERVER, "-m", MODEL], {"CUDA_VISIBLE_DEVICES": "0,2,-1,1"}, A100X4, [0, 2]),
        # mixed GPUs: all of them, in whatever order, are still all of them
        ([SERVER, "-m", MODEL], {}, MIXED, [0, 1]),
        ([SERVER, "-m", MODEL], {"CUDA_VISIBLE_DEVICES": "GPU-bbbb"}, MIXED, [1]),
        (
            [SERVER, "-m", MODEL],
            {"CUDA_VISIBLE_DEVICES": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"},
            MIXED,
            [1],
        ),
        # --device picks runtime devices, numbered within the mask
        ([SERVER, "-m", MODEL, "--device", "CUDA1"], {}, A100X4, [1]),
        ([SERVER, "-m", MODEL, "--device", "CUDA0,CUDA2"], {}, A100X4, [0, 2]),
        ([SERVER, "-m", MODEL, "-dev", "CUDA1"], {"CUDA_VISIBLE_DEVICES": "3,2"}, A100X4, [2]),
        (
            [SERVER, "-m", MODEL, "-dev", "CUDA1,CUDA0"],
            {"CUDA_VISIBLE_DEVICES": "3,1,0"},
            A100X4,
            [1, 3],
        ),
        ([SERVER, "-m", MODEL], {"LLAMA_ARG_DEVICE": "CUDA3"}, A100X4, [3]),
        ([SERVER, "-m", MODEL, "-dev", "ROCm1"], {"HIP_VISIBLE_DEVICES": "2,3"}, AMD, [3]),
        ([SERVER, "-m", MODEL, "-dev", "ROCm0"], {}, BOTH, [2]),
        ([SERVER, "-m", MODEL, "-dev", "CUDA1"], {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}, MIXED, [1]),
        # -sm none: only the main GPU (-mg, default 0) of the devices
        ([SERVER, "-m", MODEL, "-sm", "none", "-mg", "1"], {}, A100X4, [1]),
        ([SERVER, "-m", MODEL, "--split-mode", "none", "--main-gpu", "2"], {}, A100X4, [2]),
        ([SERVER, "-m", MODEL, "-sm", "none"], {}, A100X4, [0]),
        (
            [SERVER, "-m", MODEL, "-sm", "none", "-mg", "1"],
            {"CUDA_VISIBLE_DEVICES": "3,2"},
            A100X4,
            [2],
        ),
        ([SERVER, "-m", MODEL, "-dev", "CUDA2,CUDA3", "-sm", "none", "-mg", "1"], {}, A100X4, [3]),
        ([SERVER, "-m", MODEL, "-sm", "layer", "-mg", "1"], {}, A100X4, [0, 1, 2, 3]),
        ([SERVER, "-m", MODEL, "-sm", "row", "-mg", "1"], {}, A100X4, [0, 1, 2, 3]),
        (
            [SERVER, "-m", MODEL],
            {"LLAMA_ARG_SPLIT_MODE": "none", "LLAMA_ARG_MAIN_GPU": "3"},
            A100X4,
            [3],
        ),
        (
            [
                "python",
                "-m",
                "llama_cpp.server",
                "--model",
                MODEL,
                "--n_gpu_layers",
                "-1",
                "--split_mode",
                "0",
                "--main_gpu",
                "1",
            ],
            {},
            A100X4,
            [1],
        ),
        # vLLM: the first tensor x pipeline x data parallel visible GPUs
        (["vllm", "serve", "m"], {}, A100X4, [0]),
        (["vllm", "serve", "m", "-tp", "2"], {}, A100X4, [0, 1]),
        (
            ["vllm", "serve", "m", "--tensor-parallel-size", "2"],
            {"CUDA_VISIBLE_DEVICES": "2,3"},
            A100X4,
            [2, 3],
        ),
        (
            ["vllm", "serve", "m", "--tensor-parallel-size=2"],
            {"CUDA_VISIBLE_DEVICES": "3,1,0"},
            A100X4,
            [1, 3],
        ),
        (["vllm", "serve", "m", "--tensor_parallel_size", "2"], {}, A100X4, [0, 1]),
        (["vllm", "serve", "m", "-tp", "2", "-pp", "2"], {}, A100X4, [0, 1, 2, 3]),
        (
            ["vllm", "serve", "m", "--pipeline-parallel-size", "2"],
            {"CUDA_VISIBLE_DEVICES": "1,2,3"},
            A100X4,
            [1, 2],
        ),
        (["vllm", "serve", "m", "-tp", "2", "-dp", "2"], {}, A100X4, [0, 1, 2, 3]),
        (["vllm", "serve", "m", "-tp", "8"], {}, A100X4, [0, 1, 2, 3]),  # the rest on other nodes
        (["vllm", "serve", "m", "-tp", "2"], {"HIP_VISIBLE_DEVICES": "1,3"}, AMD, [1, 3]),
        (["vllm", "serve", "m", "-tp", "2"], {}, MIXED, [0, 1]),
        (["vllm", "serve", "m"], {"CUDA_VISIBLE_DEVICES": "GPU-aaaa"}, MIXED, [0]),
        # Ollama: the runner's own mask
        (
            ["ollama", "runner", "--model", OLLAMA_BLOB, "--port", "1"],
            {"CUDA_VISIBLE_DEVICES": "GPU-11aa0000-0000-0000-0000-000000000001"},
            A100X4,
            [1],
        ),
        (
            ["ollama", "runner", "--model", OLLAMA_BLOB, "--port", "1"],
            {"ROCR_VISIBLE_DEVICES": "0,2"},
            AMD,
            [0, 2],
        ),
        (["ollama", "runner", "--model", OLLAMA_BLOB, "--port", "1"], {}, BOTH, [0, 1, 2]),
    ],
)
def test_intended_gpus_from_the_mask_then_the_flags(
    cmdline: list[str], env: dict[str, str], gpus: list[GpuSample], expected: list[int]
) -> None:
    d = found(cmdline, env, gpus)
    assert (d.spec.gpus, d.gpus_unknown, d.cpu_on_purpose) == (expected, None, None)


@pytest.mark.parametrize(
    ("cmdline", "env", "gpus", "reason"),
    [
        (
            [SERVER, "-m", MODEL],
            {"CUDA_VISIBLE_DEVICES": "MIG-4b2a9f60-1234-5678-9abc-def012345678"},
            A100X4,
            "CUDA_VISIBLE_DEVICES names a MIG instance (MIG-4b2a9f60-1234-5678-9abc-def012345678), not a whole GPU",
        ),
        (
            [SERVER, "-m", MODEL],
            {"CUDA_VISIBLE_DEVICES": "0"},
            MIXED,
            "CUDA_DEVICE_ORDER is unset (fastest first) on a node of mixed GPUs; "
            "set CUDA_DEVICE_ORDER=PCI_BUS_ID",
        ),
        (
            ["vllm", "serve", "m"],
            {"CUDA_VISIBLE_DEVICES": "1", "CUDA_DEVICE_ORDER": "FASTEST_FIRST"},
            A100X4,
            "CUDA_DEVICE_ORDER=FASTEST_FIRST numbers GPUs by speed, not bus order",
        ),
        (
            [SERVER, "-m", MODEL, "-dev", "CUDA1"],
            {},
            MIXED,
            "CUDA_DEVICE_ORDER is unset (fastest first) on a node of mixed GPUs, so which GPU it "
            "picked cannot be told; set CUDA_DEVICE_ORDER=PCI_BUS_ID",
        ),
        (
            [SERVER, "-m", MODEL, "-sm", "none", "-mg", "1"],
            {},
            MIXED,
            "CUDA_DEVICE_ORDER is unset (fastest first) on a node of mixed GPUs, so which GPU it "
            "picked cannot be told; set CUDA_DEVICE_ORDER=PCI_BUS_ID",
        ),
        (
            ["vllm", "serve", "m"],
            {},
            MIXED,
            "CUDA_DEVICE_ORDER is unset (fastest first) on a node of mixed GPUs, so which GPU it "
            "picked cannot be told; set CUDA_DEVICE_ORDER=PCI_BUS_ID",
        ),
        (
            [SERVER, "-m", MODEL, "-sm", "none"],
            {"CUDA_DEVICE_ORDER": "FASTEST_FIRST"},
            A100X4,
            "CUDA_DEVICE_ORDER=FASTEST_FIRST numbers GPUs by speed, not bus order, so which one "
            "it picked cannot be told",
        ),
        (
            [SERVER, "-m", MODEL],
            {"CUDA_VISIBLE_DEVICES": "7"},
            A100X4,
            "CUDA_VISIBLE_DEVICES=7 names no GPU of this node (GPUs 0, 1, 2, 3); check the mask, "
            "or the GPU tools' list of this node's GPUs",
        ),
        (
            [SERVER, "-m", MODEL, "--device", "Vulkan0"],
            {},
            A100X4,
            "--device Vulkan0 names Vulkan0, a device in the Vulkan loader's order, which "
            "counts every vendor's GPUs and CPU renderers and which no GPU tool gives; place "
            "this shard in a shards file",
        ),
        (
            [SERVER, "-m", MODEL, "--device", "MUSA0"],
            {},
            A100X4,
            "--device MUSA0 names MUSA0, whose number is not a CUDA, ROCm or SYCL device "
            "number; place this shard in a shards file",
        ),
        (
            [SERVER, "-m", MODEL, "-dev", "CUDA2"],
            {"CUDA_VISIBLE_DEVICES": "0,1"},
            A100X4,
            "-dev CUDA2 names CUDA2, but only 2 NVIDIA GPU(s) are visible to it",
        ),
        ([SERVER, "-m", MODEL, "-dev", "ROCm0"], {}, A100X4, "this node has no AMD GPU"),
        (
            [SERVER, "-m", MODEL, "-sm", "none", "-mg", "4"],
            {},
            A100X4,
            "-sm none with -mg 4, but it sees 4 GPU(s)",
        ),
        (
            ["vllm", "serve", "m", "-tp", "2"],
            {},
            BOTH,
            "vLLM runs on one platform and both NVIDIA and AMD GPUs are visible to it; "
            "set CUDA_VISIBLE_DEVICES or HIP_VISIBLE_DEVICES to the ones it should use",
        ),
        (
            ["python", "-m", "llama_cpp.server", "--config_file", "/etc/llama/models.json"],
            {},
            A100X4,
            "its settings come from --config_file /etc/llama/models.json, which placewatch does "
            "not read; place this shard in a shards file to say which GPUs it should use",
        ),
    ],
)
def test_gpus_that_cannot_be_told_say_why(
    cmdline: list[str], env: dict[str, str], gpus: list[GpuSample], reason: str
) -> None:
    d = found(cmdline, env, gpus)
    assert (d.gpus_unknown, d.cpu_on_purpose) == (reason, None)


def test_an_unreadable_environment_leaves_the_gpus_unknown() -> None:
    d = classify([SERVER, "-m", MODEL, "-ngl", "99"], None, 4242, A100X4)
    assert d is not None
    assert d.gpus_unknown == (
        "its environment could not be read for a device mask (CUDA_VISIBLE_DEVICES, "
        "HIP_VISIBLE_DEVICES); run the worker as root or as the engine's user, or place "
        "this shard in a shards file"
    )
    assert d.cpu_on_purpose is None


def test_an_unreadable_environment_on_intel_gpus_names_their_masks() -> None:
    d = classify([SERVER, "-m", MODEL, "-ngl", "99"], None, 4242, INTEL)
    assert d is not None
    assert d.gpus_unknown == (
        "its environment could not be read for a device mask (ONEAPI_DEVICE_SELECTOR, "
        "ZE_AFFINITY_MASK); run the worker as root or as the engine's user, or place "
        "this shard in a shards file"
    )


@pytest.mark.parametrize(
    ("cmdline", "says"),
    [
        ([SERVER, "-m", MODEL, "-ngl", "0"], "-ngl 0"),
        ([SERVER, "-m", MODEL, "--device", "none"], "--device none"),
        (["vllm", "serve", "m", "--device", "cpu"], "--device cpu"),
    ],
)
def test_an_unreadable_environment_does_not_matter_when_the_command_line_says_cpu(
    cmdline: list[str], says: str
) -> None:
    d = classify(cmdline, None, 4242, A100X4)
    assert d is not None
    assert (d.spec.gpus, d.cpu_on_purpose, d.gpus_unknown) == ([], says, None)


def test_llama_cpp_python_without_its_environment_cannot_tell_its_default() -> None:
    d = classify(["python", "-m", "llama_cpp.server", "--model", MODEL], None, 4242, A100X4)
    assert d is not None
    assert d.cpu_on_purpose is None
    assert d.gpus_unknown is not None and "could not be read" in d.gpus_unknown


@pytest.mark.parametrize("env", [{}, None, {"CUDA_VISIBLE_DEVICES": "0"}])
def test_a_node_without_gpus_places_every_engine_on_the_cpu(env: dict[str, str] | None) -> None:
    d = classify(["vllm", "serve", "m", "-tp", "2"], env, 4242, [])
    assert d is not None
    assert (d.spec.gpus, d.gpus_unknown) == ([], None)


# --- no GPU tool answered: the node's GPUs cannot be told ------------------------------------

SILENT = ["nvml", "nvidia-smi", "rocm-smi", "amd-smi"]


@pytest.mark.parametrize(
    ("cmdline", "env", "asks"),
    [
        ([SERVER, "-m", MODEL, "-ngl", "99"], {}, "-ngl 99"),
        ([SERVER, "-m", MODEL, "--n-gpu-layers=all"], {}, "--n-gpu-layers=all"),
        ([SERVER, "-m", MODEL], {"LLAMA_ARG_N_GPU_LAYERS": "99"}, "LLAMA_ARG_N_GPU_LAYERS=99"),
        ([SERVER, "-m", MODEL], {}, "no -ngl; recent llama.cpp builds offload by default"),
        ([SERVER, "-m", MODEL, "-dev", "CUDA1"], {}, "-dev CUDA1"),
        ([SERVER, "-m", MODEL, "-ngl", "99"], None, "-ngl 99"),  # environment unreadable
        (
            [SERVER, "-m", MODEL, "-ngl", "99"],
            {"HIP_VISIBLE_DEVICES": ""},
            "-ngl 99",
        ),  # NVIDIA sees its GPUs
        (
            ["ollama", "runner", "--model", OLLAMA_BLOB, "--port", "1"],
            {"CUDA_VISIBLE_DEVICES": "GPU-0"},
            "an Ollama runner, which offloads what fits",
        ),
        (["vllm", "serve", "m", "-tp", "2"], {}, "vLLM without --device cpu"),
    ],
)
def test_an_engine_asking_for_gpus_where_no_gpu_tool_answered_is_unknown_naming_the_tools(
    cmdline: list[str], env: dict[str, str] | None, asks: str
) -> None:
    d = classify(cmdline, env, 4242, [], tools_silent=SILENT)
    assert d is not None
    assert (d.spec.gpus, d.cpu_on_purpose, d.gpu_request) == ([], None, asks)
    assert d.gpus_unknown == (
        f"it asks for GPUs ({asks}), but no GPU tool answered on this node "
        "(nvml, nvidia-smi, rocm-smi, amd-smi); run `placewatch doctor` to see why"
    )


@pytest.mark.parametrize(
    ("cmdline", "env", "says"),
    [
        ([SERVER, "-m", MODEL, "-ngl", "0"], {}, "-ngl 0"),
        ([SERVER, "-m", MODEL, "--device", "none"], {}, "--device none"),
        (
            [SERVER, "-m", MODEL, "-ngl", "99"],
            {"CUDA_VISIBLE_DEVICES": ""},
            "CUDA_VISIBLE_DEVICES=",
        ),
        (
            [SERVER, "-m", MODEL, "-ngl", "99"],
            {"CUDA_VISIBLE_DEVICES": "-1"},
            "CUDA_VISIBLE_DEVICES=-1",
        ),
        (
            [SERVER, "-m", MODEL, "-ngl", "99"],
            {"ROCR_VISIBLE_DEVICES": "-1", "CUDA_VISIBLE_DEVICES": ""},
            "ROCR_VISIBLE_DEVICES=-1 CUDA_VISIBLE_DEVICES=",
        ),
        (
            ["python", "-m", "llama_cpp.server", "--model", MODEL],
            {},
            "no --n_gpu_layers (llama-cpp-python's default is 0 layers on the GPU)",
        ),
        (["vllm", "serve", "m", "--device", "cpu"], {}, "--device cpu"),
    ],
)
def test_an_engine_meant_for_the_cpu_stays_cpu_where_no_gpu_tool_answered(
    cmdline: list[str], env: dict[str, str], says: str
) -> None:
    d = classify(cmdline, env, 4242, [], tools_silent=SILENT)
    assert d is not None
    assert (d.spec.gpus, d.cpu_on_purpose, d.gpus_unknown, d.gpu_request) == ([], says, None, None)


def test_a_mask_that_only_amd_reads_hides_nothing_from_nvidia_where_no_tool_answered() -> None:
    # CUDA_VISIBLE_DEVICES=0 leaves NVIDIA GPU 0 (and AMD reads HIP_VISIBLE_DEVICES first).
    env = {"HIP_VISIBLE_DEVICES": "-1", "CUDA_VISIBLE_DEVICES": "0"}
    d = classify([SERVER, "-m", MODEL, "-ngl", "99"], env, 4242, [], tools_silent=["nvidia-smi"])
    assert d is not None
    assert d.cpu_on_purpose is None
    assert d.gpus_unknown is not None and "(nvidia-smi)" in d.gpus_unknown


def test_with_no_source_to_name_the_reason_still_says_no_gpu_tool_answered() -> None:
    d = classify([SERVER, "-m", MODEL, "-ngl", "99"], {}, 4242, [], tools_silent=[])
    assert d is not None and d.gpus_unknown is not None
    assert "no GPU tool answered on this node; run `placewatch doctor`" in d.gpus_unknown


# --- a draft model of its own (speculative decoding) -------------------------------------

DRAFT = "/models/Llama-3.2-1B-Instruct-Q4_K_M.gguf"


@pytest.mark.parametrize(
    ("cmdline", "env", "asks"),
    [
        ([SERVER, "-m", MODEL, "-ngl", "0", "-md", DRAFT, "-ngld", "99"], {}, "-ngld 99"),
        (
            [SERVER, "-m", MODEL, "-ngl", "0", "--model-draft", DRAFT],
            {},
            f"--model-draft {DRAFT}, its layers on the GPU by default",
        ),
        (
            [
                SERVER,
                "-m",
                MODEL,
                "--device",
                "none",
                "--spec-draft-model",
                DRAFT,
                "-devd",
                "CUDA0",
            ],
            {},
            f"--spec-draft-model {DRAFT}, its layers on the GPU by default",
        ),
        (
            [SERVER, "-m", MODEL, "-ngl", "0", "-hfd", "org/draft", "--gpu-layers-draft", "all"],
            {},
            "--gpu-layers-draft all",
        ),
        (
            [SERVER, "-m", MODEL],
            {
                "LLAMA_ARG_N_GPU_LAYERS": "0",
                "LLAMA_ARG_SPEC_DRAFT_MODEL": DRAFT,
                "LLAMA_ARG_N_GPU_LAYERS_DRAFT": "99",
            },
            "LLAMA_ARG_N_GPU_LAYERS_DRAFT=99",
        ),
        (
            [SERVER, "-m", MODEL, "-ngl", "0"],
            {"LLAMA_ARG_MODEL_DRAFT": DRAFT},
            f"LLAMA_ARG_MODEL_DRAFT={DRAFT}, its layers on the GPU by default",
        ),
    ],
)
def test_a_model_on_the_cpu_whose_draft_goes_to_a_gpu_asks_for_the_gpu(
    cmdline: list[str], env: dict[str, str], asks: str
) -> None:
    d = classify(cmdline, env, 4242, [], tools_silent=SILENT)
    assert d is not None
    assert (d.cpu_on_purpose, d.gpu_request) == (None, asks)
    assert d.gpus_unknown is not None and f"it asks for GPUs ({asks})" in d.gpus_unknown
    placed = found(cmdline, env)  # the node's GPUs told: those the draft may use
    gpus = [0] if "-devd" in cmdline else [0, 1, 2, 3]
    assert (placed.spec.gpus, placed.cpu_on_purpose, placed.gpus_unknown) == (gpus, None, None)


def test_the_draft_s_own_device_picks_its_gpu() -> None:
    d = found([SERVER, "-m", MODEL, "-ngl", "0", "-md", DRAFT, "-devd", "CUDA2"], {})
    assert (d.spec.gpus, d.cpu_on_purpose, d.gpus_unknown) == ([2], None, None)


@pytest.mark.parametrize(
    ("cmdline", "env", "says"),
    [
        ([SERVER, "-m", MODEL, "-ngl", "0", "-md", DRAFT, "-ngld", "0"], {}, "-ngl 0"),
        ([SERVER, "-m", MODEL, "-ngl", "0", "-md", DRAFT, "-devd", "none"], {}, "-ngl 0"),
        ([SERVER, "-m", MODEL, "--device", "none", "-md", DRAFT], {}, "--device none"),
        ([SERVER, "-m", MODEL, "-ngl", "0", "-ngld", "99"], {}, "-ngl 0"),  # no draft model
        (
            [SERVER, "-m", MODEL, "-ngl", "0", "-md", DRAFT],
            {"LLAMA_ARG_N_GPU_LAYERS_DRAFT": "0"},
            "-ngl 0",
        ),
    ],
)
def test_a_draft_kept_on_the_cpu_too_leaves_the_server_on_the_cpu_on_purpose(
    cmdline: list[str], env: dict[str, str], says: str
) -> None:
    d = found(cmdline, env)
    assert (d.spec.gpus, d.cpu_on_purpose, d.gpus_unknown) == ([], says, None)


# --- a router by its flags or its variables --------------------------------------------------


@pytest.mark.parametrize(
    ("cmdline", "env"),
    [
        ([SERVER, "--models-dir", "/models"], {}),
        ([SERVER, "--models-preset", "/etc/models.ini"], {}),
        ([SERVER, "--port", "8080"], {"LLAMA_ARG_MODELS_DIR": "/models"}),
        ([SERVER, "--port", "8080"], {"LLAMA_ARG_MODELS_PRESET": "/etc/models.ini"}),
        # no model at all: b11434 routes over its models cache ("starting server in router
        # mode", tests/integration/engines/test_llama_server_lane.py)
        ([SERVER, "--port", "8080"], {}),
        ([SERVER, "--port", "8080"], {"LLAMA_ARG_MODELS_DIR": ""}),
        ([SERVER, "--spec-default"], {}),  # a draft's settings name no model
        ([SERVER, "-hf", ""], {}),
    ],
)
def test_a_router_is_no_shard_by_its_flag_its_variable_or_no_model_at_all(
    cmdline: list[str], env: dict[str, str]
) -> None:
    assert classify(cmdline, env, 4242, A100X4) is None


@pytest.mark.parametrize(
    ("cmdline", "env"),
    [
        ([SERVER, "-m", MODEL], {"LLAMA_ARG_MODELS_DIR": "/models"}),  # a model of its own
        ([SERVER, "-hf", "org/model"], {"LLAMA_ARG_MODELS_DIR": "/models"}),
        ([SERVER], {"LLAMA_ARG_MODEL": MODEL, "LLAMA_ARG_MODELS_DIR": "/models"}),
        ([SERVER], {"LLAMA_ARG_HF_REPO": "org/model", "LLAMA_ARG_MODELS_DIR": "/models"}),
        ([SERVER, "--models-dir", "/models"], {"LLAMA_ARG_MODEL": MODEL}),
        ([SERVER, "--gpt-oss-20b-default"], {}),  # a built-in preset names its model
        ([SERVER, "--fim-qwen-7b-spec", "--port", "8012"], {}),
        ([SERVER, "--embd-gemma-default"], {"LLAMA_ARG_MODELS_DIR": "/models"}),
    ],
)
def test_a_server_with_a_model_of_its_own_is_a_shard_whatever_its_models_folder(
    cmdline: list[str], env: dict[str, str]
) -> None:
    assert classify(cmdline, env, 4242, A100X4) is not None


# --- Intel: Level Zero's masks and llama.cpp's SYCL devices ---------------------------------

INTEL_CASES = [
    # ONEAPI_DEVICE_SELECTOR leaves one GPU: it is SYCL0, whatever the order
    (
        [SERVER, "-m", MODEL, "--device", "SYCL0"],
        {"ONEAPI_DEVICE_SELECTOR": "level_zero:1", **PCI_ORDER},
        [1],
    ),
    ([SERVER, "-m", MODEL, "-dev", "SYCL0"], {"ZE_AFFINITY_MASK": "1", **PCI_ORDER}, [1]),
    (
        [SERVER, "-m", MODEL],
        {"LLAMA_ARG_DEVICE": "SYCL0", "ONEAPI_DEVICE_SELECTOR": "!level_zero:0", **PCI_ORDER},
        [1],
    ),
    # every visible GPU, in whatever order, is every visible GPU
    ([SERVER, "-m", MODEL, "-dev", "SYCL1,SYCL0"], {}, [0, 1]),
    (
        [SERVER, "-m", MODEL, "-dev", "SYCL0,SYCL1"],
        {"ONEAPI_DEVICE_SELECTOR": "level_zero:*"},
        [0, 1],
    ),
    ([SERVER, "-m", MODEL, "-ngl", "99"], {}, [0, 1]),
    ([SERVER, "-m", MODEL], {"ONEAPI_DEVICE_SELECTOR": "level_zero:0", **PCI_ORDER}, [0]),
    (
        [SERVER, "-m", MODEL, "-sm", "none"],
        {"ONEAPI_DEVICE_SELECTOR": "level_zero:1", **PCI_ORDER},
        [1],
    ),
]


@pytest.mark.parametrize(("cmdline", "env", "expected"), INTEL_CASES)
def test_intel_gpus_from_level_zero_masks_then_sycl_devices(
    cmdline: list[str], env: dict[str, str], expected: list[int]
) -> None:
    d = found(cmdline, env, INTEL)
    assert (d.spec.gpus, d.gpus_unknown, d.cpu_on_purpose) == (expected, None, None)


@pytest.mark.parametrize(
    ("cmdline", "env", "reason"),
    [
        (
            [SERVER, "-m", MODEL, "--device", "SYCL1"],
            {},
            "ggml-sycl numbers the 2 Intel GPUs visible to it SYCL's default device first, "
            "then by compute units, not bus order, so which it picked cannot be told; leave it "
            "one GPU (ONEAPI_DEVICE_SELECTOR=level_zero:N)",
        ),
        (
            [SERVER, "-m", MODEL, "-sm", "none", "-mg", "1"],
            {**PCI_ORDER},
            "ggml-sycl numbers the 2 Intel GPUs visible to it SYCL's default device first, "
            "then by compute units, not bus order, so which it picked cannot be told; leave it "
            "one GPU (ONEAPI_DEVICE_SELECTOR=level_zero:N)",
        ),
        (
            [SERVER, "-m", MODEL, "--device", "SYCL0"],
            {"ONEAPI_DEVICE_SELECTOR": "level_zero:1"},
            "ONEAPI_DEVICE_SELECTOR=level_zero:1 numbers Level Zero devices in the driver's "
            "order, which is bus order only with ZE_ENABLE_PCI_ID_DEVICE_ORDER=1; set "
            "ZE_ENABLE_PCI_ID_DEVICE_ORDER=1",
        ),
        (
            [SERVER, "-m", MODEL, "--device", "SYCL1"],
            {"ONEAPI_DEVICE_SELECTOR": "level_zero:1", **PCI_ORDER},
            "--device SYCL1 names SYCL1, but only 1 Intel GPU(s) are visible to it",
        ),
        (
            [SERVER, "-m", MODEL, "--device", "Vulkan0"],
            {},
            "--device Vulkan0 names Vulkan0, a device in the Vulkan loader's order, which "
            "counts every vendor's GPUs and CPU renderers and which no GPU tool gives; place "
            "this shard in a shards file",
        ),
        (
            [SERVER, "-m", MODEL],
            {"GGML_VK_VISIBLE_DEVICES": "0,2"},
            "GGML_VK_VISIBLE_DEVICES=0,2 numbers Vulkan devices in the Vulkan loader's order, "
            "which counts every vendor's GPUs and CPU renderers and which no GPU tool gives, "
            "so which GPUs it names cannot be told",
        ),
        (
            [SERVER, "-m", MODEL],
            {"ONEAPI_DEVICE_SELECTOR": "level_zero:0.1"},
            "ONEAPI_DEVICE_SELECTOR names a sub-device (level_zero:0.1), a tile of a GPU, "
            "not a whole GPU",
        ),
        (
            [SERVER, "-m", MODEL],
            {"ONEAPI_DEVICE_SELECTOR": "level_zero;0"},
            "ONEAPI_DEVICE_SELECTOR=level_zero;0 is not a selector DPC++ accepts "
            "([!]backend:devices, such as level_zero:0 or level_zero:*)",
        ),
        (
            [SERVER, "-m", MODEL],
            {"ONEAPI_DEVICE_SELECTOR": "level_zero:cpu"},
            "ONEAPI_DEVICE_SELECTOR=level_zero:cpu names no GPU of this node (GPUs 0, 1); "
            "check the mask, or the GPU tools' list of this node's GPUs",
        ),
        ([SERVER, "-m", MODEL, "-dev", "SYCL0"], {}, "ggml-sycl numbers the 2 Intel GPUs"),
        (
            [SERVER, "-m", MODEL, "-dev", "SYCL0"],
            {"CUDA_VISIBLE_DEVICES": "0"},
            "ggml-sycl numbers",
        ),
    ],
)
def test_intel_gpus_that_cannot_be_told_say_why(
    cmdline: list[str], env: dict[str, str], reason: str
) -> None:
    d = found(cmdline, env, INTEL)
    assert d.gpus_unknown is not None and d.gpus_unknown.startswith(reason)
    assert (d.spec.gpus, d.cpu_on_purpose) == ([], None)


INTEL_AFTER_NVIDIA = [
    GpuSample(
        index=i + 1, vendor="intel", name="Intel GPU 8086:e20b (xe)", bus_id=f"0000:0{i + 5}:00.0"
    )
    for i in range(1)
]


def test_a_cuda_device_on_a_node_of_nvidia_and_intel_gpus_ignores_intel_masks() -> None:
    node = [GpuSample(index=0, uuid="GPU-aaaa", name="NVIDIA L4"), *INTEL_AFTER_NVIDIA]
    env = {"GGML_VK_VISIBLE_DEVICES": "1"}  # unknowable, but not what CUDA0 reads
    d = found([SERVER, "-m", MODEL, "-dev", "CUDA0"], env, node)
    assert (d.spec.gpus, d.gpus_unknown) == ([0], None)
    d = found(
        [SERVER, "-m", MODEL, "-dev", "SYCL0"], {"ONEAPI_DEVICE_SELECTOR": "level_zero:0"}, node
    )
    assert (d.spec.gpus, d.gpus_unknown) == ([1], None)


def test_a_hostile_device_name_is_quoted_printable_and_short() -> None:
    d = found([SERVER, "-m", MODEL, "-dev", "\x1b[2J" + "A" * 500], {}, INTEL)
    assert d.gpus_unknown is not None
    assert d.gpus_unknown.startswith("-dev ")
    assert "names ?[2JAAA" in d.gpus_unknown and "\x1b" not in d.gpus_unknown
    assert d.gpus_unknown.endswith(
        "AAA..., whose number is not a CUDA, ROCm or SYCL device number; place this shard "
        "in a shards file"
    )
