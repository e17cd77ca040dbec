"""A process that really holds memory on an NVIDIA GPU, through the driver alone.

    python tests/cuda_holder.py [--gpu ORDINAL] [--mib N] [--children N] [--busy]

It takes the GPU's primary context and allocates N MiB on it with the CUDA
driver API (libcuda.so.1, which every node with the driver has: no toolkit,
no framework), prints `ready` once it holds them, and sleeps until it is
killed, or its parent exits. With --children it first starts that many
copies of itself, each holding the same, as an engine's workers do. With
--busy it computes instead of sleeping: it launches a trivial kernel again and
again, each a few milliseconds of arithmetic on the SMs, so the driver's
per-process samples show it running. The kernel is PTX text, which the
driver compiles itself (cuModuleLoadData): still no toolkit. Used by the
real-GPU tests and benchmarks, which skip where no NVIDIA driver answers.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import signal
import subprocess
import sys
import time
from collections.abc import Callable

PR_SET_PDEATHSIG = 1


SPIN_PTX = b"""
.version 6.0
.target sm_50
.address_size 64

.visible .entry spin(.param .u64 out, .param .u32 n)
{
    .reg .pred %p;
    .reg .b32 %i, %n;
    .reg .f32 %x;
    .reg .b64 %o;
    ld.param.u64 %o, [out];
    ld.param.u32 %n, [n];
    cvta.to.global.u64 %o, %o;
    mov.f32 %x, 0f3F800000;
    mov.u32 %i, 0;
LOOP:
    fma.rn.f32 %x, %x, 0f3F7FFFFE, 0f3A83126F;
    add.u32 %i, %i, 1;
    setp.lt.u32 %p, %i, %n;
    @%p bra LOOP;
    st.global.f32 [%o], %x;
    ret;
}
\0"""
"""A kernel that runs `n` dependent multiply-adds per thread and stores the result (so the
loop is not optimised away). PTX ISA 6.0 for sm_50: every driver since R396 compiles it for
its GPU, whatever newer architecture that is."""
SPIN_ITERATIONS = 1 << 20


def hold(ordinal: int, size: int) -> tuple[ctypes.CDLL, int]:
    """The driver library and a device pointer of `size` bytes, held in the GPU's primary
    context, current on this thread."""
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
    return cuda, pointer.value


def spinner(cuda: ctypes.CDLL, out: int) -> Callable[[], None]:
    """What launches the spin kernel on `out` and waits for it, loaded and ready to call."""

    def check(rc: int, call: str) -> None:
        if rc != 0:
            sys.exit(f"cuda_holder: {call} failed with CUDA error {rc}")

    module, function = ctypes.c_void_p(), ctypes.c_void_p()
    check(cuda.cuModuleLoadData(ctypes.byref(module), SPIN_PTX), "cuModuleLoadData")
    check(cuda.cuModuleGetFunction(ctypes.byref(function), module, b"spin"), "cuModuleGetFunction")
    pointer, count = ctypes.c_uint64(out), ctypes.c_uint32(SPIN_ITERATIONS)
    params = (ctypes.c_void_p * 2)(
        ctypes.cast(ctypes.byref(pointer), ctypes.c_void_p),
        ctypes.cast(ctypes.byref(count), ctypes.c_void_p),
    )
    cuda.cuLaunchKernel.argtypes = [
        ctypes.c_void_p,  # the function
        *[ctypes.c_uint] * 7,  # grid x, y, z; block x, y, z; shared memory bytes
        ctypes.c_void_p,  # the stream (the default one)
        ctypes.c_void_p,  # the kernel's parameters
        ctypes.c_void_p,  # extra
    ]

    def launch() -> None:
        # Both kept alive by this closure as long as launches are made.
        check(cuda.cuLaunchKernel(function, 64, 1, 1, 128, 1, 1, 0, None, params, None),
              "cuLaunchKernel")  # fmt: skip
        check(cuda.cuCtxSynchronize(), "cuCtxSynchronize")

    launch()  # the first, compiled and run once before `ready` is said
    return launch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", type=int, default=0, help="CUDA ordinal (0)")
    parser.add_argument("--mib", type=int, default=256, help="MiB to allocate (256)")
    parser.add_argument("--children", type=int, default=0, help="copies of itself to start")
    parser.add_argument("--busy", action="store_true", help="run kernels instead of sleeping")
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
    cuda, pointer = hold(args.gpu, args.mib << 20)
    launch = spinner(cuda, pointer) if args.busy else None
    print("ready", flush=True)
    while True:
        if launch is None:
            time.sleep(3600)
        else:
            launch()


if __name__ == "__main__":
    main()
