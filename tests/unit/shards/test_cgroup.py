"""Which container and pod a process runs in, from /proc/PID/cgroup (tests/fixtures/cgroup)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from placewatch.worker.shards.cgroup import NONE, Container, parse_cgroup, read_container

from tests.conftest import FIXTURES

CGROUP = FIXTURES / "cgroup"
EXPECTED = {
    "docker-v1-cgroupfs.txt": Container(
        "5966eb44e0c6774455113dc30e9a8df5f768064f958507ad239eed24c2c063fe", None
    ),
    "docker-v2-systemd.txt": Container(
        "a83c546dbc4d13dcd6c93f01a9f18630b9c48cb01720800e4ca82984fcb042d9", None
    ),
    "docker-v2-cgroupfs.txt": Container(
        "00633256e25fe71d4fe2c4e12b5eadadace970fccddba416a3966023df2d5c05", None
    ),
    "containerd-v2-systemd-burstable.txt": Container(
        "3c19c840d9f9bacda62d2465be71c2d9e66c0e9819428e8a34c6049fa9998118",
        "e7f137f5-a11b-4c7d-b5a6-b47b57a73cab",
    ),
    "containerd-v2-systemd-guaranteed.txt": Container(
        "83de0b93946a0998d6567964cfbaa4dd12f034c143d2ba1160a8a1e2fdbc4be2",
        "068c193b-f65c-4902-9f77-7337923fe54e",
    ),
    "containerd-v1-cgroupfs-besteffort.txt": Container(
        "10cc80422fb71eac33ba20d253c80a75c85ad6ff6546e4be3379782e12806dcc",
        "33393138-3701-403f-b745-3614dba55617",
    ),
    "containerd-v2-cgroupfs-guaranteed.txt": Container(
        "c67e2041df70b032f3ddcd46e156ceb24223d05b17b98c28ca927d725879f224",
        "b40a5b86-968a-4fa3-8d19-1c7ccf4d7c58",
    ),
    "containerd-v2-systemd-cgroupns.txt": Container(
        "3da4e63cd002f23d471565c1b21e12e50697acafeb32f85845d90e18e1263f18",
        "a7cb440d-a07c-4f71-aec5-b43f7dc919c5",
    ),
    "crio-v2-systemd-burstable.txt": Container(
        "9fdcc21c11570c3ffdd471d22152b5cf90bc4c1046597fc84f9e9d91d95996e3",
        "46004dbf-aad3-44b6-a1b7-5b47fb165944",
    ),
    "crio-v1-systemd-besteffort.txt": Container(
        "e08260732e991a6eb5c6b35d6a5e335733e3fb178dc99b6f768cd6608cac8fa1",
        "ab7c9c6a-b893-4931-a64e-3cd3821ddb24",
    ),
    "crio-conmon-v2-systemd.txt": Container(None, "0dbb2fb3-5db2-4391-bbd8-fc43e311fbce"),
    "podman-v2-rootful.txt": Container(
        "fd9f7c9bb3dbc11e0101a47c13ffdb213b57457b6ac15379d665c9a11a6a4509", None
    ),
    "podman-v2-rootless.txt": Container(
        "9f5c066a7a206c4d66aba91dc51d8ac7ba0d6ec3102d37b3ca48209df90a7533", None
    ),
    "podman-v1-cgroupfs.txt": Container(
        "559ed7e9f1f95e3b762a77709b98e199362f38084363de1125f3032da1fe7d90", None
    ),
    "kind-nested-v2.txt": Container(
        "5dbbcf7c225d10503c828906c03dd4d3d332143b0d9b34cc2ee68902335fca4e",
        "6e97bb2e-0542-4b3f-9cb3-06f43e225b3c",
    ),
    "host-service-v2.txt": NONE,
    "host-user-session-v1.txt": NONE,
    "sandbox-v1-captured.txt": NONE,
}


def test_every_fixture_has_an_expectation() -> None:
    assert sorted(p.name for p in CGROUP.glob("*.txt")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_layout_names_its_container_and_pod(name: str) -> None:
    assert parse_cgroup((CGROUP / name).read_text()) == EXPECTED[name]


def test_the_innermost_container_of_a_nested_path_is_the_process_s() -> None:
    outer = "c1a54922e27c24214989926f84b8b5fc1089aa733219cfe1a2e862d8d31892f6"
    text = (CGROUP / "kind-nested-v2.txt").read_text()
    assert f"docker-{outer}.scope" in text
    assert parse_cgroup(text).container_id != outer


def test_a_hybrid_host_s_root_v2_line_does_not_hide_the_v1_lines() -> None:
    text = (CGROUP / "docker-v1-cgroupfs.txt").read_text()
    assert text.splitlines()[-1] == "0::/"
    assert parse_cgroup(text).container_id is not None


def test_ids_of_the_wrong_length_or_case_are_not_containers() -> None:
    short = "0::/docker/" + "a" * 63 + "\n"
    upper = "0::/system.slice/docker-" + "A" * 64 + ".scope\n"
    uid = "0::/kubepods/podE7F137F5-A11B-4C7D-B5A6-B47B57A73CAB/" + "b" * 64 + "\n"
    assert parse_cgroup(short) == NONE
    assert parse_cgroup(upper) == NONE
    assert parse_cgroup(uid) == Container("b" * 64, None)


@given(st.text(max_size=400))
def test_any_text_parses_without_raising(text: str) -> None:
    found = parse_cgroup(text)
    assert found.container_id is None or len(found.container_id) == 64


def test_read_container_reads_the_process_s_file(tmp_path: Path) -> None:
    (tmp_path / "4242").mkdir()
    (tmp_path / "4242" / "cgroup").write_bytes(
        (CGROUP / "crio-v2-systemd-burstable.txt").read_bytes()
    )
    assert read_container(4242, tmp_path) == EXPECTED["crio-v2-systemd-burstable.txt"]


def test_a_process_that_exited_reads_as_no_container(tmp_path: Path) -> None:
    assert read_container(4242, tmp_path) == NONE


def test_this_process_s_own_file_is_read() -> None:
    import os

    expected = parse_cgroup(Path(f"/proc/{os.getpid()}/cgroup").read_text())
    assert read_container(os.getpid()) == expected
