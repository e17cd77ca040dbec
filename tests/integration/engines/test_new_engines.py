"""A real llama-server started while the worker runs is found and judged within a few ticks
of its start: each tick looks at the processes new since the last (discovered.py), not only
the full walk every 10 s. A router's new child likewise (test_llama_server_router.py).

The bound is behaviour, not a speed target: bench/detection_latency.py measures the delay.
"""

from __future__ import annotations

import psutil

from .test_llama_server import NGL, NO_GPU
from tests.support.engine_lane import NEW_S, Lane, Session


def test_a_server_started_while_the_worker_runs_is_judged_within_a_few_ticks(lane: Lane) -> None:
    with lane.running({}) as workers:
        for w in workers.values():  # past its first walk of the processes
            w.until(lambda s: len(s.telemetry) >= 3)
        server = lane.start("-ngl", "99")
        started = psutil.Process(server.pid).create_time()
        shard = server.discovered_id

        def judged(s: Session) -> bool:  # its lines read (`unknown` before, with no GPU tool)
            last = s.statuses.get(shard, [None])[-1]
            return last is not None and last.verdict == "cpu_fallback" and bool(last.evidence)

        for w in workers.values():
            w.until(judged)
        sessions = {mode: w.session for mode, w in workers.items()}
    for mode, session in sessions.items():
        status = session.last(shard)
        assert (status.verdict, status.pid, tuple(status.evidence)) == (
            "cpu_fallback",
            server.pid,
            NGL,
        )
        assert NO_GPU in status.reason
        after = status.time.timestamp() - started
        assert 0 < after <= NEW_S, f"{mode}: judged {after:.1f} s after the server started"
        assert [f.state for f in session.fallbacks[shard]] == ["firing"]
