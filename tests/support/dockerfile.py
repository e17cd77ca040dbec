"""What a `docker build` of compose/Dockerfile sends and copies, worked out without Docker.

`.dockerignore` follows Docker's rules (moby/patternmatcher): each line a pattern relative
to the context's root, `*` and `?` within one path segment, `**` across any number of them,
`!` letting back in what an earlier line left out, the last line that matches a path
deciding, and a pattern that matches a folder deciding for everything under it.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Rule:
    pattern: re.Pattern[str]
    keep: bool
    literal: str
    """The pattern up to its first wildcard: where a `!` line may let files back in."""


def _regex(pattern: str) -> re.Pattern[str]:
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out))


def read_rules(text: str) -> list[Rule]:
    rules = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        keep = line.startswith("!")
        pattern = os.path.normpath(line.removeprefix("!").strip()).lstrip("/")
        literal = re.split(r"[*?\[]", pattern, maxsplit=1)[0]
        rules.append(Rule(_regex(pattern), keep, literal))
    return rules


def sent(relative: str, rules: list[Rule]) -> bool:
    """Whether the file (a path relative to the context) is in the build context."""
    parts = relative.split("/")
    prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    included = True
    for rule in rules:
        if any(rule.pattern.fullmatch(p) for p in prefixes):
            included = rule.keep
    return included


def context_files(root: Path, rules: list[Rule]) -> list[str]:
    """Every file of `root` that the build context holds, as relative paths."""
    found: list[str] = []
    for folder, dirs, files in os.walk(root):
        here = Path(folder).relative_to(root).as_posix()
        here = "" if here == "." else here + "/"
        # A folder left out whole, with no `!` line that could reach inside it, is not walked.
        dirs[:] = [
            d
            for d in dirs
            if d != ".git"
            and (
                sent(here + d, rules)
                or any(r.keep and r.literal.startswith(here + d + "/") for r in rules)
            )
        ]
        found += [here + f for f in files if sent(here + f, rules)]
    return sorted(found)


@dataclass(frozen=True)
class Copy:
    sources: list[str]
    dest: str


def copies(dockerfile: str) -> list[Copy]:
    """The COPY instructions of a Dockerfile (no --from; continuation lines joined)."""
    text = re.sub(r"\\\n", " ", dockerfile)
    found = []
    for line in text.splitlines():
        words = line.split()
        if not words or words[0].upper() != "COPY":
            continue
        args = [w for w in words[1:] if not w.startswith("--")]
        assert not any(w.startswith("--from") for w in words), line
        found.append(Copy(args[:-1], args[-1]))
    return found


def lay_out(root: Path, dockerfile: str, under: str, target: Path) -> list[str]:
    """Copy into `target` what the Dockerfile's COPY lines put under the image folder `under`,
    taking only files the build context holds; the relative paths laid out."""
    rules = read_rules((root / ".dockerignore").read_text())
    context = context_files(root, rules)
    laid: list[str] = []
    for copy in copies(dockerfile):
        dest = copy.dest.rstrip("/")
        assert dest == under or dest.startswith(under + "/"), copy
        inside = dest[len(under) :].lstrip("/")
        for given in copy.sources:
            source = given.rstrip("/")
            matched = [f for f in context if f == source or f.startswith(source + "/")]
            assert matched, f"COPY {source}: nothing of it is in the build context"
            for relative in matched:
                rest = Path(relative).name if relative == source else relative[len(source) + 1 :]
                out = target / inside / rest
                out.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(root / relative, out)
                laid.append((Path(inside) / rest).as_posix())
    return sorted(laid)
