"""NVIDIA GPUs from `nvidia-smi -q -x`, the full query as XML.

Checked against captures in ../shared/corpus/nvidia-smi-xml from drivers
352.99 (GRID K520, nvsmi_device_v7.dtd, 2017) to 595.84 (v13 DTD, 2026):
files with and without a DOCTYPE, one with the whole DTD inline, tab and
space indentation. Elements are found by name, because the schema moves them
between versions:

- power: `<power_readings>` through 525 (even under the v12 DTD),
  `<gpu_power_readings>` from 535, whose `<power_draw>` splits into
  `<average_power_draw>` and `<instant_power_draw>` from 570. Average is read
  first: it is what the CSV query's `power.draw` returns on those drivers
  (H100, L40S, RTX 4080 SUPER captures at 590 and 595), with instant as the
  fallback for cards without an average (RTX 2080 SUPER at 610.62);
- power cap: `<enforced_power_limit>` through 525; from 535 only
  `<current_power_limit>` is left;
- MIG: `<mig_mode>` is absent at 418 and present from 460 (N/A on cards
  without MIG). `<mig_devices>` gives each MIG device's ids and memory but no
  UUID or profile name (those come from `nvidia-smi -L`); both are read should
  a driver add them. `<gpu_util>` is N/A on a MIG-enabled GPU (A100 at 510
  and 535).

Health (GpuHealth; `healthy` and `problems` are left to worker/gpu/health.py):

- ECC counts: `<volatile>`/`<aggregate>` hold `<single_bit>`/`<double_bit>` with a
  `<total>` (v7 to v11 on Kepler to Volta), then `<sram_correctable>`,
  `<sram_uncorrectable>`, `<dram_correctable>`, `<dram_uncorrectable>` (v11 on T4 and A100
  at 510/515, v12), the SRAM uncorrectable count split into `_parity` and `_secded` from
  570: the parts a schema splits are summed, corrected and uncorrected apart;
- `<retired_pages>` (pre-A100 GPUs; `<pending_blacklist>` is the older name of
  `<pending_retirement>`), `<remapped_rows>` (from 460; the A100 captures at 510 and 535
  print it as `N/A` in MIG mode);
- the clock event reasons, one element each, in `<clocks_throttle_reasons>` through 525
  and `<clocks_event_reasons>` from 535 (worker/gpu/clock_events.py has their names);
- the PCIe link's `<current_link_gen>`, `<current_link_width>` ("16x") and
  `<replay_counter>`, which the CSV query does not give.

No capture (352.99 to 595.84) prints the energy counter: it comes from NVML only.

The XML spells a missing value without brackets (`N/A`, `Requested
functionality has been deprecated`); values.is_missing reads every spelling.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

import msgspec

from placewatch.schemas import GpuHealth, GpuProcess, GpuSample, MigInstance
from placewatch.schemas.health import CLOCK_EVENT_BITS

from .. import recovery, values
from ..clock_events import active

_POWER_SECTIONS = ("power_readings", "gpu_power_readings")
_POWER_DRAW = ("power_draw", "average_power_draw", "instant_power_draw")
_POWER_CAP = ("enforced_power_limit", "current_power_limit", "power_limit")
_ECC_CORRECTED = ("single_bit/total", "sram_correctable", "dram_correctable")
_ECC_UNCORRECTED = (
    "double_bit/total",
    "sram_uncorrectable",
    "sram_uncorrectable_parity",
    "sram_uncorrectable_secded",
    "dram_uncorrectable",
)
_CLOCK_EVENT_PREFIXES = ("clocks_event_reason_", "clocks_throttle_reason_")


def parse_xml(text: str) -> list[GpuSample]:
    """Every `<gpu>` of a `nvidia-smi -q -x` document, in document order; never raises.

    nvidia-smi lists GPUs in its index (PCI bus) order, so the position is the
    physical index. Garbage, empty or truncated output gives [].
    """
    try:
        # Output of a local tool, not untrusted input; expat >= 2.4 also
        # refuses entity expansion bombs.
        root = ET.fromstring(text)  # noqa: S314
    except (ET.ParseError, ValueError):
        return []  # ValueError: a str holding lone surrogates
    if root.tag != "nvidia_smi_log":
        return []
    driver = values.text(root.findtext("driver_version"))
    return [_gpu_sample(position, gpu, driver) for position, gpu in enumerate(root.findall("gpu"))]


def _gpu_sample(index: int, gpu: ET.Element, driver: str | None = None) -> GpuSample:
    total, used, free = _memory(gpu)
    # A MIG-enabled GPU reports N/A here: None, never 0.
    utilization = values.percent(gpu.findtext("utilization/gpu_util"))
    return GpuSample(
        index=index,
        uuid=values.text(gpu.findtext("uuid")),
        vendor="nvidia",
        name=values.text(gpu.findtext("product_name")),
        bus_id=values.text(gpu.get("id")) or values.text(gpu.findtext("pci/pci_bus_id")),
        utilization_pct=utilization,
        activity="busy" if utilization is not None else None,
        memory_total_bytes=total,
        memory_used_bytes=used,
        memory_free_bytes=free,
        temperature_c=values.number(gpu.findtext("temperature/gpu_temp")),
        power_w=_power(gpu, _POWER_DRAW),
        power_cap_w=_power(gpu, _POWER_CAP),
        processes=_processes(gpu),
        mig_enabled=_mig_mode(gpu.findtext("mig_mode/current_mig")),
        mig=[_mig_device(device) for device in gpu.findall("mig_devices/mig_device")],
        sm_clock_mhz=values.count(gpu.findtext("clocks/sm_clock")),
        memory_clock_mhz=values.count(gpu.findtext("clocks/mem_clock")),
        memory_util_pct=values.percent(gpu.findtext("utilization/memory_util")),
        fan_pct=values.percent(gpu.findtext("fan_speed")),
        driver_version=driver,
        health=_health(gpu),
    )


def _health(gpu: ET.Element) -> GpuHealth | None:
    """The health readings of one `<gpu>`; None when it prints none of them."""
    link = "pci/pci_gpu_link_info/"
    counts = {
        "ecc_corrected_volatile": _sum(gpu.find("ecc_errors/volatile"), _ECC_CORRECTED),
        "ecc_uncorrected_volatile": _sum(gpu.find("ecc_errors/volatile"), _ECC_UNCORRECTED),
        "ecc_corrected_aggregate": _sum(gpu.find("ecc_errors/aggregate"), _ECC_CORRECTED),
        "ecc_uncorrected_aggregate": _sum(gpu.find("ecc_errors/aggregate"), _ECC_UNCORRECTED),
        "retired_pages_sbe": values.count(
            gpu.findtext("retired_pages/multiple_single_bit_retirement/retired_count")
        ),
        "retired_pages_dbe": values.count(
            gpu.findtext("retired_pages/double_bit_retirement/retired_count")
        ),
        "remapped_rows_correctable": values.count(gpu.findtext("remapped_rows/remapped_row_corr")),
        "remapped_rows_uncorrectable": values.count(gpu.findtext("remapped_rows/remapped_row_unc")),
        "pcie_gen": values.count(gpu.findtext(link + "pcie_gen/current_link_gen")),
        "pcie_width": values.count(gpu.findtext(link + "link_widths/current_link_width")),
        "pcie_replays": values.count(gpu.findtext("pci/replay_counter")),
    }
    pending = values.flag(gpu.findtext("retired_pages/pending_retirement"))
    if pending is None:
        pending = values.flag(gpu.findtext("retired_pages/pending_blacklist"))
    action = recovery.from_words(gpu.findtext("gpu_recovery_action"))
    if action is None:
        action = recovery.from_flags(
            values.flag(gpu.findtext("gpu_reset_status/reset_required")),
            values.flag(gpu.findtext("gpu_reset_status/drain_and_reset_recommended")),
        )
    flags = {
        "recovery_action": action,
        "retired_pages_pending": pending,
        "remapped_rows_pending": values.flag(gpu.findtext("remapped_rows/remapped_row_pending")),
        "remapped_rows_failed": values.flag(gpu.findtext("remapped_rows/remapped_row_failure")),
    }
    events = _clock_events(gpu)
    if events is None and all(v is None for v in (*counts.values(), *flags.values())):
        return None
    return msgspec.structs.replace(GpuHealth(clock_events=events or []), **counts, **flags)


def _sum(section: ET.Element | None, parts: tuple[str, ...]) -> int | None:
    """The sum of the `parts` a section prints; None when it prints none of them."""
    if section is None:
        return None
    found = [values.count(section.findtext(part)) for part in parts]
    read = [n for n in found if n is not None]
    return sum(read) if read else None


def _clock_events(gpu: ET.Element) -> list[str] | None:
    """The active clock event reasons, in nvml.h's bit order; None when none is printed."""
    section = gpu.find("clocks_event_reasons")
    if section is None:
        section = gpu.find("clocks_throttle_reasons")
    if section is None:
        return None
    states: dict[str, bool] = {}
    for element in section:
        for prefix in _CLOCK_EVENT_PREFIXES:
            if element.tag.startswith(prefix):
                state = active(element.text)
                if state is not None:
                    states[element.tag.removeprefix(prefix)] = state
    if not states:
        return None
    return [name for name in CLOCK_EVENT_BITS.values() if states.get(name)]


def _memory(element: ET.Element) -> tuple[int | None, int | None, int | None]:
    """Total, used and free bytes of an element's own `<fb_memory_usage>`."""
    usage = element.find("fb_memory_usage")
    if usage is None:
        return None, None, None
    return (
        values.to_bytes(usage.findtext("total")),
        values.to_bytes(usage.findtext("used")),
        values.to_bytes(usage.findtext("free")),
    )


def _power(gpu: ET.Element, fields: tuple[str, ...]) -> float | None:
    """The first reading among `fields`, in whichever power section this schema has."""
    for section in _POWER_SECTIONS:
        readings = gpu.find(section)
        if readings is None:
            continue
        for field in fields:
            watts = values.number(readings.findtext(field))
            if watts is not None:
                return watts
    return None


def _mig_mode(value: str | None) -> bool | None:
    mode = (values.text(value) or "").lower()
    return {"enabled": True, "disabled": False}.get(mode)


def _mig_device(device: ET.Element) -> MigInstance:
    total, used, _ = _memory(device)
    return MigInstance(
        gpu_instance_id=values.integer(device.findtext("gpu_instance_id")),
        compute_instance_id=values.integer(device.findtext("compute_instance_id")),
        uuid=values.text(device.findtext("uuid")),
        profile=values.text(device.findtext("profile")),
        memory_total_bytes=total,
        memory_used_bytes=used,
    )


def _processes(gpu: ET.Element) -> list[GpuProcess]:
    """`<processes>`; an entry without a usable pid is skipped."""
    found = []
    for info in gpu.findall("processes/process_info"):
        pid = values.integer(info.findtext("pid"))
        if pid is None or pid < 0:
            continue
        found.append(
            GpuProcess(
                pid=pid,
                # WDDM (Windows) drivers may print N/A for every process.
                used_bytes=values.to_bytes(info.findtext("used_memory")),
                name=values.text(info.findtext("process_name")),
            )
        )
    return found
