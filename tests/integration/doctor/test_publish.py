"""The publish permission check on real servers with the streams: a probe that shows no node
in any fleet view and that no stream keeps; and a refusal when the credentials may not."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import anyio.to_thread
import nats

from placewatch.consumer import FleetView
from placewatch.schemas import subjects
from placewatch.schemas.streams import STREAMS, TELEMETRY
from placewatch.worker.bus.streams import StreamSettings, ensure_stream
from placewatch.worker.config import default_node

from tests.conftest import FakeGpuTools, NatsServer, run_placewatch
from tests.integration.test_security import create_streams_as_admin, node_permissions
from tests.support.doctor import A100_GPUS, lines


def test_doctor_shows_no_node_in_a_fleet_view_and_leaves_nothing_in_the_stream(
    nats_server: NatsServer, fake_gpu: FakeGpuTools
) -> None:
    fake_gpu.nvidia_smi(A100_GPUS)
    node = default_node()  # doctor's name when none is given: the host's
    subject = subjects.telemetry(node)

    async def go() -> tuple[str, int, dict[str, int]]:
        nc = await nats.connect(nats_server.url)
        try:
            for stream in STREAMS:
                await ensure_stream(nc.jetstream(), stream, StreamSettings())
            view = FleetView(nc)  # live while doctor runs
            await view.start()
            done = await anyio.to_thread.run_sync(
                lambda: run_placewatch("doctor", "--nats", nats_server.url, env=fake_gpu.env())
            )
            await nc.flush()
            assert view.nodes == {} and view.undecodable == 1
            await view.stop()
            info = await nc.jetstream().stream_info(TELEMETRY.name, subjects_filter=">")
            return done.stdout, info.state.messages, info.state.subjects or {}
        finally:
            await nc.close()

    out, messages, held = anyio.run(go, backend="asyncio")
    (publish,) = lines(out, "publish permission")
    assert publish.startswith(
        f"ok    publish permission: {subject} allowed: a probe no consumer reads as telemetry "
        "went out (the stream PLACEWATCH_TELEMETRY refused to keep it: wrong last sequence: 0); "
    )
    assert (messages, held) == (0, {})
    # A view that starts later, from what the stream keeps, shows no node either.
    done = run_placewatch(
        "watch", "--once", "--json", "--wait", "0.2", "--nats", nats_server.url, env=fake_gpu.env()
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["nodes"] == []


def test_credentials_that_may_not_publish_on_the_subject_fail_it(
    tmp_path: Path, fake_gpu: FakeGpuTools
) -> None:
    # n1's documented permissions, checked as node n2: a subject they do not allow.
    server = NatsServer(tmp_path / "js", config=node_permissions("n1", "n1pw"))
    server.start()
    try:
        anyio.run(create_streams_as_admin, server.url)
        fake_gpu.nvidia_smi(A100_GPUS)
        env = fake_gpu.env() | {"PLACEWATCH_USER": "n1", "PLACEWATCH_PASSWORD": "n1pw"}
        done = run_placewatch(
            "doctor", "--nats", server.url, "--node", "n2", "--no-create", env=env
        )
        # --no-discover: an engine something else runs on this machine is not this test's.
        ok = run_placewatch(
            "doctor", "--nats", server.url, "--node", "n1", "--no-create", "--no-discover", env=env
        )
    finally:
        server.stop()
    assert done.returncode == 1
    assert lines(done.stdout, "publish permission") == [
        "fail  publish permission: the server refused a publish on placewatch.telemetry.n2 "
        '(permissions violation for publish to "placewatch.telemetry.n2"); next: allow this '
        "user to publish on placewatch.telemetry.n2, on placewatch.telemetry.*.n2 (the servers "
        "check a partitioned subject as mapped) and this node's other subjects; "
        "docs/operations.md (Least privilege) lists what a node's credentials need"
    ]
    assert ok.returncode == 0, ok.stdout
    (publish,) = lines(ok.stdout, "publish permission")
    assert "(the stream PLACEWATCH_TELEMETRY refused to keep it: wrong last sequence: 0)" in publish
    assert "n1pw" not in done.stdout + ok.stdout
