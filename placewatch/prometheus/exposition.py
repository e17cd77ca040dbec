"""The metric families written straight to Prometheus's two text formats.

prometheus_client builds a Sample for every value and formats each label of each sample
anew; for a node's 200 series that was 2.5 ms of a scrape's 3 (bench/node_metrics.py). Here a
family's rows are kept as their label text, written once per GPU and shared by every metric
of that GPU, and a scrape joins strings. What comes out parses to the same samples as
prometheus_client's own output for the same families (tests/unit/test_exposition.py holds
it to that, with prometheus_client's parser).

- text format 0.0.4: `# HELP`, `# TYPE`, then `name{labels} value` a line;
- OpenMetrics 1.0.0 (what Prometheus asks for first): the same, a counter's family named
  without its `_total` (its samples keep it), and `# EOF` at the end.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from placewatch.schemas.printable import printable

TEXT = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"

Kind = Literal["gauge", "counter"]


def labels_text(names: Sequence[str], values: Sequence[str]) -> str:
    """`{name="value",...}` with each value printable (schemas/printable.py: the formats
    carry ESC and bidirectional marks as they are, to whoever prints /metrics), then escaped
    as both formats require."""
    if not names:
        return ""
    pairs = ",".join(f'{n}="{_escape(printable(v))}"' for n, v in zip(names, values, strict=True))
    return "{" + pairs + "}"


def _escape(value: str) -> str:
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return value


def _help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


def number(value: float) -> str:
    """A value as both formats take it: the shortest repr that reads back to it, and Go's
    spellings of the infinities and NaN."""
    if value == math.inf:
        return "+Inf"
    if value == -math.inf:
        return "-Inf"
    if math.isnan(value):
        return "NaN"
    return repr(float(value))


@dataclass
class Family:
    """One metric family: its rows as (label text, value)."""

    name: str
    help: str
    labels: tuple[str, ...]
    kind: Kind = "gauge"
    rows: list[tuple[str, float]] = field(default_factory=list)

    def add(self, values: Sequence[str], value: float) -> None:
        self.rows.append((labels_text(self.labels, values), value))


def render(families: Iterable[Family], *, openmetrics: bool) -> bytes:
    out: list[str] = []
    for f in families:
        base = f.name.removesuffix("_total") if f.kind == "counter" and openmetrics else f.name
        out.append(f"# HELP {base} {_help(f.help)}\n# TYPE {base} {f.kind}\n")
        out.extend(f"{f.name}{labels} {number(value)}\n" for labels, value in f.rows)
    if openmetrics:
        out.append("# EOF\n")
    return "".join(out).encode()
