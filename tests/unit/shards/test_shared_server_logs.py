"""A router that copies its children's lines into its log as they are (Ollama's server): the
log is read for a child only while it is the log's one child and none started after it."""

from __future__ import annotations

from placewatch.schemas import PlacementSpec
from placewatch.worker.shards.claims import SharedServerLogs
from placewatch.worker.shards.liveness import Tracked
from placewatch.worker.shards.placements import Placement

LOG = "/var/log/ollama.log"


def child(sid: str, pid: int, started: float, engine: str = "ollama") -> Tracked:
    spec = PlacementSpec(id=sid, pid=pid, gpus=[0], engine=engine, log_path=LOG)
    t = Tracked(Placement(spec, "discovered"))
    t.pid, t.create_time = pid, started
    return t


def test_one_child_reads_the_log() -> None:
    assert SharedServerLogs().unread({"a": child("a", 10, 100.0)}) == set()


def test_two_live_children_read_none_of_it() -> None:
    both = {"a": child("a", 10, 100.0), "b": child("b", 11, 200.0)}
    assert SharedServerLogs().unread(both) == {"a", "b"}


def test_a_child_that_outlived_a_later_one_does_not_read_that_one_s_lines() -> None:
    logs = SharedServerLogs()
    logs.unread({"a": child("a", 10, 100.0), "b": child("b", 11, 200.0)})
    assert logs.unread({"a": child("a", 10, 100.0)}) == {"a"}
    assert logs.unread({"c": child("c", 12, 300.0)}) == set()  # a new load starts afresh


def test_engines_that_write_their_own_log_are_not_its_business() -> None:
    both = {"a": child("a", 10, 100.0, "llama.cpp"), "b": child("b", 11, 200.0, "llama.cpp")}
    assert SharedServerLogs().unread(both) == set()
