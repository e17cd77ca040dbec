"""The bus goes away and comes back: no event lost or doubled, telemetry back at once."""

from __future__ import annotations

import functools
import signal
import subprocess
import time
from pathlib import Path

from tests.conftest import (
    FIXTURES,
    GPU1,
    FakeGpuTools,
    NatsServer,
    Worker,
    apps,
    free_port,
    start,
    wait_older_than,
)
from tests.integration.test_shards_end_to_end import events_now
from tests.support.eventually import eventually
from tests.support.natsproto import RawSubscriber


def kill(server: NatsServer) -> None:
    assert server.proc is not None
    server.proc.send_signal(signal.SIGKILL)
    server.proc.wait()
    server.proc = None


def said_again(worker: Worker, line: str, times: int) -> bool:
    return worker.err().count(line) > times


def test_events_survive_server_kills_exactly_once_and_telemetry_resumes(
    fake_gpu: FakeGpuTools,
    shard_procs: dict[str, subprocess.Popen[bytes]],
    workers: list[Worker],
    tmp_path: Path,
) -> None:
    server = NatsServer(tmp_path / "store", port=free_port())
    server.start()
    try:
        pid = start(shard_procs, "flappy")
        holding = apps({pid: (GPU1, 5000)})
        idle = apps({})
        fake_gpu.nvidia_smi(FIXTURES / "nvidia-smi" / "a100x2-query-gpu.csv", idle)
        shards = tmp_path / "shards.toml"
        shards.write_text(f'[[shard]]\nid = "flappy"\npid = {pid}\ngpus = [1]\n')
        wait_older_than([pid], 1.2)
        worker = Worker(
            "--nats", server.url, "--node", "n1", "--shards", str(shards), "--grace", "1",
            "--interval", "1", "--no-discover", env=fake_gpu.env(),
        )  # fmt: skip
        workers.append(worker)
        expected = [("fallback", "flappy", "firing"), ("compute", "flappy", "cpu_fallback")]
        deadline = time.monotonic() + 15
        while events_now(server.url) != expected:
            assert time.monotonic() < deadline, "the first verdict never reached the stream"
            time.sleep(0.3)

        resumed = []
        for answer, verdict, state in [
            (holding, "gpu", "resolved"),
            (idle, "cpu_fallback", "firing"),
            (holding, "gpu", "resolved"),
        ]:
            kill(server)
            line = f"fallback {state}: shard flappy"
            said = worker.err().count(line)
            fake_gpu.write("nvidia-smi", "query-compute-apps.csv", answer)
            # The change is judged and queued while the server is away.
            eventually(functools.partial(said_again, worker, line, said))
            server.start()
            back = time.monotonic()
            with RawSubscriber(server.url, "placewatch.telemetry.n1") as sub:
                sub.next(timeout=5)
            resumed.append(time.monotonic() - back)
            expected += [("fallback", "flappy", state), ("compute", "flappy", verdict)]
            deadline = time.monotonic() + 10
            while (seen := events_now(server.url)) != expected:
                assert time.monotonic() < deadline, f"stream holds {seen}, expected {expected}"
                time.sleep(0.3)
        assert all(t < 2 for t in resumed), resumed
        code, _, _, err = worker.stop()
        assert code == 0, err
        assert "Traceback" not in err
        assert err.count("disconnected from NATS") == 3
    finally:
        server.stop()
