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

`render` writes a body whole; `stream` writes the same bytes from families that come in
parts (a fleet's nodes a batch at a time), each family's text compressed as its parts come
and the body sent family by family, gzip or plain, so that what a scrape holds is the
compressed text (a fiftieth of it for a fleet's look-alike series), not the text.
"""

from __future__ import annotations

import functools
import math
import struct
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

from placewatch.schemas.printable import printable

TEXT = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"

Kind = Literal["gauge", "counter"]

GZIP_LEVEL = 1
"""A scrape's bytes compress to a tenth at level 1 in a fifth of level 9's time."""
CHUNK = 1 << 16
"""The most bytes `stream` yields at once."""
_GZIP_HEAD = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
"""A gzip member's header (RFC 1952): deflate, no name, no time, no OS named."""


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
        out.append(_head(f, openmetrics))
        out.extend(_rows(f))
    if openmetrics:
        out.append("# EOF\n")
    return "".join(out).encode()


def _head(f: Family, openmetrics: bool) -> str:
    base = f.name.removesuffix("_total") if f.kind == "counter" and openmetrics else f.name
    return f"# HELP {base} {_help(f.help)}\n# TYPE {base} {f.kind}\n"


def _rows(f: Family) -> Iterator[str]:
    return (f"{f.name}{labels} {number(value)}\n" for labels, value in f.rows)


def stream(
    parts: Iterable[Family], order: Sequence[str], *, openmetrics: bool, gzip: bool
) -> Iterator[bytes]:
    """What `render` writes of the families, joined from `parts`: a family may come in many
    parts, its rows in the order they came; the families written in `order` (every name a
    part may have), each one that came at all, empty or not. gzip: the body as one gzip
    member, in pieces; else plain, at most CHUNK bytes a piece.

    Nothing is yielded until every part came (each family's rows must be written together);
    a caller that stops taking pieces (a client gone) leaves the rest unwritten."""
    where = {name: i for i, name in enumerate(order)}
    spools: dict[str, _Spool] = {}
    for f in parts:
        spool = spools.get(f.name)
        if spool is None:
            spool = spools[f.name] = _Spool()
            spool.write(_head(f, openmetrics).encode())
        if f.rows:
            spool.write("".join(_rows(f)).encode())
    ordered = [spools.pop(name) for name in sorted(spools, key=where.__getitem__)]
    if openmetrics:
        ordered.append(_Spool())
        ordered[-1].write(b"# EOF\n")
    yield from _gzip(ordered) if gzip else _plain(ordered)


class _Spool:
    """One family's text, deflated as it comes (raw deflate, a stream of its own), its CRC-32
    and length kept for the gzip trailer."""

    __slots__ = ("crc", "deflate", "parts", "size")

    def __init__(self) -> None:
        self.deflate = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS)
        self.parts: list[bytes] = []
        self.crc = 0
        self.size = 0

    def write(self, data: bytes) -> None:
        self.crc = zlib.crc32(data, self.crc)
        self.size += len(data)
        if out := self.deflate.compress(data):
            self.parts.append(out)

    def close(self) -> list[bytes]:
        """Its deflate blocks, ended on a byte and not final (a sync flush), so that the
        spools' blocks one after another are one deflate stream."""
        self.parts.append(self.deflate.flush(zlib.Z_SYNC_FLUSH))
        del self.deflate
        return self.parts


def _gzip(spools: list[_Spool]) -> Iterator[bytes]:
    """One gzip member: the spools' deflate blocks in turn, a final empty block, the CRC-32
    of the whole (each spool's combined) and its length."""
    crc, size = 0, 0
    out = [_GZIP_HEAD]
    held = len(_GZIP_HEAD)
    for spool in spools:
        for part in spool.close():
            out.append(part)
            held += len(part)
            if held >= CHUNK:
                yield b"".join(out)
                out, held = [], 0
        crc = crc32_combine(crc, spool.crc, spool.size)
        size += spool.size
    end = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, -zlib.MAX_WBITS).flush(zlib.Z_FINISH)
    yield b"".join([*out, end, struct.pack("<II", crc, size & 0xFFFFFFFF)])


def _plain(spools: list[_Spool]) -> Iterator[bytes]:
    """The spools' text again, inflated CHUNK bytes at a time."""
    for spool in spools:
        inflate = zlib.decompressobj(-zlib.MAX_WBITS)
        for part in spool.close():
            data = part
            while True:
                out = inflate.decompress(data, CHUNK)
                if out:
                    yield out
                data = inflate.unconsumed_tail
                if not data and len(out) < CHUNK:
                    break


def crc32_combine(crc1: int, crc2: int, size2: int) -> int:
    """The CRC-32 of A + B from A's, B's and B's length (zlib's crc32_combine, which Python's
    zlib does not expose): A's CRC carried through size2 zero bytes, one operator a set bit
    of size2, then B's added."""
    k = 0
    while size2:
        if size2 & 1:
            crc1 = _times(_zeros(k), crc1)
        size2 >>= 1
        k += 1
    return crc1 ^ crc2


@functools.cache
def _zeros(k: int) -> list[int]:
    """The operator (a GF(2) matrix, a row an int) that carries a CRC-32 through 2**k zero
    bytes: the one of a zero bit squared three times, then k times."""
    if k:
        return _square(_zeros(k - 1))
    one_bit = [0xEDB88320] + [1 << n for n in range(31)]
    return _square(_square(_square(one_bit)))


def _times(matrix: list[int], vector: int) -> int:
    total, i = 0, 0
    while vector:
        if vector & 1:
            total ^= matrix[i]
        vector >>= 1
        i += 1
    return total


def _square(matrix: list[int]) -> list[int]:
    return [_times(matrix, row) for row in matrix]
