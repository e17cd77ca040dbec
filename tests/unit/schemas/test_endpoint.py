"""A gateway's base URL for a backend names a status's endpoint the way URLs compare."""

from __future__ import annotations

import msgspec
import pytest

from placewatch.schemas import ComputeStatus, Endpoint
from placewatch.schemas.endpoint import endpoint_of


@pytest.mark.parametrize(
    "url",
    [
        "http://10.0.0.7:8080",
        "http://10.0.0.7:8080/",
        "http://10.0.0.7:8080/v1",  # LiteLLM's openai/ api_base
        "HTTP://10.0.0.7:8080/v1/",
    ],
)
def test_a_base_url_matches_its_endpoint(url: str) -> None:
    assert Endpoint(host="10.0.0.7", port=8080).matches(url)


@pytest.mark.parametrize(
    ("endpoint", "url", "same"),
    [
        (Endpoint(host="gpu7", port=80), "http://GPU7/v1", True),  # the default port
        (Endpoint(host="fd00::7", port=8080), "http://[fd00:0::7]:8080", True),
        (
            Endpoint(host="10.0.0.7", port=8080, path_prefix="/llm"),
            "http://10.0.0.7:8080/llm/v1",
            True,
        ),
        (
            Endpoint(host="10.0.0.7", port=8080, path_prefix="/llm"),
            "http://10.0.0.7:8080/v1",
            False,
        ),
        (Endpoint(host="10.0.0.7", port=8080), "http://10.0.0.7:8081", False),
        (Endpoint(host="10.0.0.7", port=8080), "https://10.0.0.7:8080", False),
        (Endpoint(host="10.0.0.7", port=8080), "not a url", False),
        (Endpoint(host="10.0.0.7", port=8080), "http://10.0.0.7:99999", False),
    ],
)
def test_only_the_same_endpoint_matches(endpoint: Endpoint, url: str, same: bool) -> None:
    assert endpoint.matches(url) is same


def test_an_ipv6_endpoint_is_written_in_brackets() -> None:
    assert Endpoint(host="fd00::7", port=8080).url() == "http://[fd00::7]:8080"
    assert endpoint_of("http://[fd00::7]:8080/v1") == Endpoint(host="fd00::7", port=8080)


def test_a_status_without_an_endpoint_reads_null_and_one_with_it_round_trips() -> None:
    status = msgspec.json.decode(
        b'{"node":"n","shard":"s","session":"x","time":"2026-12-07T00:00:00Z"}',
        type=ComputeStatus,
    )
    assert status.endpoint is None
    placed = msgspec.structs.replace(status, endpoint=Endpoint(host="10.0.0.7", port=8080))
    again = msgspec.json.decode(msgspec.json.encode(placed), type=ComputeStatus)
    assert again.endpoint == Endpoint(scheme="http", host="10.0.0.7", port=8080, path_prefix="")
