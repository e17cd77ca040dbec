"""`placewatch exporter`'s flags, read without prometheus_client (so `--help` works when
the `exporter` extra is not installed)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from placewatch.arguments import node_name, seconds

from ..terminal import partition_argument

DEFAULT_LISTEN = "127.0.0.1:9400"
"""dcgm-exporter's port; on loopback until told otherwise."""
STALE_MIN_S = 60.0
STALE_INTERVALS = 5
"""By default a node leaves /metrics when its last sample is older than five of its intervals
or 60 s, whichever is longer."""


@dataclass(frozen=True)
class Listen:
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def listen_argument(text: str) -> Listen:
    """`HOST:PORT` (`[::1]:PORT` for IPv6), or an error argparse prints, saying what to give."""
    host, sep, port = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not HOST:PORT: give an address and a port from 1 to 65535, such as "
            f"{DEFAULT_LISTEN} (0.0.0.0:9400 for every interface)"
        )
    return Listen(host, int(port))


def add_arguments(exporter: argparse.ArgumentParser) -> None:
    exporter.add_argument(
        "--listen",
        type=listen_argument,
        default=listen_argument(DEFAULT_LISTEN),
        metavar="HOST:PORT",
        help=f"serve /metrics here ({DEFAULT_LISTEN})",
    )
    exporter.add_argument(
        "--node",
        dest="only_node",
        type=node_name,
        metavar="NAME",
        help="serve this node only (default: every node the view holds)",
    )
    exporter.add_argument(
        "--partition",
        type=partition_argument,
        metavar="P/N",
        help="only the nodes of partition P of the N the servers' mapping makes (default: all)",
    )
    exporter.add_argument(
        "--stale-after",
        type=seconds,
        metavar="SECONDS",
        help="a node whose last sample is older leaves /metrics (default: "
        f"{STALE_INTERVALS} of its intervals or {STALE_MIN_S:g} s, whichever is longer)",
    )
