"""What Ollama's server answers, read as hostile input: /api/ps and /api/show as Ollama's
source shapes them (tests/fixtures/ollama), and anything else a process of that name sends."""

from __future__ import annotations

import pytest

from placewatch.worker.engines import ModelClaim
from placewatch.worker.engines.ollama.server import (
    MAX_ANSWER,
    SOURCE,
    body,
    good_name,
    read_ps,
    read_show,
)

from tests.conftest import FIXTURES

HERE = FIXTURES / "ollama"
GiB = 1 << 30
BLOB = "sha256-dde5aa3fc5ffc17176b5e8bdc82f587b24b2678c6c66101bf7da77af9f7ccdff"
"""The model file of llama3.2:3b in the fixtures."""


def test_api_ps_of_a_model_all_on_the_gpu() -> None:
    (claim,) = (read_ps((HERE / "api-ps-gpu.json").read_bytes()) or {}).items()
    assert claim == ("llama3.2:3b", ModelClaim(SOURCE, 6038591897, 6038591897))
    assert claim[1].where == "gpu"
    assert claim[1].said() == "100% GPU (5.6 GiB of 5.6 GiB in GPU memory)"


def test_api_ps_of_a_model_on_the_cpu() -> None:
    claims = read_ps((HERE / "api-ps-cpu.json").read_bytes()) or {}
    assert claims["llama3.2:3b"].where == "cpu"
    assert claims["llama3.2:3b"].said() == "100% CPU (0.0 GiB of 6.9 GiB in GPU memory)"


def test_a_split_reads_as_ollama_ps_prints_it() -> None:
    claim = ModelClaim(SOURCE, 100 * GiB, 52 * GiB)
    assert (claim.where, claim.said()) == (
        "part",
        "48%/52% CPU/GPU (52.0 GiB of 100.0 GiB in GPU memory)",
    )


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"not json",
        b'{"models": "all of them"}',
        b'{"models": [{"name": "m", "size": "big"}]}',
        b"[1, 2]",
    ],
)
def test_an_answer_that_is_not_api_ps_is_none(data: bytes) -> None:
    assert read_ps(data) is None


def test_models_whose_names_or_sizes_make_no_sense_are_left_out() -> None:
    data = (
        b'{"models": [{"name": "ok:1b", "size": 10, "size_vram": 10},'
        b' {"name": "", "size": 10}, {"name": "a b", "size": 10},'
        b' {"name": "\\u001b[31mred", "size": 10}, {"name": "' + b"x" * 200 + b'", "size": 10},'
        b' {"name": "zero", "size": 0}, {"name": "neg", "size": 10, "size_vram": -1}]}'
    )
    assert list(read_ps(data) or {}) == ["ok:1b"]


def test_api_show_names_the_model_file_its_from_line_loads() -> None:
    assert read_show((HERE / "api-show.json").read_bytes()) == BLOB
    assert read_show(b'{"modelfile": "FROM \\"C:\\\\models\\\\blobs\\\\sha256-ab\\""}') == (
        "sha256-ab"
    )
    assert read_show(b'{"modelfile": "# FROM x\\nPARAMETER stop y"}') is None
    assert read_show(b"{") is None


@pytest.mark.parametrize(
    ("answer", "want"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{}", b"{}"),
        (b"HTTP/1.0 404 Not Found\r\n\r\n{}", None),
        (b"HTTP/1.1 200 OK\r\n", None),
        (b"garbage", None),
        (b"HTTP/1.1 200 OK\r\n\r\n" + b" " * (MAX_ANSWER + 1), None),
    ],
)
def test_only_a_bounded_200_answer_has_a_body(answer: bytes, want: bytes | None) -> None:
    assert body(answer) == want


def test_a_name_fit_for_a_shard_id() -> None:
    assert good_name("hf.co/bartowski/Llama-3.2-3B-Instruct-GGUF:Q4_K_M")
    assert not good_name("")
    assert not good_name("with space")
    assert not good_name("tab\there")
