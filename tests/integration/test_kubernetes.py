"""deploy/kubernetes/: the manifests are valid Kubernetes objects (checked against the API's
own JSON schemas, which kubernetes-validate ships, strictly: an unknown key is an error), and
the DaemonSet gives the worker what it needs and no more, the forget CronJob less still."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from placewatch.worker.config import ENV_CONFIG, FIELDS, env_name
from placewatch.worker.forget import duration

from tests.conftest import FIXTURES, ROOT

KUBERNETES = ROOT / "deploy" / "kubernetes"
MANIFESTS = sorted(KUBERNETES.glob("*.yaml"))
VERSIONS = ("1.28.0", "1.37.0")
"""The oldest Kubernetes still widely run that has every field used (appArmorProfile is not
used), and the newest whose schemas kubernetes-validate ships."""
MEASURED_RSS_MIB = 54
"""docs/benchmarks.md: the worker's RSS with NVML loaded on an H200 node."""
FORGET_RSS_MIB_20000_NODES = 124
"""docs/benchmarks.md (Forget over a fleet): forget --silent-for's peak RSS over 20,000 nodes."""


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def validate(document: dict[str, Any], version: str) -> None:
    try:
        import kubernetes_validate
    except ImportError:
        pytest.fail("kubernetes-validate is missing: pip install -e '.[test]' installs it")
    kubernetes_validate.validate(document, version, strict=True)


BUILT_IN = ("v1", "apps/v1", "batch/v1")
"""The API groups kubernetes-validate knows; the others are custom resources, checked
against their CRD's schema (fixtures/kubernetes)."""
CRD_SCHEMAS = {
    "PodMonitor": FIXTURES / "kubernetes" / "podmonitor-v1.schema.json",
    "ServiceMonitor": FIXTURES / "kubernetes" / "servicemonitor-v1.schema.json",
}


def closed(schema: Any) -> Any:
    """The CRD schema refusing what it does not name, as a misspelt field is pruned without a
    word by the API server."""
    if isinstance(schema, dict):
        found = {k: closed(v) for k, v in schema.items()}
        if "properties" in found and not found.get("x-kubernetes-preserve-unknown-fields"):
            found.setdefault("additionalProperties", False)
        return found
    if isinstance(schema, list):
        return [closed(x) for x in schema]
    return schema


def validate_custom(document: dict[str, Any]) -> None:
    """A Prometheus Operator resource against its CRD's schema (fixtures/kubernetes)."""
    import jsonschema

    schema = closed(json.loads(CRD_SCHEMAS[document["kind"]].read_text()))
    jsonschema.validate(document, schema)


def objects() -> dict[str, dict[str, Any]]:
    """Every object of the manifests by kind and name: `Secret/placewatch-nats`."""
    return {
        f"{d['kind']}/{d['metadata']['name']}": d for path in MANIFESTS for d in documents(path)
    }


def daemonset() -> dict[str, Any]:
    return objects()["DaemonSet/placewatch"]


def forget_pod() -> dict[str, Any]:
    pod = objects()["CronJob/placewatch-forget"]["spec"]["jobTemplate"]["spec"]["template"]
    assert isinstance(pod["spec"], dict)
    return pod["spec"]


def worker() -> dict[str, Any]:
    (container,) = daemonset()["spec"]["template"]["spec"]["containers"]
    assert isinstance(container, dict)
    return container


def test_the_manifests_are_a_namespace_account_daemonset_cronjob_and_secrets() -> None:
    assert [p.name for p in MANIFESTS] == [
        "exporter.yaml",
        "forget.yaml",
        "monitoring.yaml",
        "placewatch-intel.yaml",
        "placewatch.yaml",
        "secret.example.yaml",
    ]
    assert sorted(objects()) == [
        "CronJob/placewatch-forget",
        "DaemonSet/placewatch",
        "DaemonSet/placewatch-intel",
        "Deployment/placewatch-exporter",
        "Namespace/placewatch",
        "PodMonitor/placewatch",
        "Secret/placewatch-exporter",
        "Secret/placewatch-forget",
        "Secret/placewatch-nats",
        "Service/placewatch-exporter",
        "ServiceAccount/placewatch",
        "ServiceMonitor/placewatch-exporter",
    ]
    for name, thing in objects().items():
        if thing["kind"] != "Namespace":
            assert thing["metadata"]["namespace"] == "placewatch", name


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_every_object_follows_the_kubernetes_schema(path: Path, version: str) -> None:
    for document in documents(path):
        if document["apiVersion"] in BUILT_IN:
            validate(document, version)
        else:
            assert document["apiVersion"] == "monitoring.coreos.com/v1"
            validate_custom(document)


def test_the_exporter_runs_as_nobody_and_its_service_monitor_names_each_node() -> None:
    import jsonschema

    deployment = objects()["Deployment/placewatch-exporter"]
    pod = deployment["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    assert container["args"] == ["exporter", "--listen", "0.0.0.0:9400"]
    assert pod["spec"]["securityContext"]["runAsUser"] == 65534
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert (container["envFrom"][0]["secretRef"]["name"]) == "placewatch-exporter"
    service = objects()["Service/placewatch-exporter"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    monitor = objects()["ServiceMonitor/placewatch-exporter"]
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == service["spec"]["ports"][0]["name"] == "metrics"
    assert endpoint["metricRelabelings"] == [
        {"sourceLabels": ["Hostname"], "regex": "(.+)", "targetLabel": "instance"}
    ]
    misspelt = {**monitor, "spec": {**monitor["spec"], "endpoint": []}}
    with pytest.raises(jsonschema.ValidationError, match="endpoint"):
        validate_custom(misspelt)


def test_the_pod_monitor_scrapes_the_workers_metrics_port_naming_each_node() -> None:
    import jsonschema

    monitor = objects()["PodMonitor/placewatch"]
    pod = daemonset()["spec"]["template"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    (port,) = worker()["ports"]
    assert (endpoint["port"], port["name"], port["containerPort"]) == ("metrics", "metrics", 9400)
    env = {e["name"]: e.get("value") for e in worker()["env"]}
    assert env["PLACEWATCH_METRICS_LISTEN"] == ":9400"
    assert endpoint["relabelings"] == [
        {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "instance"}
    ]
    misspelt = {**monitor, "spec": {**monitor["spec"], "podMetricEndpoints": []}}
    with pytest.raises(jsonschema.ValidationError, match="podMetricEndpoints"):
        validate_custom(misspelt)
    wrong = {**monitor, "spec": {**monitor["spec"], "podMetricsEndpoints": [{"port": 9400}]}}
    with pytest.raises(jsonschema.ValidationError, match="is not of type 'string'"):
        validate_custom(wrong)


def test_the_schema_check_catches_a_misspelt_key_and_a_wrong_type() -> None:
    import kubernetes_validate

    misspelt = yaml.safe_load(
        (KUBERNETES / "placewatch.yaml").read_text().split("---")[2].replace("hostPID:", "hostPid:")
    )
    with pytest.raises(kubernetes_validate.ValidationError, match="hostPid"):
        validate(misspelt, VERSIONS[-1])
    wrong = daemonset()
    wrong["spec"]["template"]["spec"]["hostPID"] = "yes"
    with pytest.raises(kubernetes_validate.ValidationError, match="'yes' is not of type 'boolean'"):
        validate(wrong, VERSIONS[-1])


def test_the_worker_sees_host_pids_and_every_gpu_without_taking_one() -> None:
    pod = daemonset()["spec"]["template"]["spec"]
    assert pod["hostPID"] is True
    assert pod["runtimeClassName"] == "nvidia"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    assert pod["automountServiceAccountToken"] is False
    env = {e["name"]: e for e in worker()["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    assert env["PLACEWATCH_NODE"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    resources = worker()["resources"]
    assert not any("gpu" in k for part in resources.values() for k in part)


def test_credentials_come_from_the_secret_and_every_variable_is_a_setting() -> None:
    (source,) = worker()["envFrom"]
    secret = objects()["Secret/placewatch-nats"]
    assert source["secretRef"]["name"] == secret["metadata"]["name"]
    known = {env_name(f) for f in FIELDS} | {ENV_CONFIG}
    names = [e["name"] for e in worker()["env"]] + list(secret["stringData"])
    assert {"PLACEWATCH_USER", "PLACEWATCH_PASSWORD"} <= set(secret["stringData"])
    for name in names:
        assert name in known or not name.startswith("PLACEWATCH_"), name


def test_liveness_reads_the_heartbeat_in_a_writable_folder_readiness_asks_the_worker() -> None:
    container = worker()
    assert container["livenessProbe"]["exec"]["command"] == ["placewatch", "health", "--heartbeat"]
    assert container["readinessProbe"]["exec"]["command"] == ["placewatch", "health"]
    health_file = {e["name"]: e.get("value") for e in container["env"]}["PLACEWATCH_HEALTH_FILE"]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert str(Path(health_file).parent) in mounts
    volumes = {v["name"]: v for v in daemonset()["spec"]["template"]["spec"]["volumes"]}
    assert "emptyDir" in volumes[mounts[str(Path(health_file).parent)]]
    # A heartbeat is stale after three of its writer's periods (at most 10 s): the probe's
    # period times its failures outlasts that.
    probe = container["livenessProbe"]
    assert probe["periodSeconds"] * probe["failureThreshold"] > 30


def mib(quantity: str) -> float:
    number, unit = re.fullmatch(r"(\d+)(Mi|Gi)", quantity).groups()  # type: ignore[union-attr]
    return int(number) * (1024 if unit == "Gi" else 1)


def test_its_resources_fit_the_measured_footprint() -> None:
    resources = worker()["resources"]
    assert mib(resources["requests"]["memory"]) >= MEASURED_RSS_MIB
    assert mib(resources["limits"]["memory"]) >= 4 * MEASURED_RSS_MIB
    assert resources["requests"]["cpu"] == "10m"  # 0.35% of a core measured, 3.5m


def test_it_runs_read_only_with_two_capabilities() -> None:
    context = worker()["securityContext"]
    assert context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert context["privileged"] is False
    assert context["capabilities"] == {"drop": ["ALL"], "add": ["SYS_PTRACE", "DAC_READ_SEARCH"]}
    pod = daemonset()["spec"]["template"]["spec"]
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}


def test_it_reads_the_kubelet_s_pod_logs_read_only() -> None:
    """Engines in pods write to stdout; their logs are the kubelet's files (log_path.py)."""
    mounts = {m["mountPath"]: m for m in worker()["volumeMounts"]}
    volumes = {v["name"]: v for v in daemonset()["spec"]["template"]["spec"]["volumes"]}
    for path in ("/var/log/pods", "/var/log/containers"):
        assert mounts[path]["readOnly"] is True
        assert volumes[mounts[path]["name"]]["hostPath"] == {"path": path, "type": "Directory"}
    writable = {p for p, m in mounts.items() if not m.get("readOnly")}
    assert writable == {"/run/placewatch", "/tmp"}


def test_the_intel_worker_reads_sysfs_read_only_and_every_gpu_without_taking_one() -> None:
    intel = objects()["DaemonSet/placewatch-intel"]
    pod = intel["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["hostPID"] is True and "runtimeClassName" not in pod
    assert pod["nodeSelector"] == {"intel.feature.node.kubernetes.io/gpu": "true"}
    # The device plugin's monitoring resource: every GPU's /dev/dri, none taken.
    assert container["resources"]["limits"]["gpu.intel.com/i915_monitoring"] == 1
    assert not any(
        k == "gpu.intel.com/i915" for part in container["resources"].values() for k in part
    )
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["PLACEWATCH_DRM_ROOT"] == "/host/sys/class/drm"
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert mounts["/host/sys"]["readOnly"] is True
    assert volumes[mounts["/host/sys"]["name"]]["hostPath"] == {"path": "/sys", "type": "Directory"}
    assert {p for p, m in mounts.items() if not m.get("readOnly")} == {"/run/placewatch", "/tmp"}
    assert container["securityContext"] == worker()["securityContext"]
    # The same pod labels the PodMonitor scrapes; a selector of its own.
    monitor = objects()["PodMonitor/placewatch"]["spec"]["selector"]["matchLabels"]
    assert monitor.items() <= intel["spec"]["template"]["metadata"]["labels"].items()
    assert intel["spec"]["selector"] != daemonset()["spec"]["selector"]
    known = {env_name(f) for f in FIELDS} | {ENV_CONFIG}
    assert all(n in known or not n.startswith("PLACEWATCH_") for n in env)


def test_forget_runs_daily_one_at_a_time_as_nobody_with_the_forget_credentials() -> None:
    job = objects()["CronJob/placewatch-forget"]["spec"]
    assert job["schedule"] == "17 3 * * *"
    assert job["concurrencyPolicy"] == "Forbid"
    assert job["jobTemplate"]["spec"]["backoffLimit"] == 0
    (container,) = forget_pod()["containers"]
    assert container["args"][:2] == ["forget", "--silent-for"]
    assert duration(container["args"][2]) == 86400
    assert container["image"] == worker()["image"]
    (source,) = container["envFrom"]
    secret = objects()["Secret/" + source["secretRef"]["name"]]
    assert secret["stringData"]["PLACEWATCH_USER"] == "forget"
    known = {env_name(f) for f in FIELDS}
    assert all(
        name in known for name in [*secret["stringData"], *(e["name"] for e in container["env"])]
    )
    # No GPU, no host PIDs, no root, no capability: it only talks to NATS.
    pod = forget_pod()
    assert "hostPID" not in pod and "runtimeClassName" not in pod and "nodeSelector" not in pod
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65534
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert mib(container["resources"]["limits"]["memory"]) >= 4 * FORGET_RSS_MIB_20000_NODES
