"""Where a shard serves, as its status says it: its placement's endpoint, else its health URL's;
a bind to every address given as the node's address for others."""

from __future__ import annotations

import pytest

from placewatch.schemas import Endpoint, PlacementSpec
from placewatch.worker.shards.served import for_others, node_address, placed_endpoint


@pytest.mark.parametrize(
    ("health_url", "url"),
    [
        ("http://10.0.0.5:8080/health", "http://10.0.0.5:8080"),
        ("http://10.0.0.5:8080/llm/health", "http://10.0.0.5:8080/llm"),
        ("https://gpu7.internal/health", "https://gpu7.internal:443"),
        ("http://[fd00::7]:8000/v1/models", "http://[fd00::7]:8000"),  # not /health: no prefix
    ],
)
def test_a_placements_health_url_gives_its_endpoint(health_url: str, url: str) -> None:
    endpoint = placed_endpoint(PlacementSpec(id="a", health_url=health_url))
    assert endpoint is not None and endpoint.url() == url


def test_a_placements_own_endpoint_comes_first() -> None:
    own = Endpoint(host="llm-a.internal", port=443, scheme="https")
    spec = PlacementSpec(id="a", health_url="http://127.0.0.1:8080/health", endpoint=own)
    assert placed_endpoint(spec) == own
    assert placed_endpoint(PlacementSpec(id="a")) is None


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "0:0::0"])
def test_a_bind_to_every_address_is_given_as_the_nodes(host: str) -> None:
    bound = Endpoint(host=host, port=8080, path_prefix="/llm")
    assert for_others(bound, "10.0.0.7") == Endpoint(host="10.0.0.7", port=8080, path_prefix="/llm")


def test_a_named_host_stays_as_bound() -> None:
    bound = Endpoint(host="127.0.0.1", port=8080)
    assert for_others(bound, "10.0.0.7") is bound
    assert for_others(None, "10.0.0.7") is None


def test_the_nodes_address_is_the_setting_else_found() -> None:
    assert node_address("gpu7.internal") == "gpu7.internal"
    found = node_address(None)
    assert found and found != "0.0.0.0"
