"""Settings: flags over environment (PLACEWATCH_*) over the TOML file over defaults.

Each layer is checked on its own before they are merged, so an error names
where the bad value came from: the file and key, the environment variable,
or the flag. An unknown key is an error, not ignored: a misspelled
`intreval` would otherwise leave the default in force without a word.
"""

from __future__ import annotations

import os
import re
import socket
from argparse import ArgumentTypeError
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, get_args, get_origin, get_type_hints
from urllib.parse import urlsplit

import msgspec

from placewatch.connection import redact
from placewatch.prometheus.listen import listen_argument
from placewatch.schemas.control import MAX_INTERVAL_S
from placewatch.schemas.endpoint import HOST_PATTERN
from placewatch.schemas.streams import stem
from placewatch.schemas.subjects import MAX_NAME_BYTES

from .files import UnusableFile, read_text
from .gpu import DRM_ROOT, KFD_ROOT
from .gpu.registry import NAMES

ENV_PREFIX = "PLACEWATCH_"
ENV_CONFIG = "PLACEWATCH_CONFIG"
COMMAND_ENV_PREFIXES = ("PLACEWATCH_ALERTS_",)
"""Variables of a command's own flags (`placewatch alerts`' PLACEWATCH_ALERTS_WEBHOOK), read
and checked by that command: the node's settings pass over them, so that one environment
file can serve every command."""
MAX_CONFIG_BYTES = 1 << 20
"""The largest config file read: a few dozen keys fit in a few KiB."""

DAY_S = 86_400.0
Interval = Annotated[float, msgspec.Meta(ge=0.1, le=MAX_INTERVAL_S)]
"""Seconds between ticks: finite, and not so short that a tick cannot finish in it."""
Seconds = Annotated[float, msgspec.Meta(gt=0, le=DAY_S)]
NodeName = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_NAME_BYTES)]
Port = Annotated[int, msgspec.Meta(ge=0, le=65535)]
GPU_SOURCES = NAMES
"""The names of every GPU source, as the registry lists them."""
if TYPE_CHECKING:
    GpuSourceName = str
else:  # the registry's names, so that a name it does not know is refused with the choices
    GpuSourceName = Literal[GPU_SOURCES]
LISTS = ("nats", "gpu_sources")
"""Settings that are lists: a comma-separated string in a flag or the environment."""


def default_state_dir() -> str:
    # systemd's StateDirectory= sets STATE_DIRECTORY for the unit.
    if os.environ.get("STATE_DIRECTORY"):
        return os.environ["STATE_DIRECTORY"].split(":")[0]
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(Path.home(), ".local", "state")
    return os.path.join(base, "placewatch")


def default_node() -> str:
    return socket.gethostname().split(".")[0] or "localhost"


class Settings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Everything a worker can be told; the TOML file uses these names as keys."""

    nats: list[str] = msgspec.field(default_factory=list)
    """Server URLs to join. Empty: start the embedded nats-server."""
    user: str | None = None
    password: str | None = None
    token: str | None = None
    nkey_seed: str | None = None
    """A file holding an NKey seed (SU...)."""
    creds: str | None = None
    """A NATS credentials file (a user JWT and its NKey seed), as nsc writes it."""
    tls_ca: str | None = None
    """CA certificate(s) to verify the server with; turns TLS on."""
    tls_cert: str | None = None
    """Client certificate, for servers that verify clients (mutual TLS)."""
    tls_key: str | None = None
    node: NodeName = msgspec.field(default_factory=default_node)
    interval: Interval = 2.0
    prefix: str = "placewatch"
    encoding: Literal["json", "msgpack"] = "json"
    probe_timeout: Seconds = 5.0
    gpu_sources: Annotated[list[GpuSourceName], msgspec.Meta(min_length=1)] = msgspec.field(
        default_factory=lambda: list(GPU_SOURCES)
    )
    """The GPU sources to read; each vendor's are tried in their own order (NVML first)."""
    state_dir: str = msgspec.field(default_factory=default_state_dir)
    embedded_port: Port = 4222
    """Port of the embedded server; taken when free, else any free port. 0: any."""
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    shards: str | None = None
    """A TOML file of [[shard]] placements, re-read when it changes."""
    grace: Annotated[float, msgspec.Meta(ge=0, le=DAY_S)] = 15.0
    """Seconds after a shard's process started before it is judged, when it has no health_url."""
    discover: bool = True
    """Find llama.cpp, Ollama and vLLM processes that nothing places."""
    discover_env: Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z_][A-Za-z0-9_]*=")] | None = None
    """NAME=VALUE: discovery, a placement's `match` and doctor's pre-flight consider only
    processes whose environment holds it (shards/scope.py). None: every process."""
    kfd_root: str = str(KFD_ROOT)
    """The AMD KFD sysfs tree that per-process VRAM is read from."""
    journal_dir: str | None = None
    """A folder of journal files to read engines' output from (their own, or a machine id's
    folders'); None: the node's journal (/var/log/journal and /run/log/journal)."""
    drm_root: str = str(DRM_ROOT)
    """The DRM class folder Intel GPUs are read from (their cardN's device and hwmon files)."""
    fdinfo_root: str = "/proc"
    """The /proc each process's AMD and Intel GPU use is read from (PID/fd, PID/fdinfo)."""
    create: bool = True
    """Create the streams and buckets when missing (`--no-create`: never)."""
    replicas: Annotated[int, msgspec.Meta(ge=1, le=5)] = 1
    """Replicas of the streams and buckets the worker creates (3 on a cluster)."""
    storage: Literal["file", "memory"] = "file"
    """Storage of the streams and buckets the worker creates."""
    takeover: bool = False
    """Take the node's lease from a live worker that holds it (which then stops)."""
    health_file: str | None = None
    """A file the process writes its own health to, for `placewatch health --heartbeat`:
    `run` whether it ticks, `watch` and `alerts` whether their connection's PINGs are
    answered. None: no file."""
    metrics_listen: str | None = None
    """Where `run` serves its node's Prometheus metrics (`:9400`, `127.0.0.1:9400`); None:
    not served."""
    advertise_host: (
        Annotated[str, msgspec.Meta(min_length=1, max_length=253, pattern=HOST_PATTERN)] | None
    ) = None
    """The host (a name or an address) a shard bound to every address (`0.0.0.0`, `::`) is
    published at, for gateways on other nodes. None: the address the node's default route
    leaves from (worker/shards/served.py)."""


class ConfigError(Exception):
    """Bad configuration: the message names the input and what was expected."""


FIELDS: tuple[str, ...] = Settings.__struct_fields__
SECRETS = frozenset({"password", "token"})
"""Settings never printed: not in a log line, an error or `placewatch doctor`'s output."""


def env_name(field: str) -> str:
    return ENV_PREFIX + field.upper()


def load(
    flags: Mapping[str, Any],
    environ: Mapping[str, str] | None = None,
    config_path: str | None = None,
) -> Settings:
    """Settings from the flags given (None means not given), the environment and the file."""
    environ = os.environ if environ is None else environ
    path = config_path or environ.get(ENV_CONFIG)
    merged: dict[str, Any] = {}
    if path:
        merged |= _check(_read_file(path), f"config file {path}", strict=True)
    merged |= _check(_read_env(environ), "environment", strict=False)
    merged |= _check({k: v for k, v in flags.items() if v is not None}, "flag", strict=False)
    return msgspec.convert(merged, Settings, strict=False)


def _read_file(path: str) -> dict[str, Any]:
    import tomllib  # noqa: PLC0415 - only a node given a config file pays for it

    if not os.path.lexists(path):
        raise ConfigError(f"config file {path} does not exist; check --config or {ENV_CONFIG}")
    try:
        return tomllib.loads(read_text(path, MAX_CONFIG_BYTES))
    except UnusableFile as exc:
        raise ConfigError(f"config file {path} {exc}; check --config or {ENV_CONFIG}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc


def _read_env(environ: Mapping[str, str]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for name, value in environ.items():
        if not name.startswith(ENV_PREFIX) or name == ENV_CONFIG:
            continue
        if name.startswith(COMMAND_ENV_PREFIXES):
            continue
        field = name[len(ENV_PREFIX) :].lower()
        if field not in FIELDS:
            raise ConfigError(
                f"environment variable {name} is not a placewatch setting; "
                f"known: {', '.join(env_name(f) for f in FIELDS)}, {ENV_CONFIG}"
            )
        found[field] = value
    return found


def _check(layer: dict[str, Any], where: str, *, strict: bool) -> dict[str, Any]:
    """`layer` with its values normalised, or a ConfigError naming the bad key."""
    layer = dict(layer)
    for key in LISTS:
        if isinstance(layer.get(key), str):
            layer[key] = split_list(layer[key])
    try:
        msgspec.convert(layer, Settings, strict=strict)
    except msgspec.ValidationError as exc:
        raise ConfigError(_explain(str(exc), where)) from None
    node = layer.get("node")
    if isinstance(node, str) and not 0 < len(node.encode()) <= MAX_NAME_BYTES:
        raise ConfigError(_explain(f"is {len(node.encode())} bytes of UTF-8 - at `$.node`", where))
    servers = layer.get("nats")
    if isinstance(servers, list):
        problem = servers_problem(servers)
        if problem is not None:
            raise ConfigError(_explain(f"{problem} - at `$.nats`", where))
    listen = layer.get("metrics_listen")
    if isinstance(listen, str):
        try:
            listen_argument(listen)
        except ArgumentTypeError as exc:
            raise ConfigError(_explain(f"{exc} - at `$.metrics_listen`", where)) from None
    prefix = layer.get("prefix")
    if isinstance(prefix, str):
        try:
            stem(prefix)
        except ValueError as exc:
            raise ConfigError(_explain(f"{exc} - at `$.prefix`", where)) from None
    return layer


SCHEMES = ("nats", "tls", "ws", "wss")
"""The URL schemes nats-py connects with."""


def servers_problem(servers: list[object]) -> str | None:
    """What is wrong with a list of server URLs, or None: each is `HOST:PORT` or
    `SCHEME://[USER[:PASSWORD]@]HOST[:PORT]`, the port a number from 1 to 65535."""
    if not servers:
        return (
            "names no server; give nats://HOST:PORT (several comma-separated), or leave it "
            "out for the embedded server (run) or nats://127.0.0.1:4222"
        )
    for url in servers:
        if not isinstance(url, str):
            return f"{url!r} is not a URL; give nats://HOST:PORT"
        parts = urlsplit(url if "://" in url else f"nats://{url}")
        try:
            port = parts.port
        except ValueError:
            port = -1
        said = redact(url)
        if parts.scheme not in SCHEMES:
            return f"{said!r} is not a NATS URL: give nats://HOST:PORT ({', '.join(SCHEMES)})"
        if not parts.hostname:
            return f"{said!r} names no host: give nats://HOST:PORT"
        if port is not None and not 0 < port <= 65535:
            return f"{said!r} has no port from 1 to 65535: give nats://HOST:PORT"
    return None


def split_list(value: str) -> list[str]:
    """Comma-separated values (server URLs, the form NATS tools take), as a list."""
    return [item.strip() for item in value.split(",") if item.strip()]


def _choices(key: str) -> tuple[str, ...]:
    hint = get_type_hints(Settings).get(key)
    if get_origin(hint) is list:
        (hint,) = get_args(hint)
    return tuple(str(c) for c in get_args(hint)) if get_origin(hint) is Literal else ()


_UNKNOWN = re.compile(r"Object contains unknown field `(?P<key>[^`]+)`")
_AT = re.compile(r"^(?P<what>.*?)(?: - at `\$\.(?P<key>[^`\[]+)[^`]*`)?$")


_WANTED = {
    "node": f"give this node a name of 1 to {MAX_NAME_BYTES} bytes",
    "interval": f"give a number of seconds from 0.1 to {MAX_INTERVAL_S:g}",
    "probe_timeout": f"give a number of seconds above 0, at most {DAY_S:g}",
    "grace": f"give a number of seconds from 0 to {DAY_S:g}",
}
"""What a setting wants, said after what was wrong with its value."""


def _explain(message: str, where: str) -> str:
    unknown = _UNKNOWN.search(message)
    if unknown:
        key = unknown["key"]
        return f"{where}: unknown key {key!r}; known keys: {', '.join(FIELDS)}"
    match = _AT.match(message)
    key = match["key"] if match and match["key"] else None
    what = (match["what"] if match else message).strip()
    if key is None:
        return f"{where}: {what}"
    choices = _choices(key)
    if key in _WANTED:
        what += f"; {_WANTED[key]}"
    if choices and what.startswith("Invalid enum value"):
        what += f"; expected one of {', '.join(choices)}"
    elif choices and what.startswith("Expected `array` of length >= 1"):
        what = f"names none; name at least one of {', '.join(choices)}"
    if where == "environment":
        return f"environment variable {env_name(key)}: {what}"
    if where == "flag":
        return f"--{key.replace('_', '-')}: {what}"
    return f"{where}: key {key!r}: {what}"
