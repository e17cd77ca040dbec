"""GPU nodes and engine command lines that the discovery tests share."""

from __future__ import annotations

from placewatch.schemas import GpuSample
from placewatch.worker.shards.discover import Discovered, classify

A100 = "NVIDIA A100-SXM4-80GB"
A100X4 = [
    GpuSample(index=i, uuid=f"GPU-{i}{i}aa0000-0000-0000-0000-00000000000{i}", name=A100)
    for i in range(4)
]
MIXED = [
    GpuSample(index=0, uuid="GPU-aaaa", name="NVIDIA GeForce RTX 4090"),
    GpuSample(index=1, uuid="GPU-bbbb", name="NVIDIA RTX A4000"),
]
AMD = [
    GpuSample(index=i, uuid=f"0x{i}f00d", vendor="amd", name="AMD Instinct MI300X")
    for i in range(4)
]
BOTH = [
    GpuSample(index=0, uuid="GPU-aaaa", name="NVIDIA L4"),
    GpuSample(index=1, uuid="GPU-bbbb", name="NVIDIA L4"),
    GpuSample(index=2, uuid="0x2f00d", vendor="amd", name="AMD Radeon RX 7900 XTX"),
]
ARC = "Intel(R) Arc(TM) A770 Graphics"
INTEL = [
    GpuSample(index=i, vendor="intel", name=ARC, bus_id=f"0000:0{i + 3}:00.0") for i in range(2)
]
PCI_ORDER = {"ZE_ENABLE_PCI_ID_DEVICE_ORDER": "1"}
"""What makes Level Zero number devices in bus order, as placewatch indexes them."""

SERVER = "/opt/llama.cpp/build/bin/llama-server"
MODEL = "/models/Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf"
OLLAMA_BLOB = "/usr/share/ollama/.ollama/models/blobs/sha256-6a0746a1ec1aef3e7ec53868f220ff6e"


def found(
    cmdline: list[str], env: dict[str, str] | None = None, gpus: list[GpuSample] = A100X4
) -> Discovered:
    """What classify() makes of an engine as pid 4242, which it must recognise."""
    d = classify(cmdline, {} if env is None else env, 4242, gpus)
    assert d is not None, cmdline
    return d
