"""`placewatch doctor` as a user runs it: a real nats-server, a fake nvidia-smi, fake engines.

The fake llama-server builds print what llama.cpp prints for `--list-devices`, in the
formats of ../shared/corpus/engine-logs (llamacpp-*-list-devices-*.log for the device list,
*load-backend*.log and the backend-failed fixture for a CUDA backend that did not load):
the device list on stdout, ggml's own lines on stderr.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import anyio
import pytest

from placewatch.doctor import Check, Engine, Report, preflight
from placewatch.probe import ProbeRunner

from tests.conftest import (
    FIXTURES,
    GPU0,
    FakeGpuTools,
    NatsServer,
    apps,
    free_port,
    real_nvml,
    run_placewatch,
)
from tests.integration.test_security import create_streams_as_admin, node_permissions
from tests.support.natsproto import RawSubscriber

A100_GPUS = FIXTURES / "nvidia-smi" / "a100x2-query-gpu.csv"

TWO_CUDA_DEVICES = (
    "ggml_cuda_init: GGML_CUDA_FORCE_MMQ:    no\n"
    "ggml_cuda_init: GGML_CUDA_FORCE_CUBLAS: no\n"
    "ggml_cuda_init: found 2 CUDA devices:\n"
    "  Device 0: NVIDIA A100-SXM4-80GB, compute capability 8.0, VMM: yes\n"
    "  Device 1: NVIDIA A100-SXM4-80GB, compute capability 8.0, VMM: yes\n",
    "Available devices:\n"
    "  CUDA0: NVIDIA A100-SXM4-80GB (81050 MiB, 80614 MiB free)\n"
    "  CUDA1: NVIDIA A100-SXM4-80GB (81050 MiB, 81047 MiB free)\n",
)
"""(stderr, stdout) of a CUDA build of llama-server on two A100s."""

CUDA_BACKEND_FAILED = (
    "load_backend: failed to load /opt/llama.cpp/lib/libggml-cuda.so: libcublas.so.12: "
    "cannot open shared object file: No such file or directory\n"
    "load_backend: loaded CPU backend from /opt/llama.cpp/lib/libggml-cpu-haswell.so\n",
    "Available devices:\n",
)
"""The same build where libggml-cuda.so cannot find its CUDA runtime: no device at all."""


def fake_engine(folder: Path, output: tuple[str, str]) -> Path:
    """An executable named llama-server that answers --list-devices as a real build does."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "stderr.txt").write_text(output[0])
    (folder / "stdout.txt").write_text(output[1])
    engine = folder / "llama-server"
    engine.write_text(
        "#!/bin/sh\n"
        '[ "$1" = "--list-devices" ] || exit 2\n'
        f'cat "{folder}/stderr.txt" >&2\n'
        f'cat "{folder}/stdout.txt"\n'
    )
    engine.chmod(0o755)
    return engine


def lines(out: str, name: str) -> list[str]:
    """The report's lines of one check, by the name after the outcome."""
    return [line for line in out.splitlines() if line[6:].startswith(f"{name}:")]


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
                env=fake_gpu.env(),
            )
            published = json.loads(sub.next(timeout=5).payload)
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
    assert publish.startswith("ok    publish permission: a NodeTelemetry of gpu-07 (2 GPUs, ")
    assert publish.endswith("went out on placewatch.telemetry.gpu-07")
    assert published["node"] == "gpu-07"
    assert [g["index"] for g in published["gpus"]] == [0, 1]
    assert lines(out, "engine pre-flight") == [
        f"ok    engine pre-flight: llama-server ({engine}): "
        "CUDA0 NVIDIA A100-SXM4-80GB, CUDA1 NVIDIA A100-SXM4-80GB"
    ]


def test_a_node_without_gpu_tools_fails_with_what_to_install(fake_gpu: FakeGpuTools) -> None:
    if real_nvml():
        pytest.skip("a real NVML answers on this machine")
    done = run_placewatch("doctor", "--nats", f"nats://127.0.0.1:{free_port()}", env=fake_gpu.env())
    assert done.returncode == 1
    (nvml_line,) = lines(done.stdout, "GPU tool nvml")
    assert nvml_line.startswith("skip  GPU tool nvml: NVML did not initialise: ")
    assert lines(done.stdout, "GPU tool nvidia-smi") == [
        "skip  GPU tool nvidia-smi: nvidia-smi not found on PATH"
    ]
    assert lines(done.stdout, "GPU tools") == [
        "fail  GPU tools: none found: no NVML, nvidia-smi, rocm-smi or amd-smi; next: install the "
        "NVIDIA driver (NVML, and nvidia-smi on the worker's PATH), or ROCm's rocm-smi or amd-smi "
        "on the worker's PATH"
    ]
    env = fake_gpu.env() | {"PLACEWATCH_GPU_SOURCES": "rocm-smi"}
    done = run_placewatch("doctor", "--nats", f"nats://127.0.0.1:{free_port()}", env=env)
    assert [line for line in done.stdout.splitlines() if "GPU tool" in line] == [
        "skip  GPU tool rocm-smi: rocm-smi not found on PATH",
        "fail  GPU tools: none found: no rocm-smi; next: install the NVIDIA driver (NVML, and "
        "nvidia-smi on the worker's PATH), or ROCm's rocm-smi or amd-smi on the worker's PATH; "
        "or widen gpu_sources (now rocm-smi)",
    ]


def test_no_server_at_the_url_fails_reachability_with_what_to_do(
    fake_gpu: FakeGpuTools,
) -> None:
    fake_gpu.nvidia_smi(A100_GPUS)
    port = free_port()
    done = run_placewatch("doctor", "--nats", f"nats://127.0.0.1:{port}", env=fake_gpu.env())
    assert done.returncode == 1
    (reachable,) = lines(done.stdout, "server reachable")
    assert reachable.startswith(f"fail  server reachable: nats://127.0.0.1:{port}: ")
    assert "refused" in reachable
    assert f"; next: check that nats-server runs on 127.0.0.1 port {port}" in reachable
    for name in ("server authenticated", "JetStream", "publish permission"):
        assert lines(done.stdout, name) == [f"skip  {name}: no server reachable"]


def test_a_wrong_password_fails_authentication_and_no_secret_is_printed(
    tmp_path: Path, fake_gpu: FakeGpuTools
) -> None:
    server = NatsServer(
        tmp_path / "js", config="authorization { user: n1, password: s3cret-right-pw }\n"
    )
    server.start()
    try:
        env = fake_gpu.env() | {"PLACEWATCH_USER": "n1", "PLACEWATCH_PASSWORD": "s3cret-wrong-pw"}
        url = server.url.replace("nats://", "nats://n1:s3cret-url-pw@")
        done = run_placewatch("doctor", "--nats", url, env=env)
    finally:
        server.stop()
    assert done.returncode == 1
    (authenticated,) = lines(done.stdout, "server authenticated")
    assert authenticated.startswith(
        "fail  server authenticated: the server refused the credentials"
    )
    assert "Authorization Violation" in authenticated
    assert authenticated.endswith(
        "; next: check the user and password (PLACEWATCH_USER, PLACEWATCH_PASSWORD)"
    )
    (reachable,) = lines(done.stdout, "server reachable")
    assert reachable.startswith(f"ok    server reachable: nats://***@127.0.0.1:{server.port}")
    for secret in ("s3cret-right-pw", "s3cret-wrong-pw", "s3cret-url-pw"):
        assert secret not in done.stdout + done.stderr


def test_a_refused_publish_and_missing_streams_under_no_create_say_what_to_do(
    tmp_path: Path, fake_gpu: FakeGpuTools
) -> None:
    server = NatsServer(
        tmp_path / "js",
        config="authorization { users = [ {user: n1, password: n1-password, permissions: "
        '{publish: {deny: ["placewatch.telemetry.>"]}}} ] }\n',
    )
    server.start()
    try:
        env = fake_gpu.env() | {"PLACEWATCH_USER": "n1", "PLACEWATCH_PASSWORD": "n1-password"}
        done = run_placewatch(
            "doctor", "--nats", server.url, "--node", "n1", "--no-create", env=env
        )
    finally:
        server.stop()
    assert done.returncode == 1
    (publish,) = lines(done.stdout, "publish permission")
    assert publish.startswith(
        "fail  publish permission: the server refused a NodeTelemetry on placewatch.telemetry.n1 "
        '(permissions violation for publish to "placewatch.telemetry.n1")'
    )
    assert "docs/operations.md (Least privilege)" in publish
    (events,) = lines(done.stdout, "stream PLACEWATCH_EVENTS")
    assert events == (
        "fail  stream PLACEWATCH_EVENTS: does not exist, and --no-create is set; next: an "
        "operator creates it: nats stream add PLACEWATCH_EVENTS --subjects "
        "'placewatch.compute.>,placewatch.fallback.>' --storage file --replicas 1 "
        "--dupe-window 5m --defaults"
    )
    (compute,) = lines(done.stdout, "bucket placewatch_compute")
    assert compute.endswith(
        "nats kv add placewatch_compute --history 1 --storage file --replicas 1"
    )
    assert "n1-password" not in done.stdout + done.stderr


def test_an_engine_whose_cuda_backend_failed_to_load_fails_with_what_to_check(
    tmp_path: Path, fake_gpu: FakeGpuTools
) -> None:
    fake_gpu.nvidia_smi(A100_GPUS)
    good = fake_engine(tmp_path / "good", TWO_CUDA_DEVICES)
    broken = fake_engine(tmp_path / "broken", CUDA_BACKEND_FAILED)
    done = run_placewatch(
        "doctor",
        "--nats",
        f"nats://127.0.0.1:{free_port()}",
        "--engine",
        str(good),
        "--engine",
        str(broken),
        env=fake_gpu.env(),
    )
    assert done.returncode == 1
    ok, failed = lines(done.stdout, "engine pre-flight")
    assert ok.startswith(f"ok    engine pre-flight: llama-server ({good}): CUDA0 NVIDIA A100")
    assert failed.startswith(
        f"fail  engine pre-flight: llama-server ({broken}): its GPU backend failed: "
        "load_backend: failed to load /opt/llama.cpp/lib/libggml-cuda.so: libcublas.so.12: "
        "cannot open shared object file"
    )
    assert "; next: run ldd /opt/llama.cpp/lib/libggml-cuda.so and install what it lists" in failed
    assert "CUDA runtime (libcudart, libcublas)" in failed


def test_a_gpu_process_missing_from_proc_asks_for_the_hosts_pid_namespace(
    fake_gpu: FakeGpuTools,
) -> None:
    fake_gpu.nvidia_smi(A100_GPUS, apps({4194300: (GPU0, 38912)}))  # above any pid_max
    done = run_placewatch("doctor", "--nats", f"nats://127.0.0.1:{free_port()}", env=fake_gpu.env())
    assert done.returncode == 1
    assert lines(done.stdout, "shard processes") == [
        "fail  shard processes: the GPU tools list 1 process not in this worker's /proc "
        "(4194300 on nvidia GPU 0): the worker runs in a container without the host's PID "
        "namespace and sees no engine PIDs; next: run the worker with the host's PID namespace "
        "(docker run --pid=host / pid: host)"
    ]


def test_all_ok_under_the_documented_least_privilege_with_streams_made_by_an_operator(
    tmp_path: Path, fake_gpu: FakeGpuTools
) -> None:
    server = NatsServer(tmp_path / "js", config=node_permissions("n1", "n1pw"))
    server.start()
    try:
        anyio.run(create_streams_as_admin, server.url)
        fake_gpu.nvidia_smi(A100_GPUS)
        env = fake_gpu.env() | {"PLACEWATCH_USER": "n1", "PLACEWATCH_PASSWORD": "n1pw"}
        done = run_placewatch(
            "doctor", "--nats", server.url, "--node", "n1", "--no-create", env=env
        )
    finally:
        server.stop()
    assert done.returncode == 0, done.stdout
    assert lines(done.stdout, "stream PLACEWATCH_TELEMETRY") == [
        "ok    stream PLACEWATCH_TELEMETRY: 0 messages, subjects placewatch.telemetry.*, R1"
    ]
    assert lines(done.stdout, "bucket placewatch_placements") == [
        "ok    bucket placewatch_placements: 0 keys, history 1"
    ]
    (authenticated,) = lines(done.stdout, "server authenticated")
    assert "with user n1 " in authenticated
    assert lines(done.stdout, "publish permission")[0].startswith("ok    publish permission: ")


def shell_engine(folder: Path, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    engine = folder / "llama-server"
    engine.write_text(f"#!/bin/sh\n{body}\n")
    engine.chmod(0o755)
    return engine


def test_preflight_runs_a_shards_build_with_its_library_path_and_device_mask(
    tmp_path: Path,
) -> None:
    engine = shell_engine(
        tmp_path,
        'echo "Available devices:"\n'
        'echo "  CUDA0: NVIDIA L4 mask=$CUDA_VISIBLE_DEVICES libs=$LD_LIBRARY_PATH '
        '(22563 MiB, 22300 MiB free)"',
    )
    shard = Engine(
        str(engine),
        ("llama-server-8081",),
        (("LD_LIBRARY_PATH", "/opt/cuda/lib64"), ("CUDA_VISIBLE_DEVICES", "1")),
    )
    check = anyio.run(preflight, shard, ProbeRunner(10), 2)
    assert check == Check(
        "engine pre-flight",
        "ok",
        f"llama-server ({engine}) of llama-server-8081: "
        "CUDA0 NVIDIA L4 mask=1 libs=/opt/cuda/lib64",
    )


def test_preflight_skips_a_build_older_than_list_devices(tmp_path: Path) -> None:
    engine = shell_engine(tmp_path, 'echo "error: invalid argument: $1" >&2\nexit 1')
    check = anyio.run(preflight, Engine(str(engine)), ProbeRunner(10), 2)
    assert check.outcome == "skip"
    assert "this build has no --list-devices" in check.found


def test_report_lines_never_hold_a_secret_or_url_credentials() -> None:
    said: list[str] = []
    report = Report(said.append, ["hunter2-token", "abc"])
    report.fail("x", "nats://u:pw-in-url@host:4222 said hunter2-token", "check abc")
    # Under 4 characters a secret is not hunted for: every "abc" in the text would go.
    assert said == ["fail  x: nats://***@host:4222 said ***; next: check abc"]
    assert report.failed
