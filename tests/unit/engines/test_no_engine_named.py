"""An engine's quirks live in its folder: no module of the worker's neutral packages names an
engine, and nothing of engines/ imports shards/.

"Names" is read from the code, not from its docstrings and comments, which say why and name
the engine that forces it: a string that is an engine's name (`engine == "ollama"`), a
constant that holds one (`VLLM`), or an import of an engine's folder
(`from ..engines.llama_cpp import served_model`). The names and folders come from the
registry, so an engine added there is covered too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from placewatch.worker import engines
from placewatch.worker.engines import ENGINES

from tests.unit.test_layers import imports, module_name

ROOT = Path(__file__).resolve().parents[3]
WORKER = ROOT / "worker"
NEUTRAL = ("shards", "doctor", "engines/evidence")
"""The folders whose modules serve every engine alike; the worker's own top modules too."""
NAMES = frozenset(e.name for e in ENGINES)
FOLDERS = tuple(type(e).__module__ for e in ENGINES)
CONSTANTS = frozenset(
    n for n, v in vars(engines).items() if n.isupper() and isinstance(v, str) and v in NAMES
)


def neutral_modules() -> list[Path]:
    found = sorted(WORKER.glob("*.py"))
    for folder in NEUTRAL:
        found += sorted((WORKER / folder).rglob("*.py"))
    return found


def named_engines(module: str, path: Path) -> list[str]:
    """Where the module at `path` names an engine in its code, as `line: what`."""
    tree = ast.parse(path.read_text(), str(path))
    docs = {
        id(n.value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)
    }  # a string standing alone as a statement: a docstring, or an attribute's
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            if node.value.strip().lower() in NAMES:
                found.append((line, repr(node.value)))
        elif isinstance(node, ast.Name) and node.id in CONSTANTS:
            found.append((line, node.id))
        elif isinstance(node, ast.Attribute) and node.attr in CONSTANTS:
            found.append((line, f".{node.attr}"))
        elif isinstance(node, ast.alias) and node.name in CONSTANTS:
            found.append((line, f"import {node.name}"))
    return [f"{line}: {what}" for line, what in sorted(found)] + [
        f"import {name}"
        for name in sorted(imports(module, path))
        if any(name == f or name.startswith(f + ".") for f in FOLDERS)
    ]


def _module(path: Path) -> str:
    return module_name("placewatch.worker", WORKER, path)


@pytest.mark.parametrize(
    "path", neutral_modules(), ids=[str(p.relative_to(ROOT)) for p in neutral_modules()]
)
def test_a_neutral_module_names_no_engine(path: Path) -> None:
    assert named_engines(_module(path), path) == []


@pytest.mark.parametrize(
    "path",
    sorted((WORKER / "engines").rglob("*.py")),
    ids=[str(p.relative_to(ROOT)) for p in sorted((WORKER / "engines").rglob("*.py"))],
)
def test_nothing_of_the_engines_imports_the_shards(path: Path) -> None:
    shards = "placewatch.worker.shards"
    found = imports(_module(path), path)
    assert sorted(n for n in found if n == shards or n.startswith(shards + ".")) == []


def test_the_scan_sees_each_way_of_naming_an_engine(tmp_path: Path) -> None:
    assert {"llama.cpp", "ollama", "vllm", "sglang"} <= NAMES
    assert {"LLAMA_CPP", "OLLAMA", "VLLM", "SGLANG"} <= CONSTANTS
    assert len(neutral_modules()) > 40
    source = tmp_path / "probe.py"
    source.write_text(
        '"""Ollama\'s runners print llama.cpp\'s lines."""\n'
        "from ..engines import VLLM\n"
        "from ..engines.llama_cpp.log import assigned_device\n"
        "SAID = 'llama.cpp'\n"
        '"""What llama.cpp says."""\n'
        "def f(engine, e):\n"
        "    # vllm's children\n"
        "    return engine == 'Ollama' or e.SGLANG or VLLM\n"
    )
    assert named_engines("placewatch.worker.shards.probe", source) == [
        "2: import VLLM",
        "4: 'llama.cpp'",
        "8: 'Ollama'",
        "8: .SGLANG",
        "8: VLLM",
        "import placewatch.worker.engines.llama_cpp.log",
        "import placewatch.worker.engines.llama_cpp.log.assigned_device",
    ]
