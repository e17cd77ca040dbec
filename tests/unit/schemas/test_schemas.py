"""The contract as a package: msgspec and the standard library only, so that a gateway or an
alerting service can depend on it alone."""

from __future__ import annotations

import sys

import placewatch.schemas

from tests.support.imports import imported_by, top_level


def test_schemas_import_msgspec_and_the_standard_library_only() -> None:
    imported = top_level(imported_by("placewatch.schemas"))
    # What msgspec itself pulls in (typing_extensions, on some versions) is msgspec's.
    allowed = top_level(imported_by("msgspec")) | set(sys.stdlib_module_names) | {"placewatch"}
    assert {m for m in imported - allowed if not m.startswith("_")} == set()
    assert {"nats", "anyio", "psutil"}.isdisjoint(imported)


def test_of_the_worker_only_its_package_root_is_imported() -> None:
    worker = {
        name
        for name in imported_by("placewatch.schemas")
        if name.startswith("placewatch") and not name.startswith("placewatch.schemas")
    }
    assert worker == {"placewatch"}


def test_every_name_it_exports_is_there() -> None:
    missing = [name for name in placewatch.schemas.__all__ if not hasattr(placewatch.schemas, name)]
    assert missing == []
