"""The wire contract as an AsyncAPI 3.0.0 document, built from the Structs.

Payload schemas come from msgspec, so the document cannot drift from the
messages the worker encodes; `placewatch schema --asyncapi` prints it and
docs/asyncapi.json is its checked-in copy. Channel addresses are NATS
subjects, with the node and shard as parameters.
"""

from __future__ import annotations

from typing import Any

import msgspec

from . import service, subjects
from .codec import (
    HEADER_CONTENT_TYPE,
    HEADER_MSG_ID,
    HEADER_SCHEMA,
    HEADER_TYPE,
    JSON,
    MSGPACK,
)
from .control import LEASE_INTERVALS, MESSAGE_TYPES
from .messages import SCHEMA_VERSION
from .streams import for_prefix

ASYNCAPI_VERSION = "3.0.0"


_NAME_RULE = (
    "Every byte of the name's UTF-8 outside `A-Z a-z 0-9 _ -` is written `=XX` (uppercase hex, "
    "`=` included): `rack 4.gpu*7` travels as `rack=204=2Egpu=2A7`, one-to-one, so two names "
    "never share a subject; the payload carries the exact name."
)
_PARAMETERS = {
    "node": {
        "description": f"The node's name as one subject token. {_NAME_RULE}",
        "examples": ["gpu-07", "rack=204=2Egpu=2A7"],
    },
    "shard": {
        "description": f"The shard's id as one subject token. {_NAME_RULE}",
        "examples": ["llama-8b-a", "llama-3=2E1-8b", "llama-server-8080"],
    },
}


def asyncapi_document(prefix: str = subjects.DEFAULT_PREFIX) -> dict[str, Any]:
    """The AsyncAPI 3.0.0 document of every subject and bucket of the contract."""
    refs, components = msgspec.json.schema_components(
        MESSAGE_TYPES, ref_template="#/components/schemas/{name}"
    )
    payloads = {t.__name__: ref for t, ref in zip(MESSAGE_TYPES, refs, strict=True)}
    return {
        "asyncapi": ASYNCAPI_VERSION,
        "info": _info(prefix),
        "defaultContentType": JSON,
        "servers": {
            "default": {
                "host": subjects.LOCAL_URL.removeprefix("nats://"),
                "protocol": "nats",
                "description": "The embedded nats-server `placewatch run` starts when no server "
                "is configured; a cluster's URLs are given with --nats or PLACEWATCH_NATS.",
            }
        },
        "channels": {**_channels(prefix), **_service_channels(prefix)},
        "operations": {**_operations(), **_service_operations()},
        "components": {
            "schemas": components,
            "messages": {**_messages(payloads), **_service_messages(payloads)},
            "parameters": _PARAMETERS,
        },
    }


def _info(prefix: str) -> dict[str, Any]:
    return {
        "title": "placewatch",
        "version": str(SCHEMA_VERSION),
        "description": "GPU telemetry, per-shard compute statuses and fallback events "
        "published by the placewatch worker on every node. The version is the schema "
        f"version, sent in the `{HEADER_SCHEMA}` header. Fields are added with defaults "
        "and never renamed; a decoder ignores fields it does not know. Sizes are bytes, "
        "times UTC RFC 3339, and a reading a tool could not give is null, never 0. "
        f"The subject prefix (`{prefix}` here) is configurable, and the names of the "
        "streams and buckets follow it.",
        "license": {
            "name": "Apache-2.0",
            "url": "https://www.apache.org/licenses/LICENSE-2.0",
        },
    }


def _channels(prefix: str) -> dict[str, Any]:
    node = {"node": {"$ref": "#/components/parameters/node"}}
    shard = {**node, "shard": {"$ref": "#/components/parameters/shard"}}
    stores = for_prefix(prefix)
    compute, placements, leases = stores.compute.name, stores.placements.name, stores.leases.name
    return {
        "telemetry": _channel(
            f"{prefix}.telemetry.{{node}}",
            "NodeTelemetry",
            node,
            "Every interval (2 s by default), as a core NATS message: telemetry is latest-value "
            f"and never replayed. The stream `{stores.telemetry.name}` keeps the last message of "
            "each node. Readings only: what they are readings of is in the NodeInventory its "
            "`inventory` names. Where the servers partition the fleet, subscribers receive it "
            f"as `{prefix}.telemetry.<partition>.{{node}}`.",
        ),
        "inventory": _channel(
            f"{prefix}.inventory.{{node}}",
            "NodeInventory",
            node,
            "When the worker starts, whenever the node's inventory changes (a GPU process "
            "starts or ends, a power cap is set) and every 10 minutes, as a core NATS "
            f"message. The stream `{stores.inventory.name}` keeps the last message of each node; "
            "the node's `inventory` endpoint answers with it too. Where the servers partition "
            f"the fleet, subscribers receive it as `{prefix}.inventory.<partition>.{{node}}`.",
        ),
        "compute": _channel(
            f"{prefix}.compute.{{node}}.{{shard}}",
            "ComputeStatus",
            shard,
            "When a shard's verdict is first known in a worker session and whenever its "
            "verdict, backend, device set, layer counts, process or container change. Stored "
            f"in the stream `{stores.events.name}`, deduplicated by `Nats-Msg-Id`.",
        ),
        "fallback": _channel(
            f"{prefix}.fallback.{{node}}.{{shard}}",
            "FallbackEvent",
            shard,
            "`firing` when a shard placed on GPUs enters `partial`, `cpu_fallback` or "
            "`misplaced`; `resolved` when it leaves it. Stored in the stream "
            f"`{stores.events.name}`, deduplicated by `Nats-Msg-Id`.",
        ),
        "forgotten": _channel(
            f"{prefix}.forgotten.{{node}}",
            "NodeForgotten",
            node,
            "Once, from `placewatch forget`, after it has said the node's shards `gone` and "
            "removed what the bus kept of the node (its statuses, telemetry and inventory), "
            "as a core NATS message that no stream keeps: a view that holds the node lets it "
            "go, and one that starts later finds nothing of it.",
        ),
        "computeBucket": _channel(
            subjects.kv_subject(compute, "{node}.{shard}"),
            "ComputeStatusEntry",
            shard,
            f"The KV bucket `{compute}`, key `<node>.<shard>`: the latest "
            "ComputeStatus of each shard, for a consumer that starts late.",
        ),
        "placements": _channel(
            subjects.kv_subject(placements, "{node}.{shard}"),
            "PlacementSpec",
            shard,
            f"The KV bucket `{placements}`, key `<node>.<shard>`: where a "
            "control plane placed each shard. The worker watches its own node's keys; a put, "
            "update or delete takes effect on its next tick.",
        ),
        "leases": _channel(
            subjects.kv_subject(leases, "{node}"),
            "NodeLease",
            node,
            f"The KV bucket `{leases}`, key `<node>`: the worker that holds "
            "the node's name, refreshed every interval. One not refreshed for "
            f"{LEASE_INTERVALS} of its holder's intervals (by the server's timestamp of the "
            "entry) has expired; a second worker with the name exits while it is live.",
        ),
    }


def _operations() -> dict[str, Any]:
    return {
        "sendTelemetry": _operation("send", "telemetry", "NodeTelemetry", "Publish a sample."),
        "sendInventory": _operation(
            "send", "inventory", "NodeInventory", "Publish what the node is."
        ),
        "sendComputeStatus": _operation(
            "send", "compute", "ComputeStatus", "Publish a shard's compute status."
        ),
        "sendFallbackEvent": _operation(
            "send", "fallback", "FallbackEvent", "Publish a fallback firing or resolved."
        ),
        "sendNodeForgotten": _operation(
            "send", "forgotten", "NodeForgotten", "Say a node gone for good (`forget`)."
        ),
        "putComputeStatus": _operation(
            "send", "computeBucket", "ComputeStatusEntry", "Keep a shard's latest status."
        ),
        "receivePlacements": _operation(
            "receive", "placements", "PlacementSpec", "Watch this node's placements."
        ),
        "sendNodeLease": _operation(
            "send", "leases", "NodeLease", "Take or refresh this node's lease."
        ),
    }


def _messages(payloads: dict[str, Any]) -> dict[str, Any]:
    return {
        "NodeTelemetry": _message("NodeTelemetry", payloads, "What one node read in one interval."),
        "NodeInventory": _message(
            "NodeInventory", payloads, "What one node is: GPUs, host and GPU processes."
        ),
        "ComputeStatus": _message(
            "ComputeStatus", payloads, "Where one shard computes.", event=True
        ),
        "FallbackEvent": _message(
            "FallbackEvent",
            payloads,
            "A shard placed on GPUs entered or left a fallback verdict.",
            event=True,
        ),
        "NodeForgotten": _message(
            "NodeForgotten", payloads, "A node gone for good, said by `placewatch forget`."
        ),
        "ComputeStatusEntry": {
            "name": "ComputeStatusEntry",
            "title": "ComputeStatus (KV value)",
            "summary": "A shard's latest ComputeStatus, without headers.",
            "description": "Encoded as the worker's events are (JSON unless the worker is set "
            "to msgpack); a KV value carries no headers.",
            "contentType": JSON,
            "payload": payloads["ComputeStatus"],
        },
        "PlacementSpec": {
            "name": "PlacementSpec",
            "title": "PlacementSpec",
            "summary": "Where a control plane placed a shard.",
            "description": "JSON. `gpus` are physical indices (empty: the CPU on purpose); "
            "`pid` or `match` (a regular expression on the command line) finds its process. "
            "The same fields make a `[[shard]]` entry in a shards file.",
            "contentType": JSON,
            "payload": payloads["PlacementSpec"],
        },
        "NodeLease": {
            "name": "NodeLease",
            "title": "NodeLease (KV value)",
            "summary": "The worker that holds a node's name.",
            "description": "JSON, without headers: the session, host and pid of the worker "
            "that holds the node, when it started and how often it refreshes the lease.",
            "contentType": JSON,
            "payload": payloads["NodeLease"],
        },
    }


def _channel(
    address: str, message: str, parameters: dict[str, Any], description: str
) -> dict[str, Any]:
    return {
        "address": address,
        "description": description,
        "parameters": parameters,
        "messages": {message: {"$ref": f"#/components/messages/{message}"}},
    }


def _operation(action: str, channel: str, message: str, summary: str) -> dict[str, Any]:
    return {
        "action": action,
        "channel": {"$ref": f"#/channels/{channel}"},
        "summary": summary,
        "messages": [{"$ref": f"#/channels/{channel}/messages/{message}"}],
    }


def _message(
    name: str, payloads: dict[str, Any], summary: str, *, event: bool = False
) -> dict[str, Any]:
    return {
        "name": name,
        "title": name,
        "summary": summary,
        "contentType": JSON,
        "headers": _headers(name, event=event),
        "payload": payloads[name],
    }


def _headers(type_name: str, *, event: bool) -> dict[str, Any]:
    properties: dict[str, Any] = {
        HEADER_CONTENT_TYPE: {
            "type": "string",
            "enum": [JSON, MSGPACK],
            "description": "The payload's format; a message without one is JSON.",
        },
        HEADER_TYPE: {
            "type": "string",
            "const": type_name,
            "description": "The message's type.",
        },
        HEADER_SCHEMA: {
            "type": "string",
            "pattern": "^[0-9]+$",
            "description": f"The schema version, an integer (now {SCHEMA_VERSION}).",
            "examples": [str(SCHEMA_VERSION)],
        },
    }
    required = [HEADER_CONTENT_TYPE, HEADER_TYPE, HEADER_SCHEMA]
    if event:
        suffix = ", then `.firing` or `.resolved`" if type_name == "FallbackEvent" else ""
        properties[HEADER_MSG_ID] = {
            "type": "string",
            "description": "`<node>.<shard>.<session>.<n>` (node and shard as subject tokens, "
            f"n the shard's status number in the session){suffix}: JetStream stores a "
            "retried publish once.",
        }
        required.append(HEADER_MSG_ID)
    return {"type": "object", "properties": properties, "required": required}


# --- the node's micro service (placewatch.schemas.service) ----------------------------------

_REPLIES = {
    "telemetry": "NodeTelemetry",
    "inventory": "NodeInventory",
    "shards": "ComputeStatusList",
    "recheck": "ComputeStatusList",
}
_ASKS = {
    "telemetry": "The node's latest NodeTelemetry; error 503 before its first tick.",
    "inventory": "The NodeInventory its latest NodeTelemetry names; error 503 before its "
    "first tick.",
    "shards": "The latest ComputeStatus of each of the node's shards.",
    "recheck": "A tick now, answered with the statuses after it: one at a time and at most one "
    "a second, a request past that refused at once with error 429 saying when to ask again.",
}


def _service_channels(prefix: str) -> dict[str, Any]:
    node = {"node": {"$ref": "#/components/parameters/node"}}
    channels: dict[str, Any] = {
        f"service{name.capitalize()}": {
            "address": f"{prefix}.service.{{node}}.{name}",
            "description": f"The `{name}` endpoint of the node's micro service `{service.NAME}` "
            f"(found through `$SRV.PING`, `$SRV.INFO`, `$SRV.STATS`). {_ASKS[name]}",
            "parameters": node,
            "messages": {"ServiceRequest": {"$ref": "#/components/messages/ServiceRequest"}},
        }
        for name in service.ENDPOINTS
    }
    channels["serviceReply"] = {
        "address": None,
        "description": "The requester's inbox, named by the request's reply subject.",
        "messages": {
            m: {"$ref": f"#/components/messages/{m}"}
            for m in ("NodeTelemetry", "NodeInventory", "ComputeStatusList", "ServiceError")
        },
    }
    return channels


def _service_operations() -> dict[str, Any]:
    return {
        f"answer{name.capitalize()}": {
            "action": "receive",
            "channel": {"$ref": f"#/channels/service{name.capitalize()}"},
            "summary": _ASKS[name],
            "messages": [
                {"$ref": f"#/channels/service{name.capitalize()}/messages/ServiceRequest"}
            ],
            "reply": {
                "channel": {"$ref": "#/channels/serviceReply"},
                "messages": [
                    {"$ref": f"#/channels/serviceReply/messages/{_REPLIES[name]}"},
                    {"$ref": "#/channels/serviceReply/messages/ServiceError"},
                ],
            },
        }
        for name in service.ENDPOINTS
    }


def _service_messages(payloads: dict[str, Any]) -> dict[str, Any]:
    headers = _headers("ComputeStatus", event=False)
    headers["properties"][HEADER_TYPE] = {
        "type": "string",
        "const": service.STATUS_LIST,
        "description": "A list of the message type before the brackets.",
    }
    codes = "; ".join(f"`{code}`: {why}" for code, why in service.ERROR_CODES.items())
    return {
        "ServiceRequest": {
            "name": "ServiceRequest",
            "title": "A request to a node's micro service",
            "summary": "Its body is ignored: send none.",
            "payload": {"type": "string", "maxLength": 0},
        },
        "ComputeStatusList": {
            "name": "ComputeStatusList",
            "title": "ComputeStatus[]",
            "summary": "The latest ComputeStatus of each of the node's shards.",
            "contentType": JSON,
            "headers": headers,
            "payload": {"type": "array", "items": payloads["ComputeStatus"]},
        },
        "ServiceError": {
            "name": "ServiceError",
            "title": "A NATS micro error reply",
            "summary": f"No payload; the error in its headers. Codes: {codes}.",
            "headers": {
                "type": "object",
                "properties": {
                    service.HEADER_ERROR_CODE: {
                        "type": "string",
                        "enum": list(service.ERROR_CODES),
                    },
                    service.HEADER_ERROR: {"type": "string"},
                },
                "required": [service.HEADER_ERROR_CODE, service.HEADER_ERROR],
            },
            "payload": {"type": "string", "maxLength": 0},
        },
    }
