"""Where placements come from: a shards file, the placements bucket, discovery.

All three are live at once. A placement names its shard (`id`) and finds its
process by `pid` or by `match`, a regular expression searched in the
process's command line. One bad entry or value is reported and skipped;
it never stops the worker or drops the others.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import msgspec

from placewatch.schemas import PlacementSpec

log = logging.getLogger(__name__)

Origin = Literal["file", "kv", "discovered"]
SPEC_KEYS = PlacementSpec.__struct_fields__


@dataclass(frozen=True)
class Placement:
    spec: PlacementSpec
    origin: Origin
    gpus_unknown: str | None = None
    """Set when the intended GPUs cannot be told (an untranslatable device mask)."""
    cpu_on_purpose: str | None = None
    """What says the shard was meant for the CPU ("-ngl 0"), for the reason text."""


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
    if not spec.id:
        raise ValueError(f"{where}: `id` is empty; give the shard a name")
    if spec.pid is None and not spec.match:
        raise ValueError(f"{where} ({spec.id}): give `pid` or `match` to find its process")
    if spec.match:
        try:
            re.compile(spec.match)
        except re.error as exc:
            raise ValueError(
                f"{where} ({spec.id}): `match` is not a valid pattern: {exc}"
            ) from None
    return spec


def _explain(message: str) -> str:
    found = re.match(r"^(?P<what>.*?) - at `\$\.(?P<key>[^`\[]+)[^`]*`$", message)
    if found:
        return f"key {found['key']!r}: {found['what']}"
    if message.startswith("Object missing required field"):
        return message.replace("Object missing required field", "missing key")
    return message


class ShardsFile:
    """A TOML file of `[[shard]]` placements, re-read whenever it changes."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.specs: list[PlacementSpec] = []
        self.problems: list[str] = []
        self._seen: tuple[int, int, int] | None = None

    def load(self) -> bool:
        """Re-read the file if it changed since the last call; True when it was read."""
        try:
            st = os.stat(self.path)
        except OSError as exc:
            if self._seen != (0, 0, 0):
                self.specs, self.problems = (
                    [],
                    [
                        f"shards file {self.path} cannot be read ({exc.strerror}); "
                        "check the path given with --shards"
                    ],
                )
                self._seen = (0, 0, 0)
                log.warning("%s", self.problems[0])
                return True
            return False
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        if stamp == self._seen:
            return False
        self._seen = stamp
        self.specs, self.problems = parse_shards_file(self.path)
        for problem in self.problems:
            log.warning("%s", problem)
        log.info("shards file %s: %d placements", self.path, len(self.specs))
        return True


def parse_shards_file(path: Path) -> tuple[list[PlacementSpec], list[str]]:
    """The placements of a shards file and what is wrong with the rest; never raises."""
    import tomllib  # noqa: PLC0415 - only a node given a shards file pays for it

    try:
        with open(path, "rb") as f:
            doc: dict[str, Any] = tomllib.load(f)
    except OSError as exc:
        return [], [f"shards file {path} cannot be read ({exc.strerror})"]
    except tomllib.TOMLDecodeError as exc:
        return [], [f"shards file {path} is not valid TOML ({exc}); no placements read from it"]
    problems = [
        f"shards file {path}: unknown top-level key {key!r}; placements go in [[shard]] tables"
        for key in doc
        if key != "shard"
    ]
    entries = doc.get("shard", [])
    if not isinstance(entries, list):
        return [], [
            *problems,
            f"shards file {path}: `shard` must be an array of tables ([[shard]])",
        ]
    specs: list[PlacementSpec] = []
    ids: set[str] = set()
    for number, raw in enumerate(entries, 1):
        try:
            spec = check_spec(raw, f"shards file {path}, shard #{number}")
        except ValueError as exc:
            problems.append(f"{exc}; that shard is skipped")
            continue
        if spec.id in ids:
            problems.append(
                f"shards file {path}, shard #{number}: id {spec.id!r} is used twice; skipped"
            )
            continue
        ids.add(spec.id)
        specs.append(spec)
    return specs, problems
