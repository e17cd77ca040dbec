"""The DRM usage stats of one file, from fixtures built from the kernel's own printers
(tests/fixtures/drm-fdinfo/README.md names the commits)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from placewatch.worker.gpu.drm_fdinfo import device_bytes
from placewatch.worker.gpu.drm_fdinfo.parse import parse_fdinfo

from tests.support.drm_proc import fdinfo

KiB, MiB = 1 << 10, 1 << 20


def test_xe_names_its_regions_vram0_and_gtt_and_counts_cycles() -> None:
    client = parse_fdinfo(fdinfo("xe-dgpu.txt"))
    assert client is not None
    assert (client.driver, client.pdev, client.client_id) == ("xe", "0000:03:00.0", 3)
    assert client.memory == {
        "gtt": 192 * KiB,
        "stolen": 0,
        "system": 0,
        "vram0": 23992 * KiB,
    }
    assert client.cycles["rcs"] == 28257900
    assert client.total_cycles["rcs"] == 7655183225
    assert client.capacity == {"vcs": 2, "vecs": 2, "ccs": 4}
    assert client.engine_ns == {}
    assert device_bytes(client) == 23992 * KiB


def test_i915_names_its_regions_local0_and_system0_and_counts_ns() -> None:
    client = parse_fdinfo(fdinfo("i915-dgpu.txt"))
    assert client is not None
    assert (client.driver, client.client_id) == ("i915", 11)
    assert client.memory["local0"] == 4198400 * KiB
    assert client.memory["system0"] == 2 * MiB
    assert client.memory["stolen-system0"] == 0
    assert client.engine_ns == {
        "render": 573979900,
        "copy": 0,
        "video": 0,
        "video-enhance": 0,
        "compute": 10047118432,
    }
    assert client.capacity == {"video": 2, "compute": 4}
    assert device_bytes(client) == 4198400 * KiB


def test_amdgpu_resident_wins_over_its_legacy_alias_and_is_not_doubled() -> None:
    client = parse_fdinfo(fdinfo("amdgpu.txt"))
    assert client is not None
    assert (client.driver, client.pdev, client.client_id) == ("amdgpu", "0000:0c:00.0", 1402)
    assert client.memory == {"cpu": 1136 * KiB, "gtt": 2 * MiB, "vram": 96 << 30}
    assert client.engine_ns == {"gfx": 1532177}
    assert device_bytes(client) == 96 << 30


def test_older_amdgpu_writes_drm_memory_only() -> None:
    client = parse_fdinfo(fdinfo("amdgpu-legacy.txt"))
    assert client is not None
    assert client.memory == {"cpu": 0, "gtt": 4096 * KiB, "vram": 8 << 30}
    assert device_bytes(client) == 8 << 30


def test_total_stands_in_where_no_resident_is_written() -> None:
    client = parse_fdinfo("drm-driver: panfrost\ndrm-total-memory: 300 MiB\n")
    assert client is not None
    assert client.memory == {"memory": 300 * MiB}
    assert (client.pdev, client.client_id) == (None, None)


def test_maxfreq_and_bare_byte_counts_read_with_their_units() -> None:
    text = (
        "drm-driver:\tmsm\ndrm-cycles-gpu:\t1000\ndrm-maxfreq-gpu:\t800 MHz\ndrm-memory-x:\t4096\n"
    )
    client = parse_fdinfo(text)
    assert client is not None
    assert client.maxfreq_hz == {"gpu": 800_000_000}
    assert client.memory == {"x": 4096}


def test_an_integrated_gpu_counts_every_region_but_stolen() -> None:
    text = (
        "drm-driver: xe\ndrm-resident-system: 4096 KiB\ndrm-resident-gtt: 2 MiB\n"
        "drm-resident-stolen: 65536\n"
    )
    client = parse_fdinfo(text)
    assert client is not None
    assert device_bytes(client) == 6 * MiB


def test_a_file_that_is_not_a_drm_clients_gives_none() -> None:
    assert parse_fdinfo("pos:\t0\nflags:\t02\nmnt_id:\t26\nino:\t42\n") is None
    assert parse_fdinfo("drm-driver:\tname with spaces\n") is None
    assert parse_fdinfo("") is None


def test_garbage_values_and_keys_are_left_out() -> None:
    text = (
        "drm-driver:\txe\n"
        "drm-pdev:\t0000:03:00.0; rm -rf /\n"
        "drm-client-id:\t-4\n"
        "drm-resident-vram0:\t12 PiB\n"
        "drm-resident-gtt:\t99999999999999999999999 KiB\n"
        "drm-engine-render:\tlots ns\n"
        "drm-engine-capacity-ccs:\t0\n"
        "drm resident vram1:\t4 KiB\n"
        "drm-resident-\u00e9t\u00e9:\t4 KiB\n"
    )
    client = parse_fdinfo(text)
    assert client is not None
    assert (client.pdev, client.client_id) == (None, None)
    assert (client.memory, client.engine_ns, client.capacity) == ({}, {}, {})


def test_a_repeated_key_keeps_its_first_value() -> None:
    client = parse_fdinfo("drm-driver: xe\ndrm-client-id: 3\ndrm-client-id: 4\n")
    assert client is not None and client.client_id == 3


@given(st.text(max_size=400))
def test_any_text_parses_without_raising(text: str) -> None:
    client = parse_fdinfo(text)
    if client is not None:
        assert all(v >= 0 for v in client.memory.values())
