"""EngineLogs: one task follows every engine log; the tick gets what each says, as values."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import pytest

from placewatch.worker.shards.engine_log import EngineEvidence
from placewatch.worker.shards.engine_logs import EngineLogs


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
        both = await logs.read({"a": str(a), "b": str(b)})
        assert both["a"].layers_offloaded == 33 and both["b"].layers_offloaded == 0
        assert (await logs.read({"b": str(b)})).keys() == {"b"}
        assert await logs.read({}) == {}

    with_logs(body)


def test_evidence_is_a_value_that_later_lines_do_not_change(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    log.write_text("load_tensors: offloaded 2/33 layers to GPU\n")

    async def body(logs: EngineLogs) -> None:
        before = (await logs.read({"a": str(log)}))["a"]
        with log.open("a") as out:
            out.write("ggml_cuda_init: failed to initialize CUDA: unknown error\n")
        after = (await logs.read({"a": str(log)}))["a"]
        assert before.gpu_failed is None and before.layers_offloaded == 2
        assert after.gpu_failed is not None
        assert before is not after

    with_logs(body)


def test_a_change_between_asks_is_told_once(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    log.write_text("")

    async def body(logs: EngineLogs) -> None:
        assert (await logs.read({"a": str(log)}))["a"] == EngineEvidence()
        log.write_text("load_tensors: offloaded 0/33 layers to GPU\n")
        with anyio.fail_after(2):
            await logs.changed()
        with anyio.move_on_after(0.3) as quiet:
            await logs.changed()  # nothing more was said
        assert quiet.cancelled_caught
        assert (await logs.read({"a": str(log)}))["a"].layers_offloaded == 0

    with_logs(body)


@pytest.mark.parametrize("restart", ["truncated", "replaced"])
def test_another_run_of_the_engine_starts_its_evidence_afresh(tmp_path: Path, restart: str) -> None:
    log = tmp_path / "engine.log"
    log.write_text("ggml_cuda_init: failed to initialize CUDA: unknown error\n" * 3)

    async def body(logs: EngineLogs) -> None:
        assert (await logs.read({"a": str(log)}))["a"].gpu_failed is not None
        text = "load_tensors: offloaded 2/2 layers to GPU\n"
        if restart == "truncated":
            log.write_text(text)
        else:
            new = tmp_path / "new.log"
            new.write_text("x" * 300 + "\n" + text)
            new.replace(log)
        fresh = (await logs.read({"a": str(log)}))["a"]
        assert (fresh.gpu_failed, fresh.layers_offloaded) == (None, 2)

    with_logs(body)


def test_reading_before_the_task_started_says_so() -> None:
    async def main() -> None:
        with pytest.raises(RuntimeError, match="before its task started"):
            await EngineLogs().read({})

    anyio.run(main, backend="asyncio")


def test_a_deleted_log_takes_its_evidence_with_it(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    log.write_text("load_tensors: offloaded 0/33 layers to GPU\n")

    async def body(logs: EngineLogs) -> None:
        assert (await logs.read({"a": str(log)}))["a"].layers_offloaded == 0
        log.unlink()
        assert (await logs.read({"a": str(log)}))["a"] == EngineEvidence()

    with_logs(body)
