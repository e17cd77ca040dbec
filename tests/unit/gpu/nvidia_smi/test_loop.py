"""The looping GPU query read pass by pass: a pass is complete when its rows say so.

Real captures in ../shared/corpus/nvidia-smi-csv and the project's own fixtures, fed line by
line as nvidia-smi prints them when it loops: the header once, then the rows again and again.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from placewatch.worker.gpu.nvidia_smi import GPU_FIELDS, gpu_loop_argv
from placewatch.worker.gpu.nvidia_smi.loop import GpuPasses
from placewatch.worker.gpu.nvidia_smi.query_csv import parse_gpus

from tests.conftest import FIXTURES, corpus_files, needs_corpus

MiB = 1 << 20
OWN = FIXTURES / "nvidia-smi"
LOST = "Unable to determine the device handle for GPU0000:07:00.0: Unknown Error"


def feed(passes: GpuPasses, lines: list[str]) -> list[bool]:
    return [passes.line(line) for line in lines]


def rows_of(path: Path) -> tuple[str, list[str]]:
    header, *rows = [line for line in path.read_text().splitlines() if line.strip()]
    return header, rows


def test_the_loop_asks_for_count_first_and_the_interval_in_ms() -> None:
    argv = gpu_loop_argv(2.0)
    assert argv == [
        "nvidia-smi",
        "--query-gpu=" + ",".join(("count", *GPU_FIELDS)),
        "--format=csv,nounits",
        "--loop-ms=2000",
    ]
    assert gpu_loop_argv(0.25, "/opt/nvidia/nvidia-smi")[-1] == "--loop-ms=250"


def test_a_pass_is_complete_at_its_last_row_when_count_says_how_many() -> None:
    header, rows = rows_of(OWN / "a100x2-query-gpu-count.csv")
    passes = GpuPasses(clock=lambda: 7.0)
    assert feed(passes, [header, *rows, *rows]) == [False, False, True, False, True]
    assert passes.complete == 2
    assert passes.latest is not None
    busy, idle = passes.latest.gpus
    assert (busy.index, busy.memory_used_bytes, busy.utilization_pct, busy.power_w) == (
        0, 40960 * MiB, 37, 212.34,
    )  # fmt: skip
    assert (idle.index, idle.utilization_pct, idle.temperature_c) == (1, None, None)
    assert passes.latest.said == ()
    assert passes.latest.at == 7.0


def test_without_count_a_pass_is_proven_over_when_its_first_gpu_comes_again() -> None:
    header, rows = rows_of(OWN / "h200-query-gpu.csv")  # a real H200: no count column
    passes = GpuPasses()
    assert feed(passes, [header, *rows]) == [False, False]
    assert passes.complete == 0, "one GPU seen, and nothing says there is no second"
    assert feed(passes, rows) == [True]
    assert passes.latest is not None
    (gpu,) = passes.latest.gpus
    assert (gpu.name, gpu.memory_used_bytes, gpu.power_w) == ("NVIDIA H200", 2075 * MiB, 101.9)


def test_a_message_in_place_of_a_gpus_row_takes_its_place_in_the_count() -> None:
    header, (_, gpu1) = rows_of(OWN / "a100x2-query-gpu-count.csv")
    passes = GpuPasses()
    assert feed(passes, [header, LOST, gpu1, LOST, gpu1]) == [False, False, True, False, True]
    assert passes.latest is not None
    assert [g.index for g in passes.latest.gpus] == [1]
    assert passes.latest.said == (LOST,)


def test_the_header_printed_again_closes_the_pass_before_it() -> None:
    header, rows = rows_of(OWN / "h200-query-gpu.csv")
    passes = GpuPasses()
    assert feed(passes, [header, *rows, header]) == [False, False, True]
    assert passes.latest is not None and len(passes.latest.gpus) == 1


def test_a_new_child_voids_the_pass_the_last_one_left_half_printed() -> None:
    header, (gpu0, gpu1) = rows_of(OWN / "a100x2-query-gpu-count.csv")
    passes = GpuPasses()
    feed(passes, [header, gpu0, gpu1, gpu0])
    passes.started()
    assert feed(passes, [header, gpu1]) == [False, False], "the GPU 0 row before is void"
    assert feed(passes, [gpu0]) == [True]
    assert passes.complete == 2
    assert passes.latest is not None
    assert [g.index for g in passes.latest.gpus] == [1, 0]


def test_lines_before_a_header_are_passed_over() -> None:
    header, rows = rows_of(OWN / "a100x2-query-gpu-count.csv")
    passes = GpuPasses()
    assert feed(passes, ["No devices were found", "", header, *rows]) == [
        False, False, False, False, True,
    ]  # fmt: skip


@needs_corpus
@pytest.mark.parametrize(
    "capture", [p for p in corpus_files("nvidia-smi-csv") if "query-gpu" in p.name], ids=str
)
def test_every_real_capture_looped_reads_as_it_does_once(capture: Path) -> None:
    header, rows = rows_of(capture)
    passes = GpuPasses()
    done = feed(passes, [header, *rows, *rows, *rows])
    if "count" in [c.strip() for c in header.split(",")]:
        # The three single-GPU captures that ask for count: each pass ends at its row.
        assert done == [False, True, True, True]
        assert passes.complete == 3
    else:
        # Without count, a pass is over when the next begins.
        later = [True, *[False] * (len(rows) - 1)]
        assert done == [False, *[False] * len(rows), *later, *later]
        assert passes.complete == 2
    assert passes.latest is not None
    assert list(passes.latest.gpus) == parse_gpus(capture.read_text())


@needs_corpus
def test_the_timestamp_is_per_gpu_so_it_cannot_delimit_a_pass() -> None:
    (capture,) = [p for p in corpus_files("nvidia-smi-csv") if "t4-4gpu" in p.name]
    _, rows = rows_of(capture)
    stamps = [row.split(",")[0] for row in rows]
    assert stamps == [
        "2023/01/11 00:06:01.255",
        "2023/01/11 00:06:01.261",
        "2023/01/11 00:06:01.266",
        "2023/01/11 00:06:01.271",
    ]


@given(st.lists(st.text(max_size=200), max_size=30))
def test_bad_lines_never_raise(lines: list[str]) -> None:
    header, rows = rows_of(OWN / "a100x2-query-gpu-count.csv")
    passes = GpuPasses()
    feed(passes, [header, *lines, *rows])
    feed(passes, lines)
