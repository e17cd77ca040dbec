"""The node's micro service as the contract: endpoint subjects, list replies, error replies."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
import pytest

from placewatch.schemas import ComputeStatus, DecodeError
from placewatch.schemas.service import (
    ENDPOINTS,
    STATUS_LIST,
    decode_statuses,
    encode_statuses,
    endpoint,
)

STATUSES = [
    ComputeStatus(
        node="gpu.07", shard=s, session="x", time=datetime(2026, 12, 1, tzinfo=UTC), verdict="gpu"
    )
    for s in ("a", "b")
]


def test_each_endpoint_is_under_the_nodes_token() -> None:
    assert ENDPOINTS == ("telemetry", "inventory", "shards", "recheck")
    assert endpoint("gpu.07", "shards") == "placewatch.service.gpu=2E07.shards"
    assert endpoint("n", "recheck", prefix="pw") == "pw.service.n.recheck"


@pytest.mark.parametrize("encoding", ["json", "msgpack"])
def test_a_list_reply_carries_the_contracts_headers_and_reads_back(encoding: str) -> None:
    body, headers = encode_statuses(STATUSES, encoding)  # type: ignore[arg-type]
    assert headers["Placewatch-Type"] == STATUS_LIST == "ComputeStatus[]"
    assert headers["Placewatch-Schema"] == "2"
    assert headers["Content-Type"] == f"application/{encoding}"
    assert decode_statuses(body, headers) == STATUSES
    if encoding == "json":
        assert [s["shard"] for s in msgspec.json.decode(body)] == ["a", "b"]


def test_an_error_reply_or_a_wrong_body_is_a_decode_error_naming_it() -> None:
    error = {"Nats-Service-Error-Code": "429", "Nats-Service-Error": "ask again in 0.6 s"}
    with pytest.raises(DecodeError, match=r"error 429: ask again in 0\.6 s"):
        decode_statuses(b"", error)
    with pytest.raises(DecodeError, match="not a list of ComputeStatus"):
        decode_statuses(b'{"shard": "a"}', {"Content-Type": "application/json"})
