"""Placements from the KV bucket placewatch_placements, watched live.

A control plane writes `<node>.<shard>` keys with a PlacementSpec as JSON;
this worker watches its own node's keys, so a put, an update or a delete
takes effect on the next tick. A value that is not a valid placement is
reported (a log line, and an entry in the telemetry's `sources`) and skipped.
"""

from __future__ import annotations

import logging

import msgspec
from nats.js import JetStreamContext
from nats.js.errors import BucketNotFoundError
from nats.js.kv import KV_DEL, KV_PURGE, KeyValue

from placewatch.schemas import PlacementSpec, subjects

from .placements import check_spec

log = logging.getLogger(__name__)


class PlacementsBucket:
    def __init__(self, node: str) -> None:
        self.node = node
        self.specs: dict[str, PlacementSpec] = {}
        self.problems: dict[str, str] = {}
        self.ready = False

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

    async def watch(self, js: JetStreamContext, create: bool = True, replicas: int = 1) -> None:
        """Keep `specs` current until cancelled."""
        kv = await self.open(js, create, replicas)
        watcher = await kv.watch(f"{subjects.token(self.node)}.*")
        try:
            async for entry in watcher:
                if entry is None:  # the initial values are all in
                    self.ready = True
                    continue
                self.apply(entry.key, entry.value, entry.operation in (KV_DEL, KV_PURGE))
        finally:
            await watcher.stop()  # type: ignore[no-untyped-call]

    def apply(self, key: str, value: bytes | None, deleted: bool) -> None:
        self.problems.pop(key, None)
        if deleted:
            if self.specs.pop(key, None) is not None:
                log.info("placement %s removed", key)
            return
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
