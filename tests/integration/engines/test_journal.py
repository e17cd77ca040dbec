"""An engine's output in a real systemd journal, read as its log: the evidence a file of the
same lines gives, a new life at a restart, stale once the journal lost it, a hostile MESSAGE
cut, and a journal that cannot be read saying why."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import pytest

from placewatch.worker.deadline import Deadline
from placewatch.worker.doctor.logs import check_logs
from placewatch.worker.doctor.report import Report
from placewatch.worker.engines.evidence import EngineEvidence
from placewatch.worker.engines.evidence.follow import EngineLogs, Log
from placewatch.worker.engines.evidence.journal import Journal, JournalTail
from placewatch.worker.engines.evidence.source import JournalLog, PathLog
from placewatch.worker.shards.discover.classify import classify
from placewatch.worker.shards.lost_evidence import log_note
from placewatch.worker.shards.verdict import Judgement

from tests.conftest import FIXTURES as ROOT_FIXTURES
from tests.conftest import GPU0, FakeGpuTools, apps, run_placewatch, wait_older_than
from tests.support.eventually import answered
from tests.support.journal import UNIT, journal_in, needs_journal, write

pytestmark = needs_journal

FIXTURES = Path(__file__).parents[2] / "fixtures" / "engine-logs"
NGL99 = FIXTURES / "real-b11434" / "ngl99-lv4.log"
"""A real b11434 CPU build given -ngl 99 -lv 4: `no usable GPU found`."""
CUDA = FIXTURES / "llamacpp-cuda-full-offload.log"
QUERY_GPU = ROOT_FIXTURES / "nvidia-smi" / "a100x2-query-gpu.csv"


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def in_journal(pid: int | None = None) -> Log:
    return Log(JournalLog(UNIT, None), pid)


async def said_once(
    logs: EngineLogs, log: Log, holds: Callable[[EngineEvidence], bool], what: str
) -> EngineEvidence:
    """What the journal says once `holds(it)`: each ask reads on."""

    async def ask() -> EngineEvidence:
        said = (await logs.read({"j": log}))["j"]
        if not holds(said):
            raise AssertionError(f"{what}: {said}")
        return said

    return await answered(ask, timeout=10, what=what)


def with_logs(
    folder: Path, body: Callable[[EngineLogs], Awaitable[None]], journal: Journal | None = None
) -> None:
    async def main() -> None:
        logs = EngineLogs(0.05, journal=journal or journal_in(folder))
        async with anyio.create_task_group() as tg:
            await tg.start(logs.run)
            await body(logs)
            tg.cancel_scope.cancel()

    anyio.run(main, backend="asyncio")


def test_a_capture_in_the_journal_gives_what_the_same_file_gives(tmp_path: Path) -> None:
    write(tmp_path / "system.journal", lines(NGL99))
    write(
        tmp_path / "system.journal",
        ["another unit's line: offloaded 33/33 layers"],
        unit="x.service",
    )

    async def body(logs: EngineLogs) -> None:
        said = await logs.read(
            {"file": Log(PathLog(str(NGL99), os.getpid())), "journal": in_journal()}
        )
        assert said["file"].gpu_failed is not None and said["file"].known
        assert said["journal"] == said["file"]

    with_logs(tmp_path, body)


def test_lines_added_to_the_journal_are_read(tmp_path: Path) -> None:
    journal = tmp_path / "system.journal"
    write(journal, ["srv  llama_server: starting"])

    async def body(logs: EngineLogs) -> None:
        assert not (await logs.read({"j": in_journal()}))["j"].known
        write(journal, ["load_tensors: offloaded 2/33 layers to GPU"])
        await said_once(logs, in_journal(), lambda s: s.layers_offloaded == 2, "the new entry read")

    with_logs(tmp_path, body)


def test_a_restart_in_the_journal_starts_a_new_life(tmp_path: Path) -> None:
    journal = tmp_path / "system.journal"
    write(journal, lines(NGL99), pid=100)

    async def body(logs: EngineLogs) -> None:
        first = (await logs.read({"j": in_journal(100)}))["j"]
        assert first.gpu_failed is not None and first.backend == "CPU"
        write(journal, lines(CUDA), pid=200)  # the service restarted on a CUDA build

        now = await said_once(
            logs, in_journal(200), lambda s: s.backend == "CUDA", "the new life read"
        )
        assert now.gpu_failed is None and now.layers_offloaded == 33
        assert now.stale_since is None

    with_logs(tmp_path, body)


def test_a_vacuumed_journal_goes_stale_until_the_engine_says_more(tmp_path: Path) -> None:
    old, new = tmp_path / "system@old.journal", tmp_path / "system.journal"
    write(old, lines(NGL99))
    write(new, ["a line of another unit"], unit="x.service")

    async def body(logs: EngineLogs) -> None:
        before = (await logs.read({"j": in_journal()}))["j"]
        assert before.gpu_failed is not None and before.stale_since is None
        old.unlink()  # journalctl --vacuum-time: the archived file is deleted
        write(new, ["another line of another unit"], unit="x.service")

        said = await said_once(
            logs, in_journal(), lambda s: s.stale_since is not None, "the evidence stale"
        )
        assert said.gpu_failed == before.gpu_failed  # what it said stands, stale
        write(new, ["load_tensors: offloaded 0/33 layers to GPU"])

        await said_once(
            logs, in_journal(), lambda s: s.stale_since is None, "fresh once the engine said more"
        )

    with_logs(tmp_path, body)


def test_rotation_by_journald_keeps_what_was_read(tmp_path: Path) -> None:
    live = tmp_path / "system.journal"
    write(live, lines(NGL99))
    tail = JournalTail(JournalLog(UNIT, None), journal_in(tmp_path))
    assert len(tail.poll()) == len(lines(NGL99))
    live.rename(tmp_path / "system@0001-0002.journal")  # journald archives the file
    write(live, ["load_tensors: offloaded 0/33 layers to GPU"])
    assert tail.poll() == ["load_tensors: offloaded 0/33 layers to GPU"]
    assert tail.generation == 0 and tail.refused is None


def test_a_huge_binary_message_is_cut_and_reading_goes_on(tmp_path: Path) -> None:
    hostile = b"\x1b]0;owned\x07\x00" + b"load_tensors: \x1b[31m\xff\xfe" * 100_000  # 1.7 MB
    write(tmp_path / "system.journal", [hostile, "load_tensors: offloaded 5/33 layers to GPU"])
    tail = JournalTail(JournalLog(UNIT, None), journal_in(tmp_path), max_line=4096)
    started = time.monotonic()
    read: list[str] = []
    for _ in range(5):
        read += tail.poll(limit=64 << 10)
    assert time.monotonic() - started < 5
    assert read[-1] == "load_tensors: offloaded 5/33 layers to GPU"
    assert len(read) == 2 and len(read[0]) <= 4096 and tail.behind == 0

    async def body(logs: EngineLogs) -> None:
        said = (await logs.read({"j": in_journal()}))["j"]
        assert said.layers_offloaded == 5
        assert all(line.isprintable() for line in said.lines)

    with_logs(tmp_path, body)


@pytest.mark.parametrize(
    ("journal", "words"),
    [
        (Journal(("/nonexistent/journal",), "/usr/bin/journalctl"), "mount /var/log/journal"),
        (Journal(("/nonexistent/journal",), None), "journalctl is not installed"),
    ],
)
def test_a_journal_that_cannot_be_read_says_why_in_the_status(
    tmp_path: Path, journal: Journal, words: str
) -> None:
    async def body(logs: EngineLogs) -> None:
        said = (await logs.read({"j": in_journal()}))["j"]
        assert said.unread is not None and words in said.unread
        noted = log_note(Judgement("unknown", "no engine line says where it computes"), said)
        assert f"its log is not read: {said.unread}" in noted.reason

    with_logs(tmp_path, body, journal)


def test_an_empty_journal_folder_says_so(tmp_path: Path) -> None:
    tail = JournalTail(JournalLog(UNIT, None), journal_in(tmp_path))
    assert tail.poll() == []
    assert tail.refused is not None and f"no journal files in {tmp_path}" in tail.refused


def test_a_file_journalctl_cannot_open_is_its_reason(tmp_path: Path) -> None:
    (tmp_path / "system.journal").write_bytes(b"not a journal file at all")
    tail = JournalTail(JournalLog(UNIT, None), journal_in(tmp_path))
    assert tail.poll() == []
    assert tail.refused is not None and "journalctl could not read the journal" in tail.refused


def doctor_on(journal: Journal) -> list[str]:
    """What doctor's log check says of one discovered llama-server whose output is the
    journal's (this test's own process stands in for it)."""
    pid = os.getpid()
    found = classify(["llama-server", "-m", "model.gguf"], {}, pid, [], log=JournalLog(UNIT, pid))
    assert found is not None
    said: list[str] = []
    check_logs([found], [], Report(said.append), journal)
    return said


def test_doctor_says_how_to_make_the_journal_readable(tmp_path: Path) -> None:
    said = doctor_on(Journal((str(tmp_path / "absent"),), "/usr/bin/journalctl"))
    assert len(said) == 1 and said[0].startswith("fail  engine logs: ")
    assert "its log is not read: no journal is in this worker's view" in said[0]
    assert "mount /var/log/journal and /run/log/journal" in said[0]
    assert "next: let the worker read the journal" in said[0]
    assert "journalctl is not installed" in doctor_on(Journal((str(tmp_path),), None))[0]


def test_doctor_passes_a_journal_it_can_read(tmp_path: Path) -> None:
    write(tmp_path / "system.journal", lines(NGL99))
    assert doctor_on(journal_in(tmp_path)) == [
        "ok    engine logs: 1 log followed, each written by one engine"
    ]


def test_a_flood_is_read_a_capped_run_at_a_time_in_order_and_whole(tmp_path: Path) -> None:
    said = [f"slot update_slots: id  {i % 4} | task {i} | prompt processing" for i in range(6000)]
    write(tmp_path / "system.journal", said)
    tail = JournalTail(JournalLog(UNIT, None), journal_in(tmp_path))
    read = tail.poll(limit=4096)
    assert 0 < len(read) < len(said) and tail.behind > 0 and tail.last_read <= 4 * 4096
    for _ in range(1000):
        if not tail.behind:
            break
        read += tail.poll(limit=4096)
    assert read == said and tail.behind == 0


def test_a_flood_past_the_deadline_says_it_is_behind_and_reads_on(tmp_path: Path) -> None:
    write(tmp_path / "system.journal", ["load_tensors: offloaded 1/33 layers to GPU"] * 40_000)

    async def body(logs: EngineLogs) -> None:
        first = (await logs.read({"j": in_journal()}, deadline=Deadline.after(0)))["j"]
        assert first.behind_bytes is not None and first.behind_bytes > 0
        assert first.layers_offloaded == 1
        await said_once(logs, in_journal(), lambda s: s.behind_bytes is None, "read to its end")

    with_logs(tmp_path, body)


def test_a_journalctl_that_hangs_is_killed_at_its_time(tmp_path: Path) -> None:
    write(tmp_path / "system.journal", lines(NGL99))
    hangs = tmp_path / "journalctl"
    hangs.write_text("#!/bin/sh\nexec sleep 60\n")
    hangs.chmod(0o755)
    tail = JournalTail(JournalLog(UNIT, None), Journal((str(tmp_path),), str(hangs), 0.0))
    started = time.monotonic()
    assert tail.poll(stop_at=started) == []
    assert time.monotonic() - started < 2
    assert tail.refused is not None and "read no entry of the journal within 0.25 s" in tail.refused


def test_a_first_read_starts_at_the_process_s_start(tmp_path: Path) -> None:
    journal = tmp_path / "system.journal"
    write(journal, lines(NGL99), ago_s=3600)  # an earlier process of the unit, an hour ago
    write(journal, ["load_tensors: offloaded 33/33 layers to GPU"])
    tail = JournalTail(JournalLog(UNIT, None, since=time.time() - 60), journal_in(tmp_path))
    assert tail.poll() == ["load_tensors: offloaded 33/33 layers to GPU"]


def test_a_placed_journal_of_another_unit_is_refused_by_the_worker_and_doctor(
    fake_gpu: FakeGpuTools, tmp_path: Path
) -> None:
    (tmp_path / "journal").mkdir()
    write(tmp_path / "journal" / "system.journal", ["ggml_cuda_init: failed: not this one's"])
    engine = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        fake_gpu.nvidia_smi(QUERY_GPU, apps({engine.pid: (GPU0, 5000)}))
        shards = tmp_path / "shards.toml"
        shards.write_text(
            f'[[shard]]\nid = "a"\npid = {engine.pid}\ngpus = [0]\nlog_path = "journal:{UNIT}"\n'
        )
        wait_older_than([engine.pid], 0.2)
        env = fake_gpu.env() | {"PLACEWATCH_JOURNAL_DIR": str(tmp_path / "journal")}
        argv = ("sample", "--json", "--shards", str(shards), "--grace", "0", "--no-discover")
        done = run_placewatch(*argv, env=env, timeout=20)
        assert done.returncode == 0, done.stderr
        (brief,) = json.loads(done.stdout)["shards"]
        why = (
            f"journal:{UNIT} is not the journal of the shard's process (it runs as no system "
            "service), so it is not read"
        )
        assert brief["verdict"] == "gpu"
        assert brief["reason"].endswith(f"; its log is not read: {why}")
        asks = ("doctor", "--shards", str(shards), "--no-discover", "--nats", "nats://127.0.0.1:1")
        doctor = run_placewatch(*asks, env=env, timeout=30)
        said = [x for x in doctor.stdout.splitlines() if x.startswith("fail  engine logs:")]
        assert said == [
            f"fail  engine logs: a: its log is not read: {why}; next: let the worker read the "
            "journal (docs/shards.md: engines run as systemd services)"
        ]
    finally:
        engine.kill()
        engine.wait()
