"""Making the contract's streams and buckets (placewatch.schemas.streams) on the server.

Each is created when missing, as the table describes it, unless the worker
was told to use only what an operator made (`--no-create`): then a missing
one is an error that names the command to create it by hand.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import nats.js.errors
from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, StorageType, StreamConfig
from nats.js.kv import KeyValue

from placewatch.schemas.streams import MAX_CONSUMERS, Bucket, Stream

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StreamSettings:
    """Whether and how the worker creates the streams and buckets it uses."""

    create: bool = True
    replicas: int = 1
    storage: str = "file"

    @property
    def storage_type(self) -> StorageType:
        return StorageType.MEMORY if self.storage == "memory" else StorageType.FILE


def stream_config(stream: Stream, settings: StreamSettings) -> StreamConfig:
    """The configuration the table gives `stream`."""
    config = StreamConfig(
        name=stream.name,
        subjects=list(stream.subjects),
        storage=settings.storage_type,
        num_replicas=settings.replicas,
        max_consumers=MAX_CONSUMERS,
    )
    if stream.duplicate_window_s is not None:
        config.duplicate_window = stream.duplicate_window_s
    if stream.max_msgs_per_subject is not None:
        config.max_msgs_per_subject = stream.max_msgs_per_subject
        config.discard = DiscardPolicy.OLD
    return config


async def ensure_stream(js: JetStreamContext, stream: Stream, settings: StreamSettings) -> bool:
    """The stream, created when missing (and allowed); True when it was created now."""
    try:
        await js.stream_info(stream.name)
        return False
    except nats.js.errors.NotFoundError:
        if not settings.create:
            raise nats.js.errors.NotFoundError(
                description=f"stream {stream.name} does not exist and --no-create is set; "
                f"create it ({stream.command(settings.storage, settings.replicas)}) "
                "or let the worker create it"
            ) from None
        info = await js.add_stream(stream_config(stream, settings))
        # Asked while a cluster elects the stream's leader, an add finds the stream there
        # after all, and the server answers with it as it is: made now only when empty.
        if info.state.messages:
            return False
        log.info("created stream %s", stream.name)
        return True


async def ensure_bucket(js: JetStreamContext, bucket: Bucket, settings: StreamSettings) -> KeyValue:
    """The bucket, created as `nats kv add` makes it when missing (and allowed)."""
    return (await made_bucket(js, bucket, settings))[0]


async def made_bucket(
    js: JetStreamContext, bucket: Bucket, settings: StreamSettings
) -> tuple[KeyValue, bool]:
    """The bucket, created as `nats kv add` makes it when missing (and allowed), and whether
    it was created now.

    With direct gets, as the NATS CLI makes a bucket (nats-py does not by default): a node's
    credentials may then read its own key by its subject alone, never by a request body
    naming any key. With MAX_CONSUMERS, and without rollups where `bucket.rollup` says so,
    set by an update after the create, as nats-py's create_key_value has no setting for
    either.
    """
    try:
        return await js.key_value(bucket.name), False
    except nats.js.errors.BucketNotFoundError:
        if not settings.create:
            raise nats.js.errors.BucketNotFoundError(
                description=f"KV bucket {bucket.name} does not exist and --no-create is set; "
                f"create it ({bucket.command(settings.storage, settings.replicas)}) "
                "or let the worker create it"
            ) from None
        kv = await js.create_key_value(
            bucket=bucket.name,
            history=bucket.history,
            replicas=settings.replicas,
            direct=True,
        )
        config = (await js.stream_info(bucket.stream)).config
        config.allow_rollup_hdrs = config.allow_rollup_hdrs and bucket.rollup
        unlimited, config.max_consumers = config.max_consumers, MAX_CONSUMERS
        try:
            await js.update_stream(config)
        except nats.js.errors.APIError:
            # A server before 2.12 changes no stream's consumer limit ("can not change
            # MaxConsumers"); nor does it limit a stream that sets none.
            config.max_consumers = unlimited
            await js.update_stream(config)
        log.info("created KV bucket %s", bucket.name)
        return kv, True
