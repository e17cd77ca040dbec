"""`watch --once --json` prints what the straightforward build printed: every node's telemetry
decoded whole and every value of the document walked for unprintable text. The fast build
reads only the GPU fields it shows and walks nothing when the JSON holds no unprintable
character; on a small fleet with hostile text, a GPU's problems, a node in MessagePack and
readings missing, both give the same bytes."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from placewatch.consumer.held import Held, decode_held
from placewatch.consumer.snapshot import FleetState
from placewatch.consumer.watch.board import Board, bar, gpus_of, selected
from placewatch.consumer.watch.text import as_json
from placewatch.consumer.watch.watched import Watched
from placewatch.schemas import NodeTelemetry, encode
from placewatch.schemas.codec import HEADER_CONTENT_TYPE
from placewatch.schemas.printable import printable_values

from tests.support.console_fleet import NOW, fleet_state, live_name

HOSTILE = "\x1b]0;pwned\x07\u202eevil\nsecond line"


def reference_json(board: Board, now: datetime, problems: list[str] | None = None) -> bytes:
    """as_json as first written."""
    document: dict[str, Any] = {
        "time": now,
        "header": board.header._asdict(),
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
                "gpus": [
                    {
                        "index": g.gpu,
                        "utilization_pct": g.util_pct,
                        "memory_used_bytes": g.used,
                        "memory_total_bytes": g.total,
                        "temperature_c": g.temperature_c,
                        "problems": list(g.problems),
                    }
                    for g in map(bar, gpus_of(n.look))
                ],
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
    return msgspec.json.format(msgspec.json.encode(printable_values(document)), indent=2)


def telemetry_as(held: Held, telemetry: NodeTelemetry, encoding: str = "json") -> Held:
    data, headers = encode(telemetry, "msgpack" if encoding == "msgpack" else "json")
    return msgspec.structs.replace(held, data=data, content_type=headers[HEADER_CONTENT_TYPE])


def fleet(hostile: bool) -> FleetState:
    """40 live nodes and 3 dead; GPU 0 of gpu-0001 unhealthy and reading no utilization or
    free memory; gpu-0002's telemetry in MessagePack; with `hostile`, a shard's reason and
    the unhealthy GPU's problem carry control characters and a bidirectional override."""
    state = fleet_state(live=40, every=7, dead=3)
    one, two = live_name(1), live_name(2)
    t = decode_held(state.nodes[one], NodeTelemetry)
    sick = msgspec.structs.replace(
        t.gpus[0],
        utilization_pct=None,
        memory_free_bytes=None,
        problems=[f"XID 79: fell off the bus{HOSTILE if hostile else ''}"],
    )
    state.nodes[one] = telemetry_as(
        state.nodes[one], msgspec.structs.replace(t, gpus=[sick, *t.gpus[1:]])
    )
    state.nodes[two] = telemetry_as(
        state.nodes[two], decode_held(state.nodes[two], NodeTelemetry), "msgpack"
    )
    if hostile:
        key = (live_name(3), "shard-02")
        state.shards[key] = msgspec.structs.replace(state.shards[key], reason=HOSTILE)
    return state


def test_the_json_board_is_the_bytes_the_straightforward_build_printed() -> None:
    for hostile in (False, True):
        state = fleet(hostile)
        board = Watched(state, "nats://127.0.0.1:4222", clock=lambda: NOW.timestamp() + 1).board()
        problems = state.problems()
        for shown in (board, selected(board, problems=True), selected(board, node="gpu-000*")):
            assert as_json(shown, NOW, problems) == reference_json(shown, NOW, problems)
        assert (b"\\\\x1b" in as_json(board, NOW)) is hostile
        assert b'"utilization_pct": null' in as_json(board, NOW)
