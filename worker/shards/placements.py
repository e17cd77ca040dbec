"""Where placements come from: a shards file, the placements bucket, discovery.

All three are live at once. A placement names its shard (`id`) and finds its
process by `pid` or by `match`, a regular expression searched in the
process's command line. One bad entry or value is reported and skipped;
it never stops the worker or drops the others. The placements bucket is
read through `PlacementFeed`: the bucket itself (bus/bucket.py) speaks NATS,
which the shard pass and `placewatch sample` do without.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

import msgspec

from placewatch.schemas import PlacementSpec, SourceStatus
from placewatch.schemas.control import (
    MAX_FLOOR_BYTES,
    MAX_PATH_CHARS,
    MAX_PATTERN_CHARS,
    MAX_PLACED_GPUS,
    MAX_URL_CHARS,
)
from placewatch.schemas.messages import PID_MAX
from placewatch.schemas.printable import printable
from placewatch.schemas.subjects import MAX_NAME_BYTES

from ..engines import Server
from ..engines.evidence.source import LogSource
from ..files import UnusableFile, read_text

if TYPE_CHECKING:
    import regex

log = logging.getLogger(__name__)

Origin = Literal["file", "kv", "discovered"]

MAX_SHARDS = 256
"""The most shards one node watches: placed (the shards file first, then the bucket's keys in
order) and discovered. A node's telemetry carries a brief of each, and every one costs the tick
its share; past this many, the rest are refused and `sources` says so."""
MAX_SHARDS_FILE_BYTES = 4 << 20
"""The largest shards file read: MAX_SHARDS entries of the longest values, comments
besides."""
MATCH_LINE_S = 0.02
"""The most the search of a `match` in one command line may take (a usual one takes a few
microseconds). Anyone on the node may start a process whose command line makes a pattern
backtrack (`.*--port.*8081` in 120 KB of `--port`); its search stops here."""
MATCH_BUDGET_S = 0.1
"""The most every shard's `match` searches may take together in one tick."""
SPEC_KEYS = PlacementSpec.__struct_fields__


class PlacementFeed(Protocol):
    """Placements a control plane keeps by key, current whenever the tick reads them (on the
    event loop, as the task that follows them writes them)."""

    @property
    def specs(self) -> Mapping[str, PlacementSpec]:
        """Each key's placement, for the keys whose value is a valid one."""
        ...

    @property
    def problems(self) -> Mapping[str, str]:
        """Each key whose value is not a valid placement -> what is wrong with it."""
        ...


@dataclass(frozen=True)
class Placement:
    spec: PlacementSpec
    origin: Origin
    gpus_unknown: str | None = None
    """Set when the intended GPUs cannot be told (an untranslatable device mask)."""
    cpu_on_purpose: str | None = None
    """What says the shard was meant for the CPU ("-ngl 0"), for the reason text."""
    gpu_request: str | None = None
    """What asks for GPUs ("-ngl 99"), for a discovered engine on a node where no GPU tool
    answered: `gpus_unknown` says so, and only the engine's own word can still tell."""
    log_prefix: str | None = None
    """Only the lines of `spec.log_path` that start with this are its own (a router's child)."""
    server: Server | None = None
    """The router that started it, where that says what its models are (Ollama's server)."""
    model: str | None = None
    """The name that router knows its model by, which its word on it is keyed by."""
    log: LogSource | None = None
    """How discovery found `spec.log_path` opened (engines/evidence/source.py); None: it is
    a placed path, opened by its own rules."""
    unlogged: str | None = None
    """Why a discovered engine has no log (its output goes to a pipe), and how to give it one."""


def check_spec(raw: object, where: str) -> PlacementSpec:
    """A placement from a person- or control-plane-written value; ValueError says what is wrong."""
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: expected a table of placement keys, got {type(raw).__name__}")
    unknown = sorted(set(raw) - set(SPEC_KEYS))
    if unknown:
        raise ValueError(f"{where}: unknown key {unknown[0]!r}; known keys: {', '.join(SPEC_KEYS)}")
    try:
        spec = msgspec.convert(raw, PlacementSpec)
    except msgspec.ValidationError as exc:
        raise ValueError(f"{where}: {_explain(str(exc))}") from None
    if len(spec.id.encode()) > MAX_NAME_BYTES:
        raise ValueError(f"{where}: `id` is {len(spec.id.encode())} bytes; {_WANTED['id']}")
    repeated = sorted({i for i in spec.gpus if spec.gpus.count(i) > 1})
    if repeated:
        raise ValueError(f"{where} ({spec.id}): `gpus` names GPU {repeated[0]} twice")
    if spec.pid is None and not spec.match:
        raise ValueError(f"{where} ({spec.id}): give `pid` or `match` to find its process")
    if spec.match:
        import regex  # noqa: PLC0415 - only a placement with a `match` pays for it

        try:
            compiled_match(spec.match)
        except regex.error as exc:
            raise ValueError(
                f"{where} ({spec.id}): `match` is not a valid pattern: {exc}"
            ) from None
    problem = _url_problem(spec.health_url) if spec.health_url else None
    if problem:
        raise ValueError(f"{where} ({spec.id}): `health_url` {problem}; {_WANTED['health_url']}")
    return spec


@functools.lru_cache(maxsize=2 * MAX_SHARDS)
def compiled_match(pattern: str) -> regex.Pattern[str]:
    """A placement's `match`, compiled as liveness.py searches with it; raises regex.error
    where it is not a pattern.

    The first search of a line at least as long as the pattern builds the tables of its
    literal parts, past any timeout (155 ms for 1,024 characters of literal): it is done
    here, once for each pattern, rather than in a tick's budget for the searches."""
    import regex  # noqa: PLC0415 - only a placement with a `match` pays for it

    compiled = regex.compile(pattern)
    with contextlib.suppress(TimeoutError):
        compiled.search(" " * len(pattern), timeout=MATCH_LINE_S)
    return compiled


def _url_problem(url: str) -> str | None:
    """What keeps `url` from being asked, or None; never the URL itself, which may hold a
    password or a token."""
    from urllib.parse import urlsplit  # noqa: PLC0415 - only a placement with a URL pays

    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not one
    except ValueError:
        return "has a port that is not a number from 0 to 65535, or a host that is not one"
    if not parts.hostname:
        return "names no host"
    return None


_WANTED = {
    "id": f"give the shard a name of 1 to {MAX_NAME_BYTES} bytes",
    "pid": f"give the process id of a running process (1 to {PID_MAX}), or `match`",
    "gpus": f"give the physical indices of at most {MAX_PLACED_GPUS} GPUs (0 to 1023), each once",
    "match": f"give a pattern of at most {MAX_PATTERN_CHARS} characters",
    "health_url": f"give an http:// or https:// URL of at most {MAX_URL_CHARS} characters",
    "log_path": f"give a path of at most {MAX_PATH_CHARS} characters",
    "min_gpu_bytes": f"give a number of bytes from 0 to {MAX_FLOOR_BYTES} (1 PiB)",
    "engine": "give an engine name of at most 64 characters (llama.cpp, ollama, vllm)",
    "endpoint": "give `host` and `port` (1 to 65535), `scheme` http or https and a "
    "`path_prefix` such as /api, as a gateway reaches the shard",
}
"""What each key wants, said after what was wrong with its value."""


def _explain(message: str) -> str:
    found = re.match(r"^(?P<what>.*?) - at `\$\.(?P<key>[^`\[]+)[^`]*`$", message)
    if found:
        key = found["key"]
        wanted = _WANTED.get(key.split(".")[0])
        wanted = f"; {wanted}" if wanted else ""
        return f"key {key!r}: {found['what']}{wanted}"
    if message.startswith("Object missing required field"):
        return message.replace("Object missing required field", "missing key")
    return message


class ShardsFile:
    """A TOML file of `[[shard]]` placements, re-read whenever it changes."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.specs: list[PlacementSpec] = []
        self.problems: list[str] = []
        self.refused: dict[str, str] = {}
        """Each shard whose entry was refused for its values, by the id it gives -> why."""
        self._seen: tuple[int, int, int] | None = None
        self._good = False  # read as a whole at least once

    def load(self) -> bool:
        """Re-read the file if it changed since the last call; True when it was read.

        A file that cannot be read or parsed as a whole (a syntax error halfway through an
        edit, a moment without the file while a tool replaces it) leaves its last good
        placements in force, so that their shards do not go `gone` and their fallbacks
        resolve for nothing; the problem shows in `sources` until the file is good again.
        """
        try:
            st = os.stat(self.path)
        except OSError as exc:
            if self._seen == (0, 0, 0):
                return False
            self._seen = (0, 0, 0)
            self._unusable(
                f"shards file {self.path} cannot be read ({exc.strerror}); check the path given "
                "with --shards"
            )
            return True
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        if stamp == self._seen:
            return False
        self._seen = stamp
        try:
            self.specs, self.problems, self.refused = _read(self.path)
        except UnusableShardsFile as exc:
            self._unusable(str(exc))
            return True
        self._good = True
        for problem in self.problems:
            log.warning("%s", printable(problem))
        log.info("shards file %s: %d placements", self.path, len(self.specs))
        return True

    def _unusable(self, problem: str) -> None:
        if self._good:
            problem += f"; its last good placements ({len(self.specs)}) stay in force"
        self.problems = [problem]
        log.warning("%s", printable(problem))


class UnusableShardsFile(ValueError):
    """A shards file that cannot be read or parsed as a whole; the message says why."""


def parse_shards_file(path: Path) -> tuple[list[PlacementSpec], list[str]]:
    """The placements of a shards file and what is wrong with the rest; never raises."""
    try:
        return read_shards_file(path)
    except UnusableShardsFile as exc:
        return [], [str(exc)]


def read_shards_file(path: Path) -> tuple[list[PlacementSpec], list[str]]:
    """The placements of a shards file and what is wrong with entries of it; raises
    UnusableShardsFile when the file as a whole cannot be used."""
    specs, problems, _ = _read(path)
    return specs, problems


def _read(path: Path) -> tuple[list[PlacementSpec], list[str], dict[str, str]]:
    """read_shards_file, and each entry refused for its values that gives a shard id no
    valid entry gives -> why (its shard's status says so: refused.py)."""
    import tomllib  # noqa: PLC0415 - only a node given a shards file pays for it

    try:
        doc: dict[str, Any] = tomllib.loads(read_text(path, MAX_SHARDS_FILE_BYTES))
    except UnusableFile as exc:
        raise UnusableShardsFile(f"shards file {path} {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UnusableShardsFile(
            f"shards file {path} is not valid TOML ({exc}); no placements read from it"
        ) from None
    problems = [
        f"shards file {path}: unknown top-level key {key!r}; placements go in [[shard]] tables"
        for key in doc
        if key != "shard"
    ]
    entries = doc.get("shard", [])
    if not isinstance(entries, list):
        raise UnusableShardsFile(
            f"shards file {path}: `shard` must be an array of tables ([[shard]])"
        )
    specs: list[PlacementSpec] = []
    ids: set[str] = set()
    refused: dict[str, str] = {}
    for number, raw in enumerate(entries, 1):
        try:
            spec = check_spec(raw, f"shards file {path}, shard #{number}")
        except ValueError as exc:
            problems.append(f"{exc}; that shard is skipped")
            if (shard := _id_given(raw)) is not None:
                refused.setdefault(shard, problems[-1])
            continue
        if spec.id in ids:
            problems.append(
                f"shards file {path}, shard #{number}: id {spec.id!r} is used twice; skipped"
            )
            continue
        ids.add(spec.id)
        specs.append(spec)
    return specs, problems, {s: why for s, why in refused.items() if s not in ids}


def _id_given(raw: object) -> str | None:
    """The shard id an entry gives, where it gives one a shard can have."""
    shard = raw.get("id") if isinstance(raw, dict) else None
    if isinstance(shard, str) and 0 < len(shard.encode()) <= MAX_NAME_BYTES:
        return shard
    return None


def placed(
    shards_file: ShardsFile | None, bucket: PlacementFeed | None
) -> tuple[list[Placement], list[SourceStatus]]:
    """The placements of the shards file and of the placements bucket, the file's first (it
    wins a shard both place), and what is wrong with either."""
    placements: list[Placement] = []
    problems: list[SourceStatus] = []
    if shards_file is not None:
        shards_file.load()
        placements += [Placement(spec, "file") for spec in shards_file.specs]
        problems += [
            SourceStatus(name="shards-file", ok=False, error=p) for p in shards_file.problems
        ]
    if bucket is not None:
        ids = {p.spec.id for p in placements}
        for key, spec in sorted(bucket.specs.items()):
            if spec.id in ids:
                problems.append(
                    SourceStatus(
                        name="placements-kv",
                        ok=False,
                        error=f"KV key {key} places {spec.id!r}, which the shards file "
                        "places too; the file's placement is used",
                    )
                )
                continue
            placements.append(Placement(spec, "kv"))
        problems += [
            SourceStatus(name="placements-kv", ok=False, error=p) for p in bucket.problems.values()
        ]
    return placements, problems
