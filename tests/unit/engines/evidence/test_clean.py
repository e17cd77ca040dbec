"""A line as its engine said it: the colour codes and the prefixes that posters, journald,
docker and the engines' own log formats put before it taken off, and its format told."""

from __future__ import annotations

import pytest

from placewatch.worker.engines.evidence.clean import clean_line
from placewatch.worker.engines.evidence.read import EvidenceReader
from placewatch.worker.engines.ollama.log import is_ollama_format
from placewatch.worker.engines.vllm.log import is_vllm_format

SAID = "load_tensors: offloaded 13/13 layers to GPU"


@pytest.mark.parametrize(
    "prefix",
    [
        "",
        "  ",
        "> ",  # quoted in an issue
        "│ ",  # k9s's box border
        "E ",  # llama.cpp's level letter (b9181+)
        "0.00.305.668 I ",  # llama.cpp's timestamp and level (2025+)
        "[47161] 0.01.057.524 D ",  # with its pid
        "2024-10-11T12:45:53.660Z [CORTEX]::Error: ",  # Jan's cortex
        "llama-1  | ",  # docker compose
        "Apr 18 19:28:59 quorra ollama[1170]: ",  # journald
        "2025-03-05 08:58:54 ",
        "time=2025-02-07T09:38:48.650Z level=INFO source=types.go:131 ",  # Ollama
        "(Worker_TP0 pid=34322) INFO 05-06 20:59:59 [gpu_model_runner.py:4879] ",  # vLLM V1
        "INFO 03-13 09:00:22 [__init__.py:256] ",  # vLLM
        "\x1b[31m",
    ],
)
def test_the_prefix_before_a_line_is_taken_off(prefix: str) -> None:
    assert clean_line(prefix + SAID) == SAID


def test_stacked_prefixes_are_all_taken_off() -> None:
    line = (
        "Apr 18 19:28:59 quorra ollama[1170]: time=2025-02-07T09:38:48.650Z level=INFO "
        'source=server.go:368 msg="starting llama server"'
    )
    assert clean_line(line) == 'msg="starting llama server"'


def test_markdown_bold_around_a_pasted_line_is_taken_off() -> None:
    assert clean_line(f"**{SAID}**") == SAID


def test_a_line_without_a_prefix_is_kept_as_said() -> None:
    line = "ggml_vulkan: 0 = AMD Radeon RX 7900 XTX (RADV NAVI31) | uma: 0 | fp16: 1"
    assert clean_line(line) == line


def test_colour_codes_timestamps_and_trailing_space_are_stripped() -> None:
    reader = EvidenceReader()
    reader.read("\x1b[32m0.00.305.668 I load_tensors: offloaded 13/13 layers to GPU\x1b[0m   ")
    assert reader.snapshot().lines == ("load_tensors: offloaded 13/13 layers to GPU",)
    reader.read("2025-03-05 08:58:54 ggml_cuda_init: failed to initialize CUDA: unknown error")
    assert (
        reader.snapshot().gpu_failed == "ggml_cuda_init: failed to initialize CUDA: unknown error"
    )


def test_escape_sequences_and_other_control_characters_never_reach_the_evidence() -> None:
    # A hostile or broken log: a title-setting OSC sequence, a bell, a C1 control.
    reader = EvidenceReader()
    reader.read("ggml_cuda_init: failed to initialize CUDA: \x1b]0;owned\x07no\x9bdevice\r")
    said = reader.snapshot().gpu_failed
    assert said == "ggml_cuda_init: failed to initialize CUDA:  ]0;owned no device"
    assert said is not None and said.isprintable()


@pytest.mark.parametrize(
    ("line", "ollama", "vllm"),
    [
        (
            'time=2025-02-07T09:38:48.650Z level=INFO source=types.go:131 msg="inference compute"',
            True,
            False,
        ),
        # journald's line from the ollama unit, whichever of its processes printed it
        (f"Apr 18 19:28:59 quorra ollama[1170]: {SAID}", True, False),
        (
            "INFO 03-13 09:00:22 [__init__.py:256] Automatically detected platform cuda.",
            False,
            True,
        ),
        (
            "(VllmWorkerProcess pid=1222519) INFO 08-17 23:29:21 model_runner.py:266] "
            "Loading model weights took 1.5874 GB",
            False,
            True,
        ),
        (SAID, False, False),
        (f"llama-1  | {SAID}", False, False),
    ],
)
def test_the_engine_log_format_is_told_from_the_raw_line(
    line: str, ollama: bool, vllm: bool
) -> None:
    assert (is_ollama_format(line), is_vllm_format(line)) == (ollama, vllm)
