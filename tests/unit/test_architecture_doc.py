"""docs/architecture.md is true to the tree: every file and folder it names exists, and it
names every room of the product (each package folder and each module at a package's top)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
PRODUCT = ("placewatch", "schemas", "worker", "consumer")
NAMED = re.compile(r"`([\w/.]+(?:\.py|/))`")


def named() -> list[str]:
    return NAMED.findall(DOC.read_text())


def resolves(path: str) -> bool:
    """A path from the root (`worker/gpu/`), from the worker's folder (`bus/events.py`, as
    the doc writes within the worker), or a module's bare name beside the one before it."""
    if (ROOT / path).exists() or (ROOT / "worker" / path).exists():
        return True
    return "/" not in path.rstrip("/") and any(
        any((ROOT / top).rglob(path.rstrip("/"))) for top in PRODUCT
    )


def rooms() -> list[str]:
    """Each package folder below the four, and each module at the top of one of them."""
    found = []
    for top in PRODUCT:
        for path in sorted((ROOT / top).rglob("*")):
            relative = path.relative_to(ROOT).as_posix()
            if "__pycache__" in relative or path.name.startswith("__"):
                continue
            if path.is_dir() and (path / "__init__.py").exists():
                found.append(relative + "/")
            elif path.suffix == ".py" and path.parent.name in PRODUCT:
                found.append(relative)
    return found


def test_every_path_the_doc_names_exists() -> None:
    paths = named()
    assert len(paths) > 50
    assert [path for path in paths if not resolves(path)] == []


def spellings(room: str) -> tuple[str, ...]:
    """How the doc may write a room: from the root, from its top folder's inside, or a
    package folder by its own name (`discover/` in a row that names `shards/` before it)."""
    inside = room.split("/", 1)[1]
    if room.endswith("/"):
        return (room, inside, room.rstrip("/").rsplit("/", 1)[-1] + "/")
    return (room, inside)


def test_the_doc_names_every_room() -> None:
    text = DOC.read_text()
    missing = [room for room in rooms() if not any(f"`{s}`" in text for s in spellings(room))]
    assert missing == []
