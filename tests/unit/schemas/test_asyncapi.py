"""The AsyncAPI document built from the contract: channel addresses under a chosen prefix, and
every reference in it resolving (docs/asyncapi.json is checked in test_contract_docs)."""

from __future__ import annotations

from typing import Any

from placewatch.schemas import SCHEMA_VERSION, asyncapi_document


def resolve(document: dict[str, Any], ref: str) -> Any:
    assert ref.startswith("#/"), ref
    node: Any = document
    for part in ref[2:].split("/"):
        node = node[part]
    return node


def test_channel_addresses_and_bucket_names_follow_the_prefix() -> None:
    channels = asyncapi_document("pw")["channels"]
    assert {name: c["address"] for name, c in channels.items()} == {
        "telemetry": "pw.telemetry.{node}",
        "inventory": "pw.inventory.{node}",
        "compute": "pw.compute.{node}.{shard}",
        "fallback": "pw.fallback.{node}.{shard}",
        "forgotten": "pw.forgotten.{node}",
        "computeBucket": "$KV.pw_compute.{node}.{shard}",
        "placements": "$KV.pw_placements.{node}.{shard}",
        "leases": "$KV.pw_leases.{node}",
        "serviceTelemetry": "pw.service.{node}.telemetry",
        "serviceInventory": "pw.service.{node}.inventory",
        "serviceShards": "pw.service.{node}.shards",
        "serviceRecheck": "pw.service.{node}.recheck",
        "serviceReply": None,  # the requester's inbox
    }
    assert list(channels["telemetry"]["parameters"]) == ["node"]
    assert list(channels["leases"]["parameters"]) == ["node"]
    assert list(channels["fallback"]["parameters"]) == ["node", "shard"]
    assert "The stream `PW_TELEMETRY`" in channels["telemetry"]["description"]
    assert "`pw.telemetry.<partition>.{node}`" in channels["telemetry"]["description"]
    assert "The KV bucket `pw_leases`" in channels["leases"]["description"]


def test_the_default_prefix_is_placewatch_and_the_info_names_the_one_used() -> None:
    default = asyncapi_document()
    assert default["channels"]["telemetry"]["address"] == "placewatch.telemetry.{node}"
    assert "(`placewatch` here)" in default["info"]["description"]
    assert "(`pw` here)" in asyncapi_document("pw")["info"]["description"]
    assert default["asyncapi"] == "3.0.0"
    assert default["info"]["version"] == str(SCHEMA_VERSION)
    assert default["servers"]["default"]["host"] == "127.0.0.1:4222"


def test_every_reference_resolves() -> None:
    document = asyncapi_document("pw")
    for name, operation in document["operations"].items():
        channel = resolve(document, operation["channel"]["$ref"])
        assert channel in document["channels"].values(), name
        (message,) = operation["messages"]
        assert resolve(document, message["$ref"])["$ref"].startswith("#/components/messages/")
        for replied in operation.get("reply", {}).get("messages", []):
            assert replied["$ref"].startswith(operation["reply"]["channel"]["$ref"])
            assert resolve(document, replied["$ref"])["$ref"].startswith("#/components/messages/")
    for channel in document["channels"].values():
        for ref in channel["messages"].values():
            payload = resolve(document, ref["$ref"])["payload"]
            if "$ref" in payload:
                payload = resolve(document, payload["$ref"])
            elif payload.get("type") == "array":
                payload = resolve(document, payload["items"]["$ref"])
            assert "type" in payload
        for param in channel.get("parameters", {}).values():
            assert resolve(document, param["$ref"])["description"]


def test_stored_events_require_a_message_id_and_telemetry_does_not() -> None:
    messages = asyncapi_document()["components"]["messages"]
    assert messages["NodeTelemetry"]["headers"]["required"] == [
        "Content-Type",
        "Placewatch-Type",
        "Placewatch-Schema",
    ]
    for name in ("ComputeStatus", "FallbackEvent"):
        headers = messages[name]["headers"]
        assert headers["required"][-1] == "Nats-Msg-Id"
        assert headers["properties"]["Placewatch-Type"]["const"] == name
    msg_id = messages["FallbackEvent"]["headers"]["properties"]["Nats-Msg-Id"]
    assert "`.firing` or `.resolved`" in msg_id["description"]
    assert "headers" not in messages["PlacementSpec"]
    assert "headers" not in messages["NodeLease"]  # a KV value, as placements are


def test_operations_send_what_the_worker_publishes_and_receive_placements() -> None:
    operations = asyncapi_document()["operations"]
    assert {name: (o["action"], o["channel"]["$ref"]) for name, o in operations.items()} == {
        "sendTelemetry": ("send", "#/channels/telemetry"),
        "sendInventory": ("send", "#/channels/inventory"),
        "sendComputeStatus": ("send", "#/channels/compute"),
        "sendFallbackEvent": ("send", "#/channels/fallback"),
        "sendNodeForgotten": ("send", "#/channels/forgotten"),
        "putComputeStatus": ("send", "#/channels/computeBucket"),
        "receivePlacements": ("receive", "#/channels/placements"),
        "sendNodeLease": ("send", "#/channels/leases"),
        "answerTelemetry": ("receive", "#/channels/serviceTelemetry"),
        "answerInventory": ("receive", "#/channels/serviceInventory"),
        "answerShards": ("receive", "#/channels/serviceShards"),
        "answerRecheck": ("receive", "#/channels/serviceRecheck"),
    }
    shards = operations["answerShards"]["reply"]["messages"]
    assert [m["$ref"] for m in shards] == [
        "#/channels/serviceReply/messages/ComputeStatusList",
        "#/channels/serviceReply/messages/ServiceError",
    ]
