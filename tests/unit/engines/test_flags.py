"""Reading a flag from the command line, else from the variable the engine reads."""

from __future__ import annotations

import pytest

from placewatch.worker.engines import read_launch
from placewatch.worker.engines.flags import DEVICE, PORT, flag, lookup, setting

from tests.support.discovery import MODEL, SERVER, found

LLAMA_CPP_PYTHON = read_launch(["python3", "-m", "llama_cpp.server"])
OLLAMA_RUNNER = read_launch(["ollama", "runner", "--model", "blob", "-port", "41000"])


@pytest.mark.parametrize(
    ("args", "names", "expected"),
    [
        (["-ngl", "99", "-ngl", "0"], {"-ngl"}, ("-ngl 0", "0")),  # the last one counts
        (["-ngl=0"], {"-ngl"}, ("-ngl=0", "0")),
        (["--n_gpu_layers=5"], {"--n-gpu-layers"}, ("--n_gpu_layers=5", "5")),
        (["-mg", "-1"], {"-mg"}, ("-mg -1", "-1")),
        (["--", "-ngl", "0"], {"-ngl"}, None),  # after `--`, arguments are not flags
        (["-ngl"], {"-ngl"}, None),  # no value left
        (["-port", "41000"], {"--port"}, None),  # one dash is another flag but in Go
    ],
)
def test_a_flag_is_read_as_written(
    args: list[str], names: set[str], expected: tuple[str, str] | None
) -> None:
    assert flag(args, names) == expected


def test_go_reads_one_dash_as_two() -> None:
    assert flag(["-port", "41000"], {"--port"}, go=True) == ("-port 41000", "41000")
    assert OLLAMA_RUNNER is not None
    assert lookup(PORT, OLLAMA_RUNNER, {}) == ("-port 41000", "41000")


def test_the_command_line_overrides_a_variable_that_says_cpu() -> None:
    d = found([SERVER, "-m", MODEL, "-ngl", "99"], {"LLAMA_ARG_N_GPU_LAYERS": "0"})
    assert (d.spec.gpus, d.cpu_on_purpose) == ([0, 1, 2, 3], None)


def test_llama_cpp_python_reads_its_variables_in_either_case() -> None:
    assert LLAMA_CPP_PYTHON is not None
    names = {"--n-gpu-layers"}
    assert setting(LLAMA_CPP_PYTHON, {"n_gpu_layers": "0"}, names, "N_GPU_LAYERS") == (
        "n_gpu_layers=0",
        "0",
    )
    assert setting(
        LLAMA_CPP_PYTHON, {"N_GPU_LAYERS": "1", "n_gpu_layers": "0"}, names, "N_GPU_LAYERS"
    ) == ("N_GPU_LAYERS=1", "1")


def test_llama_cpp_reads_its_variables_in_capitals_only() -> None:
    server = read_launch([SERVER, "-m", MODEL])
    assert server is not None
    assert setting(server, {"llama_arg_port": "1"}, {"--port"}, "LLAMA_ARG_PORT") is None
    assert setting(server, {"LLAMA_ARG_PORT": "1"}, {"--port"}, "LLAMA_ARG_PORT") == (
        "LLAMA_ARG_PORT=1",
        "1",
    )


def test_a_setting_the_engine_does_not_have_is_none() -> None:
    assert OLLAMA_RUNNER is not None
    assert lookup(DEVICE, OLLAMA_RUNNER, {"LLAMA_ARG_DEVICE": "none"}) is None
