"""Parse throughput per tool format: parses a second and MB/s of the pure parse functions.

Reads the real captures in ../shared/corpus when they are beside the project,
else the project's own fixtures.

    python bench/parse_throughput.py [--seconds S]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.synthetic import query_apps, query_gpu  # noqa: E402
from placewatch.worker.gpu.amd_smi import parse_amd_smi  # noqa: E402
from placewatch.worker.gpu.nvidia_smi.query_csv import parse_compute_apps, parse_gpus  # noqa: E402
from placewatch.worker.gpu.nvidia_smi.query_xml import parse_xml  # noqa: E402
from placewatch.worker.gpu.rocm_smi import parse_rocm_smi  # noqa: E402

CORPUS = ROOT.parent / "shared" / "corpus"
FIXTURES = ROOT / "tests" / "fixtures"


def inputs(folder: str, fixtures: str, pattern: str) -> list[str]:
    where = CORPUS / folder
    paths = sorted(where.glob(pattern)) if where.is_dir() else []
    paths = paths or sorted((FIXTURES / fixtures).glob(pattern))
    return [p.read_text() for p in paths]


def measure(
    parse: Callable[[str], object], texts: list[str], seconds: float
) -> tuple[float, float]:
    """Parses a second and MB/s, cycling through `texts` for about `seconds`."""
    size = sum(len(t.encode()) for t in texts)
    rounds = 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        for text in texts:
            parse(text)
        rounds += 1
    took = time.perf_counter() - started
    return rounds * len(texts) / took, rounds * size / took / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0)
    seconds = parser.parse_args().seconds
    formats: list[tuple[str, Callable[[str], object], list[str]]] = [
        ("nvidia-smi --query-gpu (8 GPUs)", parse_gpus, [query_gpu(8)]),
        ("nvidia-smi --query-compute-apps (64)", parse_compute_apps, [query_apps(8, 64)]),
        (
            "nvidia-smi CSV captures",
            parse_gpus,
            inputs("nvidia-smi-csv", "nvidia-smi", "*query-gpu*.csv"),
        ),
        ("nvidia-smi -q -x captures", parse_xml, inputs("nvidia-smi-xml", "nvidia-smi", "*.xml")),
        ("rocm-smi --json captures", parse_rocm_smi, inputs("rocm-smi-json", "rocm-smi", "*.json")),
        ("amd-smi --json captures", parse_amd_smi, inputs("amd-smi-json", "amd-smi", "*.json")),
    ]
    print(f"{'format':<40}{'files':>6}{'parses/s':>12}{'MB/s':>9}{'us/parse':>10}")
    for name, parse, texts in formats:
        if not texts:
            print(f"{name:<40}{0:>6}  (no input here)")
            continue
        rate, mbps = measure(parse, texts, seconds)
        print(f"{name:<40}{len(texts):>6}{rate:>12.0f}{mbps:>9.1f}{1e6 / rate:>10.1f}")


if __name__ == "__main__":
    main()
