"""`nvidia-smi pmon -c 1 -s u`: columns by the header's names, `-` is None, never 0.

The fixtures are constructed in the tool's documented layout (tests/fixtures/nvidia-smi/
README.md); the older layout without `jpg` and `ofa` (drivers R52x and before) is written
inline below, constructed the same way.
"""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from placewatch.worker.gpu.nvidia_smi.pmon import (
    PmonRow,
    attach_pmon,
    parse_pmon,
    pmon_argv,
    pmon_usage,
)
from placewatch.worker.gpu.nvidia_smi.query_csv import (
    attach_processes,
    parse_compute_apps,
    parse_gpus,
)

from tests.conftest import FIXTURES

OWN = FIXTURES / "nvidia-smi"

OLD_LAYOUT = (
    "# gpu        pid  type    sm   mem   enc   dec   command\n"
    "# Idx          #   C/G     %     %     %     %   name\n"
    "    0      12345     C    45    12     0     0   python\n"
    "    1          -     -     -     -     -     -   -\n"
)


def a100x2() -> list:  # type: ignore[type-arg]
    gpus = parse_gpus((OWN / "a100x2-query-gpu.csv").read_text())
    return attach_processes(
        gpus, parse_compute_apps((OWN / "a100x2-query-compute-apps.csv").read_text())
    )


def test_one_sample_of_utilization_is_asked() -> None:
    assert pmon_argv() == ["nvidia-smi", "pmon", "-c", "1", "-s", "u"]


def test_the_fixture_reads_each_process_and_dash_is_none() -> None:
    rows = parse_pmon((OWN / "a100x2-pmon.txt").read_text())
    assert rows == [
        PmonRow(0, 4242, 35.0, 12.0, "C", "llama-server"),
        PmonRow(0, 4317, None, None, "C", "python3"),
        PmonRow(1, 5120, None, None, "C", "ollama"),
    ]


def test_the_older_layout_and_an_idle_gpus_row() -> None:
    assert parse_pmon(OLD_LAYOUT) == [PmonRow(0, 12345, 45.0, 12.0, "C", "python")]


def test_columns_are_found_by_name_and_a_command_keeps_its_spaces() -> None:
    text = (
        "# gpu   pid  type   sm   mem   enc   dec   jpg   ofa    fb  ccpm   command\n"
        "# Idx     #   C/G    %     %     %     %     %     %    MB    MB   name\n"
        "    0  4711   C+G    7     1     -     -     -     -   512     0   some thing\n"
    )
    (row,) = parse_pmon(text)
    assert (row.pid, row.kind, row.sm_pct, row.mem_pct) == (4711, "C+G", 7.0, 1.0)
    assert row.command == "some thing"


def test_a_process_with_compute_and_graphics_rows_adds_them_up() -> None:
    text = OLD_LAYOUT.replace(
        "    1          -", "    0      12345     G     5     1     0     0   python\n    1    -"
    )
    assert pmon_usage(parse_pmon(text)) == {0: {12345: (50.0, 13.0)}}


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Failed to initialize NVML: Driver/library version mismatch\n",
        "    0   4242  C  35  12  -  -  llama-server\n",  # rows before any header
        "# gpu pid type sm mem command\n    x   4242  C  35  12  a\n    0  -1  C  1  1  b\n",
        "# gpu pid type sm mem command\n    0   4242  C\n",  # fewer cells than the header
    ],
)
def test_bad_output_gives_no_rows(text: str) -> None:
    assert parse_pmon(text) == []


@given(st.text())
def test_any_text_parses_without_raising_to_sane_values(text: str) -> None:
    for row in parse_pmon(text):
        assert row.gpu >= 0 and row.pid > 0
        for value in (row.sm_pct, row.mem_pct):
            assert value is None or 0 <= value <= 100


@given(
    st.lists(
        st.tuples(
            st.integers(0, 7),
            st.integers(1, 4_194_304),
            st.sampled_from(["C", "G", "C+G", "-"]),
            st.one_of(st.just("-"), st.integers(0, 100).map(str)),
            st.one_of(st.just("-"), st.integers(0, 100).map(str)),
            st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=20),
        ),
        max_size=20,
    )
)
def test_any_table_in_the_layout_reads_back_what_was_written(rows: list[tuple]) -> None:  # type: ignore[type-arg]
    lines = [
        "# gpu         pid   type     sm    mem    enc    dec    jpg    ofa    command ",
        "# Idx           #    C/G      %      %      %      %      %      %    name ",
    ]
    for gpu, pid, kind, sm, mem, command in rows:
        lines.append(
            f"{gpu:>5} {pid:>10} {kind:>5} {sm:>6} {mem:>6}      -      -      -      -    {command}"
        )
    parsed = parse_pmon("\n".join(lines))
    expected = [(g, p, None if c == "-" else c) for g, p, _, _, _, c in rows]  # `-`: no name
    assert [(r.gpu, r.pid, r.command) for r in parsed] == expected
    assert [r.sm_pct for r in parsed] == [
        None if s == "-" else float(s) for _, _, _, s, _, _ in rows
    ]


def test_a_sample_is_put_on_the_process_and_no_sample_stays_none() -> None:
    busy, other = attach_pmon(a100x2(), parse_pmon((OWN / "a100x2-pmon.txt").read_text()))
    by_pid = {p.pid: (p.sm_pct, p.mem_pct) for p in busy.processes}
    assert by_pid == {4242: (35.0, 12.0), 4317: (None, None)}  # GPU 0 is 37% busy: unknown
    assert [(p.pid, p.sm_pct) for p in other.processes] == [(5120, None)]  # [N/A] utilization


def test_no_sample_on_a_gpu_that_did_nothing_is_zero() -> None:
    gpus = parse_gpus((OWN / "h200-query-gpu.csv").read_text())
    gpus = attach_processes(
        gpus, parse_compute_apps((OWN / "h200-query-compute-apps.csv").read_text())
    )
    assert gpus[0].utilization_pct == 0
    (gpu,) = attach_pmon(gpus, parse_pmon((OWN / "h200-pmon.txt").read_text()))
    assert [(p.pid, p.sm_pct, p.mem_pct) for p in gpu.processes] == [
        (492, 0.0, None),
        (488, 0.0, None),
    ]
    # A process pmon does not list at all on that GPU reads the same.
    (again,) = attach_pmon(gpus, [])
    assert [p.sm_pct for p in again.processes] == [0.0, 0.0]


def test_a_gpu_without_processes_is_left_as_it_was() -> None:
    gpu = msgspec.structs.replace(a100x2()[0], processes=[])
    assert attach_pmon([gpu], parse_pmon(OLD_LAYOUT)) == [gpu]


def test_a_pid_no_linux_process_can_have_is_passed_over() -> None:
    text = (
        "# gpu         pid   type     sm    mem    enc    dec    command\n"
        "# Idx           #    C/G      %      %      %      %    name\n"
        "    0    99999999999999999999     C     50     10      -      -    bogus\n"
        "    0     4194305     C     50     10      -      -    past-pid-max\n"
        "    0        4242     C     50     10      -      -    python3\n"
    )
    assert parse_pmon(text) == [PmonRow(0, 4242, 50.0, 10.0, "C", "python3")]
