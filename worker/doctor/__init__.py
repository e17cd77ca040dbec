"""`placewatch doctor`: can this node's worker do its job? One line per check.

Each line says `ok`, `fail` or `skip`, what was found and, for a failure, what
to do next. The checks run in the order a node is set up, one module each: the
GPU tools (gpu_tools.py), access to the engines' processes (processes.py), the
privileges other users' engines need (privileges.py), whether each engine log may be
read (logs.py), the NATS server, reachable and taking the credentials (server.py), then JetStream,
the streams and buckets and the permission to publish (jetstream.py), then
each llama.cpp build's own list of the GPUs it can use (engines.py). With a
shards file, its placements are read and their processes found (placed.py)
before the processes are checked; `--no-discover` keeps doctor from walking
the processes for engines, as it keeps the worker.

No secret is printed: report.py scrubs every line of what the settings hold.
"""

from __future__ import annotations

import argparse
import functools
import logging
from collections.abc import Sequence

import anyio
import anyio.to_thread

from placewatch.arguments import seconds

from ..config import Settings
from ..engines.evidence.journal import Journal
from ..shards.discover import Discovered, discover
from ..shards.scope import ProcessScope
from .engines import ENGINE_TIMEOUT_S, Engine, check_engines, preflight
from .gpu_tools import check_gpu_tools
from .jetstream import CHECKS as JETSTREAM_CHECKS
from .jetstream import check_jetstream
from .logs import check_logs
from .placed import Placed, check_shards_file
from .privileges import check_privileges
from .processes import check_processes
from .report import Check, Report, secrets_of
from .server import ServerErrors, check_server, close

__all__ = [
    "Check",
    "Engine",
    "Report",
    "add_arguments",
    "command",
    "diagnose",
    "main",
    "preflight",
    "secrets_of",
]


def add_arguments(doctor: argparse.ArgumentParser) -> None:
    doctor.add_argument(
        "--engine",
        action="append",
        default=[],
        metavar="PATH",
        help="an engine binary (llama-server, llama-cli) to ask which GPUs it can use; repeatable",
    )
    doctor.add_argument(
        "--timeout",
        type=seconds,
        default=ENGINE_TIMEOUT_S,
        metavar="SECONDS",
        help=f"limit for each engine's --list-devices ({ENGINE_TIMEOUT_S:g})",
    )
    doctor.add_argument(
        "--no-create",
        dest="create",
        action="store_const",
        const=False,
        help="the worker runs with --no-create: a missing stream or bucket is a failure",
    )


def command(settings: Settings, args: argparse.Namespace) -> int:
    return main(settings, args.engine, args.timeout)


def main(settings: Settings, engines: Sequence[str], timeout_s: float) -> int:
    """Run every check, one line each on stdout; 0 when none failed, else 1."""
    if settings.log_level == "info":
        logging.getLogger().setLevel(logging.WARNING)  # the report says it all
    report = Report(lambda line: print(line, flush=True), secrets_of(settings))
    anyio.run(diagnose, settings, list(engines), timeout_s, report, backend="asyncio")
    return 1 if report.failed else 0


async def diagnose(
    settings: Settings, engines: Sequence[str], timeout_s: float, report: Report
) -> None:
    gpus = await check_gpu_tools(settings, report)
    scope = ProcessScope.parse(settings.discover_env)
    placed: list[Placed] = []
    if settings.shards:
        placed = await anyio.to_thread.run_sync(check_shards_file, settings.shards, report, scope)
    found: list[Discovered] = []
    if settings.discover:  # the file's placements claim their processes, as in the worker
        claimed = {p.pid for p in placed if p.pid is not None}
        walk = functools.partial(discover, gpus, claimed, scope=scope)
        found = await anyio.to_thread.run_sync(walk)
    await anyio.to_thread.run_sync(check_processes, gpus, found, report)
    check_privileges(found, report)
    journal = Journal.at(settings.journal_dir)  # journalctl runs: not on the event loop
    await anyio.to_thread.run_sync(check_logs, found, placed, report, journal)
    await _check_server_and_jetstream(settings, report)
    await check_engines(found, engines, len(gpus), timeout_s, report, placed=placed)


async def _check_server_and_jetstream(settings: Settings, report: Report) -> None:
    """The server's checks, then, over the one connection they make, JetStream's."""
    errors = ServerErrors()
    nc = await check_server(settings, errors, report, later=JETSTREAM_CHECKS)
    if nc is None:
        return
    try:
        await check_jetstream(nc, errors, settings, report)
    finally:
        await close(nc)
