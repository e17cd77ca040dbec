"""dcgm-exporter's labels beyond a GPU's identity: the driver's version on every series of a
GPU whose tool reads it, and the pod that holds a GPU (its Kubernetes mode), from the shards'
ComputeStatus, in the worker's /metrics and the fleet exporter's alike."""

from __future__ import annotations

from datetime import timedelta

import msgspec
from prometheus_client.parser import text_string_to_metric_families

from placewatch.consumer.exporter.collector import FleetCollector
from placewatch.consumer.snapshot import FleetState
from placewatch.prometheus.exposition import render
from placewatch.prometheus.families import Families
from placewatch.schemas import ComputeStatus, GpuHealth, GpuProcess, NodeSample, lean
from placewatch.worker.latest import Latest
from placewatch.worker.metrics import NodeCollector

from tests.support import fallback_events
from tests.support.held import NOW, holdings, node_sample

DRIVER = "580.159.04"


def status(shard: str, pod: str | None) -> ComputeStatus:
    """The shard's status, computing on its GPU, in pod `pod` (container main of ml)."""
    named = {"pod_namespace": "ml", "pod_name": pod, "container_name": "main"} if pod else {}
    return msgspec.structs.replace(fallback_events.status("gpu", NOW, shard=shard), **named)


def gpu_series(text: str, name: str = "DCGM_FI_DEV_FB_FREE") -> dict[str, dict[str, str]]:
    """Each GPU's labels on metric `name`, by its `gpu` label."""
    found = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name:
                found[s.labels["gpu"]] = s.labels
    return found


def sample(*gpu0: GpuProcess, driver: str | None = DRIVER) -> NodeSample:
    """node_sample's two A100s under `driver`, GPU 0 running `gpu0`'s processes."""
    s = node_sample("gpu-07", NOW - timedelta(seconds=1))
    gpus = [msgspec.structs.replace(g, driver_version=driver) for g in s.gpus]
    gpus[0] = msgspec.structs.replace(gpus[0], processes=list(gpu0))
    return msgspec.structs.replace(s, gpus=gpus)


def served(s: NodeSample, *statuses: ComputeStatus) -> str:
    families = Families()
    families.add(lean.split(s)[1], s, 1.0, statuses=statuses)
    return render(families, openmetrics=True).decode()


def test_every_gpu_series_carries_the_driver_version_after_hostname() -> None:
    text = served(sample())
    labels = gpu_series(text)
    assert labels["0"]["DCGM_FI_DRIVER_VERSION"] == DRIVER
    assert labels["1"]["DCGM_FI_DRIVER_VERSION"] == DRIVER
    assert f'Hostname="gpu-07",DCGM_FI_DRIVER_VERSION="{DRIVER}"}}' in text  # dcgm's order
    assert "DCGM_FI_DRIVER_VERSION" not in gpu_series(served(sample(driver=None)))["0"]


def test_a_gpu_one_pod_holds_is_labelled_with_its_container_namespace_and_pod() -> None:
    processes = (GpuProcess(pid=101, shard="llama"), GpuProcess(pid=102, shard="llama-draft"))
    text = served(
        sample(*processes),
        status("llama", "llama-0"),
        status("llama-draft", "llama-0"),
        status("qwen", "qwen-0"),
    )
    gpu0, gpu1 = gpu_series(text)["0"], gpu_series(text)["1"]
    assert (gpu0["container"], gpu0["namespace"], gpu0["pod"]) == ("main", "ml", "llama-0")
    assert (
        f'DCGM_FI_DRIVER_VERSION="{DRIVER}",container="main",namespace="ml",pod="llama-0"}}' in text
    )
    assert not {"container", "namespace", "pod"} & gpu1.keys()  # idle: held by no pod


def test_a_gpu_is_labelled_with_no_pod_while_it_is_shared_or_holds_a_process_of_none() -> None:
    pods = (status("llama", "llama-0"), status("qwen", "qwen-0"), status("bare", None))
    for processes in (
        (GpuProcess(pid=101, shard="llama"), GpuProcess(pid=103, shard="qwen")),  # two pods
        (GpuProcess(pid=101, shard="llama"), GpuProcess(pid=104, shard=None)),  # no shard's
        (GpuProcess(pid=105, shard="bare"),),  # a shard outside Kubernetes
    ):
        gpu0 = gpu_series(served(sample(*processes), *pods))["0"]
        assert not {"container", "namespace", "pod"} & gpu0.keys(), processes
        assert gpu0["DCGM_FI_DRIVER_VERSION"] == DRIVER


def test_a_gpu_problem_carries_the_same_labels_as_its_readings() -> None:
    s = sample(GpuProcess(pid=101, shard="llama"))
    sick = msgspec.structs.replace(
        s.gpus[0], health=GpuHealth(problems=["XID 79: fell off the bus"])
    )
    text = served(msgspec.structs.replace(s, gpus=[sick, s.gpus[1]]), status("llama", "llama-0"))
    problem = gpu_series(text, "placewatch_gpu_problem")["0"]
    assert problem["problem"] == "XID 79"
    assert {k: v for k, v in problem.items() if k != "problem"} == gpu_series(text)["0"]


def test_the_fleet_exporter_takes_each_shard_s_pod_from_the_view_s_statuses() -> None:
    view = FleetState()
    s = sample(GpuProcess(pid=101, shard="llama"))
    view.shards[("gpu-07", "llama")] = status("llama", "llama-0")
    view.shards[("gpu-07", "qwen")] = status("qwen", None)
    view.shards[("gpu-08", "llama")] = msgspec.structs.replace(
        status("llama", "other-0"), node="gpu-08"
    )
    held = view.holdings(statuses=True)
    assert {node: [s.shard for s in listed] for node, listed in held.statuses.items()} == {
        "gpu-07": ["llama", "qwen"],
        "gpu-08": ["llama"],
    }
    assert view.holdings().statuses == {}  # not asked: a gateway's query pays nothing for them
    content = msgspec.structs.replace(holdings(s), statuses=held.statuses)
    collector = FleetCollector(lambda: content, clock=NOW.timestamp)
    gpu0 = gpu_series(render(collector.collect(), openmetrics=False).decode())["0"]
    assert gpu0["pod"] == "llama-0"


def test_the_worker_s_metrics_take_each_shard_s_pod_from_its_statuses() -> None:
    s = sample(GpuProcess(pid=101, shard="llama"))
    latest = Latest()
    latest.scraped = (lean.split(s)[1], s, NOW.timestamp())
    latest.statuses = [status("llama", "llama-0")]
    collector = NodeCollector(latest, clock=NOW.timestamp)
    gpu0 = gpu_series(render(collector.collect(), openmetrics=True).decode())["0"]
    assert (gpu0["pod"], gpu0["DCGM_FI_DRIVER_VERSION"]) == ("llama-0", DRIVER)
