"""amd-smi's per-process gfx engine time: a counter in ns turned into a share between two
reads, every shape amd-smi prints it in, and a zero that is no reading (ROCm compute runs on
KFD queues the counter never sees).

The project's fixture (tests/fixtures/amd-smi/mi300x-process.json) is constructed, in the
ROCm 6.3+ shape (`usage.gfx` value-wrapped, unit ns); the shared corpus holds no
`amd-smi process --json` capture. The other shapes below are written from amd-smi's own
source (amdsmi_cli/amdsmi_commands.py: `usage` bare in the ROCm 6.0-6.2 builds,
`engine_usage` in the by-pid listing) and marked as constructed.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from placewatch.worker.gpu.amd_smi import (
    attach_amd_smi_processes,
    parse_amd_smi,
    parse_amd_smi_processes,
    process_entries,
)
from placewatch.worker.gpu.amd_smi.activity import (
    EngineClock,
    attach_engine_time,
    parse_engine_time,
)

from tests.conftest import FIXTURES

OWN = FIXTURES / "amd-smi"


def listing(gfx: object, pid: int = 4242, gpu: int = 0, block: str = "usage") -> str:
    """`amd-smi process --json` of one process (constructed)."""
    process = {"name": "llama-server", "pid": pid, block: {"gfx": gfx, "enc": 0}}
    return json.dumps([{"gpu": gpu, "process_list": [{"process_info": process}]}])


def test_the_fixture_gives_each_process_its_counter() -> None:
    found = parse_engine_time(process_entries((OWN / "mi300x-process.json").read_text()))
    assert found == {(0, 4242): (1532177.0, "ns"), (0, 4317): (0.0, "ns")}


@pytest.mark.parametrize(
    ("gfx", "block", "reading"),
    [
        (1532177, "usage", (1532177.0, "ns")),  # ROCm 6.0-6.2: bare, in ns
        ({"value": 1532177, "unit": "ns"}, "usage", (1532177.0, "ns")),  # ROCm 6.3 on
        ({"value": 1532177, "unit": "ns"}, "engine_usage", (1532177.0, "ns")),  # by pid
        ("1532177 ns", "usage", (1532177.0, "ns")),
        ({"value": 12, "unit": "%"}, "usage", (12.0, "%")),  # labelled as a share
        ("12 %", "usage", (12.0, "%")),
    ],
)
def test_every_shape_of_the_reading(gfx: object, block: str, reading: tuple[float, str]) -> None:
    assert parse_engine_time(process_entries(listing(gfx, block=block))) == {(0, 4242): reading}


@pytest.mark.parametrize("gfx", ["N/A", None, -5, {"value": "N/A", "unit": "ns"}, [1], "x ns"])
def test_no_reading_is_left_out(gfx: object) -> None:
    assert parse_engine_time(process_entries(listing(gfx))) == {}


def test_a_counter_becomes_a_share_of_the_time_between_two_reads() -> None:
    clock = EngineClock()
    assert clock.usage({(0, 4242): (1e9, "ns")}, now_s=100.0) == {}  # first seen: no share yet
    # 0.5 s of gfx time in 2 s: 25%.
    assert clock.usage({(0, 4242): (1.5e9, "ns")}, now_s=102.0) == {0: {4242: (25.0, None)}}
    # Nothing ran since: a zero, which on AMD is no reading (ROCm compute is not counted).
    assert clock.usage({(0, 4242): (1.5e9, "ns")}, now_s=104.0) == {}
    # The counter went back (another client of the same pid): no share until the next.
    assert clock.usage({(0, 4242): (1e6, "ns")}, now_s=106.0) == {}
    assert clock.usage({(0, 4242): (2.001e9, "ns")}, now_s=108.0) == {0: {4242: (100.0, None)}}


def test_a_reading_given_as_a_share_is_taken_as_one() -> None:
    assert EngineClock().usage({(1, 7): (12.0, "%")}, now_s=1.0) == {1: {7: (12.0, None)}}


def test_shares_are_put_on_the_processes_and_the_rest_stay_none() -> None:
    text = (OWN / "mi300x-process.json").read_text()
    gpus = parse_amd_smi((OWN / "mi300x-metric.json").read_text())
    gpus = attach_amd_smi_processes(gpus, parse_amd_smi_processes(text))
    clock = EngineClock()
    attach_engine_time(gpus, clock, process_entries(text), now_s=10.0)
    later = text.replace("1532177", str(1532177 + 400_000_000))  # 0.4 s of gfx in 1 s
    (busy, idle) = attach_engine_time(gpus, clock, process_entries(later), now_s=11.0)
    assert [(p.pid, p.sm_pct, p.mem_pct) for p in busy.processes] == [(4242, 40.0, None)]
    assert idle.processes == []


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=12), c,
                                                                         max_size=4),
                    max_leaves=30))  # fmt: skip
def test_any_json_document_parses_without_raising(document: Any) -> None:
    for (gpu, pid), (value, unit) in parse_engine_time(
        process_entries(json.dumps(document))
    ).items():
        assert gpu >= 0 and pid > 0 and value >= 0 and unit in ("ns", "%")


@given(st.text())
def test_any_text_parses_without_raising(text: str) -> None:
    parse_engine_time(process_entries(text))
