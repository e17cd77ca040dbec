"""Lines out of the files that wrap them: the kubelet's CRI format, Docker's json-file and
llama.cpp's --log-jsonl, each written here the way its writer writes it."""

from __future__ import annotations

import json

from placewatch.worker.engines.evidence.read import read_text
from placewatch.worker.engines.evidence.unwrap import MAX_JOINED, Unwrap

from tests.unit.engines.readings import REAL

CPU_BUILD = REAL / "ngl99-lv4.log"


def cri(stream: str, text: str, tag: str = "F") -> str:
    """One entry as containerd's CRI logger writes it."""
    return f"2026-12-06T05:31:02.123456789Z {stream} {tag} {text}"


def docker(stream: str, text: str) -> str:
    return json.dumps({"log": text, "stream": stream, "time": "2026-12-06T05:31:02.1234Z"})


def jsonl(msg: str, kind: str = "log") -> str:
    """llama.cpp's common/log.cpp with --log-jsonl (b11434)."""
    return json.dumps({"type": kind, "time": 3795, "level": "info", "msg": msg})


def unwrapped(lines: list[str]) -> list[str]:
    unwrap = Unwrap()
    return [out for line in lines for out in unwrap.lines(line)]


def test_a_real_log_through_cri_reads_as_the_log() -> None:
    lines = CPU_BUILD.read_text().splitlines()
    wrapped = [cri("stderr", line) for line in lines]
    assert unwrapped(wrapped) == lines
    assert read_text("\n".join(unwrapped(wrapped))) == read_text(CPU_BUILD.read_text())


def test_cri_parts_are_joined_per_stream() -> None:
    lines = [
        cri("stderr", "load_tensors: offloaded 3", "P"),
        cri("stdout", "an unrelated stdout line"),
        cri("stderr", "3/33 layers to GPU"),
        cri("stdout", ""),
    ]
    assert unwrapped(lines) == [
        "an unrelated stdout line",
        "load_tensors: offloaded 33/33 layers to GPU",
        "",
    ]


def test_docker_json_file_lines_and_parts() -> None:
    lines = [
        docker("stderr", "warning: no usable GPU found, "),
        docker("stderr", "--gpu-layers option will be ignored\n"),
        docker("stdout", "plain\r\n"),
    ]
    assert unwrapped(lines) == [
        "warning: no usable GPU found, --gpu-layers option will be ignored",
        "plain",
    ]


def test_jsonl_gives_the_message_and_drops_other_types() -> None:
    lines = [
        "warning: no usable GPU found, --gpu-layers option will be ignored",
        jsonl("srv  llama_server: initializing ...\n"),
        jsonl("", kind="fit_memory_breakdown"),
        jsonl("two\nlines\n"),
    ]
    assert unwrapped(lines) == [
        "warning: no usable GPU found, --gpu-layers option will be ignored",
        "srv  llama_server: initializing ...",
        "two",
        "lines",
    ]


def test_jsonl_inside_docker_is_unwrapped_twice() -> None:
    line = docker("stdout", jsonl("load_tensors: offloaded 33/33 layers to GPU\n") + "\n")
    assert unwrapped([line]) == ["load_tensors: offloaded 33/33 layers to GPU"]


def test_broken_json_and_plain_lines_pass_as_they_are() -> None:
    lines = ['{"log": broken', '{"type": 3}', "2026-12-06 not cri", "{}"]
    assert unwrapped(lines) == lines


def test_a_part_never_ending_stays_bounded() -> None:
    unwrap = Unwrap()
    for _ in range(100):
        assert unwrap.lines(cri("stderr", "x" * 4096, "P")) == []
    (joined,) = unwrap.lines(cri("stderr", "end"))
    assert len(joined) == MAX_JOINED
