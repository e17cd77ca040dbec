"""The journal's export format read into entries, a service named from its cgroup, and what
journalctl's refusal says: pure, never raising, a hostile MESSAGE cut and unable to make
another field or entry."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from placewatch.worker.engines.evidence.journal import unit_of, valid_unit
from placewatch.worker.engines.evidence.journal.export import Entry, parse
from placewatch.worker.engines.evidence.journal.folders import GROUP_ADVICE
from placewatch.worker.engines.evidence.journal.run import Run
from placewatch.worker.engines.evidence.journal.tail import _failed


def text(cursor: str, message: str) -> bytes:
    return f"__CURSOR={cursor}\n__REALTIME_TIMESTAMP=1\n_BOOT_ID=ab\nMESSAGE={message}\n\n".encode()


def binary(cursor: str, message: bytes) -> bytes:
    size = struct.pack("<Q", len(message))
    return f"__CURSOR={cursor}\n".encode() + b"MESSAGE\n" + size + message + b"\n\n"


def test_text_and_binary_messages_are_read_as_their_bytes() -> None:
    data = text("a", "load_tensors: offloaded 2/33 layers to GPU") + binary("b", b"x\n\x00y")
    parsed = parse(data, 1024)
    assert parsed.entries == [
        Entry("a", b"load_tensors: offloaded 2/33 layers to GPU"),
        Entry("b", b"x\n\x00y"),
    ]
    assert parsed.used == len(data) and parsed.partial is None


def test_a_message_cannot_make_another_field_or_entry() -> None:
    forged = b"ok\n\n__CURSOR=forged\nMESSAGE=load_tensors: offloaded 33/33 layers to GPU"
    parsed = parse(binary("a", forged), 1024)
    assert [e.cursor for e in parsed.entries] == ["a"]
    assert parsed.entries[0].message == forged


def test_a_huge_message_is_cut_and_the_entry_ends_where_its_size_says() -> None:
    data = binary("a", b"\xff" * 100_000) + text("b", "next")
    parsed = parse(data, 4096)
    assert parsed.entries == [Entry("a", b"\xff" * 4096, cut=True), Entry("b", b"next")]


def test_output_cut_inside_an_entry_keeps_it_apart() -> None:
    whole = text("a", "one")
    data = whole + binary("b", b"z" * 10_000)[:5000]
    parsed = parse(data, 64)
    assert parsed.entries == [Entry("a", b"one")] and parsed.used == len(whole)
    assert parsed.partial == Entry("b", b"z" * 64, cut=True)


def test_text_that_is_not_the_format_ends_the_entries() -> None:
    parsed = parse(text("a", "one") + b"garbage without a name = \n\n", 64)
    assert parsed.entries == [Entry("a", b"one")]


@given(st.binary(max_size=2048))
def test_any_bytes_parse_without_raising(data: bytes) -> None:
    parsed = parse(data, 256)
    assert parsed.used <= len(data)
    assert all(len(e.message) <= 256 for e in parsed.entries)


@pytest.mark.parametrize(
    ("cgroup", "unit"),
    [
        ("0::/system.slice/ollama.service\n", "ollama.service"),
        ("0::/system.slice/vllm@gpu0.service\n", "vllm@gpu0.service"),
        ("12:pids:/x\n1:name=systemd:/system.slice/llama.service\n0::/\n", "llama.service"),
        ("0::/system.slice/docker-" + "a" * 64 + ".scope\n", None),
        ("0::/kubepods.slice/kubepods-pod1.slice/cri-containerd-x.scope\n", None),
        ("0::/user.slice/user-1000.slice/user@1000.service/app.slice/a.service\n", None),
        ("0::/system.slice/-rf.service\n", None),
        ("", None),
    ],
)
def test_the_service_a_cgroup_names(cgroup: str, unit: str | None) -> None:
    assert unit_of(cgroup) == unit


def test_a_unit_name_is_never_an_option() -> None:
    assert valid_unit("ollama.service")
    assert not valid_unit("--file=/etc/shadow.service") and not valid_unit("a b.service")


def test_journalctl_refused_by_permissions_says_which_group_reads_the_journal() -> None:
    denied = Run(b"", b"Failed to open files: Permission denied\n", 1)
    assert _failed(denied) == (
        "journalctl may not read the journal (Failed to open files: Permission denied): "
        f"{GROUP_ADVICE}"
    )
    other = Run(b"", b"\x1b[31mFailed to open files: Bad message\x1b[0m\n", 1)
    assert _failed(other) == (
        "journalctl could not read the journal (exit status 1:  [31mFailed to open files: "
        "Bad message [0m)"
    )
