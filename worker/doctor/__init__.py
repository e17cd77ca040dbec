"""`placewatch doctor`: can this node's worker do its job? One line per check.

Each line says `ok`, `fail` or `skip`, what was found and, for a failure, what
to do next. The checks run in the order a node is set up: the GPU tools, access
to the engines' processes, the NATS server (reachable, credentials, JetStream,
streams and buckets, permission to publish), then each llama.cpp build's own
list of the GPUs it can use.

No secret is printed: a server URL goes through bus.redact, a credentials
setting is named and never shown, and every line is scrubbed of the password,
the token and the seed and JWT lines of the seed and credentials files.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import shutil
import socket
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

import anyio
import anyio.to_thread
import nats
import nats.errors
import nats.js.errors
import psutil
from nats.aio.client import Client
from nats.js import JetStreamContext

from placewatch.consumer.connection import redact
from placewatch.schemas import GpuSample, encode, subjects
from placewatch.schemas import streams as contract

from ..bus.options import connect_options
from ..config import GPU_SOURCES, ConfigError, Settings
from ..gpu.registry import chains_for
from ..pipeline import open_pipeline
from ..probe import ProbeRunner
from ..shards.discover import LLAMA_CPP, Discovered, discover
from ..shards.engine_log import read_text

Outcome = Literal["ok", "fail", "skip"]

NET_TIMEOUT_S = 2.0
"""Limit for one TCP connect, the NATS handshake and each JetStream request."""
PERMISSION_WAIT_S = 0.5
"""How long a refused publish has to come back as a Permissions Violation after the flush."""
ENGINE_TIMEOUT_S = 30.0
"""Default limit for one `--list-devices`: CUDA initialises every GPU first (seconds on 8)."""

HOST_PID_NAMESPACE = (
    "run the worker with the host's PID namespace (docker run --pid=host / pid: host)"
)
AS_ENGINE_USER = "run the worker as root or as the engines' user"
ENGINE_ENV = (
    "LD_LIBRARY_PATH",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
)
"""What a running engine's environment lends its pre-flight: where its libraries are found and
which GPUs it may see, so the build is asked as the shard runs it."""

_EXEC_MERGED = (
    "import os,sys\n"
    "n=int(sys.argv[1]);env=dict(os.environ)\n"
    "env.update(a.split('=',1) for a in sys.argv[2:2+n])\n"
    "os.dup2(1,2)\n"
    "try: os.execve(sys.argv[2+n],sys.argv[2+n:],env)\n"
    "except OSError as e: print('cannot run',sys.argv[2+n]+':',e.strerror); sys.exit(127)\n"
)
"""Starts an engine with its stderr on stdout (and the environment given): llama.cpp prints
`Available devices:` on stdout but `load_backend: failed to load ...` on stderr."""

_LIST_ENTRY = re.compile(r"^(?:-\s+)?(\w+):\s+(.*?)(?:\s+\(\d+ MiB, \d+ MiB free\))?$")
_BACKEND_LIB = re.compile(r"(\S*ggml-(?:cuda|hip|rocm|vulkan|sycl|musa)\S*?\.(?:so|dll))")
_NO_FLAG = re.compile(r"(?:invalid|unknown) argument: --list-devices")
_AUTH = re.compile(r"authorization violation|authentication (?:expired|revoked|timeout)", re.I)

GPU_TOOLS = "GPU tools"
PROCESSES = "shard processes"
REACHABLE = "server reachable"
AUTHENTICATED = "server authenticated"
JETSTREAM = "JetStream"
STREAMS = "streams and buckets"
PUBLISH = "publish permission"
ENGINE = "engine pre-flight"


@dataclass(frozen=True)
class Check:
    """One line of the report."""

    name: str
    outcome: Outcome
    found: str
    todo: str | None = None
    """What to do next; said for every failure."""

    def line(self) -> str:
        text = f"{self.outcome:<4}  {self.name}: {self.found}"
        return f"{text}; next: {self.todo}" if self.todo else text


class Report:
    """Checks as they are made, each printed at once with every secret taken out."""

    def __init__(self, write: Callable[[str], None], secrets: Iterable[str] = ()) -> None:
        self.checks: list[Check] = []
        self._write = write
        # Longest first, so a secret that holds another is replaced whole; a secret of 3
        # characters or fewer is not hunted for, as every such run of text would go with it.
        self._secrets = sorted({s for s in secrets if len(s) >= 4}, key=len, reverse=True)

    def add(self, check: Check) -> None:
        self.checks.append(check)
        self._write(self.scrub(check.line()))

    def ok(self, name: str, found: str) -> None:
        self.add(Check(name, "ok", found))

    def fail(self, name: str, found: str, todo: str) -> None:
        self.add(Check(name, "fail", found, todo))

    def skip(self, name: str, found: str, todo: str | None = None) -> None:
        self.add(Check(name, "skip", found, todo))

    def scrub(self, text: str) -> str:
        text = redact(text)
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    @property
    def failed(self) -> bool:
        return any(c.outcome == "fail" for c in self.checks)


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
        type=float,
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
    found = await anyio.to_thread.run_sync(discover, gpus)
    await anyio.to_thread.run_sync(check_processes, gpus, found, report)
    await check_server(settings, report)
    await check_engines(found, engines, len(gpus), timeout_s, report)


def secrets_of(settings: Settings) -> list[str]:
    """Every secret the settings hold or point to, to keep out of the output."""
    found = [s for s in (settings.password, settings.token) if s]
    found += [p for p in (urlsplit(u).password for u in settings.nats) if p]
    for path in (settings.nkey_seed, settings.creds):
        try:
            text = Path(path).read_text(errors="replace") if path else ""
        except OSError:
            continue
        # The seed and JWT lines; not the armour or the notice between them.
        words = (line.strip() for line in text.splitlines())
        found += [w for w in words if len(w) >= 16 and " " not in w and w[:3] not in ("---", "***")]
    return found


def _count(n: int, noun: str, plural: str = "s") -> str:
    return f"{n} {noun}{'' if n == 1 else plural}"


# --- GPU tools ----------------------------------------------------------------------------

_TOOL_ADVICE = {
    "nvidia": "check that the NVIDIA driver is loaded (lsmod | grep nvidia; "
    "dmesg | grep -i -e NVRM -e Xid)",
    "amd": "check that amdgpu is loaded and that this user may open /dev/kfd and /dev/dri "
    "(the render and video groups)",
}
_STUCK = "a GPU is stuck in the driver: check dmesg for Xid errors; the GPU may need a reset"
_INSTALL = (
    "install the NVIDIA driver (NVML, and nvidia-smi on the worker's PATH), or ROCm's "
    "rocm-smi or amd-smi on the worker's PATH"
)


async def check_gpu_tools(settings: Settings, report: Report) -> list[GpuSample]:
    """One sample through each source on the node; the GPUs of each vendor's first answer."""
    gpus: list[GpuSample] = []
    present = False
    for chain in chains_for(settings.probe_timeout, settings.kfd_root, settings.gpu_sources):
        vendor_gpus: list[GpuSample] = []
        for source in chain.candidates:
            name = f"GPU tool {source.name}"
            why = source.unavailable()
            if why is not None:
                report.skip(name, why)
                continue
            present = True
            found, status = await source.sample()
            took = f"{status.latency_ms or 0:.0f} ms"
            vendor_gpus = vendor_gpus or found
            if status.ok:
                report.ok(name, f"{_describe(found)}, in {took}")
                continue
            but = f"{_describe(found)}, but " if found else ""
            todo = _STUCK if status.degraded else _TOOL_ADVICE[chain.vendor]
            report.fail(name, f"{but}{status.error} (after {took})", todo)
        gpus += vendor_gpus
    if not present:
        names = ["NVML" if name == "nvml" else name for name in settings.gpu_sources]
        listed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
        todo = _INSTALL
        if set(settings.gpu_sources) != set(GPU_SOURCES):
            todo += f"; or widen gpu_sources (now {','.join(settings.gpu_sources)})"
        report.fail(GPU_TOOLS, f"none found: no {listed}", todo)
    return gpus


def _describe(gpus: Sequence[GpuSample]) -> str:
    if not gpus:
        return "no GPUs"
    names = Counter(g.name or f"{g.vendor} GPU" for g in gpus)
    models = ", ".join(f"{n}x {name}" if n > 1 else name for name, n in names.items())
    processes = sum(len(g.processes) for g in gpus)
    return f"{_count(len(gpus), 'GPU')} ({models}), {_count(processes, 'process', 'es')}"


# --- shard processes ----------------------------------------------------------------------


def check_processes(
    gpus: Sequence[GpuSample],
    found: Sequence[Discovered],
    report: Report,
    proc: Path = Path("/proc"),
) -> None:
    """Whether this worker sees the GPU processes in its /proc and may read the engines' entries.

    The driver lists host PIDs: a worker in a container without the host's PID
    namespace finds none of them in its /proc, and would see every shard hold
    nothing. Discovery reads an engine's command line and environment (its
    device mask); a GPU process that is no engine needs only its command line
    (a placement's `match`), so a root-owned X server does not count against a
    worker that is not root.
    """
    listed: dict[int, str] = {}
    for g in gpus:
        for p in g.processes:
            listed.setdefault(p.pid, f"{g.vendor} GPU {g.index}")
    engines = {d.spec.pid: d.spec.id for d in found if d.spec.pid is not None}
    if not listed and not engines:
        report.skip(PROCESSES, "no engine process found and no GPU process listed by the tools")
        return
    hidden = sorted(pid for pid in listed if not (proc / str(pid)).exists())
    denied: dict[int, str] = {}
    for pid in sorted(set(listed).union(engines).difference(hidden)):
        entries = ("cmdline", "environ") if pid in engines else ("cmdline",)
        entry = next((e for e in entries if _denied(proc / str(pid) / e)), None)
        if entry is not None:
            denied[pid] = f"{pid} {engines.get(pid) or 'on ' + listed[pid]}: {entry}"
    if hidden:
        _hidden(report, hidden, listed, proc)
    if denied:
        report.fail(
            PROCESSES,
            f"may not read /proc/PID of {_count(len(denied), 'process', 'es')} "
            f"({_some(denied.values())}): without them a shard's device mask "
            "(CUDA_VISIBLE_DEVICES) and command line are unknown",
            AS_ENGINE_USER,
        )
    if not hidden and not denied:
        named = f" ({_some(sorted(engines.values()))})" if engines else ""
        report.ok(
            PROCESSES,
            f"{_count(len(listed), 'GPU process', 'es')} in this worker's /proc, "
            f"{_count(len(engines), 'engine')}{named} readable (cmdline, environ)",
        )


def _denied(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            f.read(1)
    except PermissionError:
        return True
    except OSError:
        return False  # it exited since it was listed
    return False


def _some(items: Iterable[str], most: int = 5) -> str:
    shown = list(items)
    return ", ".join(shown[:most]) + (", ..." if len(shown) > most else "")


def _hidden(report: Report, hidden: list[int], listed: dict[int, str], proc: Path) -> None:
    what = (
        f"the GPU tools list {_count(len(hidden), 'process', 'es')} not in this worker's /proc "
        f"({_some(f'{pid} on {listed[pid]}' for pid in hidden)})"
    )
    hidepid = _hidepid(proc)
    if hidepid is not None and os.geteuid() != 0:
        report.fail(
            PROCESSES,
            f"{what}: /proc is mounted with {hidepid}, which hides other users' processes",
            AS_ENGINE_USER,
        )
    elif len(hidden) < len(listed):
        report.fail(
            PROCESSES,
            f"{what}, while the others are there: exited since, or in another PID namespace",
            f"run `placewatch doctor` again; if they stay, {HOST_PID_NAMESPACE}",
        )
    else:
        report.fail(
            PROCESSES,
            f"{what}: the worker runs in a container without the host's PID namespace and "
            "sees no engine PIDs",
            HOST_PID_NAMESPACE,
        )


def _hidepid(proc: Path) -> str | None:
    """The hidepid option /proc is mounted with, when it hides anything."""
    try:
        mounts = Path("/proc/self/mounts").read_text()
    except OSError:
        return None
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) > 3 and fields[1] == str(proc) and fields[2] == "proc":
            for option in fields[3].split(","):
                if option.startswith("hidepid=") and option not in ("hidepid=0", "hidepid=off"):
                    return option
    return None


# --- the server ---------------------------------------------------------------------------

LEAST_PRIVILEGE = "docs/operations.md (Least privilege) lists what a node's credentials need"


@dataclass
class _Errors:
    """What nats-py hands its error callback: a refused message is reported only this way."""

    seen: list[Exception] = field(default_factory=list)

    async def record(self, exc: Exception) -> None:
        self.seen.append(exc)

    def refused(self, since: int) -> str | None:
        """The server's first Permissions Violation after the `since`-th error."""
        for exc in self.seen[since:]:
            said = str(exc).strip()
            if "permissions violation" in said.lower():
                return said.removeprefix("nats: ")
        return None


async def check_server(settings: Settings, report: Report) -> None:
    embedded = not settings.nats
    urls = settings.nats or [f"nats://127.0.0.1:{settings.embedded_port or subjects.DEFAULT_PORT}"]
    reachable = [url for url in urls if await _reachable(url, embedded, report)]
    later = (AUTHENTICATED, JETSTREAM, STREAMS, PUBLISH)
    if not reachable:
        for name in later:
            report.skip(name, "no server reachable")
        return
    errors = _Errors()
    nc = await _authenticate(settings, reachable, errors, report)
    if nc is None:
        for name in later[1:]:
            report.skip(name, "not connected")
        return
    try:
        bus = _Bus(nc, nc.jetstream(timeout=NET_TIMEOUT_S), errors, settings, report)
        if await bus.jetstream():
            await bus.streams()
            await bus.buckets()
        else:
            report.skip(STREAMS, "no JetStream")
        await bus.publish()
    finally:
        with anyio.move_on_after(NET_TIMEOUT_S, shield=True):
            await nc.close()


async def _reachable(url: str, embedded: bool, report: Report) -> bool:
    where = redact(url) + (" (none configured: the embedded default)" if embedded else "")
    try:
        parts = urlsplit(url if "://" in url else f"nats://{url}")
        host = parts.hostname or "127.0.0.1"
        port = parts.port or {"ws": 80, "wss": 443}.get(parts.scheme, 4222)
    except ValueError:
        report.fail(REACHABLE, f"{where} is not a valid URL", "fix --nats (or PLACEWATCH_NATS)")
        return False
    started = time.perf_counter()
    try:
        await anyio.to_thread.run_sync(_tcp_connect, host, port)
    except OSError as exc:
        timed_out = isinstance(exc, TimeoutError)
        why = f"no answer within {NET_TIMEOUT_S:g} s" if timed_out else exc.strerror or str(exc)
        if embedded:
            todo = (
                "nothing listens there: `placewatch run` starts its embedded server there; "
                "or give the server with --nats URL (or PLACEWATCH_NATS)"
            )
        elif isinstance(exc, socket.gaierror):
            todo = f"{host} does not resolve: check the URL in --nats (or PLACEWATCH_NATS)"
        else:
            todo = (
                f"check that nats-server runs on {host} port {port} and that this node may reach "
                "it (firewall, security group), or fix --nats (or PLACEWATCH_NATS)"
            )
        report.fail(REACHABLE, f"{where}: {why}", todo)
        return False
    report.ok(REACHABLE, f"{where}: TCP connect in {(time.perf_counter() - started) * 1000:.0f} ms")
    return True


def _tcp_connect(host: str, port: int) -> None:
    socket.create_connection((host, port), timeout=NET_TIMEOUT_S).close()


async def _authenticate(
    settings: Settings, servers: list[str], errors: _Errors, report: Report
) -> Client | None:
    """A connection that tries each server once: a doctor reports, it does not wait."""
    try:
        options = connect_options(settings)
    except ConfigError as exc:
        report.fail(AUTHENTICATED, str(exc), "fix the setting it names")
        return None
    limit = NET_TIMEOUT_S * (len(servers) + 2)
    problem: Exception | None = None
    with anyio.move_on_after(limit):
        try:
            nc = await nats.connect(
                servers=servers,
                name=f"placewatch-doctor {settings.node}",
                **options,
                inbox_prefix=subjects.inbox(settings.node),  # as the worker's replies
                allow_reconnect=False,
                max_reconnect_attempts=1,
                reconnect_time_wait=0.1,
                connect_timeout=NET_TIMEOUT_S,
                error_cb=errors.record,
            )
        except (nats.errors.Error, OSError, TimeoutError) as exc:
            problem = exc
        else:
            where = redact(nc.connected_url.geturl() if nc.connected_url else servers[0])
            report.ok(
                AUTHENTICATED,
                f"connected to {where} with {_method(settings)} (nats-server {_version(nc)})",
            )
            return nc
    said = str(problem or "").strip().removeprefix("nats: ").strip("'") or type(problem).__name__
    if isinstance(problem, nats.errors.AuthorizationError) or _AUTH.search(said):
        report.fail(AUTHENTICATED, f"the server refused the credentials ({said})", _fix(settings))
    elif problem is None:
        report.fail(
            AUTHENTICATED,
            f"no NATS handshake within {limit:g} s",
            "check that the port is a NATS client port (4222), not a cluster, monitoring or "
            "websocket one, and the TLS settings (tls_ca)",
        )
    else:
        report.fail(
            AUTHENTICATED,
            f"no NATS connection: {said}",
            "check the TLS settings (tls_ca, tls_cert, tls_key) and the server's log",
        )
    return None


def _version(nc: Client) -> str:
    try:
        v = nc.connected_server_version
        return f"{v.major}.{v.minor}.{v.patch}"
    except (ValueError, KeyError, TypeError):
        return "of unknown version"


def _method(settings: Settings) -> str:
    if settings.creds:
        return "a credentials file"
    if settings.nkey_seed:
        return "an NKey"
    if settings.user is not None:
        return f"user {settings.user}"
    return "a token" if settings.token is not None else "no credentials"


def _fix(settings: Settings) -> str:
    """Which credentials setting to check, by name, never by value."""
    named = []
    if settings.user is not None:
        named.append("user and password (PLACEWATCH_USER, PLACEWATCH_PASSWORD)")
    if settings.token is not None:
        named.append("token (PLACEWATCH_TOKEN)")
    if settings.nkey_seed:
        named.append(f"nkey_seed file {settings.nkey_seed}: the seed of a user the server knows")
    if settings.creds:
        named.append(f"creds file {settings.creds}: a user of the server's operator, not expired")
    if not named:
        return (
            "the server wants credentials: set user and password, token, nkey_seed or creds "
            "(docs/configuration.md)"
        )
    return "check the " + " and the ".join(named)


@dataclass
class _Bus:
    """The checks made over one connection."""

    nc: Client
    js: JetStreamContext
    errors: _Errors
    settings: Settings
    report: Report

    async def jetstream(self) -> bool:
        seen = len(self.errors.seen)
        try:
            info = await self.js.account_info()
        except (nats.js.errors.ServiceUnavailableError, nats.errors.NoRespondersError):
            self.report.fail(
                JETSTREAM,
                "the server has no JetStream for this account: compute statuses and fallback "
                "events would go out as core messages, kept nowhere",
                "enable JetStream (nats-server -js, or jetstream {} in its config, and for the "
                "account)",
            )
            return False
        except (nats.errors.Error, TimeoutError) as exc:
            self._unanswered(JETSTREAM, "$JS.API.INFO", exc, seen)
            return False
        domain = f" in domain {info.domain}" if info.domain else ""
        self.report.ok(
            JETSTREAM,
            f"available{domain}: {_count(info.streams, 'stream')}, "
            f"{_count(info.consumers, 'consumer')} in this account",
        )
        return True

    async def streams(self) -> None:
        """The two streams the worker publishes events and telemetry to."""
        settings = self.settings
        for stream in contract.STREAMS:
            name = f"stream {stream.name}"
            covers = stream.subjects(settings.prefix)
            seen = len(self.errors.seen)
            try:
                info = await self.js.stream_info(stream.name)
            except nats.js.errors.NotFoundError:
                self._missing(
                    name, stream.command(settings.prefix, settings.storage, settings.replicas)
                )
                continue
            except (nats.errors.Error, TimeoutError) as exc:
                self._unanswered(name, f"$JS.API.STREAM.INFO.{stream.name}", exc, seen)
                continue
            held = list(info.config.subjects or [])
            lacking = [s for s in covers if not any(_covered(s, h) for h in held)]
            if lacking:
                self.report.fail(
                    name,
                    f"takes {', '.join(held) or 'no subject'}, not {', '.join(lacking)}: this "
                    "worker's messages would not be stored",
                    f"add {', '.join(lacking)} to its subjects (nats stream edit {stream.name})",
                )
                continue
            self.report.ok(
                name,
                f"{_count(info.state.messages, 'message')}, subjects {', '.join(held)}, "
                f"R{info.config.num_replicas or 1}",
            )

    async def buckets(self) -> None:
        """The placements the worker reads and the compute statuses it keeps."""
        settings = self.settings
        for bucket in contract.BUCKETS:
            name = f"bucket {bucket.name}"
            seen = len(self.errors.seen)
            try:
                status = await (await self.js.key_value(bucket.name)).status()
            except nats.js.errors.NotFoundError:
                self._missing(name, bucket.command(settings.storage, settings.replicas))
                continue
            except (nats.errors.Error, TimeoutError) as exc:
                self._unanswered(name, f"$JS.API.STREAM.INFO.{bucket.stream}", exc, seen)
                continue
            self.report.ok(name, f"{_count(status.values, 'key')}, history {status.history}")

    def _missing(self, name: str, command: str) -> None:
        if self.settings.create:
            self.report.ok(name, "not there yet: the worker creates it when it starts")
        else:
            self.report.fail(
                name, "does not exist, and --no-create is set", f"an operator creates it: {command}"
            )

    def _unanswered(self, name: str, api: str, exc: BaseException, seen: int) -> None:
        refused = self.errors.refused(seen)
        said = refused or str(exc) or type(exc).__name__
        inbox = subjects.inbox(self.settings.node)
        self.report.fail(
            name,
            f"no answer to {api} ({said})",
            f"allow this user to publish on {api} and to subscribe to {inbox}.>; {LEAST_PRIVILEGE}",
        )

    async def publish(self) -> None:
        """Publish one real sample of this node on its telemetry subject; watch for a refusal.

        The server does not answer a core publish: one it refuses comes back as an
        asynchronous `-ERR 'Permissions Violation for Publish ...'`, before the PONG
        of the flush that follows, to the error callback.
        """
        settings = self.settings
        subject = subjects.telemetry(settings.node, settings.prefix)
        async with open_pipeline(settings) as pipeline:
            telemetry = (await pipeline.take()).telemetry
        payload, headers = encode(telemetry, settings.encoding)
        seen = len(self.errors.seen)
        try:
            await self.nc.publish(subject, payload, headers=headers)
            await self.nc.flush(timeout=round(NET_TIMEOUT_S))
            await anyio.sleep(PERMISSION_WAIT_S)
        except nats.errors.MaxPayloadError:
            self.report.fail(
                PUBLISH,
                f"a sample is {len(payload)} bytes, over the server's max_payload "
                f"({self.nc.max_payload})",
                "raise max_payload in the server's config",
            )
            return
        except (nats.errors.Error, TimeoutError) as exc:
            self.report.fail(
                PUBLISH,
                f"the publish did not go through ({exc or type(exc).__name__})",
                "check the server's log for this client (placewatch-doctor)",
            )
            return
        refused = self.errors.refused(seen)
        if refused is not None:
            self.report.fail(
                PUBLISH,
                f"the server refused a NodeTelemetry on {subject} ({refused})",
                f"allow this user to publish on {subject} and this node's other subjects; "
                f"{LEAST_PRIVILEGE}",
            )
            return
        self.report.ok(
            PUBLISH,
            f"a NodeTelemetry of {settings.node} ({_count(len(telemetry.gpus), 'GPU')}, "
            f"{_count(len(telemetry.shards), 'shard')}, {len(payload)} bytes) went out on "
            f"{subject}",
        )


def _covered(subject: str, pattern: str) -> bool:
    """Whether a stream taking `pattern` takes every subject that `subject` names."""
    want, have = subject.split("."), pattern.split(".")
    for i, part in enumerate(have):
        if part == ">":
            return i < len(want)
        if i >= len(want) or want[i] == ">" or part not in ("*", want[i]):
            return False
    return len(have) == len(want)


# --- engine pre-flight --------------------------------------------------------------------


@dataclass(frozen=True)
class Engine:
    """An engine binary to ask which GPUs it can use, and what of its environment to lend it."""

    path: str
    shards: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()


def engines_to_check(
    found: Sequence[Discovered], given: Sequence[str], report: Report
) -> list[Engine]:
    """The executables of the discovered llama.cpp shards, then every --engine PATH."""
    engines: dict[tuple[str, tuple[tuple[str, str], ...]], list[str]] = {}
    for d in found:
        if d.engine != LLAMA_CPP or d.spec.pid is None:
            continue
        try:
            process = psutil.Process(d.spec.pid)
            exe = process.exe()
        except psutil.AccessDenied:
            report.skip(
                ENGINE,
                f"{d.spec.id}: its executable cannot be read (/proc/{d.spec.pid}/exe)",
                f"{AS_ENGINE_USER}, or give it with --engine PATH",
            )
            continue
        except psutil.Error:
            continue  # it exited
        if not os.path.basename(exe).startswith("llama-"):
            continue  # llama-cpp-python: a Python interpreter has no --list-devices
        if not os.path.exists(exe):
            report.skip(
                ENGINE,
                f"{d.spec.id}: {exe} is not in this worker's filesystem (a container?)",
                f"run `{os.path.basename(exe)} --list-devices` where the engine runs",
            )
            continue
        engines.setdefault((exe, _engine_env(process)), []).append(d.spec.id)
    for path in given:
        resolved = os.path.abspath(path) if os.sep in path else shutil.which(path) or path
        engines.setdefault((resolved, ()), [])
    return [Engine(path, tuple(shards), env) for (path, env), shards in engines.items()]


def _engine_env(process: psutil.Process) -> tuple[tuple[str, str], ...]:
    try:
        environ = process.environ()
    except psutil.Error:
        return ()
    return tuple((k, environ[k]) for k in ENGINE_ENV if k in environ)


async def check_engines(
    found: Sequence[Discovered],
    given: Sequence[str],
    node_gpus: int,
    timeout_s: float,
    report: Report,
) -> None:
    engines = await anyio.to_thread.run_sync(engines_to_check, found, given, report)
    if not engines:
        report.skip(ENGINE, "no llama.cpp engine running and none given with --engine PATH")
    runner = ProbeRunner(timeout_s)
    for engine in engines:
        report.add(await preflight(engine, runner, node_gpus))


def _runnable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


async def preflight(engine: Engine, runner: ProbeRunner, node_gpus: int) -> Check:
    """`ENGINE --list-devices`, judged against the GPUs the node's tools see."""
    label = f"{os.path.basename(engine.path)} ({engine.path})"
    if engine.shards:
        label += f" of {', '.join(engine.shards)}"
    if not _runnable(engine.path):
        return Check(ENGINE, "fail", f"{label}: not found or not executable", "check the path")
    env = [f"{k}={v}" for k, v in engine.env]
    argv = [sys.executable, "-I", "-S", "-c", _EXEC_MERGED, str(len(env)), *env, engine.path]
    result = await runner.run([*argv, "--list-devices"])
    text = result.stdout
    error = (
        result.error.replace(result.tool, os.path.basename(engine.path), 1)
        if result.error
        else None
    )
    if _NO_FLAG.search(text):
        return Check(
            ENGINE,
            "skip",
            f"{label}: this build has no --list-devices (an older llama.cpp)",
            "read the GPU lines it prints at start (ggml_cuda_init, offloaded N/M layers)",
        )
    if error is not None and not text.strip():
        return Check(
            ENGINE,
            "fail",
            f"{label}: {error}",
            "check dmesg for Xid errors (a GPU stuck in the driver), or raise --timeout",
        )
    evidence = read_text(text)
    devices = ", ".join(_device(d, evidence.lines) for d in evidence.found_devices)
    if evidence.gpu_failed is not None:
        found = f"{label}: its GPU backend failed: {evidence.gpu_failed}"
        found += f" (it lists {devices})" if devices else ""
        if node_gpus == 0:
            return Check(ENGINE, "skip", f"{found}; the GPU tools see no GPU here")
        return Check(
            ENGINE, "fail", found, _backend_advice(evidence.gpu_failed, evidence.gpu_backend)
        )
    if not devices:
        if node_gpus == 0:
            return Check(ENGINE, "skip", f"{label}: lists no GPU device; the GPU tools see none")
        return Check(
            ENGINE,
            "fail",
            f"{label}: lists no GPU device, though the GPU tools see {_count(node_gpus, 'GPU')}"
            + (f" ({error})" if error else ""),
            "check that it was built for them (-DGGML_CUDA=ON, -DGGML_HIP=ON) and that its "
            "libggml-cuda.so (or libggml-hip.so) is beside it; run ldd on that library",
        )
    if error is not None:
        return Check(
            ENGINE,
            "fail",
            f"{label}: lists {devices}, then {error}",
            f"run {engine.path} --list-devices and read what it prints last",
        )
    return Check(ENGINE, "ok", f"{label}: {devices}")


def _device(device: str, lines: Sequence[str]) -> str:
    """A device with its model, from its `CUDA0: NVIDIA A100 (81050 MiB, 80536 MiB free)` line."""
    for line in lines:
        match = _LIST_ENTRY.match(line)
        if match is not None and match.group(1) == device and match.group(2):
            return f"{device} {match.group(2)}"
    return device


def _backend_advice(failed: str, backend: str | None) -> str:
    if backend == "ROCm":
        runtime = "the ROCm runtime (libamdhip64, libhipblas, librocblas) it was built for"
    else:
        runtime = (
            "the CUDA runtime (libcudart, libcublas) of the version it was built for, and a "
            "driver new enough for it (the CUDA Version nvidia-smi prints)"
        )
    library = _BACKEND_LIB.search(failed)
    if library is not None:
        return f"run ldd {library.group(1)} and install what it lists as not found; check {runtime}"
    return (
        f"check {runtime}, that the engine may open the GPU devices (/dev/nvidia*, /dev/kfd in a "
        "container), and run it with -lv 4"
    )
