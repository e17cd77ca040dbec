"""A node forgotten while its worker only could not reach the bus (stopped with SIGSTOP past
its lease, as a partition or a frozen VM does): once it can again, the worker finds its lease
removed and says everything again, so the bus does not keep the node gone while it works."""

from __future__ import annotations

import os
import signal
import time

import anyio
import nats

from placewatch.schemas import subjects
from placewatch.schemas.streams import COMPUTE, INVENTORY

from tests.conftest import run_placewatch
from tests.support.fleet_node import NODE, ShardNode
from tests.support.kv import kv_keys


async def kept_of_the_node(url: str) -> tuple[list[str], bool]:
    """The node's keys in the compute bucket, and whether the inventory stream holds its
    inventory."""
    async with await nats.connect(url) as nc:
        js = nc.jetstream()
        keys = [k for k in await kv_keys(js, COMPUTE.name) if NODE in k]
        try:
            await js.get_last_msg(INVENTORY.name, subjects.inventory(NODE))
        except nats.js.errors.NotFoundError:
            return keys, False
        return keys, True


def test_a_worker_that_comes_back_after_forget_says_every_status_again(node: ShardNode) -> None:
    worker = node.start()
    node.wait_published()
    os.kill(worker.proc.pid, signal.SIGSTOP)
    try:
        time.sleep(3.5)  # three of its 1 s intervals without a refresh: its lease expired
        done = run_placewatch("forget", NODE, "--nats", node.url)
        assert done.returncode == 0, done.stderr
        assert anyio.run(kept_of_the_node, node.url, backend="asyncio") == ([], False)
    finally:
        os.kill(worker.proc.pid, signal.SIGCONT)

    node.wait_published()  # both statuses in the bucket again, `idle` still cpu_fallback
    events = node.wait_fallback_events(3)
    assert [(e.state, e.status.verdict, e.status.shard) for e in events] == [
        ("firing", "cpu_fallback", "idle"),
        ("resolved", "gone", "idle"),  # forget's
        ("firing", "cpu_fallback", "idle"),  # the worker's, again
    ]
    assert events[0].status.session == events[2].status.session  # the same worker, not a restart
    deadline = time.monotonic() + 10
    while not anyio.run(kept_of_the_node, node.url, backend="asyncio")[1]:
        assert time.monotonic() < deadline, "the inventory was not published again"
        time.sleep(0.2)
    code, _, _, err = worker.stop()
    node.worker = None
    assert code == 0, err
    assert err.count(f"node {NODE}'s lease was removed while this worker held it") == 1
