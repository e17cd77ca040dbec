"""The board as text that stands alone: what `watch --once` prints, and `watch` off a terminal.

One line per shard, its node first, so `grep` keeps what it finds whole; `#` lines say the
fleet's counts and the nodes that need a person, so `grep -v '^#'` leaves the shards alone.
Nothing in it a terminal would take as a command: names, reasons and GPU names come from any
node's messages, and each control character and bidirectional mark in them is shown as its
escape (`\x1b`, `\u202e`: schemas/printable.py), in the JSON too.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec

from placewatch.schemas.printable import printable, printable_json

from ..held import decode_held
from .board import Board, Header, NodeLook, NodeRow, ShardRow

COLUMNS = ("NODE", "SHARD", "ENGINE", "VERDICT", "STATE", "SINCE", "GPUS", "REASON")
"""GPUS: those it is placed on / those its processes hold memory on (`1/-`: none)."""


class GpuShown(msgspec.Struct, frozen=True, gc=False):
    """The readings of a GPU the JSON shows (board.bar's), under the telemetry's names."""

    index: int
    utilization_pct: float | None = None
    memory_used_bytes: int | None = None
    memory_free_bytes: int | None = None
    temperature_c: float | None = None
    problems: list[str] = []


class GpusShown(msgspec.Struct, frozen=True, gc=False):
    """A node's telemetry as the JSON reads it: its GPUs' shown readings alone, the rest of
    it skipped rather than built (10,000 nodes' telemetry, decoded whole, took a second)."""

    gpus: list[GpuShown] = []


def gpus_json(look: NodeLook) -> list[dict[str, Any]]:
    """Each GPU of the node's latest telemetry as the JSON shows it: memory total is used
    and free (the driver's reserve is the inventory's)."""
    return [
        {
            "index": g.index,
            "utilization_pct": g.utilization_pct,
            "memory_used_bytes": g.memory_used_bytes,
            "memory_total_bytes": None
            if g.memory_used_bytes is None or g.memory_free_bytes is None
            else g.memory_used_bytes + g.memory_free_bytes,
            "temperature_c": g.temperature_c,
            "problems": g.problems,
        }
        for g in decode_held(look.telemetry, GpusShown).gpus
    ]


def header_lines(
    header: Header, now: datetime, where: str = "", problems: list[str] | None = None
) -> list[str]:
    """The counts, as the console's header says them."""
    bus = f"  {where}" if where else ""
    newest = (
        "no telemetry yet"
        if header.newest_age_s is None
        else f"newest {header.newest_age_s:.1f} s ago"
    )
    verdicts = ", ".join(
        f"{n} {v}" for v, n in sorted(header.verdicts.items(), key=lambda kv: (-kv[1], kv[0]))
    )
    firing = f"{header.firing} firing"
    if header.firing_silent:
        firing += f", {header.firing_silent} on silent nodes"
    lines = [
        f"placewatch  {now:%Y-%m-%d %H:%M:%S} UTC{bus}  {newest}",
        f"nodes {header.live} live, {header.silent} silent  shards {header.shards}"
        f"{': ' + verdicts if verdicts else ''}  {firing}",
    ]
    lines += [f"PROBLEM: {p}" for p in problems or []]
    return [printable(line) for line in lines]


def shard_cells(row: ShardRow) -> tuple[str, ...]:
    return tuple(
        printable(cell)
        for cell in (
            row.node,
            row.shard,
            row.engine,
            row.verdict,
            row.state,
            f"{row.since.astimezone(UTC):%H:%M:%SZ}",
            row.gpus,
            row.reason or "-",
        )
    )


def node_line(row: NodeRow) -> str:
    """What a node that needs a person needs, and, once it is silent for long, the command."""
    said = "; ".join(row.problems)
    if row.forget:
        said += f": if it is gone for good, placewatch forget {row.node}"
    return printable(f"node {row.node}  {said}")


def lines(
    board: Board, now: datetime, where: str = "", problems: list[str] | None = None
) -> list[str]:
    """The whole board: `#` header lines, a line of column names, a line per shard, then a
    `#` line per node that needs a person."""
    out = [f"# {line}" for line in header_lines(board.header, now, where, problems)]
    rows = [COLUMNS, *(shard_cells(r) for r in board.shards)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS) - 1)]
    out += [
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=False)) + "  " + r[-1]
        for r in rows
    ]
    out += [f"# {node_line(n)}" for n in board.nodes if n.problems]
    if board.header.live + board.header.silent == 0:
        out.append("# no nodes yet: is a worker publishing with this prefix?")
    elif not board.shards and not board.nodes:
        out.append("# nothing here matches")
    return out


def as_json(board: Board, now: datetime, problems: list[str] | None = None) -> bytes:
    """The board as one JSON document: the header, the shards (the ComputeStatus of each is
    on the bus: `placewatch.compute.<node>.<shard>`),
    the nodes (each GPU's utilization and memory), and the firing shards (`jq .firing`)."""
    h = board.header
    document: dict[str, Any] = {
        "time": now,
        "header": h._asdict(),
        "shards": [
            {
                "node": r.node,
                "shard": r.shard,
                "engine": r.engine,
                "verdict": r.verdict,
                "state": r.state,
                "since": r.since,
                "pid": r.status.pid,
                "placed_gpus": r.status.placed_gpus,
                "used_gpus": sorted({d.index for d in r.status.devices}),
                "reason": r.reason,
                "evidence": r.status.evidence,
            }
            for r in board.shards
        ],
        "nodes": [
            {
                "node": n.node,
                "silent": n.silent,
                "age_s": round(n.age_s, 3),
                "session": n.session,
                "gpus": gpus_json(n.look),
                "verdicts": n.verdicts,
                "problems": list(n.problems),
                "forget": n.forget,
            }
            for n in board.nodes
        ],
        "firing": [
            {
                "node": r.node,
                "shard": r.shard,
                "verdict": r.verdict,
                "since": r.since,
                "reason": r.reason,
            }
            for r in board.shards
            if r.firing
        ],
        "problems": problems or [],
    }
    return msgspec.json.format(printable_json(document), indent=2)
