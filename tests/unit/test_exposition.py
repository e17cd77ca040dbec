"""The families written straight to both text formats parse to the same samples as
prometheus_client's output for the same families, read back with prometheus_client's own
parsers; and a node's families carry each GPU's values."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as parse_openmetrics,
)
from prometheus_client.parser import text_string_to_metric_families as parse_text

from bench.synthetic import node_sample
from placewatch.prometheus.exposition import Family, number, render
from placewatch.prometheus.families import Families
from placewatch.prometheus.metrics import GPU_METRICS
from placewatch.schemas import lean
from placewatch.schemas.printable import printable

ODD = ["plain", 'a "quoted" one', "back\\slash", "new\nline", "ünïcode", ""]
VALUES = [0.0, 1.0, -2.5, 40960.0, 81234567891.0, 1e21, 1.5e-7, math.inf, -math.inf]


def families() -> tuple[list[Family], list[Metric]]:
    """The same families as ours and as prometheus_client's."""
    ours: list[Family] = []
    theirs: list[Metric] = []
    for kind, name in (("gauge", "odd_gauge"), ("counter", "odd_things_total")):
        mine = Family(name, 'help with "quotes" and \\ and\nnewline', ("label", "n"), kind)  # type: ignore[arg-type]
        other = (GaugeMetricFamily if kind == "gauge" else CounterMetricFamily)(
            name, mine.help, labels=["label", "n"]
        )
        for i, (label, given) in enumerate(zip(ODD * 2, VALUES, strict=False)):
            value = abs(given) if kind == "counter" else given
            mine.add([label, str(i)], value)
            other.add_metric([printable(label), str(i)], value)  # ours shows a newline as \n
        ours.append(mine)
        theirs.append(other)
    return ours, theirs


def registry(metrics: list[Metric]) -> CollectorRegistry:
    class Given:
        def collect(self) -> Iterator[Metric]:
            return iter(metrics)

    found = CollectorRegistry(auto_describe=False)
    found.register(Given())
    return found


def read(
    parsed: Iterable[Metric],
) -> list[tuple[str, str, str, list[tuple[str, dict[str, str], float]]]]:
    return [
        (
            f.name,
            f.type,
            f.documentation,
            sorted(((s.name, s.labels, s.value) for s in f.samples), key=_order),
        )
        for f in parsed
    ]


def openmetrics_families(text: str) -> list[Metric]:
    return list(parse_openmetrics(text))  # type: ignore[no-untyped-call]


def _order(sample: tuple[str, dict[str, str], float]) -> tuple[str, list[tuple[str, str]]]:
    return sample[0], sorted(sample[1].items())


def test_the_text_format_parses_as_prometheus_client_s_does() -> None:
    ours, theirs = families()
    mine = render(ours, openmetrics=False).decode()
    other = generate_latest(registry(theirs)).decode()
    assert read(parse_text(mine)) == read(parse_text(other))


def test_openmetrics_parses_as_prometheus_client_s_does() -> None:
    ours, theirs = families()
    mine = render(ours, openmetrics=True).decode()
    other = generate_openmetrics(registry(theirs)).decode()  # type: ignore[no-untyped-call]
    assert read(openmetrics_families(mine)) == read(openmetrics_families(other))
    assert mine.endswith("# EOF\n")


def test_a_label_value_s_control_characters_and_bidirectional_marks_are_written_escaped() -> None:
    hostile = "gpu\x1b]0;pwned\x07\u202e-07\nsecond line"
    family = Family("odd_gauge", "a gauge", ("node",))
    family.add([hostile], 1.0)
    for openmetrics in (False, True):
        text = render([family], openmetrics=openmetrics).decode()
        assert not any(c in text for c in ("\x1b", "\x07", "\u202e")), text
        wire = r'odd_gauge{node="gpu\\x1b]0;pwned\\x07\\u202e-07\\nsecond line"} 1.0'
        assert f"{wire}\n" in text  # printable's backslashes, escaped as the formats ask
        (sample,) = [s for f in parse_text(text) for s in f.samples]
        assert sample.labels == {"node": printable(hostile)}


@pytest.mark.parametrize(
    ("value", "written"),
    [(1.0, "1.0"), (40960.0, "40960.0"), (8.1234567891e10, "81234567891.0"),
     (1e21, "1e+21"), (1.5e-07, "1.5e-07"), (math.inf, "+Inf"), (math.nan, "NaN")],
)  # fmt: skip
def test_numbers_are_written_as_go_writes_them(value: float, written: str) -> None:
    assert number(value) == written


def test_a_node_s_families_carry_each_gpu_s_values_in_both_formats() -> None:
    sample = node_sample(gpus=8, shards=16)
    _, telemetry = lean.split(sample)
    built = Families()
    built.add(telemetry, sample, 0.5)
    text = read(parse_text(render(built, openmetrics=False).decode()))
    openmetrics = read(openmetrics_families(render(built, openmetrics=True).decode()))
    assert [(n, s) for n, _, _, s in text] == [(n, s) for n, _, _, s in openmetrics]
    by_name = {name: found for name, _, _, found in text}
    for metric in GPU_METRICS:
        want = sorted((str(g.index), v) for g in sample.gpus if (v := metric.value(g)) is not None)
        family = by_name.get(metric.name.removesuffix("_total"), by_name.get(metric.name, []))
        got = sorted((labels["gpu"], value) for _, labels, value in family)
        assert got == want, metric.name
