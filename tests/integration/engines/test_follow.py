"""EngineLogs: one task follows every engine log; the tick gets what each says, as values."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path

import anyio
import pytest

from placewatch.worker.engines.evidence import EngineEvidence
from placewatch.worker.engines.evidence.follow import EngineLogs, Log
from placewatch.worker.engines.evidence.source import PathLog


def at(path: Path, pid: int | None = None) -> Log:
    """A log at `path`, read as this test's own user may read it, written by `pid`."""
    return Log(PathLog(str(path), os.getpid()), pid)


def with_logs(body: Callable[[EngineLogs], Awaitable[None]], poll_s: float = 0.05) -> None:
    async def main() -> None:
        logs = EngineLogs(poll_s)
        async with anyio.create_task_group() as tg:
            await tg.start(logs.run)
            await body(logs)
            tg.cancel_scope.cancel()

    anyio.run(main, backend="asyncio")


def test_a_log_is_read_when_asked_for_and_an_unasked_one_is_dropped(tmp_path: Path) -> None:
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_text("load_tensors: offloaded 33/33 layers to GPU\n")
    b.write_text("load_tensors: offloaded 0/33 layers to GPU\n")

    async def body(logs: EngineLogs) -> None:
        both = await logs.read({"a": at(a), "b": at(b)})
        assert both["a"].layers_offloaded == 33 and both["b"].layers_offloaded == 0
        assert (await logs.read({"b": at(b)})).keys() == {"b"}
        assert await logs.read({}) == {}

    with_logs(body)


def test_evidence_is_a_value_that_later_lines_do_not_change(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    log.write_text("load_tensors: offloaded 2/33 layers to GPU\n")

    async def body(logs: EngineLogs) -> None:
        before = (await logs.read({"a": at(log)}))["a"]
        with log.open("a") as out:
            out.write("ggml_cuda_init: failed to initialize CUDA: unknown error\n")
        after = (await logs.read({"a": at(log)}))["a"]
        assert before.gpu_failed is None and before.layers_offloaded == 2
        assert after.gpu_failed is not None
        assert before is not after

    with_logs(body)


def test_a_change_between_asks_is_told_once(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    log.write_text("")

    async def body(logs: EngineLogs) -> None:
        assert (await logs.read({"a": at(log)}))["a"] == EngineEvidence()
        log.write_text("load_tensors: offloaded 0/33 layers to GPU\n")
        with anyio.fail_after(2):
            await logs.changed()
        with anyio.move_on_after(0.3) as quiet:
            await logs.changed()  # nothing more was said
        assert quiet.cancelled_caught
        assert (await logs.read({"a": at(log)}))["a"].layers_offloaded == 0

    with_logs(body)


@pytest.mark.parametrize("restart", ["truncated", "replaced"])
def test_another_run_of_the_engine_starts_its_evidence_afresh(tmp_path: Path, restart: str) -> None:
    log = tmp_path / "engine.log"
    log.write_text("ggml_cuda_init: failed to initialize CUDA: unknown error\n" * 3)

    async def body(logs: EngineLogs) -> None:
        assert (await logs.read({"a": at(log)}))["a"].gpu_failed is not None
        text = "build: 5400 (1a2b3c4d) with cc\nload_tensors: offloaded 2/2 layers to GPU\n"
        if restart == "truncated":
            log.write_text(text)
        else:
            new = tmp_path / "new.log"
            new.write_text("x" * 300 + "\n" + text)
            new.replace(log)
        fresh = (await logs.read({"a": at(log)}))["a"]
        assert (fresh.gpu_failed, fresh.layers_offloaded, fresh.stale_since) == (None, 2, None)

    with_logs(body)


@pytest.mark.parametrize("rotation", ["copytruncate", "renamed", "deleted"])
def test_a_log_rotated_under_its_process_keeps_its_evidence_stale(
    tmp_path: Path, rotation: str
) -> None:
    log = tmp_path / "engine.log"
    log.write_text("load_tensors: offloaded 0/33 layers to GPU\n")

    async def body(logs: EngineLogs) -> None:
        said = (await logs.read({"a": at(log, 7)}))["a"]
        assert (said.layers_offloaded, said.stale_since) == (0, None)
        if rotation == "copytruncate":
            os.truncate(log, 0)
        elif rotation == "renamed":
            log.rename(tmp_path / "engine.log.1")
            log.write_text("")
        else:
            log.unlink()
        held = (await logs.read({"a": at(log, 7)}))["a"]
        assert held.stale_since is not None
        assert replace(held, stale_since=None) == said
        with log.open("a") as out:  # the same process says more: fresh again
            out.write("load_tensors: offloaded 33/33 layers to GPU\n")
        fresh = (await logs.read({"a": at(log, 7)}))["a"]
        assert (fresh.layers_offloaded, fresh.stale_since) == (33, None)

    with_logs(body)


CPU_RUN = (
    "warning: no usable GPU found, --gpu-layers option will be ignored\n"
    "0.00.004.346 I srv  llama_server: initializing ...\n"
)
GPU_RUN = (
    "0.00.004.346 I srv  llama_server: initializing ...\n"
    "0.00.009.100 I load_tensors: offloaded 33/33 layers to GPU\n"
)


def test_a_restart_into_the_same_log_is_read_from_its_banner(tmp_path: Path) -> None:
    log = tmp_path / "s.log"
    log.write_text(CPU_RUN)

    async def body(logs: EngineLogs) -> None:
        assert (await logs.read({"a": at(log, 100)}))["a"].gpu_failed is not None
        with log.open("a") as out:
            out.write(GPU_RUN)
        now = (await logs.read({"a": at(log, 200)}))["a"]
        assert (now.gpu_failed, now.layers_offloaded) == (None, 33)

    with_logs(body)


def test_a_new_process_before_its_banner_has_no_evidence_yet(tmp_path: Path) -> None:
    """The old run's failure is not the new process's, even before it says anything."""
    log = tmp_path / "s.log"
    log.write_text(CPU_RUN)

    async def body(logs: EngineLogs) -> None:
        assert (await logs.read({"a": at(log, 100)}))["a"].gpu_failed is not None
        assert (await logs.read({"a": at(log, 200)}))["a"] == EngineEvidence()
        assert (await logs.read({"a": at(log, 200)}))["a"] == EngineEvidence()
        with log.open("a") as out:
            out.write("load_tensors: offloaded 0/33 layers to GPU\n")
        assert (await logs.read({"a": at(log, 200)}))["a"].layers_offloaded == 0

    with_logs(body)


def test_a_banner_read_before_the_new_pid_is_known_stays(tmp_path: Path) -> None:
    log = tmp_path / "s.log"
    log.write_text(CPU_RUN)

    async def body(logs: EngineLogs) -> None:
        assert (await logs.read({"a": at(log, 100)}))["a"].gpu_failed is not None
        with log.open("a") as out:
            out.write(GPU_RUN)
        with anyio.fail_after(5):
            await logs.changed()  # read between two ticks, before the tick sees pid 200
        assert (await logs.read({"a": at(log, 200)}))["a"].layers_offloaded == 33

    with_logs(body)


def test_an_ollama_runner_s_pid_is_not_a_new_life(tmp_path: Path) -> None:
    """Runners come and go in one server's log: the tick gives no pid for them."""
    log = tmp_path / "ollama.log"
    log.write_text("load_tensors: offloaded 0/33 layers to GPU\n")

    async def body(logs: EngineLogs) -> None:
        assert (await logs.read({"a": at(log)}))["a"].layers_offloaded == 0
        assert (await logs.read({"a": at(log)}))["a"].layers_offloaded == 0

    with_logs(body)


def test_reading_before_the_task_started_says_so() -> None:
    async def main() -> None:
        with pytest.raises(RuntimeError, match="before its task started"):
            await EngineLogs().read({})

    anyio.run(main, backend="asyncio")
