"""The placewatch wire contract: messages, subjects and codec.

Imports msgspec and the standard library only, so a gateway or an alerting
service can depend on it without the worker's dependencies.
"""

from . import lean, partitions, streams, subjects
from .asyncapi import asyncapi_document
from .codec import DecodeError, decode, decode_any, encode, json_schema, value_headers
from .health import GpuHealth
from .messages import (
    ACTIVITY_WINDOW_S,
    FALLBACK_VERDICTS,
    LEASE_INTERVALS,
    MESSAGE_TYPES,
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
    NodeForgotten,
    NodeInventory,
    NodeLease,
    NodeSample,
    NodeTelemetry,
    PlacementSpec,
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
    "ShardBrief",
    "ShardReading",
    "SourceStatus",
    "asyncapi_document",
    "decode",
    "decode_any",
    "encode",
    "json_schema",
    "lean",
    "partitions",
    "streams",
    "subjects",
    "value_headers",
]
