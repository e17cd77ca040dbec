"""An engine in a pod: its log found from its cgroup through the kubelet's files, and read
through the CRI format as the plain log reads.

The /var/log/pods tree is laid out as the kubelet lays it out, and the CRI file written by a
CRI-format writer (containerd's: `<RFC 3339 nano time> <stream> <F|P> <text>`, lines cut in
16 KiB parts) from a real llama-server b11434's output; the cgroup is a captured containerd
one (tests/fixtures/cgroup/README.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio

from placewatch.worker.engines.evidence.follow import EngineLogs, Log
from placewatch.worker.engines.evidence.read import read_text
from placewatch.worker.engines.evidence.source import PathLog
from placewatch.worker.shards.cgroup import parse_cgroup
from placewatch.worker.shards.discover.log_path import container_log

from tests.conftest import FIXTURES

CGROUP = FIXTURES / "cgroup" / "containerd-v2-systemd-burstable.txt"
REAL = FIXTURES / "engine-logs" / "real-b11434" / "ngl99-lv4.log"
POD_UID = "e7f137f5-a11b-4c7d-b5a6-b47b57a73cab"
PART = 16 * 1024


def cri_write(out: Path, text: str, stream: str = "stderr", part: int = PART) -> None:
    """Each line as containerd's CRI logger writes it, cut in parts of `part` characters."""
    with out.open("a") as f:
        for line in text.splitlines():
            pieces = [line[i : i + part] for i in range(0, len(line), part)] or [""]
            for n, piece in enumerate(pieces):
                tag = "F" if n == len(pieces) - 1 else "P"
                f.write(f"2026-12-06T05:31:02.{n:09d}Z {stream} {tag} {piece}\n")


def kubelet_tree(root: Path, container_id: str) -> Path:
    """/var/log/pods/<ns>_<pod>_<uid>/<container>/0.log and its /var/log/containers link."""
    folder = root / "pods" / f"llm_llama-7b-0_{POD_UID}" / "llama"
    folder.mkdir(parents=True)
    log = folder / "0.log"
    log.touch()
    (root / "containers").mkdir()
    (root / "containers" / f"llama-7b-0_llm_llama-{container_id}.log").symlink_to(log)
    return log


def read(source: PathLog) -> object:
    async def main() -> object:
        logs = EngineLogs()
        async with anyio.create_task_group() as tg:
            await tg.start(logs.run)
            found = (await logs.read({"a": Log(source, 1)}))["a"]
            tg.cancel_scope.cancel()
        return found

    return anyio.run(main, backend="asyncio")


def test_a_pod_s_engine_log_is_found_from_its_cgroup_and_read_as_plain(tmp_path: Path) -> None:
    container = parse_cgroup(CGROUP.read_text())
    assert container.pod_uid == POD_UID and container.container_id is not None
    log = kubelet_tree(tmp_path, container.container_id)
    cri_write(log, REAL.read_text(), part=40)  # parts joined as the runtime cut them
    found = container_log(
        container.container_id, 1, logs=tmp_path / "containers", pods=tmp_path / "pods"
    )
    assert found == PathLog(str(log), 1, runtime_dir=str(tmp_path / "pods"))
    said = read(found)
    assert said == read_text(REAL.read_text())
    assert said.gpu_failed == "warning: no usable GPU found, --gpu-layers option will be ignored"


def test_docker_s_json_file_log_outside_kubernetes(tmp_path: Path) -> None:
    cid = "a" * 64
    folder = tmp_path / "docker" / cid
    folder.mkdir(parents=True)
    log = folder / f"{cid}-json.log"
    log.write_text(
        "".join(
            json.dumps({"log": line + "\n", "stream": "stderr", "time": "2026-12-06T05:31:02Z"})
            + "\n"
            for line in REAL.read_text().splitlines()
        )
    )
    found = container_log(cid, 1, logs=tmp_path / "none", docker=tmp_path / "docker")
    assert found == PathLog(str(log), 1, runtime_dir=str(tmp_path / "docker"))
    assert read(found) == read_text(REAL.read_text())


def test_no_log_for_a_process_in_no_container_or_an_id_not_kept(tmp_path: Path) -> None:
    kubelet_tree(tmp_path, "b" * 64)
    assert container_log(None, logs=tmp_path / "containers") is None
    assert container_log("c" * 64, logs=tmp_path / "containers", docker=tmp_path) is None
    assert container_log("../" + "b" * 61, logs=tmp_path / "containers") is None
