"""The packages' import rules, read from the source: the worker and the consumers never import
each other, the shared package neither of them, the contract nothing of placewatch but itself.

Walks every module's `import` and `from` statements (function bodies included, relative
imports resolved), so an import made inside a function is caught as well as one at the top.
import-linter checks the same contracts in CI (pyproject.toml, [tool.importlinter]).
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = {
    "placewatch": ROOT / "placewatch",
    "placewatch.schemas": ROOT / "schemas",
    "placewatch.worker": ROOT / "worker",
    "placewatch.consumer": ROOT / "consumer",
}
FORBIDDEN = {
    "placewatch.schemas": ("placewatch.worker", "placewatch.consumer", "placewatch.cli", "litellm"),
    "placewatch.worker": ("placewatch.consumer", "placewatch.cli", "litellm"),
    "placewatch.consumer": ("placewatch.worker", "placewatch.cli"),
    "placewatch": ("placewatch.worker", "placewatch.consumer", "litellm"),
}
"""What each package may not import. The command line (placewatch.cli, and the node's flags it
takes from placewatch.node_flags) dispatches to both sides: the modules of the shared package
the rule for `placewatch` does not cover. LiteLLM, an optional extra, is a gateway's: only
placewatch.consumer.gateway.litellm imports it."""
COMMAND_LINE = ("placewatch.cli", "placewatch.node_flags")
LITELLM_ONLY_IN = "placewatch.consumer.gateway.litellm"


def module_name(package: str, folder: Path, path: Path) -> str:
    parts = list(path.relative_to(folder).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([package, *parts])


def imports(module: str, path: Path) -> set[str]:
    """The full names of what the module at `path` imports, anywhere in it."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                stem = ".".join([*base, node.module] if node.module else base)
            else:
                stem = node.module or ""
            found.add(stem)
            found.update(f"{stem}.{alias.name}" for alias in node.names)
    return found


def modules() -> list[tuple[str, str, Path]]:
    """(package, module, path) for every module of the four packages."""
    found = []
    for package, folder in FOLDERS.items():
        for path in sorted(folder.rglob("*.py")):
            if package == "placewatch" and path.parent != folder:
                continue
            found.append((package, module_name(package, folder, path), path))
    return found


def offences(package: str, module: str, path: Path) -> list[str]:
    if module in COMMAND_LINE:
        return []
    banned = FORBIDDEN[package]
    return sorted(
        name
        for name in imports(module, path)
        if any(name == ban or name.startswith(ban + ".") for ban in banned)
    )


@pytest.mark.parametrize(
    ("package", "module", "path"), modules(), ids=[module for _, module, _ in modules()]
)
def test_no_import_crosses_between_the_packages(package: str, module: str, path: Path) -> None:
    assert offences(package, module, path) == []


def test_only_the_litellm_gateway_module_imports_litellm() -> None:
    importers = sorted(
        module
        for _, module, path in modules()
        if any(n == "litellm" or n.startswith("litellm.") for n in imports(module, path))
    )
    assert importers == [LITELLM_ONLY_IN]


def test_the_walk_sees_every_package_and_an_import_in_a_function(tmp_path: Path) -> None:
    seen = {package for package, _, _ in modules()}
    assert seen == set(FOLDERS)
    assert len(modules()) > 100
    # A crossing import inside a function, and a relative one, are both found.
    source = tmp_path / "probe.py"
    source.write_text(
        "def later():\n    from placewatch.consumer import fleet\nfrom ..shards import verdict\n"
    )
    found = imports("placewatch.worker.bus.probe", source)
    assert "placewatch.consumer.fleet" in found
    assert "placewatch.worker.shards.verdict" in found
    assert offences("placewatch.worker", "placewatch.worker.bus.probe", source) == [
        "placewatch.consumer",
        "placewatch.consumer.fleet",
    ]


def worker_layers() -> list[set[str]]:
    """The worker's layers as pyproject.toml's import-linter contract lists them, top first."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (contract,) = (
        c
        for c in config["tool"]["importlinter"]["contracts"]
        if c.get("containers") == ["placewatch.worker"]
    )
    return [{m.strip() for m in re.split(r"[|:]", layer)} for layer in contract["layers"]]


def layer_of(module: str, layers: list[set[str]]) -> int | None:
    parts = module.split(".")
    if parts[:2] != ["placewatch", "worker"] or len(parts) < 3:
        return None
    return next((n for n, layer in enumerate(layers) if parts[2] in layer), None)


def test_the_worker_layers_name_every_room_of_the_worker() -> None:
    rooms = {
        path.stem if path.is_file() else path.name
        for path in (ROOT / "worker").iterdir()
        if (path.suffix == ".py" and path.stem != "__init__") or (path / "__init__.py").exists()
    }
    assert rooms == set().union(*worker_layers())


WORKER_MODULES = [m for m in modules() if m[0] == "placewatch.worker" and m[1] != m[0]]


@pytest.mark.parametrize(
    ("package", "module", "path"),
    WORKER_MODULES,
    ids=[module for _, module, _ in WORKER_MODULES],
)
def test_no_worker_module_imports_a_layer_above_its_own(
    package: str, module: str, path: Path
) -> None:
    layers = worker_layers()
    own = layer_of(module, layers)
    assert own is not None, f"{module} is in no layer of the worker's contract"
    above = sorted(
        name
        for name in imports(module, path)
        if (theirs := layer_of(name, layers)) is not None and theirs < own
    )
    assert above == []
