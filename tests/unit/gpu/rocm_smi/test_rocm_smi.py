"""rocm-smi JSON: power over cap is the activity, junction where there is no edge, N/A is None.

Real captures in ../shared/corpus/rocm-smi-json (ROCm 4.3 to 6.2, MI100, MI50,
RX 6700 XT, RX 7800 XT, Vega 10, a Strix Halo APU, a Hygon DCU) and the
project's own fixtures, made in the format of the flags the worker sends.
"""

from __future__ import annotations

import json
import re
from typing import Any, NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placewatch.schemas import GpuHealth
from placewatch.worker.gpu.rocm_smi import (
    BUSY_KEYS,
    CAP_KEYS,
    FAN_KEY,
    MCLK_KEY,
    MEMORY_BUSY_KEYS,
    NAME_KEYS,
    PCIE_KEY,
    POWER_KEYS,
    REPLAY_KEY,
    ROCM_SMI_ARGS,
    SCLK_KEY,
    parse_rocm_smi,
    power_activity,
)

from tests.conftest import CORPUS, FIXTURES, corpus_files, examples, needs_corpus
from tests.support.amd_readings import assert_sane

MiB = 1 << 20
GiB = 1 << 30
OWN = FIXTURES / "rocm-smi"


def test_argv_asks_for_every_reading_it_parses_and_json() -> None:
    assert ROCM_SMI_ARGS[-1] == "--json"
    wanted = ("--showuse", "--showtemp", "--showpower", "--showmaxpower", "--showbus",
              "--showclocks", "-f", "--showreplaycount", "--showmemuse")  # fmt: skip
    for flag in wanted:
        assert flag in ROCM_SMI_ARGS
    at = ROCM_SMI_ARGS.index("--showmeminfo")
    assert ROCM_SMI_ARGS[at + 1] == "vram"


@needs_corpus
def test_every_flag_is_one_real_rocm_smi_runs_took() -> None:
    """Each flag appears in a command a capture in the corpus was made with (ROCm 4.3-6.2)."""
    provenance = (CORPUS / "PROVENANCE.md").read_text()
    commands = " ".join(re.findall(r"`(rocm-smi [^`]*)`", provenance))
    flags = set(commands.split())
    assert {a for a in ROCM_SMI_ARGS if a.startswith("-")} <= flags


def test_mi300x_activity_is_power_share_not_the_busy_flag() -> None:
    card0, _ = parse_rocm_smi((OWN / "mi300x-style.json").read_text())
    # GPU use (%) says 100: a resident context. 159 W of 750 W says 21.
    assert card0.utilization_pct == 21
    assert card0.activity == "power"
    assert card0.power_w == 159.0
    assert card0.power_cap_w == 750.0
    assert card0.temperature_c == 52.0
    assert card0.temperature_sensor == "junction"
    assert card0.memory_total_bytes == 206141652992
    assert card0.memory_used_bytes == 103375863808
    assert card0.memory_free_bytes == 206141652992 - 103375863808
    assert card0.name == "AMD Instinct MI300X"
    assert card0.uuid == "0x18a1c5a4e3f2b7d9"
    assert card0.bus_id == "0000:0C:00.0"
    assert card0.vendor == "amd"
    assert card0.index == 0


def test_clocks_pcie_link_replays_and_memory_busy() -> None:
    card0, card1 = parse_rocm_smi((OWN / "mi300x-style.json").read_text())
    assert (card0.sm_clock_mhz, card0.memory_clock_mhz) == (2100, 1300)
    # ROCm 6.1's read/write activity, not the 50 % of VRAM allocated.
    assert card0.memory_util_pct == 37
    assert card0.fan_pct is None  # MI300X: no fan reading at all
    assert card0.health == GpuHealth(pcie_gen=5, pcie_width=16, pcie_replays=0)
    # card1 prints N/A for them and no clocks: null, and no health at all.
    assert (card1.sm_clock_mhz, card1.memory_util_pct, card1.health) == (None, None, None)
    (consumer,) = parse_rocm_smi((OWN / "rx7900xtx-consumer.json").read_text())
    assert (consumer.sm_clock_mhz, consumer.memory_clock_mhz) == (2482, 1249)
    assert (consumer.memory_util_pct, consumer.fan_pct) == (18, 31)
    assert consumer.health == GpuHealth(pcie_gen=4, pcie_width=16, pcie_replays=2)
    assert consumer.energy_j is None  # no capture shows rocm-smi's energy counter


@pytest.mark.parametrize(
    ("level", "link"),
    [("0 (2.5GT/s x1)", (1, 1)), ("1 (16.0GT/s x16)", (4, 16)), ("2 (32.0GT/s x8)", (5, 8)),
     ("1 (12.0GT/s x16)", (None, 16)), ("N/A", None), ("(16.0GT/s)", None)],
)  # fmt: skip
def test_pcie_level_in_force_is_generation_and_width(
    level: str, link: tuple[int | None, int] | None
) -> None:
    (gpu,) = parse_rocm_smi(json.dumps({"card0": {PCIE_KEY: level}}))
    got = None if gpu.health is None else (gpu.health.pcie_gen, gpu.health.pcie_width)
    assert got == link


def test_power_over_cap_clamps_to_100() -> None:
    _, card1 = parse_rocm_smi((OWN / "mi300x-style.json").read_text())
    assert card1.index == 1
    assert (card1.utilization_pct, card1.activity) == (100, "power")
    assert (card1.power_w, card1.power_cap_w) == (800.0, 750.0)
    # Its edge sensor prints N/A: junction it is.
    assert (card1.temperature_c, card1.temperature_sensor) == (88.0, "junction")
    assert card1.memory_free_bytes == 206141652992 - 197568495616


def test_consumer_card_average_power_share() -> None:
    (card,) = parse_rocm_smi((OWN / "rx7900xtx-consumer.json").read_text())
    assert (card.utilization_pct, card.activity) == (27, "power")  # 87 W of 327 W
    assert (card.power_w, card.power_cap_w) == (87.0, 327.0)
    assert (card.temperature_c, card.temperature_sensor) == (48.0, "edge")
    assert card.memory_total_bytes == 25753026560
    assert card.memory_used_bytes == 20 * GiB
    assert card.name == "Navi 31 [Radeon RX 7900 XT/7900 XTX/7900 GRE/7900M]"


def test_power_activity_prefers_power_and_needs_a_cap() -> None:
    assert power_activity(159.0, 750.0, 100.0) == (21, "power")
    assert power_activity(159.0, None, 100.0) == (100.0, "busy")
    assert power_activity(None, 750.0, 3.0) == (3.0, "busy")
    assert power_activity(-5.0, 750.0, None) == (0, "power")
    assert power_activity(None, None, None) == (None, None)


def test_a_draw_whose_share_overflows_reads_as_full_power_not_a_crash() -> None:
    assert power_activity(1.797693134862316e306, 1.0, None) == (100.0, "power")
    assert power_activity(-1.797693134862316e306, 1.0, None) == (0.0, "power")


def test_gpu_bracket_keys_index_cards_and_other_keys_are_skipped() -> None:
    text = json.dumps(
        {
            "GPU[1]": {"GPU use (%)": "7"},
            "GPU[0]": {"GPU use (%)": "3"},
            "system": {"Driver version": "6.8.5", "PID4242": "llama-server, 1, 0, 0, 0"},
            "card": {"GPU use (%)": "9"},
            "cardX": {"GPU use (%)": "9"},
            "card2": "not a card",
        }
    )
    assert [(g.index, g.utilization_pct) for g in parse_rocm_smi(text)] == [(0, 3), (1, 7)]


@pytest.mark.parametrize(
    "missing", ["N/A", "N/A (Secondary die)", "", "[N/A]", "unknown", "Not supported"]
)
def test_every_spelling_of_missing_is_null_and_keeps_the_card(missing: str) -> None:
    card = {
        "Average Graphics Package Power (W)": missing,
        "Max Graphics Package Power (W)": "211.0",
        "GPU use (%)": "4",
        "Temperature (Sensor edge) (C)": missing,
        "Temperature (Sensor junction) (C)": "47.0",
        "VRAM Total Memory (B)": "12868124672",
        "VRAM Total Used Memory (B)": missing,
        "Unique ID": missing,
        "Card series": missing,
        "Card Series": "Navi 22",
    }
    (gpu,) = parse_rocm_smi(json.dumps({"card0": card}))
    assert gpu.power_w is None
    assert gpu.power_cap_w == 211.0
    assert (gpu.utilization_pct, gpu.activity) == (4, "busy")
    assert (gpu.temperature_c, gpu.temperature_sensor) == (47.0, "junction")
    assert gpu.memory_total_bytes == 12868124672
    assert gpu.memory_used_bytes is None
    assert gpu.memory_free_bytes is None
    assert gpu.uuid is None
    assert gpu.name == "Navi 22"


def test_a_zero_cap_is_no_cap() -> None:
    card = {"Average Graphics Package Power (W)": "30.0", "Max Graphics Package Power (W)": "0.0"}
    (gpu,) = parse_rocm_smi(json.dumps({"card0": card}))
    assert (gpu.power_cap_w, gpu.utilization_pct, gpu.activity) == (None, None, None)
    assert gpu.power_w == 30.0


def test_memory_sensor_is_the_last_resort() -> None:
    (gpu,) = parse_rocm_smi(json.dumps({"card0": {"Temperature (Sensor memory) (C)": "61.0"}}))
    assert (gpu.temperature_c, gpu.temperature_sensor) == (61.0, "memory")


def test_output_after_a_warning_line_is_read() -> None:
    text = "WARNING: Unlocked monitor_devices lock; it should have already been unlocked.\n"
    text += (OWN / "rx7900xtx-consumer.json").read_text()
    assert [g.utilization_pct for g in parse_rocm_smi(text)] == [27]


@pytest.mark.parametrize(
    "text",
    [
        "",
        "\n\n",
        "ERROR: No AMD GPUs specified\n",
        "[]",
        '{"card0": ',
        '{"system": {"Driver version": "6.3.6"}}',
        "[" * 100_000,
        "null",
    ],
)
def test_bad_output_gives_no_gpus_and_does_not_raise(text: str) -> None:
    assert parse_rocm_smi(text) == []


class Card(NamedTuple):
    name: str | None
    uuid: str | None
    bus: str | None
    total: int | None
    used: int | None
    temp: float | None
    sensor: str | None
    power: float | None
    cap: float | None
    util: float | None
    activity: str | None


def mi100(cards: list[tuple[str, str | None, int, float, float, int]]) -> list[Card]:
    """MI100s from (bus, uuid, used, edge temperature, power, utilization): 32 GiB, 290 W cap."""
    return [
        Card("Arcturus GL-XL [Instinct MI100]", uuid, bus, 34342961152, used, temp, "edge",
             power, 290.0, util, "power")
        for bus, uuid, used, temp, power, util in cards
    ]  # fmt: skip


NAVI22 = "Navi 22 [Radeon RX 6700/6700 XT / 6800M]"

# What each real capture says, read by hand from the file.
CAPTURES: dict[str, list[Card]] = {
    # Hygon DCU, DTK 24.04.3: its own key spellings, VRAM in MiB, no power cap.
    "gpustack-hygon-dcu-dtk24.04.3.json": [
        Card("DCU xxxx", "7100fa8866904061", None, 65520 * MiB, 2 * MiB, 41.0, "edge",
             80.0, None, 0, "busy"),
    ],
    # RX 7800 XT, ROCm 6.2.4, run without --showmaxpower: no cap, so the busy flag (100).
    "gpustack-rx7800xt-rocm6.2.4.json": [
        Card("Navi 32 [Radeon RX 7700 XT / 7800 XT]", "0x5c88007d760374f3", None,
             17163091968, 11615076352, 45.0, "edge", 53.0, None, 100, "busy"),
    ],
    # Strix Halo APU: Current Socket power, no cap printed.
    "llamaland-radeon-8060s-strix-halo-apu.json": [
        Card("Radeon 8060S Graphics", None, None, 536870912, 415236096, 43.0, "edge",
             7.006, None, 1, "busy"),
    ],
    # 6x MI100, ROCm 5.7.1: idle cards draw 35-40 W of 290 W.
    "telegraf-mi100_rocm571.json": mi100([
        ("0000:1E:00.0", None, 6782976, 31.0, 39.0, 13),
        ("0000:22:00.0", None, 6782976, 30.0, 37.0, 13),
        ("0000:3F:00.0", None, 6782976, 31.0, 35.0, 12),
        ("0000:43:00.0", None, 6782976, 33.0, 39.0, 13),
        ("0000:46:00.0", None, 6782976, 32.0, 39.0, 13),
        ("0000:49:00.0", None, 6782976, 33.0, 40.0, 14),
    ]),
    # 4x MI100, ROCm 6.0.2.
    "telegraf-mi100_rocm602.json": mi100([
        ("0000:83:00.0", "0x79ccd55167a2124a", 6750208, 53.0, 36.0, 12),
        ("0000:A3:00.0", "0x4edfb117a17a07d", 6750208, 55.0, 44.0, 15),
        ("0000:C3:00.0", "0xd4a9ec48d03d261d", 6750208, 54.0, 43.0, 15),
        ("0000:E3:00.0", "0x1b9dd972253c3736", 6750208, 51.0, 39.0, 13),
    ]),
    # RX 6700 XT, ROCm 4.3.0: every "Card ..." field prints the vendor id 0x1002.
    "telegraf-rx6700xt_rocm430.json": [
        Card(None, None, "0000:07:00.0", 12868124672, 1622728704, 45.0, "edge",
             6.0, 211.0, 3, "power"),
    ],
    # ROCm 6.0.2: power "N/A (Secondary die)", so the busy flag.
    "telegraf-rx6700xt_rocm602.json": [
        Card(NAVI22, None, "0000:07:00.0", 12868124672, 1572757504, 45.0, "edge",
             None, 211.0, 0, "busy"),
    ],
    # ROCm 6.1.2: "Card Series" capitalised, "Device Name" added.
    "telegraf-rx6700xt_rocm612.json": [
        Card(NAVI22, None, "0000:07:00.0", 12868124672, 1572745216, 45.0, "edge",
             6.0, 211.0, 3, "power"),
    ],
    # Vega 10 XT: no "Card series" at all; the model id is the only name.
    "telegraf-vega10-xt.json": [
        Card("0xc1e", "0x2150e7d042a1124", "0000:04:00.0", 17163091968, 17776640, 39.0,
             "edge", 15.0, 170.0, 9, "power"),
    ],
    "telegraf-vega20-wks-gl-xe.json": [
        Card("Radeon Instinct MI50 32GB", "0x2f048617326b1ea", "0000:63:00.0", 34342961152,
             10850304, 36.0, "edge", 26.0, 225.0, 12, "power"),
    ],
}  # fmt: skip


@needs_corpus
def test_every_rocm_smi_capture_has_expected_values() -> None:
    assert {p.name for p in corpus_files("rocm-smi-json")} == set(CAPTURES)


@needs_corpus
@pytest.mark.parametrize("name", sorted(CAPTURES))
def test_rocm_smi_capture(name: str) -> None:
    gpus = parse_rocm_smi((CORPUS / "rocm-smi-json" / name).read_text())
    expected = CAPTURES[name]
    assert [g.index for g in gpus] == list(range(len(expected)))
    for gpu, want in zip(gpus, expected, strict=True):
        got = Card(
            gpu.name, gpu.uuid, gpu.bus_id, gpu.memory_total_bytes, gpu.memory_used_bytes,
            gpu.temperature_c, gpu.temperature_sensor, gpu.power_w, gpu.power_cap_w,
            gpu.utilization_pct, gpu.activity,
        )  # fmt: skip
        assert got == want
        assert want.total is not None and want.used is not None
        assert gpu.memory_free_bytes == want.total - want.used
        assert gpu.vendor == "amd"


# (sclk MHz, mclk MHz, memory busy %, fan %, (PCIe generation, width, replays)) per card,
# read by hand from each capture; the gpustack and Hygon runs asked for no clocks.
HEALTH_CAPTURES: dict[str, list[tuple[Any, ...]]] = {
    "gpustack-hygon-dcu-dtk24.04.3.json": [(None, None, None, None, None)],
    "gpustack-rx7800xt-rocm6.2.4.json": [(None, None, None, None, None)],
    # --showclocks without --showmemuse: an sclk only (an APU has no mclk line).
    "llamaland-radeon-8060s-strix-halo-apu.json": [(668, None, None, None, None)],
    # MI100: idle at 300/1200 MHz, "GPU memory use (%)" 0, a Gen 3 link on 5.7.1 and Gen 4
    # on 6.0.2, no fan reading.
    "telegraf-mi100_rocm571.json": [(300, 1200, 0, None, (3, 16, 0))] * 6,
    "telegraf-mi100_rocm602.json": [(300, 1200, 0, None, (4, 16, 0))] * 4,
    "telegraf-rx6700xt_rocm430.json": [(500, 96, 0, None, (4, 16, 0))],
    "telegraf-rx6700xt_rocm602.json": [(500, 96, 0, None, (4, 16, 0))],
    # ROCm 6.1.2: sclk "(0Mhz)" (gated), "GPU Memory Read/Write Activity (%)" 0 beside 12 %
    # of VRAM allocated.
    "telegraf-rx6700xt_rocm612.json": [(0, 96, 0, None, (4, 16, 0))],
    # Vega 10 XT: a fan at 13 %, no memory busy reading.
    "telegraf-vega10-xt.json": [(1269, 167, None, 13, (3, 16, 0))],
    "telegraf-vega20-wks-gl-xe.json": [(1725, 1000, 0, 0, (4, 16, 0))],
}


@needs_corpus
@pytest.mark.parametrize("name", sorted(HEALTH_CAPTURES))
def test_rocm_smi_capture_clocks_and_health(name: str) -> None:
    assert set(HEALTH_CAPTURES) == set(CAPTURES)
    gpus = parse_rocm_smi((CORPUS / "rocm-smi-json" / name).read_text())
    got = [
        (g.sm_clock_mhz, g.memory_clock_mhz, g.memory_util_pct, g.fan_pct,
         None if g.health is None else
         (g.health.pcie_gen, g.health.pcie_width, g.health.pcie_replays))
        for g in gpus
    ]  # fmt: skip
    assert got == HEALTH_CAPTURES[name]
    for gpu in gpus:
        assert gpu.energy_j is None
        assert gpu.health is None or gpu.health.clock_events == []


# Structured fuzzing with the real key names.
CARD_KEYS = [
    *POWER_KEYS, *CAP_KEYS, *BUSY_KEYS, *NAME_KEYS, "Unique ID", "PCI Bus", "",
    "Temperature (Sensor edge) (C)", "Temperature (Sensor junction) (C)",
    "Temperature (Sensor memory) (C)", "Temperature (Sensor mem) (C)",
    "VRAM Total Memory (B)", "VRAM Total Used Memory (B)",
    "vram Total Memory (MiB)", "vram Total Used Memory (MiB)", "VRAM Total Memory (GB)",
    SCLK_KEY, MCLK_KEY, FAN_KEY, REPLAY_KEY, PCIE_KEY, *MEMORY_BUSY_KEYS,
]  # fmt: skip
leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),
    st.text(max_size=10),
    st.sampled_from(["N/A", "N/A (Secondary die)", "159.0", "-3", "1e400", "[N/A]", "0x1002",
                     "750.0", "0", "100", "101", "nan", "12 MB", "-0x72ff", "(1200Mhz)",
                     "(99999999999999999999999Mhz)", "1 (16.0GT/s x16)", "0 (99GT/s x99999999999999999999)"]),
)  # fmt: skip
json_values = st.recursive(
    leaves,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(CARD_KEYS) | st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=10,
)
cards = st.dictionaries(st.sampled_from(CARD_KEYS), json_values, max_size=14)
card_keys = st.sampled_from(["card0", "card1", "GPU[2]", "system", "card", "GPU[x]", ""]) | (
    st.from_regex(r"card[0-9]{1,25}", fullmatch=True)
)
documents = st.dictionaries(card_keys, cards | json_values, max_size=4) | json_values


@settings(max_examples=examples(300), deadline=None)
@given(documents)
def test_any_json_document_parses_to_sane_values(document: Any) -> None:
    assert_sane(parse_rocm_smi(json.dumps(document)))


@settings(max_examples=examples(300), deadline=None)
@given(st.text())
def test_any_text_parses_without_raising(text: str) -> None:
    assert_sane(parse_rocm_smi(text))
