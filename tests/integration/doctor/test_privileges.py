"""Whether the worker holds what reading other users' engines needs, as `placewatch doctor`
runs it: as root, as root without the two capabilities (a container's default set), and as
a user with none (setpriv)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import FakeGpuTools, clean_env, placewatch_cmd
from tests.support.hostile import NOBODY, needs_root, nobody_engine, nobody_folder, stop

pytestmark = needs_root

PTRACE = (
    "cannot read /proc/PID/environ, fd and fdinfo of other users' processes: their engines "
    "have no device mask (CUDA_VISIBLE_DEVICES) and no log"
)
DAC = "cannot read a log only its owner may read: such an engine's log is not read"
TODO = "next: give the worker {} (docs/operations.md, The worker's own privileges)"


@pytest.fixture
def folder() -> Iterator[Path]:
    with nobody_folder() as made:
        yield made


def doctor(env: dict[str, str], *before: str) -> list[str]:
    """The `privileges` lines of doctor's report, run after `before` (setpriv's argv)."""
    argv = [*before, *placewatch_cmd(), "doctor", "--nats", "nats://127.0.0.1:1"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    return [x for x in done.stdout.splitlines() if " privileges: " in x]


def test_a_root_worker_with_both_capabilities_is_ok(fake_gpu: FakeGpuTools) -> None:
    assert doctor(fake_gpu.env()) == [
        "ok    privileges: CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH: other users' engines, their "
        "/proc entries and their logs, are read"
    ]


def test_root_without_them_fails_naming_the_engine_of_another_user(
    fake_gpu: FakeGpuTools, folder: Path
) -> None:
    engine = nobody_engine(folder, folder / "engine.log", 18193, clean_env())
    # Without CAP_SYS_PTRACE no other user's environment can be read, its mark (the tests'
    # discover_env) with it: this doctor walks every process, as a worker without one does.
    env = {k: v for k, v in fake_gpu.env().items() if k != "PLACEWATCH_DISCOVER_ENV"}
    try:
        dropped = ("setpriv", "--bounding-set=-sys_ptrace,-dac_read_search,-dac_override", "--")
        said = doctor(env, *dropped)
    finally:
        stop([engine])
    ptrace, dac = said
    assert ptrace.startswith(f"fail  privileges: {PTRACE} (")
    assert ptrace.endswith(f"); {TODO.format('CAP_SYS_PTRACE')}")
    assert dac.startswith(f"fail  privileges: {DAC} (")
    assert dac.endswith(f"); {TODO.format('CAP_DAC_READ_SEARCH')}")
    assert "llama-server-18193 (uid 65534)" in ptrace and "llama-server-18193 (uid 65534)" in dac


def test_a_user_without_capabilities_and_no_other_user_s_engine_is_told_what_it_misses(
    fake_gpu: FakeGpuTools,
) -> None:
    said = doctor(fake_gpu.env(), *NOBODY)
    assert said == [
        f"skip  privileges: {PTRACE}; no engine of another user runs now; "
        f"{TODO.format('CAP_SYS_PTRACE')}",
        f"skip  privileges: {DAC}; no engine of another user runs now; "
        f"{TODO.format('CAP_DAC_READ_SEARCH')}",
    ]
