"""A process that really holds memory on an NVIDIA GPU, through the driver alone.

    python tests/cuda_holder.py [--gpu ORDINAL] [--mib N] [--children N]

It takes the GPU's primary context and allocates N MiB on it with the CUDA
driver API (libcuda.so.1, which every node with the driver has: no toolkit,
no framework), prints `ready` once it holds them, and sleeps until it is
killed, or its parent exits. With --children it first starts that many
copies of itself, each holding the same, as an engine's workers do. Used by
the real-GPU tests and benchmarks, which skip where no NVIDIA driver answers.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import signal
import subprocess
import sys
import time

PR_SET_PDEATHSIG = 1


def hold(ordinal: int, size: int) -> None:
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        sys.exit(f"cuda_holder: the NVIDIA driver's libcuda.so.1 did not load: {exc}")

    def check(rc: int, call: str) -> None:
        if rc != 0:
            sys.exit(f"cuda_holder: {call} failed with CUDA error {rc}")

    device = ctypes.c_int()
    context = ctypes.c_void_p()
    pointer = ctypes.c_uint64()
    check(cuda.cuInit(0), "cuInit")
    check(cuda.cuDeviceGet(ctypes.byref(device), ordinal), f"cuDeviceGet({ordinal})")
    check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device), "cuDevicePrimaryCtxRetain")
    check(cuda.cuCtxSetCurrent(context), "cuCtxSetCurrent")
    check(cuda.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(size)), f"cuMemAlloc({size})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", type=int, default=0, help="CUDA ordinal (0)")
    parser.add_argument("--mib", type=int, default=256, help="MiB to allocate (256)")
    parser.add_argument("--children", type=int, default=0, help="copies of itself to start")
    args = parser.parse_args()
    with contextlib.suppress(OSError, AttributeError):  # Linux: go when the parent goes
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    children = [
        subprocess.Popen(
            [sys.executable, __file__, "--gpu", str(args.gpu), "--mib", str(args.mib)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(args.children)
    ]
    for child in children:
        assert child.stdout is not None
        if child.stdout.readline().strip() != "ready":
            sys.exit("cuda_holder: a child did not take its memory")
    hold(args.gpu, args.mib << 20)
    print("ready", flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
