"""`placewatch sample`: one tick, no bus, as a user runs it."""

from __future__ import annotations

import json

from .conftest import CORPUS, FIXTURES, FakeGpuTools, needs_corpus, run_placewatch

MiB = 1 << 20


def test_sample_json_reports_gpus_with_exact_bytes_and_null_for_na(fake_gpu: FakeGpuTools) -> None:
    fake_gpu.nvidia_smi(
        FIXTURES / "nvidia-smi" / "a100x2-query-gpu.csv",
        FIXTURES / "nvidia-smi" / "a100x2-query-compute-apps.csv",
    )
    done = run_placewatch("sample", "--json", "--node", "gpu-07", env=fake_gpu.env())
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["node"] == "gpu-07"
    assert doc["schema"] == 1
    assert [g["index"] for g in doc["gpus"]] == [0, 1]
    gpu0, gpu1 = doc["gpus"]
    assert gpu0["memory_used_bytes"] == 40960 * MiB
    assert gpu0["memory_total_bytes"] == 81920 * MiB
    assert gpu0["vendor"] == "nvidia"
    assert [p["pid"] for p in gpu0["processes"]] == [4242, 4317]
    assert gpu1["utilization_pct"] is None
    assert gpu1["temperature_c"] is None
    assert gpu1["power_cap_w"] == 400.0
    host = doc["host"]
    assert host["cpu_count"] >= 1
    assert host["memory_total_bytes"] > host["memory_available_bytes"] > 0
    assert 0 <= host["cpu_pct"] <= 100
    (source,) = doc["sources"]
    assert (source["name"], source["ok"], source["error"]) == ("nvidia-smi", True, None)
    assert doc["sources"][0]["latency_ms"] > 0
    calls = fake_gpu.calls("nvidia-smi")
    assert any(c.split()[1].startswith("--query-gpu=index,uuid") for c in calls)


@needs_corpus
def test_sample_replays_a_real_h100_capture(fake_gpu: FakeGpuTools) -> None:
    here = CORPUS / "nvidia-smi-csv"
    fake_gpu.nvidia_smi(
        here / "utkuozdemir-h100-80gb-hbm3-mig-linux-drv590.48.01-query-gpu-load.csv",
        here / "utkuozdemir-h100-80gb-hbm3-mig-linux-drv590.48.01-query-compute-apps-load.csv",
    )
    done = run_placewatch("sample", "--json", env=fake_gpu.env())
    assert done.returncode == 0, done.stderr
    (gpu,) = json.loads(done.stdout)["gpus"]
    assert gpu["name"] == "NVIDIA H100 80GB HBM3"
    assert gpu["memory_total_bytes"] == 81559 * MiB
    assert gpu["utilization_pct"] is None  # MIG: the tool cannot tell
    assert gpu["power_w"] == 433.78
    assert sorted(p["pid"] for p in gpu["processes"]) == [21180, 21181, 21198]


def test_sample_without_gpu_tools_reports_none_and_exits_0() -> None:
    done = run_placewatch("sample", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["gpus"] == []
    sources = {s["name"]: s for s in doc["sources"]}
    assert not any(s["ok"] for s in sources.values())
    assert sources["nvidia-smi"]["error"] == "nvidia-smi not found on PATH"
    assert sources["nvml"]["error"].startswith(
        ("nvidia-ml-py is not installed", "NVML did not initialise")
    )
    assert {s["vendor"] for s in sources.values()} >= {"nvidia"}
    assert doc["host"]["cpu_count"] >= 1


def test_failing_driver_is_reported_with_its_own_words(fake_gpu: FakeGpuTools) -> None:
    fake_gpu.install("nvidia-smi")
    fake_gpu.write(
        "nvidia-smi",
        "fail",
        "9 NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
    )
    done = run_placewatch("sample", "--json", env=fake_gpu.env())
    assert done.returncode == 0
    (source,) = json.loads(done.stdout)["sources"]
    assert source["ok"] is False
    assert source["error"] == (
        "nvidia-smi exited 9: NVIDIA-SMI has failed because it couldn't communicate "
        "with the NVIDIA driver."
    )


def test_sample_prints_a_readable_summary(fake_gpu: FakeGpuTools) -> None:
    fake_gpu.nvidia_smi(FIXTURES / "nvidia-smi" / "a100x2-query-gpu.csv")
    done = run_placewatch("sample", "--node", "n1", env=fake_gpu.env())
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("node n1 ")
    assert lines[1] == (
        "nvidia GPU 0  NVIDIA A100-SXM4-80GB  util 37%  mem 40.0/80.0 GiB  45 C  212/400 W  0 processes"
    )
    assert (
        lines[2]
        == "nvidia GPU 1  NVIDIA A100-SXM4-80GB  util -  mem 0.0/80.0 GiB  -  -/400 W  0 processes"
    )
    assert lines[-1].startswith("source nvidia-smi (") and lines[-1].endswith(" ok")


def test_schema_lists_every_message() -> None:
    done = run_placewatch("schema")
    assert done.returncode == 0
    defs = json.loads(done.stdout)["$defs"]
    assert {"NodeTelemetry", "ComputeStatus", "FallbackEvent", "PlacementSpec", "GpuSample"} <= set(
        defs
    )
