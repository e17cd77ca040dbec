"""Placements from the KV bucket placewatch_placements, watched live.

A control plane writes `<node>.<shard>` keys with a PlacementSpec as JSON;
this worker watches its own node's keys, so a put, an update or a delete
takes effect on the next tick. A value that is not a valid placement is
reported (a log line, and an entry in the telemetry's `sources`) and skipped.
"""

from __future__ import annotations

import logging
import math

import anyio
import msgspec
import nats.errors
from anyio.streams.memory import MemoryObjectReceiveStream
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, Header
from nats.js.errors import BucketNotFoundError
from nats.js.kv import KV_DEL, KV_MARKER_REASON, KV_OP, KV_PURGE, KeyValue

from placewatch.schemas import PlacementSpec, subjects

from .placements import check_spec

log = logging.getLogger(__name__)

STREAM = f"KV_{subjects.BUCKET_PLACEMENTS}"
KEY_PREFIX = f"$KV.{subjects.BUCKET_PLACEMENTS}."
HEARTBEAT_S = 10.0
"""How often the server says the watch is alive when nothing changes."""
RESTART_PAUSE_S = 0.5
DELETED = (KV_DEL, KV_PURGE)
EXPIRED = ("MaxAge", "Purge", "Remove")  # server-placed markers (nats-server 2.11+)


class PlacementsBucket:
    def __init__(self, node: str, heartbeat: float = HEARTBEAT_S) -> None:
        self.node = node
        self.heartbeat = heartbeat
        self.specs: dict[str, PlacementSpec] = {}
        self.problems: dict[str, str] = {}
        self.values: dict[str, bytes] = {}  # as last applied, valid or not
        self.ready = False  # the values there were at the start are in

    async def open(self, js: JetStreamContext, create: bool = True, replicas: int = 1) -> KeyValue:
        try:
            return await js.key_value(subjects.BUCKET_PLACEMENTS)
        except BucketNotFoundError:
            if not create:
                raise
            log.info("creating KV bucket %s", subjects.BUCKET_PLACEMENTS)
            return await js.create_key_value(
                bucket=subjects.BUCKET_PLACEMENTS, history=1, replicas=replicas
            )

    async def watch(self, nc: Client, create: bool = True, replicas: int = 1) -> None:
        """Keep `specs` current until cancelled.

        A push consumer of the node's keys, latest value each, then every
        change. Not nats-py's KV watcher: its ordered consumer checks flow
        control four times a second, a third of an idle worker's CPU
        (docs/benchmarks.md); this one wakes for a change and for the
        server's heartbeat. A change it may have missed (a consumer sequence
        that skips, a silent server) makes it read the latest values afresh.
        """
        js = nc.jetstream()
        await self.open(js, create, replicas)
        while True:
            reason = await self._follow(nc, js)
            log.warning("placements watch: %s; reading the latest values again", reason)
            await anyio.sleep(RESTART_PAUSE_S)  # a server that keeps refusing is not hammered

    async def _follow(self, nc: Client, js: JetStreamContext) -> str:
        """Follow one consumer until it may have missed a change; why it stopped."""
        send, receive = anyio.create_memory_object_stream[Msg](math.inf)
        with send, receive:
            sub = await nc.subscribe(nc.new_inbox(), cb=send.send)
            name = None
            try:
                info = await js.add_consumer(
                    STREAM,
                    ConsumerConfig(
                        deliver_subject=sub.subject,
                        filter_subject=f"{KEY_PREFIX}{subjects.token(self.node)}.*",
                        deliver_policy=DeliverPolicy.LAST_PER_SUBJECT,
                        ack_policy=AckPolicy.NONE,
                        idle_heartbeat=self.heartbeat,
                        inactive_threshold=300.0,
                        mem_storage=True,
                        num_replicas=1,
                    ),
                )
                name = info.name
                initial: dict[str, bytes | None] | None = {}
                if not info.num_pending and not (info.delivered and info.delivered.consumer_seq):
                    self._replace({})  # nothing to wait for
                    initial = None
                return await self._take(receive, initial)
            finally:
                with anyio.CancelScope(shield=True), anyio.move_on_after(1):
                    try:
                        await sub.unsubscribe()
                        if name is not None:
                            await js.delete_consumer(STREAM, name)
                    except (nats.errors.Error, TimeoutError):
                        pass  # gone with the server; the server drops it when idle

    async def _take(
        self, receive: MemoryObjectReceiveStream[Msg], initial: dict[str, bytes | None] | None
    ) -> str:
        """Apply what arrives: the initial values at once when all are in, then each change."""
        delivered = 0
        while True:
            msg = None
            with anyio.move_on_after(2.5 * self.heartbeat):
                msg = await receive.receive()
            if msg is None:
                return f"no word from the server in {2.5 * self.heartbeat:g} s"
            headers = msg.headers or {}
            status = headers.get(Header.STATUS)
            if status is not None:
                last = headers.get(Header.LAST_CONSUMER)
                if status != "100":
                    return f"the server says {status} {headers.get(Header.DESCRIPTION, '')}"
                if last is not None and int(last) != delivered:
                    return f"the server sent {last} changes, {delivered} arrived"
                continue  # an idle heartbeat
            meta = msg.metadata
            delivered += 1
            if meta.sequence.consumer != delivered:
                return f"change {meta.sequence.consumer} arrived after {delivered - 1}"
            op = headers.get(KV_OP)
            reason = headers.get(KV_MARKER_REASON)
            deleted = op in DELETED or reason in EXPIRED
            key = msg.subject.removeprefix(KEY_PREFIX)
            if op is None and reason is not None and not deleted:
                pass  # a marker of a kind this worker does not know: the value stands
            elif initial is None:
                self.apply(key, msg.data, deleted)
            else:
                initial[key] = None if deleted else msg.data
            if initial is not None and meta.num_pending == 0:
                self._replace(initial)
                initial = None

    def _replace(self, latest: dict[str, bytes | None]) -> None:
        """Take the latest values: apply what changed, remove what is gone."""
        for key in self.values.keys() - latest.keys():
            self.apply(key, None, deleted=True)
        for key, value in latest.items():
            if self.values.get(key) != value:
                self.apply(key, value, deleted=value is None)
        self.ready = True

    def apply(self, key: str, value: bytes | None, deleted: bool) -> None:
        self.problems.pop(key, None)
        if deleted:
            self.values.pop(key, None)
            if self.specs.pop(key, None) is not None:
                log.info("placement %s removed", key)
            return
        self.values[key] = value or b""
        where = f"KV {subjects.BUCKET_PLACEMENTS} key {key}"
        try:
            raw = msgspec.json.decode(value or b"")
        except msgspec.DecodeError as exc:
            problem = f"{where}: not JSON ({exc})"
        else:
            try:
                self.specs[key] = check_spec(raw, where)
            except ValueError as exc:
                problem = str(exc)
            else:
                log.info(
                    "placement %s: %s on GPUs %s", key, self.specs[key].id, self.specs[key].gpus
                )
                return
        self.problems[key] = f"{problem}; the placement is skipped"
        self.specs.pop(key, None)
        log.warning("%s", self.problems[key])
