"""The board `placewatch watch` draws: problems first, silent nodes told apart and not counted
as firing where they are, filters by glob, and text and JSON that stand alone."""

from __future__ import annotations

import fnmatch
import json
from datetime import timedelta

import msgspec
import pytest

from placewatch.consumer.held import decode_held
from placewatch.consumer.watch.board import (
    FILTERED,
    FORGET_AFTER_S,
    Filtered,
    matches,
    node_matches,
    rank,
    selected,
)
from placewatch.consumer.watch.text import COLUMNS, as_json, lines
from placewatch.consumer.watch.watched import Watched
from placewatch.schemas import NodeTelemetry, SourceStatus, encode
from placewatch.schemas.evidence import BLIND_AFTER_S
from placewatch.schemas.printable import printable

from tests.support.console_fleet import DEAD_FOR, NOW, dead_name, fleet_state, live_name


def watched(**kwargs: int) -> Watched:
    return Watched(
        fleet_state(**kwargs), "nats://127.0.0.1:4222", clock=lambda: NOW.timestamp() + 1
    )


def test_one_look_builds_the_board_a_console_builds_and_keeps_no_rows_or_verdicts() -> None:
    kept, once = watched(), watched()
    once.once = True
    assert once.board() == kept.board()
    assert len(kept.history) == 4108 and not once.history  # each shard's verdicts, or none
    assert len(kept._rows) == 4108 and not once._rows


def test_the_header_counts_nodes_live_and_silent_and_the_firing_on_silent_nodes_apart() -> None:
    h = watched().board().header
    assert (h.live, h.silent, h.shards) == (1000, 27, 4108)
    assert h.verdicts == {"gpu": 4066, "cpu_fallback": 42}
    assert (h.firing, h.firing_silent) == (42, 27)
    assert h.newest_age_s == pytest.approx(1.0)


def test_problems_come_first_live_fallbacks_then_silent_nodes_then_the_rest() -> None:
    rows = watched().board().shards
    firing_live = rows[:15]
    assert all(r.verdict == "cpu_fallback" and r.firing and not r.silent for r in firing_live)
    assert [r.node for r in firing_live] == [live_name(i) for i in range(0, 1000, 71)]
    silent = rows[15 : 15 + 27 * 4]
    assert all(r.silent for r in silent) and {r.node for r in silent} == {
        dead_name(i) for i in range(27)
    }
    assert all(r.verdict == "gpu" and not r.problem for r in rows[15 + 27 * 4 :])
    assert [(r.node, r.shard, r.state) for r in rows[15:17]] == [
        (dead_name(0), "shard-00", "silent"),
        (dead_name(0), "shard-01", "FIRING,silent"),  # still firing: alerts resolve on evidence
    ]


@pytest.mark.parametrize(
    ("verdict", "stale", "silent", "expected"),
    [
        ("cpu_fallback", False, False, 0),
        ("misplaced", False, False, 1),
        ("partial", False, False, 2),
        ("gpu", True, False, 3),  # evidence lost: a person should look
        ("unknown", False, False, 3),
        ("gpu", False, True, 4),
        ("cpu_fallback", False, True, 4),
        ("starting", False, False, 5),
        ("gpu", False, False, 6),
    ],
)
def test_rank_orders_what_needs_a_person_first(
    verdict: str, stale: bool, silent: bool, expected: int
) -> None:
    assert rank(verdict, stale, silent) == expected


def test_a_node_silent_for_long_is_offered_to_forget_and_one_silent_briefly_is_not() -> None:
    nodes = {n.node: n for n in watched().board().nodes}
    old = nodes[dead_name(0)]
    assert old.silent and old.forget and old.age_s >= FORGET_AFTER_S
    assert old.problems == ("silent 60 min",)
    assert DEAD_FOR.total_seconds() > FORGET_AFTER_S
    state = fleet_state(live=3, dead=0)
    later = Watched(state, clock=lambda: NOW.timestamp() + 30).board()  # 15 intervals of 2 s
    quiet = later.nodes[0]
    assert quiet.silent and not quiet.forget and quiet.problems == ("silent 30 s",)


def test_globs_select_nodes_and_shards_and_problems_keeps_what_needs_a_person() -> None:
    board = watched().board()
    one = selected(board, node="gpu-0071")
    assert [(r.node, r.shard) for r in one.shards] == [
        ("gpu-0071", f"shard-0{i}") for i in (1, 0, 2, 3)
    ]
    assert [n.node for n in one.nodes] == ["gpu-0071"]
    firing = selected(board, problems=True, node="gpu-*")
    assert len(firing.shards) == 15 and all(r.firing for r in firing.shards)
    assert firing.nodes == []  # the live nodes are fine
    shard = selected(board, shard="shard-01", node="old-*")
    assert len(shard.shards) == 27 and len(shard.nodes) == 27


def test_a_filter_term_matches_within_any_field_or_the_one_it_names() -> None:
    row = watched().board().shards[0]  # gpu-0000 shard-01 vllm cpu_fallback
    assert matches(row, "fallback") and matches(row, "verdict:cpu_*") and matches(row, "VLLM")
    assert not matches(row, "node:shard*") and not matches(row, "engine:llama*")
    assert node_matches("gpu-0042", "node:gpu-004?") and node_matches("gpu-0042", "0042")
    assert node_matches("gpu-0042", "verdict:gpu")  # another field's term keeps every node
    assert not node_matches("gpu-0042", "old")
    # a name's second line is no name of its own: `gpu-*` keeps a node named as it begins
    assert not node_matches("evil\ngpu-0042", "gpu-*") and node_matches("gpu-0042\nx", "gpu-*")


@pytest.mark.parametrize(
    ("terms", "count"),
    [
        ("fallback", 42),
        ("node:old-0[0-4]", 20),
        ("GPU-00* verdict:CPU*", 2),
        ("state:*silent shard:shard-0[!1]", 81),
        ("old gpu-00", 0),
        ("node:gpu-01?? fallback", 1),
        ("", 4108),
    ],
)
def test_a_filter_over_every_row_at_once_keeps_what_each_row_s_match_keeps(
    terms: str, count: int
) -> None:
    rows = watched().board().shards
    kept = Filtered(rows).kept(terms.split())
    assert kept == [r for r in rows if all(matches(r, t) for t in terms.split())]
    assert len(kept) == count


@pytest.mark.parametrize(
    "glob", ["*", "gpu-0*", "*-01", "gpu-00?2", "*-0?4*", "shard-0[!1]", "*FALL*", "cpu_fallback"]
)
def test_a_glob_keeps_the_rows_a_shell_s_match_keeps_its_ends_anchored_where_it_has_no_star(
    glob: str,
) -> None:
    rows = watched().board().shards
    whole = glob if any(c in glob for c in "*?[") else f"*{glob}*"
    want = [
        r
        for r in rows
        if any(fnmatch.fnmatch(getattr(r, f).lower(), whole.lower()) for f in FILTERED)
    ]
    assert Filtered(rows).kept([glob]) == want
    assert 0 < len(want) < len(rows) or glob == "*"


def test_once_prints_a_line_per_shard_with_its_node_so_grep_keeps_it_whole() -> None:
    w = watched()
    out = lines(w.board(), NOW, w.where)
    assert out[0].startswith("# placewatch  2026-12-06 08:00:00 UTC  nats://127.0.0.1:4222")
    assert (
        out[1]
        == "# nodes 1000 live, 27 silent  shards 4108: 4066 gpu, 42 cpu_fallback  42 firing, 27 on silent nodes"
    )
    assert out[2].split() == list(COLUMNS)
    firing = [line for line in out if "FIRING" in line]
    assert len(firing) == 42
    assert firing[0].split()[:6] == [
        "gpu-0000",
        "shard-01",
        "vllm",
        "cpu_fallback",
        "FIRING",
        "08:00:00Z",
    ]
    assert firing[0].endswith(
        "placed on GPU 1 but computing on the CPU: its log says 0 of 33 layers offloaded"
    )
    assert (
        f"# node {dead_name(3)}  silent 60 min: if it is gone for good, placewatch forget {dead_name(3)}"
        in out
    )
    assert len(out) == 3 + 4108 + 27


def test_json_keeps_the_filters_so_the_firing_shards_are_a_few_kb() -> None:
    board = selected(watched().board(), problems=True, node="gpu-*")
    data = as_json(board, NOW)
    assert len(data) < 16_000
    document = json.loads(data)
    assert len(document["shards"]) == 15 and len(document["firing"]) == 15
    first = document["shards"][0]
    assert (first["node"], first["shard"], first["state"], first["placed_gpus"]) == (
        "gpu-0000",
        "shard-01",
        "FIRING",
        [1],
    )
    assert first["evidence"] == ["load_tensors: offloaded 0/33 layers to GPU"]
    assert document["header"]["firing_silent"] == 27


def test_nothing_a_node_sends_reaches_the_terminal_as_a_control_sequence() -> None:
    state = fleet_state(live=1, dead=0)
    key = next(iter(state.shards))
    hostile = "\x1b]52;c;cHduZWQ=\x07\u202eevil\nsecond line"
    state.shards[key] = msgspec.structs.replace(
        state.shards[key], reason=hostile, verdict="unknown"
    )
    board = Watched(state, clock=NOW.timestamp).board()
    text = "\n".join(lines(board, NOW))
    assert "\x1b" not in text and "\u202e" not in text and "\x07" not in text
    assert r"\x1b]52;c;cHduZWQ=\x07\u202eevil\nsecond line" in text
    assert printable("a\tb") == r"a\tb"
    data = as_json(board, NOW)
    assert not any(c in data.decode() for c in ("\x1b", "\x07", "\u202e"))
    (shard,) = [s for s in json.loads(data)["shards"] if s["reason"].startswith("\\x1b")]
    assert shard["reason"] == r"\x1b]52;c;cHduZWQ=\x07\u202eevil\nsecond line"


def test_a_shard_s_verdicts_as_the_console_saw_them() -> None:
    state = fleet_state(live=1, dead=0)
    w = Watched(state, clock=NOW.timestamp)
    w.board()
    key = (live_name(0), "shard-01")
    was = state.shards[key]
    later = NOW + timedelta(minutes=5)
    state.shards[key] = msgspec.structs.replace(
        was, verdict="gpu", reason="computes on GPU 1", time=later
    )
    w.board()
    w.board()  # the same status again: no change to note
    assert [(c.verdict, c.time) for c in w.history[key]] == [("cpu_fallback", NOW), ("gpu", later)]


def test_a_selection_that_matches_nothing_says_so_and_an_empty_bus_says_what_to_check() -> None:
    w = watched(live=3, dead=0)
    assert lines(selected(w.board(), node="nope*"), NOW)[-1] == "# nothing here matches"
    empty = Watched(fleet_state(live=0, dead=0), clock=NOW.timestamp).board()
    assert lines(empty, NOW)[-1] == "# no nodes yet: is a worker publishing with this prefix?"


def test_a_blind_node_is_a_problem_and_its_shards_read_blind_past_the_limit() -> None:
    """nvidia-smi fails on one node: it is BLIND among the problems; a shard stale for
    longer than BLIND_AFTER_S reads `blind` where it read `stale`, one stale less long
    `stale`. The limit is counted on the node's clock, here 30 s behind the view's."""
    state = fleet_state(live=2, dead=0)
    node = live_name(0)
    failed = SourceStatus(
        name="nvidia-smi", ok=False, latency_ms=40.0, error="NVIDIA-SMI has failed", vendor="nvidia"
    )
    telemetry = decode_held(state.nodes[node], NodeTelemetry)
    blind = msgspec.structs.replace(telemetry, gpus=[], sources=[failed])
    data, headers = encode(blind)
    state.nodes[node] = msgspec.structs.replace(
        state.nodes[node],
        data=data,
        content_type=headers["Content-Type"],
        seen=NOW.timestamp() + 30,
    )
    behind = NOW  # the node's now, when the view's is NOW + 30 s
    for shard, lost_s in (("shard-00", BLIND_AFTER_S + 5), ("shard-01", BLIND_AFTER_S - 5)):
        state.shards[(node, shard)] = msgspec.structs.replace(
            state.shards[(node, shard)],
            stale=True,
            stale_since=behind - timedelta(seconds=lost_s),
        )
    board = Watched(state, clock=lambda: NOW.timestamp() + 30).board()
    (row,) = [n for n in board.nodes if n.node == node]
    assert row.problems == (
        "BLIND: no GPU tool answers: NVIDIA-SMI has failed",
        "clock 30 s behind",
    )
    assert board.nodes[0] is row  # problems first
    states = {r.shard: r.state for r in board.shards if r.node == node}
    assert (states["shard-00"], states["shard-01"]) == ("blind", "FIRING,stale")
    (other,) = [n for n in board.nodes if n.node != node]  # silent by now, never blind
    assert not any("BLIND" in said for said in other.problems)
