"""Intel GPUs from i915's and xe's sysfs files, in trees built from the kernel's ABI
documents (tests/fixtures/intel-sysfs/README.md)."""

from __future__ import annotations

from pathlib import Path

import anyio

from placewatch.worker.gpu.intel_sysfs import EnergyClock, IntelSysfsSource
from placewatch.worker.gpu.intel_sysfs.read import intel_cards, read_cards

from tests.conftest import FIXTURES

TREES = FIXTURES / "intel-sysfs"
GiB = 1 << 30


class Clock:
    """A monotonic clock a test moves."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_only_intel_cards_count_not_connectors_render_nodes_or_a_bmc() -> None:
    arc = intel_cards(TREES / "arc-a770-i915")
    assert [(c.path.name, c.bus_id, c.driver, c.pci_id) for c in arc] == [
        ("card0", "0000:03:00.0", "i915", "8086:56a0")
    ]
    assert [c.path.name for c in intel_cards(TREES / "b580-xe")] == ["card1"]  # card0: ASPEED


def test_i915_gives_energy_the_pl1_limit_and_the_clock_but_no_temperature() -> None:
    (r,) = read_cards(TREES / "arc-a770-i915")
    assert (r.energy_uj, r.power_cap_w, r.clock_mhz) == (8843020431, 190.0, 2100)
    assert (r.temperature_c, r.memory_temperature_c, r.vram_bytes) == (None, None, None)


def test_xe_gives_package_and_vram_temperatures_vram_and_the_package_limit() -> None:
    (r,) = read_cards(TREES / "b580-xe")
    assert (r.energy_uj, r.clock_mhz, r.vram_bytes) == (412903518233, 2850, 12 * GiB)
    assert r.power_cap_w == 190.0  # power1_max 0 is the card's PL1 disabled
    assert (r.temperature_c, r.memory_temperature_c) == (54.0, 60.0)


def test_labels_name_the_temperatures_where_the_driver_writes_them(tmp_path: Path) -> None:
    card = tmp_path / "card0"
    hwmon = card / "device" / "hwmon" / "hwmon1"
    hwmon.mkdir(parents=True)
    (card / "device" / "uevent").write_text(
        "DRIVER=xe\nPCI_ID=8086:E20B\nPCI_SLOT_NAME=0000:0A:00.0\n"
    )
    for name, value in {
        "name": "xe", "temp1_input": "71000", "temp1_label": "vram",
        "temp2_input": "48000", "temp2_label": "pkg",
    }.items():  # fmt: skip
        (hwmon / name).write_text(value + "\n")
    (r,) = read_cards(tmp_path)
    assert (r.card.bus_id, r.temperature_c, r.memory_temperature_c) == ("0000:0a:00.0", 48.0, 71.0)
    assert (r.energy_uj, r.power_cap_w) == (None, None)


def test_power_is_the_energys_rise_over_the_time_between_reads() -> None:
    clock = EnergyClock()
    assert clock.power_w("a", 10_000_000, 1.0) is None  # the first read: nothing to compare
    assert clock.power_w("a", 310_000_000, 3.0) == 150.0
    assert clock.power_w("a", 5, 4.0) is None  # the counter went back: a reload
    assert clock.power_w("a", 20_000_005, 5.0) == 20.0
    assert clock.power_w("a", None, 6.0) is None


def test_the_source_samples_each_card_and_reads_power_from_the_second_tick(tmp_path: Path) -> None:
    clock = Clock()
    source = IntelSysfsSource(TREES / "arc-a770-i915", clock)
    assert source.unavailable() is None
    (first,), status = anyio.run(source.sample, backend="asyncio")
    assert (status.name, status.vendor, status.ok, status.error) == (
        "intel-sysfs",
        "intel",
        True,
        None,
    )
    assert (first.index, first.vendor, first.name) == (0, "intel", "Intel GPU 8086:56a0 (i915)")
    assert (first.power_w, first.power_cap_w, first.sm_clock_mhz) == (None, 190.0, 2100)
    assert first.energy_j == 8843.020431
    assert (first.utilization_pct, first.memory_used_bytes) == (None, None)  # no such file
    clock.now += 2
    (again,), _ = anyio.run(source.sample, backend="asyncio")
    assert again.power_w == 0.0  # the fixture's counter did not move: 0 W, a reading


def test_no_intel_gpu_says_what_to_check() -> None:
    source = IntelSysfsSource("/nonexistent/drm")
    assert "no Intel GPU under /nonexistent/drm" in (source.unavailable() or "")
    assert "lsmod | grep -e i915 -e xe" in (source.unavailable() or "")
    gpus, status = anyio.run(source.sample, backend="asyncio")
    assert (gpus, status.ok) == ([], False)
