"""A real llama-server's log across its process's life, as operators run it: restarted into
the same file, rotated by copytruncate, deleted, shared with a second server, written as
JSONL, or no file at all (a pipe).

Real servers (the lane's CPU-only b11434 build) judged by a real `placewatch run` on a real
nats-server; tests/support/engine_lane.py says how.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
from anyio.from_thread import start_blocking_portal

from placewatch.schemas import ComputeStatus
from placewatch.worker.engines import read_launch
from placewatch.worker.engines.evidence import EngineEvidence
from placewatch.worker.engines.evidence.follow import EngineLogs, Log
from placewatch.worker.engines.evidence.source import HeldLog
from placewatch.worker.shards.discover.log_path import find_log
from placewatch.worker.shards.discovered import DISCOVERY_EVERY_S

from .test_llama_server import (
    LV4,
    NGL,
    NO_GPU,
    NO_USABLE_GPU,
    asked_but_cpu,
    said_verbosity,
    shown,
    untold,
)
from tests.conftest import clean_env, run_placewatch
from tests.support.doctor import lines
from tests.support.engine_lane import PLACED, Lane, Server, Session
from tests.support.eventually import eventually
from tests.support.llama_server import LlamaServers, healthy


def fallbacks(session: Session, shard: str) -> list[tuple[str, str]]:
    return [(f.state, f.status.verdict) for f in session.fallbacks.get(shard, [])]


def test_a_restart_into_its_old_log_is_judged_on_its_own_lines(lane: Lane) -> None:
    """`llama-server -ngl 99 >> s.log` on a CPU build, stopped, started again into s.log at
    -lv 4 (found by its port: the same shard): its status is the new run's alone."""
    log = lane.tmp / "s.log"
    old = lane.start("-ngl", "99", log=log)
    with lane.running({PLACED: old}, by_port=True) as workers:
        for w in workers.values():
            w.settle([PLACED])
            assert w.session.last(PLACED).verdict == "cpu_fallback"
        old.stop()
        new = lane.start("-lv", "4", log=log, port=old.port)
        lane.gpu_lists([new.engine_pid])

        def judged_anew(s: Session) -> bool:
            last = s.last(PLACED)
            return last.pid == new.pid and last.verdict not in ("starting", "gone")

        for w in workers.values():
            w.until(judged_anew)
        sessions = {mode: w.session for mode, w in workers.items()}
    assert log.read_text().count(NO_GPU) == 1
    for session in sessions.values():
        now = session.last(PLACED)
        assert NO_GPU not in now.evidence
        assert shown(now.evidence) == LV4
        assert now.reason.startswith("placed on GPU 0 but computing on the CPU: llama.cpp lists")
        assert not now.stale


def test_copytruncate_keeps_the_fallback_stale_and_never_resolves_it(lane: Lane) -> None:
    server = lane.start("-ngl", "99")
    with lane.running({PLACED: server}) as workers:
        for w in workers.values():
            w.settle([PLACED])
        os.truncate(server.log, 0)  # logrotate's copytruncate, after its copy
        for w in workers.values():
            w.until(lambda s: s.last(PLACED).stale)
            seen = len(w.session.telemetry)
            w.until(lambda s, seen=seen: len(s.telemetry) >= seen + 3)
        sessions = {mode: w.session for mode, w in workers.items()}
    for session in sessions.values():
        last: ComputeStatus = session.last(PLACED)
        assert (last.verdict, last.stale, last.pid) == ("cpu_fallback", True, server.pid)
        assert last.reason.startswith(NO_USABLE_GPU.reason)
        assert last.stale_since is not None
        assert fallbacks(session, PLACED) == [("firing", "cpu_fallback")]
        assert session.telemetry[-1].shards[PLACED].verdict == "cpu_fallback"


def test_two_servers_on_one_log_are_both_unknown_and_say_why(lane: Lane) -> None:
    log = lane.tmp / "shared.log"
    quiet = lane.start(log=log)
    loud = lane.start("-lv", "4", log=log)
    shards = [quiet.discovered_id, loud.discovered_id]
    with lane.running({}) as workers:
        for w in workers.values():
            w.until(lambda s: all(s.statuses.get(sid) for sid in shards))
            w.settle(shards)
        sessions = {mode: w.session for mode, w in workers.items()}
    for session in sessions.values():
        for sid, other in ((quiet, loud), (loud, quiet)):
            s = session.last(sid.discovered_id)
            assert s.verdict == "unknown", s
            assert s.reason == (
                f"two engines write this log ({log}): {other.discovered_id} (pid {other.pid}) "
                "too, so whose lines are whose cannot be told; give each engine its own log "
                "(llama.cpp: -lv 4 with --log-file)"
            )
            assert s.evidence == []
            assert fallbacks(session, sid.discovered_id) == []
    # doctor says the same, naming both
    done = run_placewatch("doctor", "--nats", lane.nats.url, env=clean_env())
    said = sorted(line for line in lines(done.stdout, "engine logs") if str(log) in line)
    assert said == [
        f"fail  engine logs: {a.discovered_id}: two engines write this log ({log}): "
        f"{b.discovered_id} (pid {b.pid}) too, so whose lines are whose cannot be told; next: "
        "give each engine its own log (llama.cpp: -lv 4 with --log-file)"
        for a, b in sorted(((quiet, loud), (loud, quiet)), key=lambda p: p[0].discovered_id)
    ]


def test_log_jsonl_reads_as_the_text_log_does(lane: Lane) -> None:
    jsonl = lane.start("-ngl", "99", "--log-jsonl")
    text = lane.start("-ngl", "99")
    assert '{"type":"log"' in jsonl.log.read_text()
    sessions = lane.judge([jsonl], {PLACED: text})
    for session in sessions.values():
        found, placed = session.last(jsonl.discovered_id), session.last(PLACED)
        assert (found.verdict, found.backend) == ("cpu_fallback", "CPU")
        assert tuple(found.evidence) == NGL
        assert found.evidence == placed.evidence
        assert not any("{" in line or "\\n" in line for line in found.evidence)


def test_a_discovered_server_restarted_into_its_log_is_judged_on_the_new_run(
    lane: Lane, cpu_only_build: Path, tiny_model: Path
) -> None:
    """A discovered `llama-server >> s.log` sent SIGTERM while it receives a request, and at
    once `-ngl 99 -lv 4` started into s.log on its port (issue 65, case 3). The stopped one
    holds the log until that request's connection closes, so the new run's start is read
    through its descriptor first, and the new process is found by the next discovery walk
    alone (a launcher that execs it after a pause is no new engine at a tick's look): it is
    judged on its own lines, from where its life starts."""
    launcher = lane.tmp / "launch-later"
    launcher.write_text(f'#!/bin/sh\nsleep 2\nexec {cpu_only_build} "$@"\n')
    launcher.chmod(0o755)
    later = LlamaServers(launcher, tiny_model)
    log = lane.tmp / "s.log"
    old = lane.start(log=log)
    sid = old.discovered_id
    try:
        with lane.running({}) as workers:
            for w in workers.values():
                w.settle([sid])
                assert w.session.last(sid).verdict in ("unknown", "gpu")
            with uploading(old.port):
                old.proc.send_signal(signal.SIGTERM)
                eventually(lambda: not healthy(old.port), what="its port closed")
                new = lane.start("-ngl", "99", "-lv", "4", log=log, port=old.port, via=later)
                assert log.read_text().count(LISTENING) == 2
                assert old.proc.poll() is None  # stopping, its log still held
                for w in workers.values():
                    seen = len(w.session.telemetry)
                    w.until(lambda s, seen=seen: len(s.telemetry) >= seen + 4)
            old.proc.wait(30)
            lane.gpu_lists([new.engine_pid])

            def judged_anew(s: Session) -> bool:
                last = s.last(sid)
                return last.pid == new.pid and last.verdict not in ("starting", "gone", "unknown")

            for w in workers.values():
                w.until(judged_anew)
            sessions = {mode: w.session for mode, w in workers.items()}
    finally:
        later.stop()
    for mode, session in sessions.items():
        now = session.last(sid)
        assert (now.verdict, now.backend, now.stale) == ("cpu_fallback", "CPU", False), now
        assert shown(now.evidence)[:2] == NGL[:2]
        assert said_verbosity(4) in now.evidence
        assert said_verbosity(3) not in now.evidence
        if mode == "bare":
            assert now.reason == asked_but_cpu("-ngl 99", f"says {NO_GPU!r}")
        else:
            assert now.reason == NO_USABLE_GPU.reason
        assert fallbacks(session, sid)[-1] == ("firing", "cpu_fallback")


LISTENING = "llama_server: listening on"


@contextmanager
def uploading(port: int) -> Iterator[None]:
    """A request to the server on `port` whose body is still on its way while the block runs:
    llama-server stopped by SIGTERM meanwhile closes its port at once, and exits only once
    that connection closes. The block starts once the server has read the request's start: a
    connection it has not yet taken up when stopped is closed unread, and it exits at once."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as client:
        client.sendall(
            b"POST /completion HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b'Content-Length: 100000\r\n\r\n{"prompt": '
        )
        ours = client.getsockname()[1]
        eventually(lambda: unread(port, ours) == 0, what="the request's start read by the server")
        yield


def unread(port: int, peer: int) -> int | None:
    """Bytes waiting in the receive queue of the server's end of a loopback connection from
    port `peer` (/proc/net/tcp), or None while there is no such end."""
    for row in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, remote, _, queues = row.split()[1:5]
        if local == f"0100007F:{port:04X}" and remote == f"0100007F:{peer:04X}":
            return int(queues.split(":")[1], 16)
    return None


def test_a_deleted_log_keeps_the_fallback_stale_and_never_resolves_it(lane: Lane) -> None:
    """`rm` of a discovered `llama-server -ngl 99 > s.log`'s log while it runs (issue 65, case
    2): through the discovery walks that follow, its fallback stands, stale, saying why."""
    server = lane.start("-ngl", "99")
    sid = server.discovered_id
    with lane.running({}) as workers:
        for w in workers.values():
            w.settle([sid])
        server.log.unlink()
        for w in workers.values():
            w.until(lambda s: s.last(sid).stale)
            seen = len(w.session.telemetry)
            # past the next full discovery walk (DISCOVERY_EVERY_S) at 0.5 s a tick
            w.until(lambda s, seen=seen: len(s.telemetry) >= seen + 2 * DISCOVERY_EVERY_S + 4)
        sessions = {mode: w.session for mode, w in workers.items()}
    for mode, session in sessions.items():
        last = session.last(sid)
        assert (last.verdict, last.stale, last.pid) == ("cpu_fallback", True, server.pid), last
        first = asked_but_cpu("-ngl 99", f"says {NO_GPU!r}") if mode == "bare" else None
        assert last.reason.startswith(first or NO_USABLE_GPU.reason)
        assert f"its log {server.log} was deleted while its process writes to it" in last.reason
        assert tuple(last.evidence) == NGL
        assert [s.verdict for s in session.statuses[sid]] == ["cpu_fallback"] * len(
            session.statuses[sid]
        )
        assert fallbacks(session, sid) == [("firing", "cpu_fallback")]
        assert session.telemetry[-1].shards[sid].verdict == "cpu_fallback"


@contextmanager
def following() -> Iterator[Callable[[Log], EngineEvidence]]:
    """The worker's own log follower (EngineLogs), running while the test goes on: each call
    names shard "s"'s log and gives its evidence so far."""
    with start_blocking_portal() as portal:
        logs = EngineLogs()
        running, _ = portal.start_task(logs.run)
        try:
            yield lambda wanted: portal.call(logs.read, {"s": wanted})["s"]
        finally:
            running.cancel()


def held(server: Server, log: Path) -> Log:
    """`log` as the worker follows it for `server`: through its stderr, knowing its start."""
    fields = Path(f"/proc/{server.pid}/stat").read_text().rsplit(")", 1)[1].split()
    started = int(fields[19])  # starttime, the stat's 22nd field: clock ticks since boot
    return Log(HeldLog(str(log), server.pid, 2), server.pid, None, started)


def test_a_new_run_read_through_the_stopping_process_s_descriptor_is_its_own(
    lane: Lane,
) -> None:
    """Case 3's race held open: the stopped server still holds the log (as a large model's
    clean-up keeps it) while the next one prints its start into it, so the new run's lines are
    read through the old process's descriptor before the tick names the new pid. They are
    the new process's evidence: naming it keeps them, as a new life it started."""
    log = lane.tmp / "s.log"
    old = lane.start(log=log)
    with following() as read:
        assert read(held(old, log)).verbosity == 3
        old.proc.send_signal(signal.SIGSTOP)  # stopping: it holds the log a while yet
        new = lane.start("-ngl", "99", "-lv", "4", log=log)
        through_old = read(held(old, log))
        assert (through_old.verbosity, through_old.gpu_failed) == (4, NO_GPU)
        old.proc.kill()
        old.proc.wait()
        now = read(held(new, log))
    assert (now.verbosity, now.gpu_failed, now.cpu_only_build) == (4, NO_GPU, True)
    assert now.stale_since is None  # the old descriptor closed as its process exited
    assert now.lines[:2] == NGL[:2]
    assert log.read_text().count(said_verbosity(3)) == 1


def test_a_log_deleted_before_it_was_first_read_is_its_log_and_says_so(lane: Lane) -> None:
    server = lane.start("-ngl", "99")
    server.log.unlink()
    launch = read_launch(psutil.Process(server.pid).cmdline())
    assert launch is not None
    found = find_log(launch, {}, server.pid)
    assert found == HeldLog(str(server.log), server.pid, 2)
    with following() as read:
        said = read(held(server, server.log))
    assert said.unread == f"{server.log} was deleted while its process writes to it"
    assert (said.known, said.stale_since, said.deleted) == (False, None, str(server.log))


def test_a_server_whose_output_goes_to_a_pipe_says_so_and_how_to_read_it(lane: Lane) -> None:
    """`llama-server -ngl 99 2>&1 | cat > /dev/null` (issue 65, case 7): no log to follow, so
    `unknown` without a GPU tool and memory alone with one, each reason naming the pipe and
    how to make the output readable."""
    read_end, write_end = os.pipe()
    try:
        proc, port = lane.servers.start(
            "-ngl", "99", stdout=write_end, stderr=subprocess.STDOUT, env=lane.mark
        )
        cat = subprocess.Popen(["cat"], stdin=read_end, stdout=subprocess.DEVNULL)
    finally:
        os.close(write_end)
        os.close(read_end)
    try:
        server = Server(proc, port, Path(os.devnull))
        lane.started.append(server)
        sid, link = server.discovered_id, os.readlink(f"/proc/{proc.pid}/fd/2")
        assert link.startswith("pipe:[")
        with lane.running({}) as workers:
            for w in workers.values():
                w.settle([sid])
            sessions = {mode: w.session for mode, w in workers.items()}
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)
        cat.wait(30)
    piped = (
        f"it has no log: its output goes to a pipe (stderr, fd 2: {link}), which only the "
        "process at its other end reads; send it to a file (> FILE 2>&1; or --log-file "
        "FILE) or run it as a systemd unit, whose output the journal holds"
    )
    bare = sessions["bare"].last(sid)
    silent = ", ".join(sessions["bare"].silent_sources)
    told = untold("-ngl 99").replace("{silent}", silent)
    assert (bare.verdict, bare.reason, bare.evidence) == ("unknown", f"{told}; {piped}", [])
    gpu = sessions["gpu"].last(sid)
    assert (gpu.verdict, gpu.reason) == ("gpu", f"holds 1.0 GiB on GPU 0 as placed; {piped}")
    for session in sessions.values():
        assert [s.verdict for s in session.statuses[sid]] == [session.last(sid).verdict]
        assert fallbacks(session, sid) == []
