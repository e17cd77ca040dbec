"""Fixtures of the integration tests that start a real llama-server (tests/support/llama_server.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.llama_server import LlamaServers, list_devices


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The half-megabyte model every test server loads, written once."""
    from tests.support import tiny_gguf  # numpy and gguf: imported by these tests only

    return tiny_gguf.write(tmp_path_factory.mktemp("model") / "tiny.gguf")


@pytest.fixture
def llama_servers(llama_server_binary: Path, tiny_model: Path) -> Iterator[LlamaServers]:
    """Real llama-servers on the tiny model, each stopped when the test ends."""
    servers = LlamaServers(llama_server_binary, tiny_model)
    try:
        yield servers
    finally:
        with contextlib.suppress(OSError):
            servers.stop()


@pytest.fixture
def cpu_only_build(llama_server_binary: Path) -> Path:
    """The binary, when it is a build without a GPU backend (the lane's build); tests that
    read what a CPU-only build says skip, saying why, on a build that lists a GPU."""
    listed = list_devices(llama_server_binary)
    if listed:
        pytest.skip(
            f"{llama_server_binary} lists GPU devices ({', '.join(listed)}): "
            "this test reads what a CPU-only build says"
        )
    return llama_server_binary
