"""`placewatch doctor` as a user runs it, every check at once: a real nats-server, a fake
nvidia-smi, a fake engine. Each check's own cases are in the test file named after its module."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from placewatch.schemas import DecodeError, NodeTelemetry, decode
from placewatch.worker.doctor.publish import PROBE_BODY

from tests.conftest import GPU0, FakeGpuTools, NatsServer, apps, run_placewatch
from tests.support.doctor import A100_GPUS, TWO_CUDA_DEVICES, fake_engine, lines
from tests.support.natsproto import RawSubscriber


def test_all_ok_against_a_real_server_with_nvidia_smi_and_an_engine(
    tmp_path: Path, fake_gpu: FakeGpuTools, nats_server: NatsServer
) -> None:
    holder = subprocess.Popen(["sleep", "60"])  # a GPU process this worker can read
    try:
        fake_gpu.nvidia_smi(A100_GPUS, apps({holder.pid: (GPU0, 2048)}))
        engine = fake_engine(tmp_path / "cuda-build", TWO_CUDA_DEVICES)
        with RawSubscriber(nats_server.url, "placewatch.telemetry.gpu-07") as sub:
            done = run_placewatch(
                "doctor",
                "--nats",
                nats_server.url,
                "--node",
                "gpu-07",
                "--engine",
                str(engine),
                "--no-discover",  # the engines the suite's other workers run are not this node's
                env=fake_gpu.env(),
            )
            probe = sub.next(timeout=5)
    finally:
        holder.kill()
        holder.wait()
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert not [line for line in out.splitlines() if line.startswith("fail")], out
    (smi,) = lines(out, "GPU tool nvidia-smi")
    assert smi.startswith("ok    GPU tool nvidia-smi: 2 GPUs (2x NVIDIA A100-SXM4-80GB), 1 process")
    assert lines(out, "shard processes") == [
        "ok    shard processes: 1 GPU process in this worker's /proc, 0 engines readable (cmdline, environ)"
    ]
    (reachable,) = lines(out, "server reachable")
    assert reachable.startswith(f"ok    server reachable: {nats_server.url}: TCP connect in ")
    (authenticated,) = lines(out, "server authenticated")
    assert f"connected to {nats_server.url} with no credentials" in authenticated
    assert lines(out, "JetStream")[0].startswith("ok    JetStream: available")
    for name in ("stream PLACEWATCH_EVENTS", "bucket placewatch_compute"):
        assert lines(out, name) == [
            f"ok    {name}: not there yet: the worker creates it when it starts"
        ]
    (publish,) = lines(out, "publish permission")
    assert re.fullmatch(
        r"ok    publish permission: placewatch.telemetry.gpu-07 allowed: a probe no consumer "
        r"reads as telemetry went out \(no stream takes that subject; live subscribers got it\); "
        r"a sample of gpu-07 \(2 GPUs, 0 shards\) is \d+ bytes of telemetry and \d+ of inventory, within max_payload",
        publish,
    ), publish
    # What a subscriber got is no node's telemetry: a consumer cannot read it as one.
    assert probe.headers["Placewatch-Type"] == "DoctorProbe"
    assert probe.payload == PROBE_BODY
    with pytest.raises(DecodeError):
        decode(probe.payload, NodeTelemetry, probe.headers)
    assert lines(out, "engine pre-flight") == [
        f"ok    engine pre-flight: llama-server ({engine}): "
        "CUDA0 NVIDIA A100-SXM4-80GB, CUDA1 NVIDIA A100-SXM4-80GB"
    ]
