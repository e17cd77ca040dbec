"""The documented contract: docs/schema.json, docs/asyncapi.json and docs/subjects.md's samples."""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
import msgspec
import pytest

from placewatch.schemas import (
    MESSAGE_TYPES,
    SCHEMA_VERSION,
    FallbackEvent,
    asyncapi_document,
    decode,
    encode,
    subjects,
)
from placewatch.schemas.streams import COMPUTE, EVENTS, LEASES, PLACEMENTS, TELEMETRY, for_prefix

from tests.conftest import ROOT, SHARED, run_placewatch
from tests.support.wire import doc_samples as samples

DOCS = ROOT / "docs"
ASYNCAPI_SPEC = SHARED / "specs" / "asyncapi-3.0.0.json"
GENERATED = {
    "docs/schema.json": ("schema",),
    "docs/asyncapi.json": ("schema", "--asyncapi"),
}
TYPES: dict[str, type[msgspec.Struct]] = {t.__name__: t for t in MESSAGE_TYPES}
UNSTORED = ("NodeTelemetry", "NodeInventory", "NodeForgotten")
"""The messages published without a message id: no stream deduplicates them."""


def load(relative: str) -> dict[str, Any]:
    doc = json.loads((ROOT / relative).read_text())
    assert isinstance(doc, dict)
    return doc


@pytest.mark.parametrize("relative", sorted(GENERATED))
def test_checked_in_documents_match_the_code(relative: str) -> None:
    argv = GENERATED[relative]
    done = run_placewatch(*argv)
    assert done.returncode == 0, done.stderr
    command = f"placewatch {' '.join(argv)} > {relative}"
    assert (ROOT / relative).read_text() == done.stdout, (
        f"{relative} no longer matches the Structs; regenerate it with `{command}`"
    )


@pytest.mark.skipif(
    not ASYNCAPI_SPEC.is_file(), reason="../shared/specs is not beside the project (only in CI)"
)
def test_asyncapi_document_is_valid_asyncapi_3() -> None:
    spec = json.loads(ASYNCAPI_SPEC.read_text())
    validator = jsonschema.Draft7Validator(spec)
    errors = [
        f"{e.json_path}: {e.message[:200]}"
        for e in validator.iter_errors(load("docs/asyncapi.json"))
    ]
    assert errors == []
    # The validator itself catches what AsyncAPI forbids: a server without a host.
    broken = load("docs/asyncapi.json")
    del broken["servers"]["default"]["host"]
    assert not validator.is_valid(broken)


def resolve(doc: dict[str, Any], ref: str) -> Any:
    assert ref.startswith("#/"), ref
    node: Any = doc
    for part in ref[2:].split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [r for v in node.values() for r in refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in refs(v)]
    return []


def test_every_reference_in_the_asyncapi_document_resolves() -> None:
    doc = load("docs/asyncapi.json")
    for ref in refs(doc):
        resolve(doc, ref)  # a KeyError names the broken one
    for name, op in doc["operations"].items():
        channel = resolve(doc, op["channel"]["$ref"])
        for message in op["messages"]:
            assert message["$ref"].startswith(op["channel"]["$ref"] + "/messages/"), name
            assert resolve(doc, message["$ref"]) in channel["messages"].values()


def test_asyncapi_describes_the_subjects_headers_and_server() -> None:
    doc = asyncapi_document()
    assert doc["asyncapi"] == "3.0.0"
    assert doc["info"]["title"] == "placewatch"
    assert doc["info"]["version"] == str(SCHEMA_VERSION)
    assert doc["servers"]["default"] == {
        "host": "127.0.0.1:4222",
        "protocol": "nats",
        "description": doc["servers"]["default"]["description"],
    }
    addresses = {name: c["address"] for name, c in doc["channels"].items()}
    assert addresses == {
        "telemetry": "placewatch.telemetry.{node}",
        "inventory": "placewatch.inventory.{node}",
        "compute": "placewatch.compute.{node}.{shard}",
        "fallback": "placewatch.fallback.{node}.{shard}",
        "forgotten": "placewatch.forgotten.{node}",
        "computeBucket": "$KV.placewatch_compute.{node}.{shard}",
        "placements": "$KV.placewatch_placements.{node}.{shard}",
        "leases": "$KV.placewatch_leases.{node}",
        "serviceTelemetry": "placewatch.service.{node}.telemetry",
        "serviceInventory": "placewatch.service.{node}.inventory",
        "serviceShards": "placewatch.service.{node}.shards",
        "serviceRecheck": "placewatch.service.{node}.recheck",
        "serviceReply": None,
    }
    for channel in doc["channels"].values():
        named = set(re.findall(r"{(\w+)}", channel["address"] or ""))
        assert set(channel.get("parameters", {})) == named
    for parameter in doc["components"]["parameters"].values():
        assert "A-Z a-z 0-9 _ -" in parameter["description"]
    actions = {
        name: (op["action"], op["channel"]["$ref"]) for name, op in doc["operations"].items()
    }
    assert actions["sendFallbackEvent"] == ("send", "#/channels/fallback")
    assert actions["receivePlacements"] == ("receive", "#/channels/placements")
    messages = doc["components"]["messages"]
    for name in (
        "NodeTelemetry",
        "NodeInventory",
        "ComputeStatus",
        "FallbackEvent",
        "NodeForgotten",
    ):
        headers = messages[name]["headers"]
        assert headers["properties"]["Placewatch-Type"]["const"] == name
        assert headers["properties"]["Content-Type"]["enum"] == [
            "application/json",
            "application/msgpack",
        ]
        event = name not in UNSTORED
        assert ("Nats-Msg-Id" in headers["required"]) is event
        assert messages[name]["payload"] == {"$ref": f"#/components/schemas/{name}"}
    assert doc["components"]["schemas"]["ComputeStatus"]["properties"]["verdict"]["enum"]
    assert (
        asyncapi_document("pw")["channels"]["fallback"]["address"] == "pw.fallback.{node}.{shard}"
    )


def test_asyncapi_headers_describe_what_encode_sends() -> None:
    doc = asyncapi_document()
    for name, payload in json_samples():
        if name in ("PlacementSpec", "NodeLease"):
            continue  # KV values, written without headers
        message = decode(payload.encode(), TYPES[name])
        event = name not in UNSTORED
        msg_id = "gpu-07.llama-8b-a.d9eab6f1c983.1" if event else None
        _, headers = encode(message, msg_id=msg_id)
        schema = doc["components"]["messages"][name]["headers"]
        jsonschema.Draft7Validator(schema).validate(headers)


def json_samples() -> list[tuple[str, str]]:
    return [(name, text) for name, lang, text in samples() if lang == "json"]


def test_every_json_block_in_subjects_md_is_a_named_sample() -> None:
    text = (DOCS / "subjects.md").read_text()
    assert text.count("```json") == len(json_samples())
    names = [name for name, _ in json_samples()]
    assert set(names) == set(TYPES), "a sample of every message type"
    assert names.count("FallbackEvent") == 2  # firing and resolved
    assert names.count("ComputeStatus") == 2  # on its subject and in the compute bucket


FORMATS = jsonschema.Draft202012Validator.FORMAT_CHECKER


@pytest.mark.parametrize(
    ("name", "payload"), json_samples(), ids=[f"{n}-{i}" for i, (n, _) in enumerate(json_samples())]
)
def test_subjects_md_sample_decodes_and_validates_against_schema_json(
    name: str, payload: str
) -> None:
    message = decode(payload.encode(), TYPES[name])
    schema = load("docs/schema.json")
    validator = jsonschema.Draft202012Validator(
        {"$ref": f"#/$defs/{name}", "$defs": schema["$defs"]}
    )
    validator.validate(json.loads(payload))
    # The root takes every message too, dates checked as dates (check-jsonschema's way).
    root = jsonschema.Draft202012Validator(schema, format_checker=FORMATS)
    assert list(root.iter_errors(json.loads(payload))) == []
    # Complete: every field present, as the worker writes it (nothing left to defaults).
    assert json.loads(payload) == json.loads(msgspec.json.encode(message))


def test_nats_sub_sample_shows_the_headers_encode_sends() -> None:
    (block,) = [text for name, _, text in samples() if name == "nats-sub"]
    head, _, payload = block.partition("\n\n")
    first, *header_lines = head.splitlines()
    subject = re.fullmatch(r'\[#1\] Received on "(.+)"', first)
    assert subject is not None
    shown = dict(line.split(": ", 1) for line in header_lines)
    event = decode(payload.encode(), FallbackEvent, shown)
    assert subject.group(1) == subjects.fallback(event.status.node, event.status.shard)
    wire, headers = encode(event, msg_id=shown["Nats-Msg-Id"])
    assert shown == headers
    assert payload.encode() == wire


def test_subjects_md_names_every_subject_stream_bucket_and_header() -> None:
    text = (DOCS / "subjects.md").read_text()
    for name in (
        "placewatch.telemetry.<node>",
        "placewatch.inventory.<node>",
        "placewatch.compute.<node>.<shard>",
        "placewatch.fallback.<node>.<shard>",
        "placewatch.forgotten.<node>",
        EVENTS.name,
        TELEMETRY.name,
        PLACEMENTS.name,
        COMPUTE.name,
        LEASES.name,
        "Content-Type",
        "Placewatch-Type",
        "Placewatch-Schema",
        "Nats-Msg-Id",
        "asyncapi.json",
        "schema.json",
    ):
        assert f"`{name}" in text or f"({name})" in text, name


def test_subjects_md_gives_the_names_of_each_prefix_as_for_prefix_makes_them() -> None:
    text = (DOCS / "subjects.md").read_text()
    table = text.split("<!-- names-per-prefix -->")[1].split("<!-- /names-per-prefix -->")[0]
    rows = [line.split(" | ") for line in table.strip().splitlines()[2:]]
    assert [r[0].removeprefix("| `").split("`")[0] for r in rows] == [
        "placewatch",
        "acme.pw",
        "site-2.gpu",
    ]
    for prefix, streams, buckets in rows:
        stores = for_prefix(prefix.removeprefix("| `").split("`")[0])
        assert streams == ", ".join(f"`{s.name}`" for s in stores.streams)
        assert buckets.removesuffix(" |") == ", ".join(f"`{b.name}`" for b in stores.buckets)


def test_operations_md_creates_the_streams_and_buckets_as_the_worker_would() -> None:
    text = (DOCS / "operations.md").read_text()
    block = text.split("<!-- operator-creates -->\n```sh\n")[1].split("```")[0]
    stores = for_prefix()
    assert block.splitlines() == [
        *(s.command("file", 3) for s in stores.streams),
        *(b.command("file", 3) for b in stores.buckets),
    ]


def test_development_md_says_how_to_regenerate_the_documents() -> None:
    text = (DOCS / "development.md").read_text()
    for relative, argv in GENERATED.items():
        assert f"placewatch {' '.join(argv)} > {relative}" in text
