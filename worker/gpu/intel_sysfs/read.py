"""What the i915 and xe drivers write in sysfs about each Intel GPU, read from one root.

The root is /sys/class/drm (a test points it at a tree of files). Each `cardN` whose
`device/uevent` says PCI_ID 8086:* is an Intel GPU; `cardN-DP-1` and the like are its
connectors, and `renderD128` its render node, neither a GPU. uevent also gives the PCI
address (PCI_SLOT_NAME) and the driver (DRIVER), so no symlink has to be resolved.

Files, per the kernel's ABI documents (Documentation/ABI/testing/
sysfs-driver-intel-i915-hwmon at torvalds/linux 4f78971, sysfs-driver-intel-xe-hwmon at
594ce0b and its 6.15-6.16 additions):
- `device/hwmon/hwmonM/` named `i915` or `xe` (i915's per-GT `i915_gtN` ones are skipped):
  `energy1_input` (card, µJ; xe's `energy2_input` is the package), `power1_max` (the PL1
  limit, µW; 0: disabled; xe's package one is `power2_max`). Neither driver has a
  `power1_input`: power is the energy's rise over the time between two reads. xe from 6.15
  has `temp2_input` (package) and `temp3_input` (VRAM), m°C, labelled `pkg` and `vram`.
- the GT's actual frequency in MHz: i915 `gt_act_freq_mhz` (or `gt/gt0/rps_act_freq_mhz`),
  xe `device/tile0/gt0/freq0/act_freq` (drivers/gpu/drm/xe/xe_gt_freq.c). 0 while the GT
  sleeps (RC6): a reading, not a missing one.
- xe's VRAM size per tile, `device/tileN/physical_vram_size_bytes` (igt's xe_sysfs_tile
  reads it); i915 upstream writes none. Neither driver writes memory in use: that is per
  process, in /proc/PID/fdinfo.

Every file is small and read with a size cap: what a driver writes there is trusted no
more than any file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .. import DRM_ROOT, values

INTEL_VENDOR = "8086"
MAX_FILE_BYTES = 4096
_CARD = re.compile(r"card(\d+)")


@dataclass(frozen=True)
class Card:
    """An Intel GPU as the DRM class lists it."""

    path: Path
    bus_id: str
    driver: str | None
    pci_id: str


@dataclass(frozen=True)
class CardReading:
    """One read of a card's files; None where its driver writes no such file."""

    card: Card
    energy_uj: int | None = None
    power_cap_w: float | None = None
    temperature_c: float | None = None
    memory_temperature_c: float | None = None
    clock_mhz: int | None = None
    vram_bytes: int | None = None


def read_text(path: Path) -> str | None:
    """The file's text, or None where it cannot be read (absent, a driver's EIO, EACCES)."""
    try:
        with path.open("rb") as f:
            return f.read(MAX_FILE_BYTES).decode("utf-8", "replace")
    except OSError:
        return None


def read_number(path: Path) -> float | None:
    text = read_text(path)
    return None if text is None else values.number(text.strip())


def uevent(text: str) -> dict[str, str]:
    """KEY=VALUE lines of a uevent file."""
    pairs = (line.partition("=") for line in text.splitlines())
    return {key.strip(): value.strip() for key, sep, value in pairs if sep}


def intel_cards(root: Path = DRM_ROOT) -> list[Card]:
    """The Intel GPUs under `root`, in PCI address order (the order indices follow)."""
    try:
        entries = [p for p in root.iterdir() if _CARD.fullmatch(p.name)]
    except OSError:
        return []
    cards: list[Card] = []
    for entry in entries:
        text = read_text(entry / "device" / "uevent")
        event = uevent(text) if text is not None else {}
        vendor, _, device = event.get("PCI_ID", "").partition(":")
        slot = event.get("PCI_SLOT_NAME")
        if vendor.lower() != INTEL_VENDOR or not slot:
            continue
        cards.append(Card(entry, slot.lower(), event.get("DRIVER"), f"{vendor}:{device}".lower()))
    return sorted(cards, key=lambda c: c.bus_id)


def _hwmon(card: Card) -> Path | None:
    """The card's device-level hwmon folder, named after its driver (i915 or xe)."""
    try:
        folders = sorted((card.path / "device" / "hwmon").iterdir())
    except OSError:
        return None
    for folder in folders:
        name = (read_text(folder / "name") or "").strip()
        if name in ("i915", "xe"):
            return folder
    return None


def _temperatures(hwmon: Path) -> tuple[float | None, float | None]:
    """(GPU package, VRAM) in °C: by label where the driver writes one (`pkg`, `vram`),
    else xe's numbering (temp2 package, temp3 VRAM), else temp1 as the GPU's."""
    by_label: dict[str, float] = {}
    by_index: dict[int, float] = {}
    for index in range(1, 9):
        milli = read_number(hwmon / f"temp{index}_input")
        if milli is None:
            continue
        by_index[index] = milli / 1000
        label = (read_text(hwmon / f"temp{index}_label") or "").strip().lower()
        if label:
            by_label[label] = milli / 1000
    gpu = by_label.get("pkg", by_label.get("gpu", by_index.get(2, by_index.get(1))))
    memory = by_label.get("vram", by_index.get(3))
    return gpu, memory


def _clock(card: Card) -> int | None:
    for relative in (
        "gt_act_freq_mhz",
        "gt/gt0/rps_act_freq_mhz",
        "device/tile0/gt0/freq0/act_freq",
    ):
        found = values.count(read_number(card.path / relative))
        if found is not None:
            return found
    return None


def _vram(card: Card) -> int | None:
    """xe's physical VRAM, summed over tiles; None where no tile writes it (i915, an iGPU)."""
    try:
        tiles = [p for p in (card.path / "device").iterdir() if p.name.startswith("tile")]
    except OSError:
        return None
    sizes = [values.count(read_number(t / "physical_vram_size_bytes")) for t in tiles]
    known = [s for s in sizes if s is not None]
    return sum(known) if known else None


def read_card(card: Card) -> CardReading:
    """Every file placewatch reads of one card; never raises."""
    hwmon = _hwmon(card)
    clock, vram = _clock(card), _vram(card)
    if hwmon is None:
        return CardReading(card, clock_mhz=clock, vram_bytes=vram)
    energy = read_number(hwmon / "energy1_input")
    if energy is None:
        energy = read_number(hwmon / "energy2_input")
    cap = read_number(hwmon / "power1_max")
    if cap is None or cap <= 0:
        cap = read_number(hwmon / "power2_max")
    gpu, memory = _temperatures(hwmon)
    return CardReading(
        card,
        energy_uj=values.count(energy),
        power_cap_w=cap / 1e6 if cap is not None and cap > 0 else None,
        temperature_c=gpu,
        memory_temperature_c=memory,
        clock_mhz=clock,
        vram_bytes=vram,
    )


def read_cards(root: Path = DRM_ROOT) -> list[CardReading]:
    """A read of every Intel GPU under `root`."""
    return [read_card(card) for card in intel_cards(root)]
