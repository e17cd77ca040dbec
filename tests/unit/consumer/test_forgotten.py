"""A FleetView told a node is gone for good (NodeForgotten, from `placewatch forget`) lets it
go: the messages handed to it as its subscriptions and stream reads would."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any, cast

import msgspec

from placewatch.consumer import FleetView, Message
from placewatch.consumer.fleet import GONE_FROM_STREAMS
from placewatch.consumer.kept import Kept
from placewatch.schemas import (
    ComputeStatus,
    NodeForgotten,
    NodeInventory,
    NodeTelemetry,
    encode,
    subjects,
)

NOW = datetime(2026, 12, 3, 6, 0, tzinfo=UTC)
NODES = ("gpu-07", "gpu-08")


def messages(node: str) -> list[msgspec.Struct]:
    return [
        NodeInventory(node=node, session="s1", time=NOW, id="i1"),
        NodeTelemetry(node=node, session="s1", seq=1, time=NOW, interval_s=2.0, inventory="i1"),
        ComputeStatus(node=node, shard="llama", session="s1", time=NOW, verdict="cpu_fallback"),
    ]


def hand(view: FleetView, message: msgspec.Struct, stored: float | None = None) -> None:
    """`message` as it came live (`stored` None) or read from a stream stored at `stored`."""
    payload, headers = encode(message)
    view._hold(payload, headers, cast(Any, type(message)), subject(message), stored)


def subject(message: msgspec.Struct) -> str:
    """The subject `message` travels on, as its node publishes it."""
    if isinstance(message, ComputeStatus):
        return subjects.compute(message.node, message.shard)
    of_node = {
        NodeInventory: subjects.inventory,
        NodeTelemetry: subjects.telemetry,
        NodeForgotten: subjects.forgotten,
    }
    return of_node[type(message)](cast(Any, message).node)


def forgotten(node: str) -> NodeForgotten:
    return NodeForgotten(node=node, time=NOW, reason="forgotten: `placewatch forget` on ops-1")


def holding_both() -> tuple[FleetView, list[Message]]:
    heard: list[Message] = []
    view = FleetView(cast(Any, None), on_change=heard.append)  # never started: handed messages
    for node in NODES:
        for message in messages(node):
            hand(view, message)
    assert view.sample("gpu-07") is not None and len(view.firing()) == 2
    heard.clear()
    return view, heard


def test_a_forgotten_node_is_let_go_and_every_other_node_kept() -> None:
    view, heard = holding_both()

    hand(view, forgotten("gpu-07"))

    assert (sorted(view.nodes), sorted(view.inventories)) == (["gpu-08"], ["gpu-08"])
    assert list(view.shards) == [("gpu-08", "llama")]
    assert [f.node for f in view.firing()] == ["gpu-08"]
    assert view.sample("gpu-07") is None and view.sample("gpu-08") is not None
    assert heard == [forgotten("gpu-07")]
    assert view.undecodable == 0

    hand(view, forgotten("gpu-07"))  # said twice, or of a node the view never held
    hand(view, forgotten("gpu-99"))
    assert heard == [forgotten("gpu-07")]  # nothing changed, so nobody is told


def test_a_node_started_again_under_the_name_is_held_afresh() -> None:
    view, _ = holding_both()
    hand(view, forgotten("gpu-07"))

    for message in messages("gpu-07"):
        hand(view, message)

    assert sorted(view.nodes) == list(NODES)
    assert ("gpu-07", "llama") in view.shards
    assert view.firing()[0].since == NOW  # its fallback counted from its new status


def test_what_a_stream_kept_of_a_node_forgotten_while_the_view_reads_it_is_not_held() -> None:
    view = FleetView(cast(Any, None))
    view._forgotten = set()  # start() reading the streams
    hand(view, forgotten("gpu-07"))  # came live, before the read's copies

    for node in NODES:
        for message in messages(node):
            hand(view, message, stored=NOW.timestamp())

    assert sorted(view.nodes) == ["gpu-08"]
    assert list(view.shards) == [("gpu-08", "llama")]
    hand(view, messages("gpu-07")[1])  # live: a worker started under the name since
    assert sorted(view.nodes) == list(NODES)


def test_after_a_reconnect_what_the_bus_no_longer_keeps_and_was_not_heard_since_is_let_go() -> None:
    view, heard = holding_both()
    began = time.time() + 1  # every message was taken before the view's fill began
    hand(view, messages("gpu-08")[2])  # ...save one gpu-08 status heard live since
    view._status_seen[("gpu-08", "llama")] = began + 1

    view._let_go(Kept(nodes={"gpu-08"}, statuses=set()), began)

    assert (sorted(view.nodes), sorted(view.inventories)) == (["gpu-08"], ["gpu-08"])
    assert list(view.shards) == [("gpu-08", "llama")]
    assert [(type(m).__name__, getattr(m, "node", "")) for m in heard] == [
        ("NodeForgotten", "gpu-07")
    ]
    assert isinstance(heard[0], NodeForgotten) and heard[0].reason == GONE_FROM_STREAMS


def test_after_a_reconnect_a_read_that_failed_lets_nothing_go() -> None:
    view, heard = holding_both()

    view._let_go(Kept(nodes=None, statuses=None), time.time() + 1)

    assert (sorted(view.nodes), len(view.shards), heard) == (list(NODES), 2, [])


def test_after_a_reconnect_a_node_heard_since_the_fill_began_is_kept() -> None:
    view, heard = holding_both()

    view._let_go(Kept(nodes=set(), statuses=set()), began=0.0)  # each heard after it began

    assert (sorted(view.nodes), len(view.shards), heard) == (list(NODES), 2, [])
