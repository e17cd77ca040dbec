"""nvidia-smi's health readings (GpuHealth, clocks, memory utilization, fan) from its CSV
and XML: the project's own fixtures, real captures in ../shared/corpus (skipped where it
is absent), and fuzzed cells and elements that must give None or a valid value."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from placewatch.schemas import GpuSample
from placewatch.schemas.health import CLOCK_EVENT_BITS
from placewatch.worker.gpu.clock_events import clock_event_names, parse_mask
from placewatch.worker.gpu.health import assess
from placewatch.worker.gpu.nvidia_smi import GPU_FIELDS
from placewatch.worker.gpu.nvidia_smi.query_csv import parse_gpus
from placewatch.worker.gpu.nvidia_smi.query_xml import parse_xml

from tests.conftest import CORPUS, FIXTURES, corpus_files, needs_corpus

OWN = FIXTURES / "nvidia-smi"
CSV = CORPUS / "nvidia-smi-csv"
XML = CORPUS / "nvidia-smi-xml"


def valid(gpu: GpuSample) -> GpuSample:
    """`gpu` through the wire and back: msgspec checks every constraint of the contract."""
    again = msgspec.json.decode(msgspec.json.encode(gpu), type=GpuSample)
    assert again == gpu
    return again


def test_clock_event_mask_decodes_to_names_in_bit_order() -> None:
    assert clock_event_names(0) == []
    assert clock_event_names(0x41) == ["gpu_idle", "hw_thermal_slowdown"]
    assert clock_event_names(0x1FF) == list(CLOCK_EVENT_BITS.values())
    assert clock_event_names(0x8000000000000000 | 0x4) == ["sw_power_cap"]  # unknown bit
    assert parse_mask("0x0000000000000001") == 1
    assert parse_mask("[Not Supported]") is None
    assert parse_mask("41") is None  # not the tool's hex form


def test_query_asks_for_health_by_names_every_driver_since_mig_knows() -> None:
    assert "clocks_throttle_reasons.active" in GPU_FIELDS
    assert "pcie.link.gen.current" in GPU_FIELDS
    assert not any(f.startswith("remapped_rows.") for f in GPU_FIELDS)


def test_own_csv_fixture_reads_health_and_a_fatal_ecc_count() -> None:
    healthy, hot = (valid(g) for g in parse_gpus((OWN / "a100x2-query-gpu-health.csv").read_text()))
    assert (healthy.sm_clock_mhz, healthy.memory_clock_mhz) == (1410, 1593)
    assert healthy.memory_util_pct == 12
    assert healthy.fan_pct is None  # [N/A]: passively cooled
    assert healthy.energy_j is None  # no CSV field gives it
    h = healthy.health
    assert h is not None
    assert (h.ecc_corrected_volatile, h.ecc_uncorrected_volatile) == (4, 0)
    assert (h.ecc_corrected_aggregate, h.ecc_uncorrected_aggregate) == (17, 0)
    assert (h.retired_pages_sbe, h.retired_pages_dbe, h.retired_pages_pending) == (None,) * 3
    assert h.remapped_rows_pending is None  # not asked for: see nvidia_smi.py
    assert h.clock_events == []
    assert (h.pcie_gen, h.pcie_width, h.pcie_replays) == (4, 16, None)
    assert assess(healthy).health == h  # nothing fatal
    assert hot.health is not None
    assert hot.health.clock_events == ["gpu_idle", "hw_thermal_slowdown"]
    assert hot.health.pcie_width == 8
    judged = assess(hot).health
    assert judged is not None and not judged.healthy
    assert judged.problems[0].startswith("2 uncorrected ECC error(s) since the last reset")


def test_csv_without_health_columns_has_no_health() -> None:
    gpus = parse_gpus((OWN / "a100x2-query-gpu.csv").read_text())
    assert [g.health for g in gpus] == [None, None]
    assert [g.sm_clock_mhz for g in gpus] == [None, None]


def test_per_reason_columns_stand_in_for_a_missing_mask() -> None:
    text = (
        "index, clocks_throttle_reasons.active, clocks_throttle_reasons.gpu_idle, "
        "clocks_throttle_reasons.sw_power_cap, clocks_throttle_reasons.hw_slowdown\n"
        "0, [N/A], Not Active, Active, Active\n"
    )
    (gpu,) = parse_gpus(text)
    assert gpu.health is not None
    assert gpu.health.clock_events == ["sw_power_cap", "hw_slowdown"]


def test_health_cells_seen_before_read_as_before_and_a_changed_count_at_once() -> None:
    """A looping query prints the same health cells pass after pass, GPU after GPU: each set
    is read once and its health given again; a count that changes is read in that pass."""
    header = "index, " + ", ".join(HEALTH_COLUMNS[4:6]) + ", clocks_event_reasons.active\n"

    def row(index: int, uncorrected: int, mask: str = "0x0000000000000000") -> str:
        return f"{index}, 4, {uncorrected}, {mask}\n"

    first = parse_gpus(header + row(0, 0) + row(1, 0))
    assert first[0].health is first[1].health  # one read for both GPUs
    assert first[0].health is not None and first[0].health.ecc_corrected_volatile == 4
    later = parse_gpus(header + row(0, 0) + row(1, 2, "0x0000000000000040"))
    assert later[0].health is first[0].health
    sick = later[1].health
    assert sick is not None
    assert (sick.ecc_uncorrected_volatile, sick.clock_events) == (2, ["hw_thermal_slowdown"])
    assert parse_gpus(header + row(1, 0))[0].health == first[1].health  # reset, read again


def test_yes_and_no_cells_are_flags_and_other_words_none() -> None:
    text = (
        "index, retired_pages.pending, remapped_rows.pending, remapped_rows.failure\n"
        "0, Yes, No, [Requested functionality has been deprecated]\n"
    )
    (gpu,) = parse_gpus(text)
    assert gpu.health is not None
    assert gpu.health.retired_pages_pending is True
    assert gpu.health.remapped_rows_pending is False
    assert gpu.health.remapped_rows_failed is None


def test_own_h200_xml_capture_reads_remapped_rows_and_replays() -> None:
    # Captured on an H200, driver 580.159.04 (tests/fixtures/nvidia-smi/README.md).
    (gpu,) = parse_xml((OWN / "h200-q.xml").read_text())
    valid(gpu)
    assert (gpu.sm_clock_mhz, gpu.memory_clock_mhz, gpu.memory_util_pct) == (1980, 3201, 0)
    assert gpu.fan_pct is None
    h = gpu.health
    assert h is not None
    assert (h.ecc_corrected_volatile, h.ecc_uncorrected_volatile) == (0, 0)
    assert (h.remapped_rows_correctable, h.remapped_rows_uncorrectable) == (0, 0)
    assert (h.remapped_rows_pending, h.remapped_rows_failed) == (False, False)
    assert h.retired_pages_pending is None  # N/A: H200 remaps rows, it retires no pages
    assert (h.pcie_gen, h.pcie_width, h.pcie_replays) == (5, 16, 3)
    assert h.clock_events == []


def test_xml_sums_split_ecc_counts_and_reads_pending_flags() -> None:
    text = """<nvidia_smi_log><gpu id="00000000:01:00.0">
      <ecc_errors><volatile>
        <sram_correctable>1</sram_correctable>
        <sram_uncorrectable_parity>2</sram_uncorrectable_parity>
        <sram_uncorrectable_secded>3</sram_uncorrectable_secded>
        <dram_correctable>10</dram_correctable>
        <dram_uncorrectable>N/A</dram_uncorrectable>
      </volatile></ecc_errors>
      <retired_pages><pending_blacklist>Yes</pending_blacklist></retired_pages>
      <remapped_rows><remapped_row_pending>Yes</remapped_row_pending>
        <remapped_row_failure>No</remapped_row_failure></remapped_rows>
      <clocks_throttle_reasons>
        <clocks_throttle_reason_sw_thermal_slowdown>Active</clocks_throttle_reason_sw_thermal_slowdown>
        <clocks_throttle_reason_unknown>Active</clocks_throttle_reason_unknown>
      </clocks_throttle_reasons>
    </gpu></nvidia_smi_log>"""
    (gpu,) = parse_xml(text)
    h = gpu.health
    assert h is not None
    assert (h.ecc_corrected_volatile, h.ecc_uncorrected_volatile) == (11, 5)
    assert h.ecc_corrected_aggregate is None
    assert (h.retired_pages_pending, h.remapped_rows_pending) == (True, True)
    assert h.clock_events == ["sw_thermal_slowdown"]
    judged = assess(gpu).health
    assert judged is not None and len(judged.problems) == 3


# Read by hand from the captures (card and driver in each name; ../shared/corpus).
CSV_HEALTH: dict[str, dict[str, Any]] = {
    # H100 80GB HBM3 in MIG mode, driver 590.48.01, units in the values ("1980 MHz").
    "utkuozdemir-h100-80gb-hbm3-mig-linux-drv590.48.01-query-gpu-load.csv": {
        "clocks": (1980, 2619),
        "mem_util": None,
        "fan": None,
        "ecc": (0, 0, 0, 0),
        "remapped": (None, None, None, None),
        "events": [],
        "pcie": (5, 16),
    },
    # L40S, driver 595.80: remapped rows printed in --query-gpu.
    "utkuozdemir-l40s-linux-drv595.80-query-gpu-load.csv": {
        "clocks": (2520, 9001),
        "mem_util": 2,
        "fan": None,
        "ecc": (0, 0, 0, 0),
        "remapped": (0, 0, False, False),
        "events": [],
        "pcie": (4, 16),
    },
    # RTX 2080 SUPER, driver 465.27: clocks_throttle_reasons.*, GPU idle (mask 0x1).
    "utkuozdemir-rtx-2080-super-linux-drv465.27-query-gpu.csv": {
        "clocks": (300, 405),
        "mem_util": 10,
        "fan": 38,
        "ecc": (None, None, None, None),
        "remapped": (None, None, None, None),
        "events": ["gpu_idle"],
        "pcie": (1, 16),
    },
    # Tesla P100, nounits, no health column but clocks, memory utilization and fan.
    "netdata-tesla-p100-pcie-16gb-query-gpu-nounits.csv": {
        "clocks": (405, 715),
        "mem_util": 0,
        "fan": None,
        "health": None,
    },
}


@needs_corpus
@pytest.mark.parametrize("name", sorted(CSV_HEALTH))
def test_csv_capture_health(name: str) -> None:
    want = CSV_HEALTH[name]
    (gpu,) = (valid(g) for g in parse_gpus((CSV / name).read_text()))
    assert (gpu.sm_clock_mhz, gpu.memory_clock_mhz) == want["clocks"]
    assert (gpu.memory_util_pct, gpu.fan_pct) == (want["mem_util"], want["fan"])
    if "health" in want:
        assert gpu.health is want["health"]
        return
    h = gpu.health
    assert h is not None
    ecc = (h.ecc_corrected_volatile, h.ecc_uncorrected_volatile,
           h.ecc_corrected_aggregate, h.ecc_uncorrected_aggregate)  # fmt: skip
    assert ecc == want["ecc"]
    remapped = (h.remapped_rows_correctable, h.remapped_rows_uncorrectable,
                h.remapped_rows_pending, h.remapped_rows_failed)  # fmt: skip
    assert remapped == want["remapped"]
    assert h.clock_events == want["events"]
    assert (h.pcie_gen, h.pcie_width) == want["pcie"]


XML_HEALTH: dict[str, dict[str, Any]] = {
    # Tesla P100-PCIE-16GB, driver 510.47.03, v11: single_bit/double_bit totals, three
    # corrected errors over its life, page retirement readable.
    "netdata-tesla-p100-pcie-16gb-drv510.47.03-v11.xml": {
        "ecc": (0, 0, 3, 0),
        "retired": (0, 0, False),
        "remapped": (None, None),
        "events": ["gpu_idle"],
        "pcie": (3, 16, 0),
        "clocks": (405, 715),
    },
    # A100-SXM4-80GB in MIG mode, driver 535.54.03, v12: sram_/dram_ counts; the driver
    # prints <remapped_rows>N/A</remapped_rows> in MIG mode and no retired-page counts.
    "telegraf-a100-sxm4-80gb-mig-drv535.54.03-v12.xml": {
        "ecc": (0, 0, 0, 0),
        "retired": (None, None, None),
        "remapped": (None, None),
        "events": [],
        "pcie": (4, 16, 0),
        "clocks": (1275, 1593),
    },
    # RTX 4090, driver 535.86.05, v12: remapped rows printed on a consumer card.
    "netdata-rtx-4090-drv535.86.05-v12.xml": {
        "ecc": (None, None, None, None),
        "retired": (None, None, None),
        "remapped": (0, 0),
        "events": ["gpu_idle"],
        "pcie": (1, 16, 0),
        "clocks": (210, 405),
    },
    # GRID K520, driver 352.99, v7: clocks_throttle_reason_* with an "unknown" reason.
    "rai-project-grid-k520-drv352.99-v7.xml": {
        "ecc": (None, None, None, None),
        "retired": (None, None, None),
        "remapped": (None, None),
        "events": ["gpu_idle"],
        "pcie": (1, 16, 0),
        "clocks": (324, 324),
    },
}


@needs_corpus
@pytest.mark.parametrize("name", sorted(XML_HEALTH))
def test_xml_capture_health(name: str) -> None:
    want = XML_HEALTH[name]
    gpu = valid(parse_xml((XML / name).read_text())[0])
    assert (gpu.sm_clock_mhz, gpu.memory_clock_mhz) == want["clocks"]
    h = gpu.health
    assert h is not None
    ecc = (h.ecc_corrected_volatile, h.ecc_uncorrected_volatile,
           h.ecc_corrected_aggregate, h.ecc_uncorrected_aggregate)  # fmt: skip
    assert ecc == want["ecc"]
    assert (h.retired_pages_sbe, h.retired_pages_dbe, h.retired_pages_pending) == want["retired"]
    assert (h.remapped_rows_correctable, h.remapped_rows_uncorrectable) == want["remapped"]
    assert h.clock_events == want["events"]
    assert (h.pcie_gen, h.pcie_width, h.pcie_replays) == want["pcie"]


@needs_corpus
@pytest.mark.parametrize("path", corpus_files("nvidia-smi-csv"), ids=lambda p: p.name)
def test_every_csv_capture_parses_valid_health(path: Path) -> None:
    for gpu in parse_gpus(path.read_text()):
        valid(assess(gpu))
        if "query-gpu" in path.name and "virtualclient" not in path.name:
            assert gpu.sm_clock_mhz is not None


@needs_corpus
@pytest.mark.parametrize("path", corpus_files("nvidia-smi-xml"), ids=lambda p: p.name)
def test_every_xml_capture_parses_valid_health(path: Path) -> None:
    gpus = parse_xml(path.read_text())
    assert gpus
    for gpu in gpus:
        valid(assess(gpu))
        assert gpu.health is not None
        assert gpu.health.pcie_replays == 0  # every capture's link had no replays
        assert gpu.health.healthy  # and none shows a fatal condition
        assert gpu.sm_clock_mhz is not None


HEALTH_COLUMNS = [
    "clocks.current.sm [MHz]",
    "clocks.current.memory [MHz]",
    "utilization.memory [%]",
    "fan.speed [%]",
    "ecc.errors.corrected.volatile.total",
    "ecc.errors.uncorrected.volatile.total",
    "retired_pages.double_bit.count",
    "retired_pages.pending",
    "remapped_rows.correctable",
    "remapped_rows.failure",
    "clocks_event_reasons.active",
    "clocks_throttle_reasons.gpu_idle",
    "pcie.link.gen.current",
    "pcie.link.width.current",
    "gpu_recovery_action",
    "reset_status.reset_required",
]
CELL = st.one_of(
    st.text(alphabet=st.characters(blacklist_characters=',\n\r"\x00'), max_size=24),
    st.integers(min_value=-(1 << 70), max_value=1 << 70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.integers(min_value=0, max_value=(1 << 64) - 1).map(lambda n: f"0x{n:016X}"),
    st.sampled_from(
        ["Yes", "No", "Active", "Not Active", "[N/A]", "16x", "-1", "1e308", "None", "Reset"]
    ),
)


@given(st.lists(CELL, min_size=len(HEALTH_COLUMNS), max_size=len(HEALTH_COLUMNS)))
def test_fuzzed_health_cells_give_none_or_a_valid_value(cells: list[str]) -> None:
    text = "index, " + ", ".join(HEALTH_COLUMNS) + "\n0, " + ", ".join(cells) + "\n"
    for gpu in parse_gpus(text):
        valid(assess(gpu))
        if gpu.health is not None:
            assert set(gpu.health.clock_events) <= set(CLOCK_EVENT_BITS.values())


XML_ELEMENTS = [
    "clocks/sm_clock",
    "clocks/mem_clock",
    "utilization/memory_util",
    "fan_speed",
    "ecc_errors/volatile/sram_correctable",
    "ecc_errors/volatile/dram_uncorrectable",
    "ecc_errors/aggregate/single_bit/total",
    "retired_pages/double_bit_retirement/retired_count",
    "retired_pages/pending_retirement",
    "remapped_rows/remapped_row_corr",
    "remapped_rows/remapped_row_failure",
    "clocks_event_reasons/clocks_event_reason_sw_power_cap",
    "pci/pci_gpu_link_info/pcie_gen/current_link_gen",
    "pci/pci_gpu_link_info/link_widths/current_link_width",
    "pci/replay_counter",
    "gpu_recovery_action",
    "gpu_reset_status/reset_required",
    "gpu_reset_status/drain_and_reset_recommended",
]


def _nest(path: str, text: str) -> str:
    tags = path.split("/")
    opened = "".join(f"<{t}>" for t in tags)
    closed = "".join(f"</{t}>" for t in reversed(tags))
    return f"{opened}{text}{closed}"


XML_TEXT = st.one_of(
    st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), max_size=24),
    CELL,
).map(lambda s: s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;"))


@given(st.lists(XML_TEXT, min_size=len(XML_ELEMENTS), max_size=len(XML_ELEMENTS)))
def test_fuzzed_health_elements_give_none_or_a_valid_value(texts: list[str]) -> None:
    body = "".join(_nest(path, text) for path, text in zip(XML_ELEMENTS, texts, strict=True))
    for gpu in parse_xml(f"<nvidia_smi_log><gpu>{body}</gpu></nvidia_smi_log>"):
        valid(assess(gpu))
