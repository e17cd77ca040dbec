"""Where /metrics is served: `HOST:PORT`, as both the worker and the exporter take it."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

DEFAULT_LISTEN = "127.0.0.1:9400"
"""dcgm-exporter's port; on loopback until told otherwise."""


@dataclass(frozen=True)
class Listen:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def listen_argument(text: str) -> Listen:
    """`HOST:PORT` (`[::1]:PORT` for IPv6, `:PORT` for every IPv4 interface, as dcgm-exporter
    takes it), or an error argparse prints, saying what to give."""
    host, sep, port = text.strip().rpartition(":")
    host = host.removeprefix("[").removesuffix("]") or ("0.0.0.0" if sep else "")  # noqa: S104
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not HOST:PORT: give an address and a port from 1 to 65535, such as "
            f"{DEFAULT_LISTEN} (:9400 or 0.0.0.0:9400 for every interface)"
        )
    return Listen(host, int(port))
