"""One live worker per node name, on a real nats-server with real `placewatch run` processes:
a second worker exits 2 and publishes nothing, `--takeover` stops the first with exit 3, a
killed worker's lease holds until it expires, and of workers that start at once one wins."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import msgspec
import nats
import nats.js.errors
import pytest
from nats.aio.client import Client

from placewatch.schemas import ComputeStatus, NodeLease, decode, subjects
from placewatch.schemas.streams import COMPUTE, LEASES, PLACEMENTS
from placewatch.worker.bus.lease import LeaseHeld, LeaseKeeper, LeaseRemoved, node_lease
from placewatch.worker.bus.streams import StreamSettings, ensure_bucket

from tests.conftest import (
    FIXTURES,
    FakeGpuTools,
    NatsServer,
    Worker,
    apps,
    clean_env,
    start,
    wait_older_than,
)
from tests.integration.test_shards_end_to_end import events_now, wait_for_events
from tests.support.eventually import eventually
from tests.support.kv import kv_keys
from tests.support.natsproto import RawSubscriber

HOST = socket.gethostname()


def sessions_seen(url: str, node: str, seconds: float) -> list[str]:
    """The session of every telemetry message of `node` published within `seconds`."""
    seen: list[str] = []
    with RawSubscriber(url, subjects.telemetry(node)) as sub:
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                doc = sub.next(timeout=left).json()
            except TimeoutError:
                break
            assert isinstance(doc, dict)
            seen.append(doc["session"])
    return seen


def first_session(url: str, node: str) -> str:
    with RawSubscriber(url, subjects.telemetry(node)) as sub:
        doc = sub.next(timeout=10).json()
    assert isinstance(doc, dict)
    return str(doc["session"])


def run_args(url: str, node: str, interval: float, *more: str) -> list[str]:
    return ["--nats", url, "--node", node, "--interval", str(interval), "--no-discover", *more]


def finished(worker: Worker, timeout: float) -> tuple[int, str]:
    """The exit code and stderr of a worker expected to exit by itself."""
    return worker.finished(timeout)


async def lease_entry(url: str, node: str) -> tuple[NodeLease | None, datetime | None]:
    """The node's lease and the server's timestamp of it; (None, None) once it is deleted."""
    nc = await nats.connect(url)
    try:
        subject = subjects.kv_subject(LEASES.name, subjects.lease_key(node))
        msg = await nc.jetstream().get_msg(LEASES.stream, subject=subject)
        if (msg.headers or {}).get(subjects.KV_OPERATION) in subjects.KV_DELETED:
            return None, None
        return decode(msg.data or b"", NodeLease), msg.time
    finally:
        await nc.close()


@asynccontextmanager
async def holding(nc: Client, keeper: LeaseKeeper) -> AsyncIterator[None]:
    """`keeper` holding its lease on `nc` and refreshing it until the block ends."""
    async with anyio.create_task_group() as tg:
        await tg.start(keeper.keep, nc, tg.cancel_scope)
        yield
        tg.cancel_scope.cancel()


async def compute_sessions(url: str) -> list[str]:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        kv = await js.key_value(COMPUTE.name)
        return [
            decode((await kv.get(key)).value or b"", ComputeStatus).session
            for key in await kv_keys(js, COMPUTE.name)
        ]
    finally:
        await nc.close()


def test_a_second_worker_exits_2_naming_the_holder_and_resolves_nothing(
    nats_server: NatsServer,
    fake_gpu: FakeGpuTools,
    shard_procs: dict[str, subprocess.Popen[bytes]],
    workers: list[Worker],
    tmp_path: Path,
) -> None:
    # The first worker's shard computes nowhere: its fallback fires and stays firing.
    pid = start(shard_procs, "llama")
    fake_gpu.nvidia_smi(FIXTURES / "nvidia-smi" / "a100x2-query-gpu.csv", apps({}))
    shards = tmp_path / "shards.toml"
    shards.write_text(f'[[shard]]\nid = "llama"\npid = {pid}\ngpus = [1]\n')
    wait_older_than([pid], 1.2)
    url = nats_server.url
    first = Worker(
        *run_args(url, "n1", 0.5, "--shards", str(shards), "--grace", "1"), env=fake_gpu.env()
    )
    workers.append(first)
    firing = [("compute", "llama", "cpu_fallback"), ("fallback", "llama", "firing")]
    assert sorted(wait_for_events(url, lambda s: len(s) >= 2)) == firing
    session = first_session(url, "n1")

    # The second, with no shards, would find "llama" gone and resolve its fallback.
    second = Worker(*run_args(url, "n1", 0.5), env=fake_gpu.env())
    workers.append(second)
    seen = sessions_seen(url, "n1", 3)
    code, err = finished(second, 10)

    assert code == 2, err
    assert f"node n1 is held by another live worker: host {HOST}, pid {first.proc.pid}, " in err
    assert f"session {session}; its lease was refreshed " in err
    assert "(every 0.5 s)" in err
    assert "Stop it, or start this one with --takeover (PLACEWATCH_TAKEOVER=true)" in err
    assert "Traceback" not in err
    assert seen and set(seen) == {session}  # no telemetry of the second
    time.sleep(1)
    assert sorted(events_now(url) or []) == firing  # nothing resolved, nothing more
    assert anyio.run(compute_sessions, url, backend="asyncio") == [session]
    assert first.proc.poll() is None
    code, _, _, err = first.stop()
    assert code == 0, err


def test_a_live_worker_whose_leases_bucket_was_deleted_keeps_its_node(
    nats_server: NatsServer, workers: list[Worker]
) -> None:
    url = nats_server.url
    # Its next refresh 6 s away: the second worker below asks well before it, however slow
    # this machine is to start a Python process.
    first = Worker(*run_args(url, "n1", 6), env=clean_env())
    workers.append(first)
    session = first_session(url, "n1")

    async def delete_leases() -> None:
        nc = await nats.connect(url)
        try:
            await nc.jetstream().delete_stream(LEASES.stream)
        finally:
            await nc.close()

    anyio.run(delete_leases, backend="asyncio")
    # A second worker of the node starts at once, before the first refreshes: no lease to
    # see, but the first answers on the node's micro service.
    second = Worker(*run_args(url, "n1", 0.5), env=clean_env())
    workers.append(second)
    code, err = finished(second, 10)
    assert code == 2, err
    assert (
        f"node n1 is held by a live worker that answers on placewatch.service.n1.telemetry "
        f"(session {session}), though its lease in KV placewatch_leases is missing or expired"
    ) in err

    # The first writes its lease again, and goes on.
    def written() -> bool:
        try:
            return anyio.run(lease_entry, url, "n1", backend="asyncio")[0] is not None
        except nats.errors.Error:
            return False  # the bucket is not there yet

    eventually(written, timeout=30)
    lease, _ = anyio.run(lease_entry, url, "n1", backend="asyncio")
    assert lease is not None and lease.session == session
    assert first.proc.poll() is None
    code, _, _, err = first.stop()
    assert code == 0, err
    assert "taken over" not in err


def test_takeover_stops_the_first_with_exit_3_saying_who_took_it(
    nats_server: NatsServer, workers: list[Worker]
) -> None:
    url = nats_server.url
    first = Worker(*run_args(url, "n1", 0.5), env=clean_env())
    workers.append(first)
    old = first_session(url, "n1")
    second = Worker(*run_args(url, "n1", 0.5, "--takeover"), env=clean_env())
    workers.append(second)

    code, err = finished(first, 15)
    assert code == 3, err
    said = re.search(
        rf"node n1 was taken over by another worker: host {re.escape(HOST)}, "
        rf"pid {second.proc.pid}, session (\w+) \(started with --takeover",
        err,
    )
    assert said, err
    new = said.group(1)
    assert new != old
    assert err.count("this worker stops publishing for it") == 2  # the log line and the exit
    assert set(sessions_seen(url, "n1", 1.5)) == {new}  # the first publishes no more

    lease, _ = anyio.run(lease_entry, url, "n1", backend="asyncio")
    assert lease is not None
    assert (lease.session, lease.pid, lease.host, lease.interval_s) == (
        new,
        second.proc.pid,
        HOST,
        0.5,
    )
    code, _, _, err = second.stop()
    assert code == 0, err
    assert f"taken over from host {HOST}, pid {first.proc.pid}, session {old} (--takeover)" in err


def test_a_killed_workers_lease_holds_until_three_of_its_intervals_pass(
    nats_server: NatsServer, workers: list[Worker]
) -> None:
    url = nats_server.url
    killed = Worker(*run_args(url, "n1", 2), env=clean_env())
    workers.append(killed)
    old = first_session(url, "n1")
    killed.proc.send_signal(signal.SIGKILL)
    killed.proc.wait()
    lease, stored = anyio.run(lease_entry, url, "n1", backend="asyncio")
    assert lease is not None and stored is not None
    assert lease.session == old
    expires = stored + timedelta(seconds=6)

    blocked = Worker(*run_args(url, "n1", 0.3), env=clean_env())
    workers.append(blocked)
    code, err = finished(blocked, 10)
    assert code == 2, err
    assert f"pid {killed.proc.pid}, session {old}" in err
    assert "(every 2 s)" in err
    assert float(re.findall(r"expires in ([\d.]+) s", err)[0]) <= 6

    time.sleep(max((expires - datetime.now(UTC)).total_seconds(), 0) + 0.2)
    after = Worker(*run_args(url, "n1", 0.3), env=clean_env())
    workers.append(after)
    new = first_session(url, "n1")
    assert new != old
    code, _, _, err = after.stop()
    assert code == 0, err
    assert (
        f"node n1's lease taken; host {HOST}, pid {killed.proc.pid}, session {old} had let " in err
    )


def test_of_three_workers_started_at_once_exactly_one_runs(
    nats_server: NatsServer, workers: list[Worker]
) -> None:
    url = nats_server.url
    racing = [Worker(*run_args(url, "n1", 0.5), env=clean_env()) for _ in range(3)]
    workers.extend(racing)
    deadline = time.monotonic() + 20
    while sum(w.proc.poll() is not None for w in racing) < 2:
        assert time.monotonic() < deadline, "two of them should have exited"
        time.sleep(0.1)
    (winner,) = [w for w in racing if w.proc.poll() is None]
    losers = [w for w in racing if w is not winner]
    session = first_session(url, "n1")
    for loser in losers:
        code, err = finished(loser, 5)
        assert code == 2, err
        assert f"pid {winner.proc.pid}, session {session}" in err
    assert set(sessions_seen(url, "n1", 1)) == {session}
    code, _, _, err = winner.stop()
    assert code == 0, err


def test_of_eight_keepers_racing_on_separate_connections_exactly_one_holds(
    nats_server: NatsServer,
) -> None:
    async def main() -> None:
        conns: list[Client] = [await nats.connect(nats_server.url) for _ in range(8)]
        keepers = [LeaseKeeper(node_lease("n1", f"s{i}", 0.5), StreamSettings()) for i in range(8)]
        try:
            async with anyio.create_task_group() as tg:
                for nc, keeper in zip(conns, keepers, strict=True):
                    tg.start_soon(keep, nc, keeper)
                with anyio.fail_after(15):
                    while sum(k.ended is not None for k in keepers) < 7:
                        await anyio.sleep(0.05)
                await anyio.sleep(1.2)  # the winner refreshes meanwhile, unopposed
                tg.cancel_scope.cancel()
        finally:
            for nc in conns:
                await nc.close()
        (holder,) = [k for k in keepers if k.ended is None]
        assert holder.revision is not None
        for loser in keepers:
            if loser is not holder:
                assert isinstance(loser.ended, LeaseHeld)
                assert f"session {holder.lease.session};" in str(loser.ended)
                assert loser.revision is None

    async def keep(nc: Client, keeper: LeaseKeeper) -> None:
        with anyio.CancelScope() as scope:
            await keeper.keep(nc, scope)

    anyio.run(main, backend="asyncio")


def test_a_refresh_whose_answer_was_lost_finds_its_own_lease_and_carries_on(
    nats_server: NatsServer,
) -> None:
    async def main() -> None:
        keeper = LeaseKeeper(node_lease("n1", "mine", 0.3), StreamSettings())
        async with await nats.connect(nats_server.url) as nc:
            async with holding(nc, keeper):
                taken = keeper.revision
                assert taken is not None
                # The refresh the server stored, whose answer never came back: the same lease,
                # written over the revision the keeper knows.
                kv = await nc.jetstream().key_value(LEASES.name)
                landed = await kv.update("n1", keeper.value, last=taken)
                await anyio.sleep(1.0)
                assert keeper.ended is None
                assert keeper.revision is not None and keeper.revision > landed
            await keeper.release()
            with pytest.raises(nats.js.errors.KeyNotFoundError):
                await kv.get("n1")

    anyio.run(main, backend="asyncio")


def test_a_lease_removed_under_a_live_keeper_is_taken_again_and_told_to_the_tick(
    nats_server: NatsServer,
) -> None:
    async def main() -> None:
        keeper = LeaseKeeper(node_lease("n1", "mine", 0.3), StreamSettings())
        async with await nats.connect(nats_server.url) as nc, holding(nc, keeper):
            kv = await nc.jetstream().key_value(LEASES.name)
            await kv.delete("n1")  # as `placewatch forget` does while the worker is cut off
            marker = (await nc.jetstream().stream_info(LEASES.stream)).state.last_seq
            with anyio.fail_after(3):
                assert await keeper.removals.receive() == LeaseRemoved()
                while (keeper.revision or 0) <= marker:  # written again over the marker
                    await anyio.sleep(0.01)
            assert (await kv.get("n1")).value == keeper.value
            assert keeper.ended is None
            with pytest.raises(anyio.WouldBlock):  # told once
                keeper.removals.receive_nowait()

    anyio.run(main, backend="asyncio")


def test_a_refresh_goes_out_with_a_ticks_telemetry_and_on_its_own_when_no_tick_comes(
    nats_server: NatsServer,
) -> None:
    async def main() -> None:
        keeper = LeaseKeeper(node_lease("n1", "mine", 1.0), StreamSettings())
        async with await nats.connect(nats_server.url) as nc, holding(nc, keeper):
            taken = keeper.revision
            keeper.with_telemetry()  # a tick just after the lease was taken: not due yet
            await anyio.sleep(0.6)
            assert keeper.revision == taken
            keeper.with_telemetry()  # half an interval on: the tick brings the refresh
            with anyio.fail_after(0.5):  # long before the 1.5 s it would wait on its own
                while keeper.revision == taken:
                    await anyio.sleep(0.01)
            brought, since = keeper.revision, time.monotonic()
            with anyio.fail_after(3):  # no tick now: written on its own
                while keeper.revision == brought:
                    await anyio.sleep(0.01)
            assert 1.3 < time.monotonic() - since < 2.0
            assert keeper.ended is None

    anyio.run(main, backend="asyncio")


def test_a_stopped_worker_gives_its_lease_back_and_the_next_starts_at_once(
    nats_server: NatsServer, workers: list[Worker]
) -> None:
    url = nats_server.url
    first = Worker(*run_args(url, "n1", 2), env=clean_env())
    workers.append(first)
    old = first_session(url, "n1")
    code, _, _, err = first.stop()
    assert code == 0, err
    assert anyio.run(lease_entry, url, "n1", backend="asyncio") == (None, None)

    started = time.monotonic()
    second = Worker(*run_args(url, "n1", 2), env=clean_env())
    workers.append(second)
    assert first_session(url, "n1") != old
    assert time.monotonic() - started < 6  # not the 6 s the first's lease would have lasted
    code, _, _, err = second.stop()
    assert code == 0, err
    assert "node n1's lease taken (session " in err


async def make_all_but_the_leases_bucket(url: str) -> None:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        for bucket in (PLACEMENTS.name, COMPUTE.name):
            await js.create_key_value(bucket=bucket)
    finally:
        await nc.close()


async def make_leases_bucket(url: str) -> None:
    nc = await nats.connect(url)
    try:
        await ensure_bucket(nc.jetstream(), LEASES, StreamSettings())
    finally:
        await nc.close()


def test_with_no_create_a_missing_leases_bucket_is_named_and_nothing_published_until_made(
    nats_server: NatsServer, workers: list[Worker]
) -> None:
    url = nats_server.url
    anyio.run(make_all_but_the_leases_bucket, url, backend="asyncio")
    worker = Worker(*run_args(url, "n1", 0.5, "--no-create"), env=clean_env())
    workers.append(worker)
    worker.wait_for("cannot take node n1's lease", 30)  # it tried, and says why
    assert sessions_seen(url, "n1", 2.5) == []
    anyio.run(make_leases_bucket, url, backend="asyncio")
    first_session(url, "n1")  # the lease is taken once an operator made the bucket
    code, _, _, err = worker.stop()
    assert code == 0, err
    missing = [line for line in err.splitlines() if "cannot take node n1's lease" in line]
    assert len(missing) == 1, err  # said once, not every try
    command = LEASES.command("file", 1)
    assert command.endswith(
        "nats stream edit KV_placewatch_leases --max-consumers 1000000 --no-allow-rollup -f"
    )
    assert (
        f"KV bucket placewatch_leases does not exist and --no-create is set; create it "
        f"({command}) or let the worker create it); nothing is published until it is taken"
        in missing[0]
    )


def test_without_jetstream_there_is_no_lease_and_the_worker_says_so_once(
    tmp_path: Path, workers: list[Worker]
) -> None:
    server = NatsServer(tmp_path / "js", jetstream=False)
    server.start()
    try:
        worker = Worker(*run_args(server.url, "n1", 0.5), env=clean_env())
        workers.append(worker)
        first_session(server.url, "n1")
        time.sleep(1)
        code, _, _, err = worker.stop()
    finally:
        server.stop()
    assert code == 0, err
    assert err.count("no lease is taken for node n1") == 1, err
    assert "a second worker with this name is not refused" in err


def test_the_lease_value_is_json_a_consumer_reads(nats_server: NatsServer) -> None:
    async def main() -> None:
        nc = await nats.connect(nats_server.url)
        keeper = LeaseKeeper(node_lease("rack 4.gpu*7", "abc", 2.0), StreamSettings())
        try:
            async with anyio.create_task_group() as tg:
                await tg.start(keeper.keep, nc, tg.cancel_scope)
                kv = await nc.jetstream().key_value(LEASES.name)
                entry = await kv.get("rack=204=2Egpu=2A7")
                tg.cancel_scope.cancel()
        finally:
            await nc.close()
        doc = msgspec.json.decode(entry.value or b"")
        assert sorted(doc) == [
            "host",
            "interval_s",
            "node",
            "pid",
            "schema",
            "session",
            "started",
        ]
        assert (doc["node"], doc["session"], doc["host"], doc["interval_s"]) == (
            "rack 4.gpu*7",
            "abc",
            HOST,
            2.0,
        )

    anyio.run(main, backend="asyncio")


async def take_once(nc: Client, node: str, session: str, clock_ahead_s: float) -> LeaseKeeper:
    """A keeper of 0.5 s intervals whose clock is `clock_ahead_s` ahead, once it took the
    node's lease or was refused it (`ended`)."""
    keeper = LeaseKeeper(
        node_lease(node, session, 0.5),
        StreamSettings(),
        clock=lambda: datetime.now(UTC) + timedelta(seconds=clock_ahead_s),
    )
    async with anyio.create_task_group() as tg:
        await tg.start(keeper.keep, nc, tg.cancel_scope)
        tg.cancel_scope.cancel()
    return keeper


def test_a_value_that_is_not_a_lease_holds_the_node_for_three_of_the_readers_intervals(
    nats_server: NatsServer,
) -> None:
    async def main() -> None:
        nc = await nats.connect(nats_server.url)
        try:
            kv = await ensure_bucket(nc.jetstream(), LEASES, StreamSettings())
            junk = await kv.put("n1", b"hello")
            written = time.time()

            async def attempt(clock_ahead_s: float) -> LeaseKeeper:
                return await take_once(nc, "n1", f"ahead{clock_ahead_s:g}", clock_ahead_s)

            refused = await attempt(0)
            assert isinstance(refused.ended, LeaseHeld)
            assert "lease key holds a value that is not a placewatch lease (5 bytes)" in str(
                refused.ended
            )
            assert (await kv.get("n1")).value == b"hello"
            # A clock 1.6 s ahead does not see it expired: the server's time judges.
            assert isinstance((await attempt(1.6)).ended, LeaseHeld)
            # 1.5 s later (three intervals of 0.5 s), the value no longer holds the node.
            await anyio.sleep(max(1.55 - (time.time() - written), 0))
            taken = await attempt(0)
            assert taken.ended is None
            assert taken.revision is not None and taken.revision > junk
            entry = await kv.get("n1")
            assert decode(entry.value or b"", NodeLease).session == "ahead0"
        finally:
            await nc.close()

    anyio.run(main, backend="asyncio")


@pytest.mark.parametrize("offset_s", [-60.0, 60.0])
def test_a_node_clock_a_minute_off_judges_a_lease_by_the_servers_time_and_says_so(
    nats_server: NatsServer, offset_s: float, caplog: pytest.LogCaptureFixture
) -> None:
    # A killed worker's lease of 0.3 s intervals (0.9 s to live), and one of 15 s (45 s).
    # Behind, this node's clock would see the first live for a minute more; ahead, the
    # second expired a minute early.
    caplog.set_level("WARNING", logger="placewatch.worker.bus.lease")

    async def main() -> None:
        nc = await nats.connect(nats_server.url)
        try:
            kv = await ensure_bucket(nc.jetstream(), LEASES, StreamSettings())
            await kv.put("dead", msgspec.json.encode(node_lease("dead", "gone", 0.3)))
            await kv.put("live", msgspec.json.encode(node_lease("live", "running", 15.0)))
            await anyio.sleep(1.0)

            dead = await take_once(nc, "dead", "skewed", offset_s)
            assert dead.ended is None and dead.revision is not None
            assert dead.clock_offset_s is not None
            assert abs(dead.clock_offset_s + offset_s) < 1.0
            live = await take_once(nc, "live", "skewed", offset_s)
            assert isinstance(live.ended, LeaseHeld)
            assert "session running" in str(live.ended)
            assert float(re.findall(r"expires in ([\d.]+) s", str(live.ended))[0]) > 40
        finally:
            await nc.close()

    anyio.run(main, backend="asyncio")
    where = "ahead of" if offset_s > 0 else "behind"
    said = [r.getMessage() for r in caplog.records if "clock is" in r.getMessage()]
    assert len(said) == 2  # one for each keeper
    assert said[0].startswith(f"this node's clock is 60.0 s {where} the NATS server's"), said
