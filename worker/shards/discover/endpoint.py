"""The port an engine serves on, which names its shard, and the URL that says it is ready.

The port comes from `--port` or the engine's variable, else the engine's
default; none for an engine that serves nothing, one bound to a unix socket
(vLLM's `--uds`, llama-server's `--host` naming a `.sock` file) or one asked
for a random port (`--port 0`). llama-server and vLLM's servers answer
GET /health with 2xx only once the model is loaded, so theirs is the URL
readiness is read from; llama-server serves it under `--api-prefix` when one
is set. The endpoint is the same port as others reach it: the host as bound
(every address stays `0.0.0.0` here: the shard pass gives it as the node's),
the prefix as set.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping

from placewatch.schemas import Endpoint
from placewatch.schemas.endpoint import (
    HOST_PATTERN,
    MAX_HOST_CHARS,
    MAX_PREFIX_CHARS,
    PREFIX_PATTERN,
)

from ...engines import Launch
from ...engines.flags import API_PREFIX, HOST, PORT, UNIX_SOCKET, int_value, lookup

_HOST = re.compile(HOST_PATTERN)
_PREFIX = re.compile(PREFIX_PATTERN)
_LOOPBACK = {"", "0.0.0.0", "::", "localhost", "127.0.0.1", "[::]"}  # noqa: S104 - hosts read, not bound


def serve_port(launch: Launch, env: Mapping[str, str] | None) -> int | None:
    """The port it serves on; None for one that serves nothing, or on a unix socket."""
    if not launch.serves:
        return None
    if lookup(UNIX_SOCKET, launch, env) is not None:
        return None
    host = lookup(HOST, launch, env)
    if host is not None and host[1].endswith(".sock"):
        return None  # llama-server listens on a unix socket when --host names one
    found = lookup(PORT, launch, env)
    if found is None:
        return launch.default_port
    port = int_value(found[1])
    return port if port is not None and 0 < port < 65536 else None  # 0: a random port


def health_url(launch: Launch, env: Mapping[str, str] | None, port: int | None) -> str | None:
    """Where GET answers 2xx once the model is loaded; None for an engine without one."""
    if not launch.health or port is None:
        return None
    host = lookup(HOST, launch, env)
    path = "/health"
    prefix = lookup(API_PREFIX, launch, env)
    if prefix is not None and prefix[1].strip("/"):
        path = "/" + prefix[1].strip("/") + path
    return f"http://{_url_host(host[1] if host else '')}:{port}{path}"


def _url_host(host: str) -> str:
    """Where to reach a server bound to `host` from this node."""
    host = host.strip()
    if host in _LOOPBACK:
        return "127.0.0.1"  # bound to every address, or to loopback
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return host  # a host name
    if address.is_unspecified:
        return "127.0.0.1"
    return f"[{address}]" if address.version == 6 else str(address)


def bound_endpoint(
    launch: Launch, env: Mapping[str, str] | None, port: int | None
) -> Endpoint | None:
    """Where it serves as bound: its host flag, else every address for an engine that binds
    all (vLLM), else loopback; None without a port, or for a host or prefix that is no URL's
    (a command line is anyone's text)."""
    if port is None:
        return None
    found = lookup(HOST, launch, env)
    host = found[1].strip().strip("[]") if found else ""
    if not host:
        host = "0.0.0.0" if launch.binds_all else "127.0.0.1"  # noqa: S104 - read, not bound
    if not _is_host(host):
        return None
    prefix = lookup(API_PREFIX, launch, env)
    path = "/" + prefix[1].strip("/") if prefix is not None and prefix[1].strip("/") else ""
    if len(path) > MAX_PREFIX_CHARS or not _PREFIX.match(path):
        return None
    return Endpoint(host=host, port=port, path_prefix=path)


def _is_host(host: str) -> bool:
    return len(host) <= MAX_HOST_CHARS and _HOST.match(host) is not None
