"""A real llama-server in router mode (`--models-dir`): the router loads no model and is no
shard; each model it loads runs in a child llama-server of its own, a shard
`<router's id>/<model>`, its lines those the router prefixes with the child's `[PORT]`.

The lane's CPU-only b11434 build, judged by a real `placewatch run` on a real nats-server
(tests/support/engine_lane.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from placewatch.worker.shards.liveness import ROUTER

from .test_llama_server import NGL
from tests.conftest import free_port
from tests.support.engine_lane import NEW_S, Lane, Server, Session, descendants
from tests.support.llama_server import START_S, healthy


def post(port: int, path: str, body: dict[str, str]) -> None:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(), method="POST"
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert answer.status == 200


def router(lane: Lane, models: Path, log: Path, *, by_variable: bool | None = False) -> Server:
    """A router over `models`, named by `--models-dir`, or `by_variable` by
    LLAMA_ARG_MODELS_DIR alone; with no folder named, over its models cache, `models` made
    its cache (LLAMA_CACHE, HF_HOME: the machine's own is not read)."""
    port = free_port()
    argv = [str(lane.servers.binary), "--host", "127.0.0.1", "--port", str(port), "-ngl", "99"]
    env = {**os.environ, **lane.mark}
    if by_variable:
        env["LLAMA_ARG_MODELS_DIR"] = str(models)
    elif by_variable is None:
        env.update(LLAMA_CACHE=str(models), HF_HOME=str(models))
    else:
        argv += ["--models-dir", str(models)]
    with log.open("ab") as out:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env
        )
    server = Server(proc, port, log)
    lane.started.append(server)
    lane.servers.procs.append(proc)  # stopped with the lane's servers
    deadline = time.monotonic() + START_S
    while not healthy(port):
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, f"router not ready in {START_S} s"
        time.sleep(0.05)
    return server


@pytest.mark.parametrize(
    ("named", "by_variable", "discovery"),
    [
        (False, False, True),
        (True, False, True),
        (False, True, True),
        (True, True, True),
        (True, False, False),
    ],
    ids=["found", "placed", "found-by-variable", "placed-by-variable", "placed-no-discover"],
)
def test_a_router_is_no_shard_and_each_model_it_loads_is_one(
    lane: Lane, tmp_path: Path, named: bool, by_variable: bool, discovery: bool
) -> None:
    """Found, its children are `<router's id>/<model>` on their own flags' GPUs; named by a
    shards file, they are `<placement's id>/<model>` on the placement's GPUs, with discovery
    off too. A router by LLAMA_ARG_MODELS_DIR alone is one as by `--models-dir`. A child is
    judged within a few ticks of its start, not at the next full walk of the processes."""
    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(lane.servers.model, models / "tiny.gguf")
    served = router(lane, models, tmp_path / "router.log", by_variable=by_variable)
    router_id = served.discovered_id
    child_id = f"{'router' if named else router_id}/tiny"
    args = () if discovery else ("--no-discover",)
    with lane.running({"router": served} if named else {}, args=args) as workers:
        for w in workers.values():  # idle: nothing loaded, nothing to judge
            w.until(lambda s: len(s.telemetry) >= 3)
        post(served.port, "/models/load", {"model": "tiny"})
        deadline = time.monotonic() + START_S
        while not (children := descendants(served.pid)):
            assert time.monotonic() < deadline, "the router started no child"
            time.sleep(0.05)
        child = children[0]
        argv = psutil.Process(child).cmdline()
        child_port = argv[argv.index("--port") + 1]
        lane.gpu_lists([child])

        def judged(s: Session) -> bool:
            # its lines read: before, it may be `unknown`, or by memory `cpu_fallback` for a
            # moment before the fake GPU tool lists it
            last = s.statuses.get(child_id, [None])[-1]
            return last is not None and last.verdict == "cpu_fallback" and bool(last.evidence)

        for w in workers.values():
            w.until(judged)
        loaded = {mode: w.session.last(child_id) for mode, w in workers.items()}
        started = psutil.Process(child).create_time()
        post(served.port, "/models/unload", {"model": "tiny"})
        for w in workers.values():
            w.until(lambda s: s.last(child_id).verdict == "gone")
        sessions = {mode: w.session for mode, w in workers.items()}
    said = served.log.read_text()
    assert f"[{child_port}] warning: no usable GPU found" in said  # the router's own file
    for mode, session in sessions.items():
        assert router_id not in session.statuses, sorted(session.statuses)
        assert all(router_id not in t.shards for t in session.telemetry)
        if named:  # the entry naming it reads unknown, saying why, and never fires
            entry = session.last("router")
            assert (entry.verdict, entry.reason) == ("unknown", f"pid {served.pid} is a {ROUTER}")
            assert "router" not in session.fallbacks
        status = loaded[mode]
        assert (status.verdict, status.backend, status.pid) == ("cpu_fallback", "CPU", child)
        after = status.time.timestamp() - started
        assert 0 < after <= NEW_S, f"{mode}: judged {after:.1f} s after the child started"
        assert tuple(status.evidence) == NGL
        assert status.placed_gpus == ([0] if named or mode == "gpu" else [])
        assert [f.state for f in session.fallbacks[child_id]] == ["firing", "resolved"]


@pytest.mark.parametrize("named", [False, True], ids=["found", "placed"])
def test_a_server_given_no_model_at_all_routes_over_its_cache_and_is_no_shard(
    lane: Lane, tmp_path: Path, named: bool
) -> None:
    """b11434 given no model, no models folder and no presets file starts as a router over its
    models cache. It holds no GPU memory, so judged as a shard it read cpu_fallback: a page for
    a server that loads models only when asked. Found, it is no shard; placed, its entry reads
    unknown, saying it is a router, and never fires."""
    cache = tmp_path / "cache"
    cache.mkdir()
    served = router(lane, cache, tmp_path / "router.log", by_variable=None)
    with lane.running({"router": served} if named else {}) as workers:
        for w in workers.values():
            w.until(lambda s: len(s.telemetry) >= 4)
        sessions = {mode: w.session for mode, w in workers.items()}
    assert "starting server in router mode" in served.log.read_text()
    for session in sessions.values():
        assert served.discovered_id not in session.statuses, sorted(session.statuses)
        if named:
            entry = session.last("router")
            assert (entry.verdict, entry.reason) == ("unknown", f"pid {served.pid} is a {ROUTER}")
        assert not session.fallbacks
