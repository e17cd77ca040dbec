"""Where amd-smi puts a reading, in any of its output's shapes.

A reading is bare (`"gfx_activity": 72`), a string with its unit (`"72 %"`), or
value-wrapped (`{"value": 72, "unit": "%"}`), and sits in a block (`usage`, `power`,
`clock.gfx_0`) or flat on the GPU, as in `amd-smi metric --csv`. A Spec lists the places to
look, first match wins. Pure: no I/O, and nothing here raises on odd input.
"""

from __future__ import annotations

from collections.abc import Mapping

from .. import values

Block = tuple[str, ...]
Spec = tuple[tuple[Block, tuple[str, ...]], ...]


def leaf(node: object) -> tuple[object, str | None]:
    """A reading and its unit, from a bare or a value-wrapped reading."""
    if isinstance(node, dict):
        unit = node.get("unit")
        return node.get("value"), unit if isinstance(unit, str) else None
    return node, None


def reading(item: Mapping[str, object], spec: Spec) -> tuple[object, str | None]:
    """The first present reading among the spec's (block path, names), with its unit."""
    for path, names in spec:
        where: object = item
        for step in path:
            where = where.get(step) if isinstance(where, dict) else None
        if not isinstance(where, dict):
            continue
        for name in names:
            value, unit = leaf(where.get(name))
            if isinstance(value, str | int | float) and not values.is_missing(value):
                return value, unit
    return None, None


def number(item: Mapping[str, object], spec: Spec) -> float | None:
    value = reading(item, spec)[0]
    if isinstance(value, str):
        value = value.replace("\N{DEGREE SIGN}", "")  # "61 °C", amd-smi's readable form
    return values.number(value)


def count(item: Mapping[str, object], spec: Spec) -> int | None:
    """A whole, non-negative reading (a counter, a clock in MHz, a lane count)."""
    found = number(item, spec)
    if found is None or found < 0 or found >= 2**63:
        return None
    return round(found)


def text(item: Mapping[str, object], spec: Spec) -> str | None:
    return values.text(reading(item, spec)[0])
