"""Where a shard serves its API, so that a gateway can tell which of its backends a status is
about: a ComputeStatus carries it, and a placement may say it.

A gateway names a backend by URL (LiteLLM's `api_base`, an nginx upstream, an Envoy cluster's
address); `url()` is the base such a gateway would write, and `matches()` compares one with it
the way URLs compare: scheme and host case-insensitive, a default port equal to none, trailing
slashes and the OpenAI-style `/v1` a gateway appends left out of the prefix.
"""

from __future__ import annotations

import ipaddress
from typing import Annotated
from urllib.parse import urlsplit

import msgspec

MAX_HOST_CHARS = 253
"""The longest DNS name (RFC 1035); an address is shorter."""
MAX_PREFIX_CHARS = 256
HOST_PATTERN = r"^[A-Za-z0-9._:%-]+$"
"""A DNS name, an IPv4 address or an IPv6 one (a zone too): what a URL's host may be, and
nothing a terminal or a log would act on."""
PREFIX_PATTERN = r"^(/[A-Za-z0-9._~!$&'()*+,;=:@%-]+)*$"
"""An absolute path of URL characters without a trailing slash, or nothing."""
DEFAULT_PORTS = {"http": 80, "https": 443}
_API_SUFFIXES = ("/v1",)
"""What an OpenAI-compatible client appends to a server's base URL (LiteLLM's `api_base`
for `openai/` models ends in it): a server at `http://h:8080` is `http://h:8080/v1` there."""


class Endpoint(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Scheme, host, port and path prefix of the URL a shard's engine answers on."""

    scheme: Annotated[str, msgspec.Meta(pattern="^https?$")] = "http"
    host: Annotated[
        str, msgspec.Meta(min_length=1, max_length=MAX_HOST_CHARS, pattern=HOST_PATTERN)
    ]
    """A name or an address (an IPv6 one without brackets), as others on the network reach
    it: a shard bound to every address is given under its node's (docs/shards.md)."""
    port: Annotated[int, msgspec.Meta(ge=1, le=65535)]
    path_prefix: Annotated[
        str, msgspec.Meta(max_length=MAX_PREFIX_CHARS, pattern=PREFIX_PATTERN)
    ] = ""
    """What the engine serves its API under (llama-server's `--api-prefix`), `""` for none;
    starts with `/` when set, never ends with one."""

    def url(self) -> str:
        """The base URL: `http://10.0.0.7:8080`, `http://[fd00::7]:8080/api`."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}{self.path_prefix}"

    def matches(self, url: str) -> bool:
        """Whether `url` (a gateway's base URL for a backend) names this endpoint."""
        other = endpoint_of(url)
        return other is not None and key_of(other) == key_of(self)


def endpoint_of(url: str) -> Endpoint | None:
    """The endpoint a base URL names, its `/v1` left out of the prefix; None for anything but
    an http(s) URL with a host."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname:
        return None
    prefix = parts.path.rstrip("/")
    for suffix in _API_SUFFIXES:
        prefix = prefix.removesuffix(suffix)
    try:
        return Endpoint(
            scheme=scheme,
            host=parts.hostname,
            port=port or DEFAULT_PORTS[scheme],
            path_prefix=prefix,
        )
    except (TypeError, ValueError):
        return None


EndpointKey = tuple[str, str, int, str]
"""An endpoint as URLs compare: equal keys, the same server."""


def key_of(e: Endpoint) -> EndpointKey:
    """`e` as URLs compare: scheme and host in lower case, one spelling of an address, the
    prefix without a trailing slash or `/v1`."""
    host = e.host.lower().strip("[]")
    try:
        host = str(ipaddress.ip_address(host))  # one spelling of an IPv6 address
    except ValueError:
        host = host.rstrip(".")
    return e.scheme.lower(), host, e.port, e.path_prefix.rstrip("/").removesuffix("/v1")
