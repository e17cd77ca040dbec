"""The `placewatch` command: run, sample, schema."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from typing import Any

import anyio
import msgspec

from placewatch.schemas import NodeTelemetry, asyncapi_document, json_schema

from . import __version__, alerts, doctor, watch
from .config import ENV_CONFIG, GPU_SOURCES, ConfigError, Settings, load
from .embedded import EmbeddedError
from .gpu.registry import chains_for
from .host import HostSampler
from .runtime import run
from .sampler import NodeSampler, new_session
from .shards.watch import shard_watch

EXIT_CONFIG = 2


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_CONFIG
    if args.command == "schema":
        document = asyncapi_document(args.prefix) if args.asyncapi else json_schema()
        print(json.dumps(document, indent=2))
        return 0
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
    handler = getattr(args, "handler", None)  # a command in its own module
    try:
        if handler is not None:
            code: int = handler(settings, args)
            return code
        if args.command == "sample":
            return _sample(settings, as_json=args.json)
        return _run(settings)
    except ConfigError as exc:  # a credentials or TLS file that cannot be used, for any command
        print(f"placewatch: {exc}", file=sys.stderr)
        return EXIT_CONFIG


def _run(settings: Settings) -> int:
    try:
        anyio.run(run, settings, sys.stdout, backend="asyncio")
    except EmbeddedError as exc:
        print(f"placewatch: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0


def _sample(settings: Settings, *, as_json: bool) -> int:
    async def once() -> NodeTelemetry:
        session = new_session()
        sampler = NodeSampler(
            settings.node,
            settings.interval,
            chains_for(settings),
            HostSampler(),
            session=session,
            watch=shard_watch(settings, session),
        )
        return (await sampler.sample()).telemetry

    telemetry = anyio.run(once, backend="asyncio")
    if as_json:
        sys.stdout.buffer.write(msgspec.json.format(msgspec.json.encode(telemetry), indent=2))
        sys.stdout.write("\n")
    else:
        print(describe(telemetry))
    return 0


def describe(t: NodeTelemetry) -> str:
    """A sample as a person reads it at a terminal."""
    lines = [f"node {t.node}  {t.time:%Y-%m-%d %H:%M:%S} UTC"]
    if not t.gpus:
        lines.append("no GPUs found")
    for g in t.gpus:
        util = "-" if g.utilization_pct is None else f"{g.utilization_pct:.0f}%"
        mem = f"{_gib(g.memory_used_bytes)}/{_gib(g.memory_total_bytes)} GiB"
        temp = "-" if g.temperature_c is None else f"{g.temperature_c:.0f} C"
        power = "-" if g.power_w is None else f"{g.power_w:.0f}"
        if g.power_cap_w is not None:
            power += f"/{g.power_cap_w:.0f}"
        lines.append(
            f"{g.vendor} GPU {g.index}  {g.name or '?'}  util {util}  mem {mem}  {temp}  "
            f"{power} W  {len(g.processes)} process{'' if len(g.processes) == 1 else 'es'}"
        )
    if t.host is not None:
        h = t.host
        cpu = "-" if h.cpu_pct is None else f"{h.cpu_pct:.0f}%"
        lines.append(
            f"host  cpu {cpu} of {h.cpu_count}  memory {_gib(h.memory_available_bytes)} GiB "
            f"available of {_gib(h.memory_total_bytes)}  load {h.load_1m}"
        )
    for b in t.shards:
        pid = f" (pid {b.pid})" if b.pid else ""
        lines.append(f"shard {b.shard}{pid}  {b.verdict}: {b.reason}")
    for s in t.sources:
        state = "ok" if s.ok else f"failed: {s.error}"
        latency = "" if s.latency_ms is None else f" ({s.latency_ms:.0f} ms)"
        lines.append(f"source {s.name}{latency} {state}")
    return "\n".join(lines)


def _gib(n: int | None) -> str:
    return "-" if n is None else f"{n / (1 << 30):.1f}"


def _flags(args: argparse.Namespace) -> dict[str, Any]:
    given: dict[str, Any] = {}
    for field in Settings.__struct_fields__:
        value = getattr(args, field, None)
        if value is not None:
            given[field] = value
    return given


def bus_options() -> argparse.ArgumentParser:
    """The flags of every command that talks to NATS: servers, credentials, TLS, prefix."""
    bus = argparse.ArgumentParser(add_help=False)
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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="placewatch",
        description="Checks that every model shard placed on a node's GPUs computes on them, "
        "and publishes GPU telemetry and compute status to NATS.",
    )
    parser.add_argument("--version", action="version", version=f"placewatch {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", metavar="FILE", help=f"TOML settings file (also {ENV_CONFIG})")
    common.add_argument("--node", help="this node's name (default: the short hostname)")
    common.add_argument("--interval", type=float, metavar="SECONDS", help="default 2")
    common.add_argument(
        "--probe-timeout", type=float, metavar="SECONDS", help="limit for one GPU tool run (5)"
    )
    common.add_argument(
        "--gpu-sources",
        metavar="NAMES",
        help=f"GPU sources to read, comma-separated (default {','.join(GPU_SOURCES)})",
    )
    common.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    common.add_argument("--kfd-root", metavar="DIR", help="AMD KFD sysfs tree (/sys/class/kfd/kfd)")
    common.add_argument("--shards", metavar="FILE", help="TOML file of [[shard]] placements")
    common.add_argument(
        "--grace",
        type=float,
        metavar="SECONDS",
        help="judge a shard without health_url this long after its process started (15)",
    )
    common.add_argument(
        "--no-discover",
        dest="discover",
        action="store_const",
        const=False,
        help="do not look for llama.cpp, Ollama and vLLM processes nothing places",
    )

    run = commands.add_parser(
        "run",
        parents=[common, bus_options()],
        help="run the worker",
        description="Sample every interval and publish to NATS. With no server configured, "
        "start an embedded nats-server on 127.0.0.1 and print its URL.",
    )
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
    run.add_argument(
        "--replicas", type=int, metavar="N", help="replicas of what the worker creates (1)"
    )
    run.add_argument("--storage", choices=["file", "memory"], help="storage of what it creates")

    sample = commands.add_parser(
        "sample", parents=[common], help="take one sample and print it, no bus needed"
    )
    sample.add_argument("--json", action="store_true", help="print a NodeTelemetry as JSON")
    doctor.add_command(commands, [common, bus_options()])

    consumer = argparse.ArgumentParser(add_help=False)
    consumer.add_argument(
        "--config", metavar="FILE", help=f"TOML settings file (also {ENV_CONFIG})"
    )
    consumer.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    watch.add_command(commands, [consumer, bus_options()])
    alerts.add_command(commands, [consumer, bus_options()])

    schema = commands.add_parser("schema", help="print the JSON Schema of every message")
    schema.add_argument(
        "--asyncapi", action="store_true", help="print the AsyncAPI 3.0.0 document instead"
    )
    schema.add_argument("--prefix", default="placewatch", help="subject prefix (--asyncapi)")
    return parser


if __name__ == "__main__":
    sys.exit(main())
