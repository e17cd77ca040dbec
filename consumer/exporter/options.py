"""`placewatch exporter`'s flags, read without the exporter itself (so `--help` starts fast)."""

from __future__ import annotations

import argparse

from placewatch.arguments import node_name, partition_argument, seconds
from placewatch.prometheus.listen import DEFAULT_LISTEN, listen_argument


def node_glob(text: str) -> str:
    """A shell-style glob of node names (fnmatch's, case kept)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty glob matches no node: give one, as 'rack1-*'")
    return text


STALE_MIN_S = 60.0
STALE_INTERVALS = 5
"""By default a node leaves /metrics when its last sample is older than five of its intervals
or 60 s, whichever is longer."""


def add_arguments(exporter: argparse.ArgumentParser) -> None:
    exporter.add_argument(
        "--listen",
        type=listen_argument,
        default=listen_argument(DEFAULT_LISTEN),
        metavar="HOST:PORT",
        help=f"serve /metrics here ({DEFAULT_LISTEN})",
    )
    which = exporter.add_mutually_exclusive_group()
    which.add_argument(
        "--node",
        dest="only_node",
        type=node_name,
        metavar="NAME",
        help="serve this node only (default: every node the view holds)",
    )
    which.add_argument(
        "--nodes",
        type=node_glob,
        metavar="GLOB",
        help="serve only the nodes whose names match this shell-style glob ('rack1-*'); "
        "the others are let go as their messages arrive",
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
