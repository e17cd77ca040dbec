"""Where a shard serves, as a gateway on another node reaches it: the endpoint its status says.

A placement may say it (`endpoint`); else its `health_url` does (llama-server and vLLM answer
/health beside their API, so its scheme, host and port are the API's, and what precedes
`/health` is the prefix); a discovered shard's comes from its engine's flags. A server bound
to every address (`0.0.0.0`, `::`) is reached at the node's address, which no bind names: the
setting `advertise_host`, else the address the node's default route leaves from (a gateway
on another node reaches it there), else the node's host name.
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

import msgspec

from placewatch.schemas import Endpoint, PlacementSpec
from placewatch.schemas.endpoint import DEFAULT_PORTS

_HEALTH = "/health"
_PROBE_ADDRESS = ("192.0.2.1", 9)
"""TEST-NET-1 (RFC 5737): connecting a UDP socket to it picks the default route's source
address and sends nothing."""


def placed_endpoint(spec: PlacementSpec) -> Endpoint | None:
    """The endpoint `spec` says, or its health URL's; None when neither says one."""
    if spec.endpoint is not None:
        return spec.endpoint
    if spec.health_url is None:
        return None
    try:
        parts = urlsplit(spec.health_url)
        port = parts.port or DEFAULT_PORTS.get(parts.scheme)
    except ValueError:
        return None
    if not parts.hostname or port is None:
        return None
    path = parts.path.rstrip("/")
    prefix = path.removesuffix(_HEALTH) if path.endswith(_HEALTH) else ""
    return Endpoint(scheme=parts.scheme, host=parts.hostname, port=port, path_prefix=prefix)


def for_others(endpoint: Endpoint | None, node_address: str) -> Endpoint | None:
    """`endpoint` with a bind to every address given as `node_address`."""
    if endpoint is None or not _every_address(endpoint.host):
        return endpoint
    return msgspec.structs.replace(endpoint, host=node_address)


def node_address(advertised: str | None) -> str:
    """The host others reach this node's shards at: `advertised` when set, else the default
    route's source address, else the host name (a node without a route)."""
    if advertised:
        return advertised
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(_PROBE_ADDRESS)
            address = str(s.getsockname()[0])
    except OSError:
        address = ""
    return address if address and address != "0.0.0.0" else socket.gethostname()  # noqa: S104


def _every_address(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return False
