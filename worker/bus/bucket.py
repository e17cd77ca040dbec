"""Placements from the prefix's placements bucket (placewatch_placements), watched live.

A control plane writes `<node>.<shard>` keys with a PlacementSpec as JSON;
this worker watches its own node's keys, so a put, an update or a delete
takes effect on the next tick. A value that is not a valid placement is
reported (a log line, and an entry in the telemetry's `sources`) and skipped.
"""

from __future__ import annotations

import logging

import anyio
import msgspec
from nats.aio.client import Client

from placewatch.schemas import PlacementSpec, subjects
from placewatch.schemas.streams import for_prefix

from ..shards.placements import check_spec
from .kvfollow import Values, follow
from .streams import StreamSettings, ensure_bucket

log = logging.getLogger(__name__)

HEARTBEAT_S = 10.0
"""How often the server says the watch is alive when nothing changes."""
RESTART_PAUSE_S = 0.5


class PlacementsBucket:
    """The node's keys of the placements bucket, as the shard pass reads them (its
    `PlacementFeed`, shards/placements.py): `specs` and `problems` by key."""

    def __init__(
        self, node: str, *, prefix: str = subjects.DEFAULT_PREFIX, heartbeat: float = HEARTBEAT_S
    ) -> None:
        self.node = node
        self.bucket = for_prefix(prefix).placements
        self.heartbeat = heartbeat
        self.specs: dict[str, PlacementSpec] = {}
        self.problems: dict[str, str] = {}
        self.values: dict[str, bytes] = {}  # as last applied, valid or not
        self.ready = False  # the values there were at the start are in

    async def follow(self, nc: Client, streams: StreamSettings | None = None) -> None:
        """Keep `specs` current until cancelled: the latest values, then each change
        (placewatch.worker.bus.kvfollow); a change that may have been missed makes it read the
        latest values afresh."""
        await ensure_bucket(nc.jetstream(), self.bucket, streams or StreamSettings())
        keys = subjects.node_keys(self.node)
        log.info("following KV %s for placements %s", self.bucket.name, keys)
        while True:
            reason = await follow(
                nc,
                self.bucket.name,
                keys,
                heartbeat=self.heartbeat,
                latest=self._replace,
                change=lambda key, value: self.apply(key, value, deleted=value is None),
            )
            log.warning("placements watch: %s; reading the latest values again", reason)
            await anyio.sleep(RESTART_PAUSE_S)  # a server that keeps refusing is not hammered

    def _replace(self, latest: Values) -> None:
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
        try:
            spec = self._placement(key, value or b"")
        except ValueError as exc:
            self.problems[key] = f"{exc}; the placement is skipped"
            self.specs.pop(key, None)
            log.warning("%s", self.problems[key])
            return
        self.specs[key] = spec
        log.info("placement %s: %s on GPUs %s", key, spec.id, spec.gpus)

    def _placement(self, key: str, value: bytes) -> PlacementSpec:
        """The placement a value gives, under the key it must have; ValueError says what is
        wrong."""
        where = f"KV {self.bucket.name} key {key}"
        try:
            raw = msgspec.json.decode(value)
        except msgspec.DecodeError as exc:
            raise ValueError(f"{where}: not JSON ({exc})") from None
        spec = check_spec(raw, where)
        expected = subjects.shard_key(self.node, spec.id)
        if key != expected:
            raise ValueError(
                f"{where} places {spec.id!r}, whose key is {expected}: a key is the node and the "
                "shard id as subject tokens (docs/subjects.md)"
            )
        return spec
