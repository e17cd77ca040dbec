"""The `placewatch` command: the node worker's commands and those that read the bus.

`run`, `sample`, `doctor` and `health` are the node's (placewatch), and `forget`, which
says on the bus that a node is gone for good; `watch`, `alerts` and `exporter` read the bus
(placewatch.consumer); `schema` prints the contract.
Each command's module is imported only when that command runs, so that
`placewatch sample` does not pay for the NATS client: a command whose
module owns flags of its own (`doctor`, `watch`, `alerts`) adds them to its
parser through `add_arguments` once the command line has named it.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import Any

from placewatch import __version__
from placewatch.arguments import Parser
from placewatch.node_flags import node_options
from placewatch.worker.config import ENV_CONFIG, ConfigError, Settings, load

EXIT_CONFIG = 2
EXIT_LEASE_HELD = 2
"""`run`: another live worker holds this node's name; this one published nothing."""
EXIT_LEASE_LOST = 3
"""`run`: another worker took this node's lease over; this one stopped publishing. A systemd
unit does not restart it (RestartPreventExitStatus=3 in deploy/systemd/placewatch.service)."""


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = _parser(argv)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_CONFIG
    if args.command == "schema":
        return _schema(args)
    if args.command == "partition":
        return _partition(args)
    try:
        settings = load(_flags(args), config_path=args.config)
    except ConfigError as exc:
        print(f"placewatch: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s placewatch %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    try:
        code: int = COMMANDS[args.command](settings, args)
    except ConfigError as exc:  # a credentials or TLS file that cannot be used, for any command
        print(f"placewatch: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    return code


# --- the commands, each importing what it needs when it runs -------------------------------


def _run_command(settings: Settings, args: argparse.Namespace) -> int:
    import anyio

    from placewatch.worker.bus.lease import LeaseHeld, LeaseLost
    from placewatch.worker.embedded import EmbeddedError
    from placewatch.worker.runtime import run

    try:
        anyio.run(run, settings, sys.stdout, backend="asyncio")
    except (EmbeddedError, LeaseHeld, LeaseLost) as exc:
        print(f"placewatch: {exc}", file=sys.stderr)
        if isinstance(exc, LeaseHeld):
            return EXIT_LEASE_HELD
        return EXIT_LEASE_LOST if isinstance(exc, LeaseLost) else 1
    except KeyboardInterrupt:
        pass
    return 0


def _sample_command(settings: Settings, args: argparse.Namespace) -> int:
    from placewatch.worker import sample

    return sample.main(settings, as_json=args.json)


def _doctor_command(settings: Settings, args: argparse.Namespace) -> int:
    from placewatch.worker import doctor

    return doctor.command(settings, args)


def _health_command(settings: Settings, args: argparse.Namespace) -> int:
    from placewatch.worker import health

    return health.command(settings, args)


def _forget_command(settings: Settings, args: argparse.Namespace) -> int:
    from placewatch.worker import forget

    return forget.command(settings, args)


def _watch_command(settings: Settings, args: argparse.Namespace) -> int:
    from placewatch.consumer.watch import command

    return command.command(_bus(settings), args)


def _alerts_command(settings: Settings, args: argparse.Namespace) -> int:
    from placewatch.consumer import alerts

    return alerts.command(_bus(settings), args)


def _exporter_command(settings: Settings, args: argparse.Namespace) -> int:
    from placewatch.consumer.exporter import serve

    return serve.command(_bus(settings), args)


def _bus(settings: Settings) -> Any:
    """Where a command that reads the bus connects (a ConfigError is the caller's to say),
    with the heartbeat its connection keeps when given a health file."""
    from placewatch.connection import HEARTBEAT, Bus
    from placewatch.heartbeat import check_folder
    from placewatch.schemas import subjects
    from placewatch.worker.bus.options import connect_options

    options = connect_options(settings)
    if settings.health_file is not None:
        problem = check_folder(settings.health_file)
        if problem is not None:
            raise ConfigError(problem)
        options[HEARTBEAT] = settings.health_file
    return Bus(settings.nats or [subjects.LOCAL_URL], options, settings.prefix)


def _schema(args: argparse.Namespace) -> int:
    import json

    from placewatch.schemas import asyncapi_document, json_schema

    try:
        document = asyncapi_document(args.prefix) if args.asyncapi else json_schema()
    except ValueError as exc:  # a prefix with no stream and bucket names
        print(f"placewatch: --prefix: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    print(json.dumps(document, indent=2))
    return 0


COMMANDS = {
    "run": _run_command,
    "sample": _sample_command,
    "doctor": _doctor_command,
    "health": _health_command,
    "forget": _forget_command,
    "watch": _watch_command,
    "alerts": _alerts_command,
    "exporter": _exporter_command,
}


def _partition(args: argparse.Namespace) -> int:
    from placewatch.schemas import partitions, subjects
    from placewatch.schemas.printable import printable

    found = partitions.partition_of(args.node, args.partitions)  # N checked as it was read
    token = subjects.token(args.node)
    print(
        f"{printable(args.node)}: partition {found} of {args.partitions} (FNV-1a of {token!r}: "
        f"{partitions.node_hash(args.node)})"
    )
    for kind in partitions.PARTITIONED:
        print(f"  {partitions.mapped(kind, args.node, args.partitions, args.prefix)}")
    return 0


def _flags(args: argparse.Namespace) -> dict[str, Any]:
    given: dict[str, Any] = {}
    for field in Settings.__struct_fields__:
        value = getattr(args, field, None)
        if value is not None:
            given[field] = value
    return given


# --- the command line ----------------------------------------------------------------------


def _parser(argv: Sequence[str]) -> argparse.ArgumentParser:
    parser = Parser(
        prog="placewatch",
        description="Checks that every model shard placed on a node's GPUs computes on them, "
        "and publishes GPU telemetry and compute status to NATS.",
    )
    parser.add_argument("--version", action="version", version=f"placewatch {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    named = next((a for a in argv if not a.startswith("-")), None)
    node, bus, reader = node_options(), _bus_options(), _reader_options()
    settings_file = _reader_options(health_file=False)
    parents = {
        "run": [node, bus],
        "sample": [node],
        "doctor": [node, bus],
        "health": [reader, bus],
        "forget": [settings_file, bus],
        "watch": [reader, bus],
        "alerts": [reader, bus],
        "exporter": [reader, bus],
        "schema": [],
        "partition": [],
    }
    for name, (help_text, description) in HELP.items():
        command = commands.add_parser(
            name,
            parents=parents[name] if name == named else [],
            help=help_text,
            description=description,
        )
        if name == named:
            _add_arguments(name, command)
    return parser


HELP = {
    "run": (
        "run the worker",
        "Sample every interval and publish to NATS. With no server configured, start an "
        "embedded nats-server on 127.0.0.1 and print its URL.",
    ),
    "sample": ("take one sample and print it, no bus needed", None),
    "doctor": (
        "check that this node can run the worker, one line per check",
        "Check the GPU tools, access to the engines' processes, the NATS server (reachable, "
        "credentials, JetStream, streams and buckets, publish permission) and which GPUs each "
        "llama.cpp build can use. Exit 0 when nothing failed, else 1.",
    ),
    "health": (
        "is this node's worker (or this container's process) healthy? exit 0 or 1, one line",
        "Ask the node's worker over NATS for its latest telemetry (healthy: younger than "
        "three intervals), or with --heartbeat read the health file a `run`, `watch` or "
        "`alerts` process writes (no network: for liveness probes).",
    ),
    "forget": (
        "say on the bus that a node is gone for good (its shards gone, its fallbacks resolved)",
        "For a node whose worker will not come back: publish each of its shards' `gone` "
        "status and the resolution of each fallback it left firing, then remove its keys from "
        "the compute bucket and its last telemetry and inventory from their streams; with "
        "--silent-for, for every node of which the bus kept nothing newer. Refused while a "
        "node's lease is live (exit 2). Exit 0 when all of it was done, else 1.",
    ),
    "watch": (
        "a live view of the fleet from the bus",
        "Nodes, GPUs and shards as the bus has them, redrawn as they change. With no --nats, "
        "the embedded default nats://127.0.0.1:4222.",
    ),
    "alerts": (
        "deliver fallback events to stdout, a webhook or Alertmanager",
        "A durable JetStream consumer of fallback events: each is written to stdout as a JSON "
        "line or POSTed to --webhook, and acknowledged once it was delivered; with --format "
        "alertmanager, every shard's alert follows its latest status (fired, changed, "
        "resolved, and re-posted after a restart). With no --nats, the embedded default "
        "nats://127.0.0.1:4222.",
    ),
    "exporter": (
        "serve the fleet on the bus as Prometheus metrics, with dcgm-exporter's names",
        "Follow the bus (every node, one partition, or with --node one node) and serve "
        "/metrics on --listen: GPU metrics under dcgm-exporter's names and labels, and "
        "placewatch_* for shard verdicts, shard and foreign memory and node ages. A node "
        "whose last sample is older than --stale-after leaves /metrics. With no --nats, the "
        "embedded default nats://127.0.0.1:4222.",
    ),
    "schema": ("print the JSON Schema of every message", None),
    "partition": (
        "print the partition the servers' mapping puts a node in",
        "The partition of NODE among N, as nats-server's {{partition(N,1)}} computes it (the "
        "32-bit FNV-1a hash of the node's subject token, modulo N), and its mapped subjects: "
        "what to give `nats stream get --last-for` or `nats sub` once the mapping is on.",
    ),
}


def _add_arguments(name: str, command: argparse.ArgumentParser) -> None:
    """The flags of the command the command line names, from the module that owns them."""
    if name == "run":
        _run_arguments(command)
    elif name == "sample":
        command.add_argument(
            "--json",
            action="store_true",
            help="print the whole NodeSample (inventory and readings) as JSON",
        )
    elif name == "doctor":
        from placewatch.worker import doctor

        doctor.add_arguments(command)
    elif name == "health":
        from placewatch.worker import health

        health.add_arguments(command)
    elif name == "forget":
        from placewatch.worker import forget

        forget.add_arguments(command)
    elif name == "watch":
        from placewatch.consumer.watch import command as watch

        watch.add_arguments(command)
    elif name == "alerts":
        from placewatch.consumer import alerts

        alerts.add_arguments(command)
    elif name == "exporter":
        from placewatch.consumer.exporter.options import add_arguments

        add_arguments(command)
    elif name == "partition":
        from placewatch.arguments import MOST_PARTITIONS, node_name, partitions_argument

        command.add_argument("node", type=node_name, metavar="NODE", help="the node's name")
        command.add_argument(
            "--partitions",
            type=partitions_argument,
            required=True,
            metavar="N",
            help=f"the mapping's N (1 to {MOST_PARTITIONS})",
        )
        command.add_argument("--prefix", default="placewatch", help="subject prefix")
    elif name == "schema":
        command.add_argument(
            "--asyncapi", action="store_true", help="print the AsyncAPI 3.0.0 document instead"
        )
        command.add_argument("--prefix", default="placewatch", help="subject prefix (--asyncapi)")


def _reader_options(*, health_file: bool = True) -> Parser:
    """The flags of every command that reads the bus (health, watch, alerts, exporter): the
    settings file, the log level and, for one that runs on, its heartbeat file."""
    reader = Parser(add_help=False)
    reader.add_argument("--config", metavar="FILE", help=f"TOML settings file (also {ENV_CONFIG})")
    reader.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    if health_file:
        _health_file_argument(reader)
    return reader


def _health_file_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--health-file",
        metavar="FILE",
        help="heartbeat file for `placewatch health --heartbeat` (also PLACEWATCH_HEALTH_FILE)",
    )


def _bus_options() -> Parser:
    """The flags of every command that talks to NATS: servers, credentials, TLS, prefix."""
    bus = Parser(add_help=False)
    group = bus.add_argument_group("NATS connection (secrets are better given in the environment)")
    group.add_argument(
        "--nats",
        metavar="URL",
        help="server URL(s), comma-separated (also PLACEWATCH_NATS); "
        "none: run an embedded server (run) or use nats://127.0.0.1:4222",
    )
    group.add_argument("--user", help="user name (password in PLACEWATCH_PASSWORD)")
    group.add_argument("--password", help="password; prefer PLACEWATCH_PASSWORD")
    group.add_argument("--token", help="token; prefer PLACEWATCH_TOKEN")
    group.add_argument("--nkey-seed", metavar="FILE", help="file holding an NKey seed")
    group.add_argument("--creds", metavar="FILE", help="NATS credentials file (JWT and seed)")
    group.add_argument("--tls-ca", metavar="FILE", help="CA to verify the server (turns TLS on)")
    group.add_argument("--tls-cert", metavar="FILE", help="client certificate (mutual TLS)")
    group.add_argument("--tls-key", metavar="FILE", help="client certificate's key")
    group.add_argument("--prefix", help="subject prefix (default placewatch)")
    return bus


def _run_arguments(run: argparse.ArgumentParser) -> None:
    _health_file_argument(run)
    run.add_argument("--encoding", choices=["json", "msgpack"], help="payload format (json)")
    run.add_argument("--state-dir", metavar="DIR", help="embedded server's JetStream store")
    run.add_argument(
        "--embedded-port", type=int, metavar="PORT", help="embedded server port (4222; 0: any)"
    )
    run.add_argument(
        "--no-create",
        dest="create",
        action="store_const",
        const=False,
        help="never create the streams and buckets; use what an operator made",
    )
    run.add_argument("--replicas", type=int, metavar="N", help="replicas of what it creates (1)")
    run.add_argument("--storage", choices=["file", "memory"], help="storage of what it creates")
    run.add_argument(
        "--metrics-listen",
        metavar="HOST:PORT",
        help="serve this node's Prometheus metrics here (:9400, dcgm-exporter's port; off)",
    )
    run.add_argument(
        "--takeover",
        action="store_const",
        const=True,
        help="take this node's lease from a live worker that holds it (that one stops)",
    )


if __name__ == "__main__":
    sys.exit(main())
