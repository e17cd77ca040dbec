"""The consume path: decoding a NodeTelemetry as a gateway does, per message.

placewatch.schemas.decode (msgspec into the contract's Structs, validated)
against json.loads and against untyped msgspec (msgspec.json.decode with no
type), each followed by the same field reads: what a placement gateway looks
at (the sample's time as a datetime, each GPU's memory and utilisation, its
processes' memory, each shard's verdict). One run, side by side, best of the
repeats. The last three rows time the decoders alone, with no reads: the most
the typed path could reach (untyped msgspec beside it: what msgspec costs with no types).
The last line tells what the reads cost on each side, and what 3x would leave them.

The message is the NodeTelemetry of 8 GPUs, 64 processes and 16 shards (readings only: what
they are readings of is in the node's NodeInventory, which changes rarely).

    python bench/consume_path.py [--seconds S]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.synthetic import node_telemetry  # noqa: E402
from placewatch.schemas import NodeTelemetry, decode, encode  # noqa: E402

TARGET = 3.0
ROUNDS = 6
"""Rounds over every path in turn: a slow moment of the machine in one path's turn is
outweighed by its other turns."""


def read_typed(t: NodeTelemetry) -> int:
    total = t.time.second + t.seq
    for g in t.gpus:
        total += (g.memory_used_bytes or 0) + (g.memory_free_bytes or 0)
        total += int(g.utilization_pct or 0)
        total += sum(filter(None, g.processes.values()))
    return total + [s.verdict for s in t.shards.values()].count("gpu")


def read_dict(t: dict[str, Any]) -> int:
    total: int = datetime.fromisoformat(t["time"]).second + t["seq"]
    for g in t["gpus"]:
        total += (g.get("memory_used_bytes") or 0) + (g.get("memory_free_bytes") or 0)
        total += int(g.get("utilization_pct") or 0)
        total += sum(filter(None, g.get("processes", {}).values()))
    return total + [s.get("verdict") for s in t["shards"].values()].count("gpu")


def measure(work: Callable[[], int], seconds: float) -> float:
    """Seconds per call, the best of several timed batches over about `seconds`."""
    best = float("inf")
    deadline = time.perf_counter() + seconds
    batch = 200
    while time.perf_counter() < deadline:
        started = time.perf_counter()
        for _ in range(batch):
            work()
        best = min(best, (time.perf_counter() - started) / batch)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=6.0)
    seconds = parser.parse_args().seconds
    payload, headers = encode(node_telemetry())
    expected = read_typed(decode(payload, NodeTelemetry, headers))
    paths: dict[str, Callable[[], int]] = {
        "json.loads + reads": lambda: read_dict(json.loads(payload)),
        "msgspec untyped + reads": lambda: read_dict(msgspec.json.decode(payload)),
        "schemas.decode + reads": lambda: read_typed(decode(payload, NodeTelemetry, headers)),
        "json.loads alone": lambda: len(json.loads(payload)),
        "msgspec untyped alone": lambda: len(msgspec.json.decode(payload)),
        "schemas.decode alone": lambda: decode(payload, NodeTelemetry, headers).seq,
    }
    for name, work in paths.items():
        if "alone" not in name:
            assert work() == expected, name
    # Interleaved, so that a busy neighbour slows every path alike.
    best = {name: float("inf") for name in paths}
    for _ in range(ROUNDS):
        for name, work in paths.items():
            best[name] = min(best[name], measure(work, seconds / ROUNDS / len(paths)))
    base = best["json.loads + reads"]
    print(
        f"consume path: one NodeTelemetry, {len(payload)} bytes of JSON, "
        f"best of repeats (load {os.getloadavg()[0]:.2f})"
    )
    print(f"{'path':<28}{'us/msg':>8}{'msgs/s':>10}{'MB/s':>8}{'vs json.loads':>15}")
    for name, per in best.items():
        print(
            f"{name:<28}{per * 1e6:>8.1f}{1 / per:>10.0f}{len(payload) / per / 1e6:>8.0f}"
            f"{base / per:>14.2f}x"
        )
    ratio = base / best["schemas.decode + reads"]
    bound = best["json.loads alone"] / best["schemas.decode alone"]
    print(
        f"target: schemas.decode at least {TARGET:g}x json.loads: {ratio:.2f}x "
        f"({ratio / TARGET:.2f} of it); the decoders alone, reads free: {bound:.2f}x"
    )
    typed = best["schemas.decode + reads"] - best["schemas.decode alone"]
    plain = best["json.loads + reads"] - best["json.loads alone"]
    left = base / TARGET - best["schemas.decode alone"]
    print(
        f"the reads: {typed * 1e6:.1f} us on the Structs, {plain * 1e6:.1f} us on the dicts; "
        f"{TARGET:g}x would leave them {left * 1e6:.1f} us"
    )


if __name__ == "__main__":
    main()
