"""Every product file is named where a newcomer looks for it: docs/development.md's layout
(the tree, each name under its folder) or docs/architecture.md (a path in backticks)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("placewatch", "schemas", "worker", "consumer")
TOKEN = re.compile(r"(?<![\w./-])([A-Za-z_][\w]*(?:\.py|/))")
PATH = re.compile(r"`([\w/.]+\.py)`")


def layout_block() -> list[str]:
    text = (ROOT / "docs" / "development.md").read_text()
    block = text.split("## Layout", 1)[1].split("```", 2)[1]
    return block.splitlines()[1:]


def named_in_layout() -> set[str]:
    """Every file and folder the layout tree names, as a path from the root. A line names
    its first word under the folders above it (by indentation); the other names on the line
    sit beside it, or inside it where the first word is a folder."""
    found: set[str] = set()
    stack: list[tuple[int, str]] = []
    places: tuple[str, ...] = ()
    """Where the names of the line being read sit: beside its first word, or inside it."""
    for line in layout_block():
        words = line.split()
        if not words:
            continue
        rest = line
        if TOKEN.fullmatch(words[0]) is not None:  # a new entry; else a line that goes on
            indent = len(line) - len(line.lstrip())
            while stack and stack[-1][0] >= indent:
                stack.pop()
            parent = stack[-1][1] if stack else ""
            path = parent + words[0]
            found.add(path)
            places = (parent,)
            if path.endswith("/"):
                stack.append((indent, path))
                places = (parent, path)
            rest = line[line.index(words[0]) + len(words[0]) :]
        for name in TOKEN.findall(rest):
            found.update(p + name for p in places if (ROOT / (p + name)).exists())
    return found


def named_in_architecture() -> set[str]:
    text = (ROOT / "docs" / "architecture.md").read_text()
    found = set()
    for path in PATH.findall(text):
        found.add(path)
        found.add(f"worker/{path}")  # the doc writes paths within the worker from its inside
    return found


def product_files() -> list[str]:
    return sorted(
        p.relative_to(ROOT).as_posix()
        for top in PRODUCT
        for p in (ROOT / top).rglob("*.py")
        if p.name != "__init__.py"
    )


def test_every_product_file_is_named_in_the_layout_or_the_architecture() -> None:
    named = named_in_layout() | named_in_architecture()
    assert [f for f in product_files() if f not in named] == []


def test_the_layout_tree_is_read_as_a_tree() -> None:
    named = named_in_layout()
    assert {"worker/", "worker/shards/", "worker/shards/verdict.py", "schemas/codec.py"} <= named
    assert len(product_files()) > 120
