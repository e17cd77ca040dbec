"""Ollama's request lines: its server logs every answered HTTP request with its latency
(gin), once it is done:

    [GIN] 2025/07/02 - 14:20:13 | 200 |  6.234077207s |       127.0.0.1 | POST     "/api/generate"

Only the endpoints that run a model count, and only those that answered 2xx.
"""

from __future__ import annotations

import re

from ..base import RequestLine

_GIN = re.compile(
    r"\[GIN\][^|]*\|\s*(2\d\d)\s*\|\s*(\S+)\s*\|[^|]*\|\s*POST\s+\""
    r"(/api/(?:generate|chat|embed|embeddings)|/v1/(?:chat/completions|completions|embeddings))\""
)
_GO_DURATION = re.compile(r"([0-9.]+)(ns|us|µs|μs|ms|s|m|h)")
_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}


def go_duration(text: str) -> float | None:
    """Seconds from a Go duration as gin prints it ("6.234077207s", "275.8ms", "1m2.5s")."""
    parts = _GO_DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    try:
        return sum(float(n) * _GO_UNITS.get(u, 3600.0) for n, u in parts)
    except ValueError:
        return None


def read_request(line: str) -> RequestLine | None:
    """A request that ran a model and is done, with the latency gin says; None for any other
    line."""
    match = _GIN.search(line)
    latency = None if match is None else go_duration(match[2])
    return None if latency is None else RequestLine("done", busy_s=latency)


class _Requests:
    word = "[GIN]"

    def read(self, line: str) -> RequestLine | None:
        return read_request(line)


REQUESTS = _Requests()
