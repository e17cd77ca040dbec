"""Which container and which Kubernetes pod a shard's process runs in, from /proc/PID/cgroup.

The driver lists host PIDs, and a gateway that places shards knows them by container or pod,
not by PID: a ComputeStatus carries the container's id and the pod's UID so that the two can
be joined. Both are written in the process's cgroup path by the runtime that started it, and
the path does not change while the process runs, so it is read once per process (when
liveness finds it), never each tick.

Layouts understood (tests/fixtures/cgroup/README.md says where each sample comes from):

- cgroup v1 (one line per hierarchy, `N:controllers:/path`) and v2 (`0::/path`); on a hybrid
  host the v2 line is `/` and a v1 line names the container, so every line is looked at;
- Docker: `/docker/<id>` (cgroupfs driver), `/system.slice/docker-<id>.scope` (systemd);
- containerd through the CRI: `cri-containerd-<id>.scope` (systemd driver), a bare `<id>`
  under the pod's folder (cgroupfs driver);
- CRI-O: `crio-<id>.scope`; its `crio-conmon-<id>.scope` is the monitor, not the container;
- Podman: `libpod-<id>.scope` (also with a `/container` child, as Podman 4 and later make
  with cgroup v2), `libpod-<id>` under `libpod_parent` (cgroupfs); `libpod-conmon-` is the
  monitor;
- Kubernetes pods: `kubepods[-QOS]-pod<uid with _>.slice` (systemd driver; guaranteed pods
  have no QOS part; kind's kubelet prefixes `kubelet-`) or `kubepods/[QOS/]pod<uid>`
  (cgroupfs), QOS `burstable` or `besteffort`;
- a path seen from inside another cgroup namespace (a worker in a container on cgroup v2
  reads `/../../kubepods.slice/...`): its segments are read the same way.

A nested container (kind, Docker in Docker) has several ids in its path: the innermost one,
last in the path, is the container the process runs in. Parsing is pure and never raises:
text that names no container gives None for both.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

CONTAINER_ID = re.compile(r"[0-9a-f]{64}")
"""Docker, containerd, CRI-O and Podman all name a container by 64 hex digits."""

_SCOPE = re.compile(
    r"(?:docker|cri-containerd|containerd|crio|libpod)-(?!conmon-)(?P<id>[0-9a-f]{64})"
    r"(?:\.scope)?"
)
"""A systemd scope (or a Podman cgroupfs folder) named after the container."""
_POD_SLICE = re.compile(
    r"(?:^|-)kubepods(?:-(?:burstable|besteffort))?-pod"
    r"(?P<uid>[0-9a-f]{8}(?:_[0-9a-f]{4}){3}_[0-9a-f]{12})\.slice$"
)
"""The systemd cgroup driver writes the pod's UID with `_` for `-` (a `-` splits a slice); a
kubelet given another cgroup root prefixes it (kind's `kubelet-kubepods-...`)."""
_POD_FOLDER = re.compile(r"pod(?P<uid>[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12})")
"""The cgroupfs driver writes the pod's UID as the API server has it."""
CONTAINER_LOGS = Path("/var/log/containers")
"""Where the kubelet links each container's log, named after its pod and itself."""
MAX_CGROUP_BYTES = 64 * 1024
"""More than a cgroup file ever holds (one line per hierarchy): a read stops there."""


@dataclass(frozen=True)
class Container:
    """The container and the pod a process runs in; None where its cgroup names none."""

    container_id: str | None = None
    pod_uid: str | None = None
    namespace: str | None = None
    pod: str | None = None
    name: str | None = None
    """The pod's namespace and name and the container's name, as the kubelet names the
    container's log; None where there is none to read."""


NONE = Container()


def parse_cgroup(text: str) -> Container:
    """The container id and pod UID that /proc/PID/cgroup's text names, if any."""
    container_id: str | None = None
    pod_uid: str | None = None
    for line in text.splitlines():
        _, _, path = line.partition(":")
        _, _, path = path.partition(":")
        found_id, found_uid = _from_path(path.strip())
        container_id = container_id or found_id
        pod_uid = pod_uid or found_uid
    return Container(container_id, pod_uid)


def _from_path(path: str) -> tuple[str | None, str | None]:
    """The last container id and pod UID in one cgroup path: the innermost of nested ones."""
    container_id: str | None = None
    pod_uid: str | None = None
    for segment in path.split("/"):
        scope = _SCOPE.fullmatch(segment)
        if scope:
            container_id = scope["id"]
        elif CONTAINER_ID.fullmatch(segment):
            # cgroupfs drivers: Docker's /docker/<id>, the kubelet's .../pod<uid>/<id>
            container_id = segment
        pod = _POD_SLICE.search(segment) or _POD_FOLDER.fullmatch(segment)
        if pod:
            pod_uid = pod["uid"].replace("_", "-")
    return container_id, pod_uid


def read_container(pid: int, proc_root: Path = Path("/proc")) -> Container:
    """What /proc/PID/cgroup says, with the names the kubelet gives a pod's container, or
    NONE when it cannot be read (the process exited, or a kernel without cgroups). Blocking:
    called where liveness finds a shard's process."""
    try:
        with open(proc_root / str(pid) / "cgroup", "rb") as f:
            raw = f.read(MAX_CGROUP_BYTES)
    except OSError:
        return NONE
    found = parse_cgroup(raw.decode("utf-8", "replace"))
    names = kubelet_names(found.container_id) if found.pod_uid else None
    return replace(found, namespace=names[0], pod=names[1], name=names[2]) if names else found


def kubelet_names(container_id: str | None) -> tuple[str, str, str] | None:
    """A container's namespace, pod and name, from the link the kubelet keeps of its log:
    /var/log/containers/<pod>_<namespace>_<container>-<id>.log (none of the three names may
    hold `_`, which Kubernetes names never do)."""
    if container_id is None or not CONTAINER_ID.fullmatch(container_id):
        return None
    suffix = f"-{container_id}.log"
    try:
        names = [n for n in os.listdir(CONTAINER_LOGS) if n.endswith(suffix)]
    except OSError:
        return None
    parts = names[0].removesuffix(suffix).split("_") if names else []
    return (parts[1], parts[0], parts[2]) if len(parts) == 3 else None
