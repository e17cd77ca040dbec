"""The configuration the worker gives each stream of the table."""

from __future__ import annotations

from nats.js.api import DiscardPolicy, StorageType

from placewatch.schemas.streams import TELEMETRY, for_prefix
from placewatch.worker.bus.streams import StreamSettings, stream_config


def test_the_events_stream_keeps_message_ids_for_its_duplicate_window() -> None:
    config = stream_config(for_prefix("pw").events, StreamSettings(replicas=3))
    assert config.name == "PW_EVENTS"
    assert config.subjects == ["pw.compute.>", "pw.fallback.>"]
    assert (config.storage, config.num_replicas) == (StorageType.FILE, 3)
    assert config.duplicate_window == 300.0
    assert config.max_msgs_per_subject == -1  # the client's "no limit"


def test_the_telemetry_stream_keeps_the_latest_per_node_in_the_storage_asked() -> None:
    config = stream_config(TELEMETRY, StreamSettings(storage="memory"))
    assert config.name == "PLACEWATCH_TELEMETRY"
    assert config.subjects == ["placewatch.telemetry.*", "placewatch.telemetry.*.*"]
    assert (config.storage, config.num_replicas) == (StorageType.MEMORY, 1)
    assert (config.max_msgs_per_subject, config.discard) == (1, DiscardPolicy.OLD)
    assert config.duplicate_window == 0  # the server's default window
