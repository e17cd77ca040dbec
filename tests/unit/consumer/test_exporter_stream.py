"""The exporter's /metrics written in parts (a batch of nodes at a time) and streamed, gzip or
plain: byte for byte what the families rendered whole give, for the same fleet."""

from __future__ import annotations

import gzip
import zlib
from datetime import timedelta

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from placewatch.consumer.exporter.collector import FleetCollector
from placewatch.consumer.fleet import Holdings
from placewatch.prometheus.exposition import CHUNK, Family, crc32_combine, render, stream
from placewatch.schemas import GpuSample, NodeSample

from tests.support.held import NOW, holdings, node_sample, sick_node

INTEL = GpuSample(
    index=1,
    vendor="intel",
    uuid="00000000-0000-0029-0000-002f0bd58086",
    name="Intel(R) Data Center GPU Max 1550",
    bus_id="0000:29:00.0",
    utilization_pct=99.5,
    power_w=419.61,
)


def fleet() -> Holdings:
    """Nine nodes: sick ones, a stale one, a hostile name, and an Intel GPU on the last node
    only, so its xpumanager families first come in the last batch."""
    fresh = NOW - timedelta(seconds=1)
    nodes: list[NodeSample] = [node_sample(f"gpu-{i:02d}", fresh, machine=str(i)) for i in range(5)]
    nodes += [sick_node("gpu-05", fresh), node_sample('gpu-"6"\n', fresh)]
    nodes.append(node_sample("gpu-07", NOW - timedelta(hours=1)))  # stale: not served
    last = node_sample("zz-intel", fresh)
    nodes.append(msgspec.structs.replace(last, gpus=[last.gpus[0], INTEL]))
    return holdings(*nodes)


def collector(content: Holdings, batch: int) -> FleetCollector:
    return FleetCollector(
        lambda: content,
        clock=NOW.timestamp,
        unreadable=lambda: {"impostor": 2},
        serves=("1/3", "gpu-*"),
        batch=batch,
    )


@pytest.mark.parametrize("openmetrics", [False, True])
def test_the_streamed_body_is_the_whole_rendering_byte_for_byte(openmetrics: bool) -> None:
    content = fleet()
    whole = render(collector(content, batch=10_000).collect(), openmetrics=openmetrics)
    parts = list(collector(content, batch=2).collect())
    order = FleetCollector.order()
    assert len(parts) > 4 * len({f.name for f in parts})  # each family in several parts
    xpum = [i for i, f in enumerate(parts) if f.name.startswith("xpum_")]
    assert xpum and min(xpum) > len(order)  # the Intel GPU's families came late
    plain = b"".join(stream(parts, order, openmetrics=openmetrics, gzip=False))
    zipped = b"".join(stream(parts, order, openmetrics=openmetrics, gzip=True))
    assert plain == whole
    assert gzip.decompress(zipped) == whole
    assert len(zipped) < len(whole) / 2
    text = whole.decode()
    assert text.count("# TYPE xpum_power_watts gauge\n") == 1
    assert text.index("# TYPE xpum_power_watts") < text.index("# TYPE placewatch_gpu_problem")
    assert 'placewatch_exporter_serves{partition="1/3",nodes="gpu-*"} 1.0\n' in text
    assert 'Hostname="gpu-07"' not in text
    assert 'Hostname="gpu-\\"6\\"\\\\n"' in text  # printable's \n, escaped


def test_a_plain_body_comes_in_pieces_of_at_most_chunk_bytes() -> None:
    big = Family("rows_total", "many rows", ("row",), "counter")
    for i in range(40_000):
        big.add([f"row-{i:06d}"], float(i))
    pieces = list(stream([big], [big.name], openmetrics=False, gzip=False))
    assert len(pieces) > 10
    assert max(map(len, pieces)) <= CHUNK
    assert b"".join(pieces) == render([big], openmetrics=False)


def test_a_family_that_never_came_is_not_written_and_one_that_came_empty_is() -> None:
    empty = Family("seen", "came without rows", ())
    text = b"".join(stream([empty], ["absent", "seen"], openmetrics=True, gzip=False))
    assert text == b"# HELP seen came without rows\n# TYPE seen gauge\n# EOF\n"


@given(st.binary(max_size=300), st.binary(max_size=3000))
def test_crc32_combine_is_zlibs_crc_of_the_two_joined(a: bytes, b: bytes) -> None:
    assert crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)


def test_crc32_combine_over_a_long_second_part() -> None:
    a, b = b"# HELP x y\n", bytes(range(256)) * 40_000
    assert crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)
