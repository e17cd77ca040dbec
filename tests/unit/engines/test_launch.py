"""Which engine a command line starts, and which command lines start none."""

from __future__ import annotations

import pytest

from placewatch.worker.engines import LLAMA_CPP, OLLAMA, VLLM, read_launch
from placewatch.worker.shards.discover import classify

from tests.support.discovery import A100X4


@pytest.mark.parametrize(
    "cmdline",
    [
        ["/usr/local/bin/ollama", "serve"],
        ["ollama", "run", "llama3.1"],
        ["ollama", "runner", "--ollama-engine", "--port", "41234"],  # 0.12's GPU discovery probe
        ["python", "app.py"],
        ["python3", "-c", "import vllm"],
        ["python3", "-m", "http.server", "8080"],
        ["grep", "--color=auto", "llama-server"],
        ["vim", "/opt/llama.cpp/build/bin/llama-server"],
        ["bash", "-c", "llama-server -m model.gguf --port 8080"],
        ["tail", "-f", "/var/log/llama-server.log"],
        ["vllm", "chat", "--url", "http://localhost:8000/v1"],
        ["python3", "/home/me/vllm_notes.py", "serve"],
        ["llama-server-wrapper.sh"],
        [],
    ],
)
def test_processes_that_are_not_engines_are_not_shards(cmdline: list[str]) -> None:
    assert classify(cmdline, {}, 4242, A100X4) is None


@pytest.mark.parametrize(
    ("cmdline", "engine", "name", "args"),
    [
        # CPython's own options come before the module or script, and combine
        (["python3", "-um", "vllm.entrypoints.cli.main", "serve", "m"], VLLM, "vllm", ("m",)),
        (["python3", "-Wignore", "-m", "llama_cpp.server"], LLAMA_CPP, "llama-cpp-python", ()),
        (["python3", "-W", "ignore", "-m", "llama_cpp.server"], LLAMA_CPP, "llama-cpp-python", ()),
        (
            [
                "python3",
                "--check-hash-based-pycs",
                "always",
                "-m",
                "llama_cpp.server",
                "--port",
                "1",
            ],
            LLAMA_CPP,
            "llama-cpp-python",
            ("--port", "1"),
        ),
        (["python3", "-X", "importtime", "-m", "vllm.entrypoints.api_server"], VLLM, "vllm", ()),
        (["python3.12t", "-m", "vllm.entrypoints.openai.api_server"], VLLM, "vllm", ()),
        (["PYTHON3.EXE", "-m", "llama_cpp.server"], LLAMA_CPP, "llama-cpp-python", ()),
        # the vllm console script, run by the interpreter
        (["python3", "--", "/venv/bin/vllm", "serve", "m"], VLLM, "vllm", ("m",)),
        (
            ["python3", "-I", "/venv/bin/vllm", "run-batch", "-i", "in.jsonl"],
            VLLM,
            "vllm-run-batch",
            ("-i", "in.jsonl"),
        ),
        # Ollama's runner before it had the `runner` subcommand, and Go's one-dash flags
        (["ollama_llama_server", "--model", "blob"], OLLAMA, "ollama-runner", ("--model", "blob")),
        (["ollama", "runner", "-model", "blob"], OLLAMA, "ollama-runner", ("-model", "blob")),
        ([r"C:\LLAMA\LLAMA-SERVER.EXE", "-m", "x"], LLAMA_CPP, "llama-server", ("-m", "x")),
    ],
)
def test_the_engine_and_its_own_arguments_come_from_the_command_line(
    cmdline: list[str], engine: str, name: str, args: tuple[str, ...]
) -> None:
    launch = read_launch(cmdline)
    assert launch is not None
    assert (launch.engine, launch.name, launch.args) == (engine, name, args)


@pytest.mark.parametrize(
    "cmdline",
    [
        ["python3"],
        ["python3", "-"],  # the program comes from stdin
        ["python3", "--", "-"],
        ["python3", "-m"],
        ["python3", "-W"],
        ["python3", "-cimport vllm"],
        ["python3", "-i", "-E"],
    ],
)
def test_an_interpreter_that_names_no_module_or_script_is_no_engine(cmdline: list[str]) -> None:
    assert read_launch(cmdline) is None
