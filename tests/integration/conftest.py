"""Fixtures of the integration tests that start a real llama-server (tests/support/llama_server.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.llama_server import LlamaServers, needs_llama_server


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The half-megabyte model every test server loads, written once."""
    from tests.support import tiny_gguf  # numpy and gguf: imported by these tests only

    return tiny_gguf.write(tmp_path_factory.mktemp("model") / "tiny.gguf")


@pytest.fixture
def llama_servers(tiny_model: Path) -> Iterator[LlamaServers]:
    """Real llama-servers on the tiny model, each stopped when the test ends."""
    needs_llama_server()
    servers = LlamaServers(tiny_model)
    try:
        yield servers
    finally:
        with contextlib.suppress(OSError):
            servers.stop()
