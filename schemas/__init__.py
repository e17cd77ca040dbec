"""The placewatch wire contract: messages, subjects and codec.

Imports msgspec and the standard library only, so a gateway or an alerting
service can depend on it without the worker's dependencies.
"""

from . import lean, partitions, streams, subjects
from .asyncapi import asyncapi_document
from .codec import (
    DecodeError,
    SchemaError,
    decode,
    decode_any,
    encode,
    json_schema,
    on_own_subject,
    value_headers,
)
from .control import LEASE_INTERVALS, MESSAGE_TYPES, NodeForgotten, NodeLease, PlacementSpec
from .endpoint import Endpoint
from .health import GpuHealth
from .messages import (
    ACTIVITY_WINDOW_S,
    FALLBACK_VERDICTS,
    SCHEMA_VERSION,
    ComputeStatus,
    DeviceUse,
    FallbackEvent,
    GpuInfo,
    GpuProcess,
    GpuReading,
    GpuSample,
    HostInfo,
    HostReading,
    HostSample,
    MigInstance,
    NodeInventory,
    NodeSample,
    NodeTelemetry,
    ProcessInfo,
    ShardBrief,
    ShardReading,
    SourceStatus,
)

__all__ = [
    "ACTIVITY_WINDOW_S",
    "FALLBACK_VERDICTS",
    "LEASE_INTERVALS",
    "MESSAGE_TYPES",
    "SCHEMA_VERSION",
    "ComputeStatus",
    "DecodeError",
    "DeviceUse",
    "Endpoint",
    "FallbackEvent",
    "GpuHealth",
    "GpuInfo",
    "GpuProcess",
    "GpuReading",
    "GpuSample",
    "HostInfo",
    "HostReading",
    "HostSample",
    "MigInstance",
    "NodeForgotten",
    "NodeInventory",
    "NodeLease",
    "NodeSample",
    "NodeTelemetry",
    "PlacementSpec",
    "ProcessInfo",
    "SchemaError",
    "ShardBrief",
    "ShardReading",
    "SourceStatus",
    "asyncapi_document",
    "decode",
    "decode_any",
    "encode",
    "json_schema",
    "lean",
    "on_own_subject",
    "partitions",
    "streams",
    "subjects",
    "value_headers",
]
