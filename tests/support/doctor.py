"""What the doctor's tests share: fake llama.cpp builds, their outputs, the report's lines.

The fake llama-server builds print what llama.cpp prints for `--list-devices`, written
here as text (nothing is read from the corpus), in the formats its real logs show: the
device list of a `--list-devices` run, the `load_backend` lines of a CUDA backend that did
not load; the device list on stdout, ggml's own lines on stderr.
"""

from __future__ import annotations

from pathlib import Path

from tests.conftest import FIXTURES

A100_GPUS = FIXTURES / "nvidia-smi" / "a100x2-query-gpu.csv"

TWO_CUDA_DEVICES = (
    "ggml_cuda_init: GGML_CUDA_FORCE_MMQ:    no\n"
    "ggml_cuda_init: GGML_CUDA_FORCE_CUBLAS: no\n"
    "ggml_cuda_init: found 2 CUDA devices:\n"
    "  Device 0: NVIDIA A100-SXM4-80GB, compute capability 8.0, VMM: yes\n"
    "  Device 1: NVIDIA A100-SXM4-80GB, compute capability 8.0, VMM: yes\n",
    "Available devices:\n"
    "  CUDA0: NVIDIA A100-SXM4-80GB (81050 MiB, 80614 MiB free)\n"
    "  CUDA1: NVIDIA A100-SXM4-80GB (81050 MiB, 81047 MiB free)\n",
)
"""(stderr, stdout) of a CUDA build of llama-server on two A100s."""

CUDA_BACKEND_FAILED = (
    "load_backend: failed to load /opt/llama.cpp/lib/libggml-cuda.so: libcublas.so.12: "
    "cannot open shared object file: No such file or directory\n"
    "load_backend: loaded CPU backend from /opt/llama.cpp/lib/libggml-cpu-haswell.so\n",
    "Available devices:\n",
)
"""The same build where libggml-cuda.so cannot find its CUDA runtime: no device at all."""


def fake_engine(folder: Path, output: tuple[str, str]) -> Path:
    """An executable named llama-server that answers --list-devices as a real build does."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "stderr.txt").write_text(output[0])
    (folder / "stdout.txt").write_text(output[1])
    engine = folder / "llama-server"
    engine.write_text(
        "#!/bin/sh\n"
        '[ "$1" = "--list-devices" ] || exit 2\n'
        f'cat "{folder}/stderr.txt" >&2\n'
        f'cat "{folder}/stdout.txt"\n'
    )
    engine.chmod(0o755)
    return engine


def shell_engine(folder: Path, body: str) -> Path:
    """An executable named llama-server that runs `body` as a shell script."""
    folder.mkdir(parents=True, exist_ok=True)
    engine = folder / "llama-server"
    engine.write_text(f"#!/bin/sh\n{body}\n")
    engine.chmod(0o755)
    return engine


def lines(out: str, name: str) -> list[str]:
    """The report's lines of one check, by the name after the outcome."""
    return [line for line in out.splitlines() if line[6:].startswith(f"{name}:")]
