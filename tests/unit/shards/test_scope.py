"""Which processes a worker considers: every one, or those whose environment carries a mark."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from placewatch.worker.shards.scope import EVERY, ProcessScope

from tests.support.eventually import eventually


def test_no_setting_is_every_process() -> None:
    assert ProcessScope.parse(None) is EVERY
    assert EVERY.admits(os.getpid(), {})


def test_a_mark_admits_only_an_environment_that_holds_it() -> None:
    scope = ProcessScope.parse("TENANT=blue=green")
    assert scope.mark == ("TENANT", "blue=green")
    assert scope.admits(1, {"TENANT": "blue=green"})
    assert not scope.admits(1, {"TENANT": "blue"})
    assert not scope.admits(1, {})


def test_an_empty_value_is_a_value() -> None:
    assert ProcessScope.parse("MARK=").admits(1, {"MARK": ""})
    assert not ProcessScope.parse("MARK=").admits(1, {})


@pytest.mark.parametrize("text", ["", "=x", "1A=x", "NAME", "A B=x", "A-B=x"])
def test_what_is_not_name_equals_value_is_refused_naming_it(text: str) -> None:
    with pytest.raises(ValueError, match="is not NAME=VALUE"):
        ProcessScope.parse(text)


def test_a_process_environment_is_read_when_not_given() -> None:
    marked = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        env={**os.environ, "SCOPE_TEST_MARK": "yes"},
    )
    try:
        # Until the child has exec'd, /proc/PID/environ is its parent's copy, or empty.
        eventually(lambda: ProcessScope.parse("SCOPE_TEST_MARK=yes").admits(marked.pid), 10)
        assert not ProcessScope.parse("SCOPE_TEST_MARK=no").admits(marked.pid)
    finally:
        marked.kill()
        marked.wait()


def test_a_process_that_cannot_be_read_is_not_admitted() -> None:
    assert not ProcessScope.parse("ANY=1").admits(2**22 + 1)  # above pid_max: no such process
