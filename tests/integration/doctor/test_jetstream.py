"""JetStream, the contract's streams and buckets, and the permission to publish, checked by
`placewatch doctor` against real nats-servers: without JetStream, with a stream made wrong, and
under the documented least privilege with and without the right to publish."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import nats
import pytest
from nats.js.api import StreamConfig

from placewatch.schemas.streams import DEFAULT_CONSUMER_LIMIT_SINCE, EVENTS, MAX_CONSUMERS
from placewatch.worker.bus.streams import StreamSettings, ensure_stream
from placewatch.worker.config import Settings
from placewatch.worker.doctor.jetstream import _JetStreamChecks
from placewatch.worker.doctor.report import Report
from placewatch.worker.doctor.server import ServerErrors

from tests.conftest import FakeGpuTools, NatsServer, run_placewatch
from tests.integration.test_security import create_streams_as_admin, node_permissions
from tests.support.doctor import A100_GPUS, lines


def test_a_server_without_jetstream_fails_it_and_skips_the_streams(
    tmp_path: Path, fake_gpu: FakeGpuTools
) -> None:
    server = NatsServer(tmp_path / "js", jetstream=False)
    server.start()
    try:
        fake_gpu.nvidia_smi(A100_GPUS)
        done = run_placewatch(
            "doctor", "--nats", server.url, "--node", "n1", "--no-discover", env=fake_gpu.env()
        )
    finally:
        server.stop()
    assert done.returncode == 1
    assert lines(done.stdout, "JetStream") == [
        "fail  JetStream: the server has no JetStream for this account: compute statuses and "
        "fallback events would go out as core messages, kept nowhere; next: enable JetStream "
        "(nats-server -js, or jetstream {} in its config, and for the account)"
    ]
    assert lines(done.stdout, "streams and buckets") == ["skip  streams and buckets: no JetStream"]
    (publish,) = lines(done.stdout, "publish permission")
    assert publish.startswith(
        "ok    publish permission: placewatch.telemetry.n1 allowed: a probe no consumer reads as "
        "telemetry went out (no stream takes that subject and nobody listens); a sample of n1 "
        "(2 GPUs, 0 shards) is "
    )


async def make_streams_one_too_narrow(url: str) -> None:
    """The events stream as the contract has it; the telemetry stream for one node only."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        await js.add_stream(
            StreamConfig(
                name="PLACEWATCH_EVENTS",
                subjects=["placewatch.compute.>", "placewatch.fallback.>"],
                max_consumers=MAX_CONSUMERS,
            )
        )
        await js.add_stream(
            StreamConfig(
                name="PLACEWATCH_TELEMETRY",
                subjects=["placewatch.telemetry.gpu-01"],
                max_consumers=MAX_CONSUMERS,
            )
        )
    finally:
        await nc.close()


def test_a_stream_that_does_not_take_every_nodes_subject_fails_with_the_edit_to_make(
    tmp_path: Path, fake_gpu: FakeGpuTools
) -> None:
    server = NatsServer(tmp_path / "js")
    server.start()
    try:
        anyio.run(make_streams_one_too_narrow, server.url)
        fake_gpu.nvidia_smi(A100_GPUS)
        done = run_placewatch("doctor", "--nats", server.url, "--node", "n1", env=fake_gpu.env())
    finally:
        server.stop()
    assert done.returncode == 1
    assert lines(done.stdout, "stream PLACEWATCH_EVENTS") == [
        "ok    stream PLACEWATCH_EVENTS: 0 messages, subjects placewatch.compute.>, "
        "placewatch.fallback.>, R1"
    ]
    assert lines(done.stdout, "stream PLACEWATCH_TELEMETRY") == [
        "fail  stream PLACEWATCH_TELEMETRY: takes placewatch.telemetry.gpu-01, not "
        "placewatch.telemetry.*: this worker's messages would not be stored; next: add "
        "placewatch.telemetry.*, placewatch.telemetry.*.* to its subjects (nats stream edit "
        "PLACEWATCH_TELEMETRY --subjects "
        "'placewatch.telemetry.gpu-01,placewatch.telemetry.*,placewatch.telemetry.*.*' -f)"
    ]


async def make_a_telemetry_stream_from_before_partitions(url: str) -> None:
    nc = await nats.connect(url)
    try:
        await nc.jetstream().add_stream(
            StreamConfig(
                name="ACME_PW_TELEMETRY",
                subjects=["acme.pw.telemetry.*"],
                max_consumers=MAX_CONSUMERS,
            )
        )
    finally:
        await nc.close()


def test_a_prefix_s_own_streams_are_checked_and_one_from_before_partitions_says_what_they_need(
    tmp_path: Path, fake_gpu: FakeGpuTools
) -> None:
    server = NatsServer(tmp_path / "js")
    server.start()
    try:
        anyio.run(make_a_telemetry_stream_from_before_partitions, server.url)
        fake_gpu.nvidia_smi(A100_GPUS)
        done = run_placewatch(
            "doctor",
            "--nats",
            server.url,
            "--node",
            "n1",
            "--prefix",
            "acme.pw",
            env=fake_gpu.env(),
        )
    finally:
        server.stop()
    assert lines(done.stdout, "stream ACME_PW_EVENTS") + lines(
        done.stdout, "stream ACME_PW_TELEMETRY"
    ) == [
        "ok    stream ACME_PW_EVENTS: not there yet: the worker creates it when it starts",
        "ok    stream ACME_PW_TELEMETRY: 0 messages, subjects acme.pw.telemetry.*, R1; "
        "partitions would need acme.pw.telemetry.*.* too: before the servers' mapping is "
        "turned on, add acme.pw.telemetry.*.* to its subjects (nats stream edit "
        "ACME_PW_TELEMETRY --subjects 'acme.pw.telemetry.*,acme.pw.telemetry.*.*' -f)",
    ]
    for bucket in ("acme_pw_placements", "acme_pw_compute", "acme_pw_leases"):
        assert lines(done.stdout, f"bucket {bucket}") == [
            f"ok    bucket {bucket}: not there yet: the worker creates it when it starts"
        ]
    (publish,) = lines(done.stdout, "publish permission")
    assert publish.startswith(
        "ok    publish permission: acme.pw.telemetry.n1 allowed: a probe no consumer reads as "
        "telemetry went out (the stream ACME_PW_TELEMETRY refused to keep it"
    )


def test_a_refused_publish_and_missing_streams_under_no_create_say_what_to_do(
    tmp_path: Path, fake_gpu: FakeGpuTools
) -> None:
    server = NatsServer(
        tmp_path / "js",
        config="authorization { users = [ {user: n1, password: n1-password, permissions: "
        '{publish: {deny: ["placewatch.telemetry.>"]}}} ] }\n',
    )
    server.start()
    try:
        env = fake_gpu.env() | {"PLACEWATCH_USER": "n1", "PLACEWATCH_PASSWORD": "n1-password"}
        done = run_placewatch(
            "doctor", "--nats", server.url, "--node", "n1", "--no-create", env=env
        )
    finally:
        server.stop()
    assert done.returncode == 1
    (publish,) = lines(done.stdout, "publish permission")
    assert publish.startswith(
        "fail  publish permission: the server refused a publish on placewatch.telemetry.n1 "
        '(permissions violation for publish to "placewatch.telemetry.n1")'
    )
    assert "docs/operations.md (Least privilege)" in publish
    (events,) = lines(done.stdout, "stream PLACEWATCH_EVENTS")
    assert events == (
        "fail  stream PLACEWATCH_EVENTS: does not exist, and --no-create is set; next: an "
        "operator creates it: nats stream add PLACEWATCH_EVENTS --subjects "
        "'placewatch.compute.>,placewatch.fallback.>' --storage file --replicas 1 "
        "--dupe-window 5m --max-consumers 1000000 --defaults"
    )
    (compute,) = lines(done.stdout, "bucket placewatch_compute")
    assert compute.endswith(
        "nats kv add placewatch_compute --history 1 --storage file --replicas 1"
        " && nats stream edit KV_placewatch_compute --max-consumers 1000000 --no-allow-rollup -f"
    )
    assert "n1-password" not in done.stdout + done.stderr


def test_all_ok_under_the_documented_least_privilege_with_streams_made_by_an_operator(
    tmp_path: Path, fake_gpu: FakeGpuTools
) -> None:
    server = NatsServer(tmp_path / "js", config=node_permissions("n1", "n1pw"))
    server.start()
    try:
        anyio.run(create_streams_as_admin, server.url)
        fake_gpu.nvidia_smi(A100_GPUS)
        env = fake_gpu.env() | {"PLACEWATCH_USER": "n1", "PLACEWATCH_PASSWORD": "n1pw"}
        # --no-discover: an engine something else runs on this machine is not this test's.
        done = run_placewatch(
            "doctor", "--nats", server.url, "--node", "n1", "--no-create", "--no-discover", env=env
        )
    finally:
        server.stop()
    assert done.returncode == 0, done.stdout
    assert lines(done.stdout, "stream PLACEWATCH_TELEMETRY") == [
        "ok    stream PLACEWATCH_TELEMETRY: 0 messages, subjects placewatch.telemetry.*, "
        "placewatch.telemetry.*.*, R1"
    ]
    assert lines(done.stdout, "bucket placewatch_placements") == [
        "ok    bucket placewatch_placements: 0 keys, history 1"
    ]
    (authenticated,) = lines(done.stdout, "server authenticated")
    assert "with user n1 " in authenticated
    assert lines(done.stdout, "publish permission")[0].startswith("ok    publish permission: ")
    (clock,) = lines(done.stdout, "clock")
    assert re.fullmatch(
        r"ok    clock: 0\.\d s (behind|ahead of) the NATS server's, within 2 s", clock
    )


def test_a_compute_bucket_that_takes_rollups_fails_with_the_edit_to_make(
    tmp_path: Path, fake_gpu: FakeGpuTools
) -> None:
    # As nats-py's create_key_value and earlier workers made it: any node's put with
    # `Nats-Rollup: all` on its own key would wipe every node's statuses.
    server = NatsServer(tmp_path / "js")
    server.start()
    try:

        async def make() -> None:
            nc = await nats.connect(server.url)
            try:
                await nc.jetstream().create_key_value(bucket="placewatch_compute")
            finally:
                await nc.close()

        anyio.run(make)
        fake_gpu.nvidia_smi(A100_GPUS)
        done = run_placewatch("doctor", "--nats", server.url, "--node", "n1", env=fake_gpu.env())
    finally:
        server.stop()
    assert done.returncode == 1
    assert lines(done.stdout, "bucket placewatch_compute") == [
        "fail  bucket placewatch_compute: takes rollups: one message with Nats-Rollup: all, which "
        "any node may send on its own key, would wipe every node's keys in it; next: nats stream "
        "edit KV_placewatch_compute --no-allow-rollup -f (a put, an update and a delete need no "
        "rollup)"
    ]


@pytest.mark.parametrize("offset_s", [0.0, -45.0, 45.0])
def test_a_node_clock_off_the_servers_fails_the_clock_check_saying_by_how_much(
    nats_server: NatsServer, offset_s: float
) -> None:
    written: list[str] = []
    report = Report(written.append)

    async def check(with_stream: bool) -> None:
        nc = await nats.connect(nats_server.url)
        try:
            if with_stream:
                await ensure_stream(nc.jetstream(), EVENTS, StreamSettings())
            checks = _JetStreamChecks(
                nc,
                nc.jetstream(),
                ServerErrors(),
                Settings(),
                report,
                clock=lambda: datetime.now(UTC) + timedelta(seconds=offset_s),
            )
            await checks.server_clock()
        finally:
            await nc.close()

    anyio.run(check, False)  # a fresh server: no stream to ask yet
    anyio.run(check, True)
    fresh, checked = report.checks
    assert (fresh.outcome, fresh.found) == (
        "skip",
        "no stream of the prefix yet to ask the server's time (or a server before 2.10, which "
        "does not say it)",
    )
    if offset_s == 0:
        assert checked.outcome == "ok" and checked.found.endswith("within 2 s")
        return
    where = "behind" if offset_s < 0 else "ahead of"
    assert checked.outcome == "fail"
    assert checked.found == (
        f"this node's clock is 45.0 s {where} the NATS server's: each message it publishes "
        "carries a time off by as much"
    )
    assert checked.todo == "check NTP on this node (timedatectl, chronyc tracking)"
    assert written[1] == f"fail  clock: {checked.found}; next: {checked.todo}"


async def server_version(url: str) -> tuple[int, int]:
    async with await nats.connect(url) as nc:
        version = nc.connected_server_version
        return version.major, version.minor


async def make_the_events_stream_without_a_consumer_limit(url: str) -> None:
    """As placewatch made it before it set the limit, and as `nats stream add` makes it."""
    async with await nats.connect(url) as nc:
        await nc.jetstream().add_stream(
            StreamConfig(name=EVENTS.name, subjects=list(EVENTS.subjects))
        )


async def raise_the_limit(url: str) -> None:
    """The edit doctor gives: `nats stream edit PLACEWATCH_EVENTS --max-consumers 1000000`."""
    async with await nats.connect(url) as nc:
        js = nc.jetstream()
        config = (await js.stream_info(EVENTS.name)).config
        config.max_consumers = MAX_CONSUMERS
        await js.update_stream(config)


def test_a_stream_without_a_consumer_limit_fails_on_a_server_that_gives_it_1000(
    nats_server: NatsServer, fake_gpu: FakeGpuTools
) -> None:
    version = anyio.run(server_version, nats_server.url)
    if version < DEFAULT_CONSUMER_LIMIT_SINCE:
        pytest.skip(f"nats-server {version} limits no stream that sets no consumer limit")
    anyio.run(make_the_events_stream_without_a_consumer_limit, nats_server.url)
    fake_gpu.nvidia_smi(A100_GPUS)
    argv = ("doctor", "--nats", nats_server.url, "--node", "n1")

    done = run_placewatch(*argv, env=fake_gpu.env())

    assert done.returncode == 1
    assert lines(done.stdout, "stream PLACEWATCH_EVENTS") == [
        "fail  stream PLACEWATCH_EVENTS: sets no consumer limit, so this server (nats-server "
        f"{version[0]}.{version[1]}) gives it its default_max_consumers, 1,000 unless its "
        "configuration says otherwise: every worker holds a consumer on the placements bucket "
        "and makes short-lived ones on the others, so from about the 1,000th node on workers "
        "are refused; next: nats stream edit PLACEWATCH_EVENTS --max-consumers 1000000 -f "
        "(the 1,000,000 the worker sets when it creates it)"
    ]

    anyio.run(raise_the_limit, nats_server.url)
    again = run_placewatch(*argv, env=fake_gpu.env())
    assert lines(again.stdout, "stream PLACEWATCH_EVENTS") == [
        "ok    stream PLACEWATCH_EVENTS: 0 messages, subjects placewatch.compute.>, "
        "placewatch.fallback.>, R1"
    ]
