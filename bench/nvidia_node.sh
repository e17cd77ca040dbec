#!/usr/bin/env bash
# The checks that need a real NVIDIA GPU, run on a node that has one:
#   bash bench/nvidia_node.sh OUTDIR
# OUTDIR gets the node's description (env.txt), nvidia-smi's answers to the
# worker's queries while two processes hold GPU memory and NVML's two memory
# readings beside nvidia-smi's (captures.tgz), and
# the log of each step: `placewatch sample` and `placewatch doctor` as an
# operator runs them, the real-GPU tests, the tick cost and the footprint
# against the node's own nvidia-smi and NVML, and the tick cost with the fake
# tools, for comparison with a machine without a GPU, and where the worker's
# RSS comes from (bench/rss_stages.py); the loop cost against the node's own
# nvidia-smi looping, the footprint's growth over an hour's ticks (at 0.1 s),
# the NVML tick split into its phases against the node's driver
# (bench/nvml_parts.py), and the cold publish and the consume path on the
# node's processor. Each step has a time limit, and a failed step does not stop
# the next; STEPS names the steps to run (all by default), e.g.
# STEPS="real-tests tick-real loop-real".
# Needs placewatch and its test extra installed (placewatch and nats-server on
# PATH); PYTHON names the interpreter (python3). Install them in a venv of their
# own, as the README does: a machine image's shared environment imports its own
# modules into every process at start (its site .pth files), and the footprint
# would count them.
set -u
out=${1:?usage: bash bench/nvidia_node.sh OUTDIR}
py=${PYTHON:-python3}
cd "$(dirname "$0")/.."
mkdir -p "$out"
out=$(cd "$out" && pwd)
export PYTHONUNBUFFERED=1
steps=${STEPS:-captures sample doctor real-tests tick-real parts-real loop-real footprint-real growth-real rss-stages tick-fake publish-node consume-node}
failed=0

wanted() { [[ " $steps " == *" $1 "* ]]; }

step() { # step NAME SECONDS COMMAND...: its output to NAME.log and here
    local name=$1 limit=$2
    shift 2
    wanted "$name" || return 0
    echo "== $name ($(date -u +%T))"
    timeout --kill-after=5 "$limit" "$@" 2>&1 | tee "$out/$name.log"
    local rc=${PIPESTATUS[0]}
    [ "$rc" -eq 0 ] || { echo "== $name: exit $rc"; failed=1; }
}

{
    date -u +%FT%TZ
    uname -srm
    nproc
    "$py" --version
    nvidia-smi --version
    nvidia-smi -L
} >"$out/env.txt" 2>&1
cat "$out/env.txt"

# What nvidia-smi answers the worker's own queries, with two processes on GPU 0.
if wanted captures; then
captures=$(mktemp -d)
"$py" tests/support/cuda_holder.py --mib 512 --children 1 >"$captures/holder.out" &
holder=$!
for _ in $(seq 200); do grep -q ready "$captures/holder.out" && break; sleep 0.1; done
"$py" - "$captures" <<'PY'
import subprocess, sys
from pathlib import Path
from placewatch.worker.gpu.nvidia_smi import apps_query_argv, gpu_query_argv, xml_argv
where = Path(sys.argv[1])
memory = ["nvidia-smi", "--query-gpu=index,memory.total,memory.reserved,memory.used,memory.free",
          "--format=csv,nounits"]
for name, argv in (("query-gpu.csv", gpu_query_argv()), ("query-compute-apps.csv", apps_query_argv()),
                   ("q.xml", xml_argv()), ("nvidia-smi.txt", ["nvidia-smi"]), ("memory.csv", memory)):
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    (where / name).write_text(done.stdout)
    print(name, "exit", done.returncode, len(done.stdout), "chars", done.stderr.strip())
# NVML's two memory readings beside nvidia-smi's: what each counts as used.
import pynvml
pynvml.nvmlInit()
lines = []
for i in range(pynvml.nvmlDeviceGetCount()):
    h = pynvml.nvmlDeviceGetHandleByIndex(i)
    v1 = pynvml.nvmlDeviceGetMemoryInfo(h)
    v2 = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
    lines.append(f"{i} v1 total {v1.total} used {v1.used} free {v1.free}; "
                 f"v2 total {v2.total} reserved {v2.reserved} used {v2.used} free {v2.free}")
(where / "nvml-memory.txt").write_text("\n".join(lines) + "\n")
print(*lines, sep="\n")
PY
kill "$holder"
wait "$holder" 2>/dev/null
tar czf "$out/captures.tgz" -C "$captures" .
rm -rf "$captures"
fi

# What an operator sees: a one-off sample, and doctor against a nats-server of its own.
step sample 30 placewatch sample
if wanted doctor; then
store=$(mktemp -d)
port=$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
nats-server -a 127.0.0.1 -p "$port" -js -sd "$store" >/dev/null 2>&1 &
server=$!
sleep 1
step doctor 60 placewatch doctor --nats "nats://127.0.0.1:$port"
kill "$server"
wait "$server" 2>/dev/null
rm -rf "$store"
fi

step real-tests 150 "$py" -m pytest -v -p no:cacheprovider tests/integration/gpu/test_real_gpu.py
step tick-real 150 "$py" bench/tick_cost.py --real --ticks 40
step parts-real 90 "$py" bench/nvml_parts.py --real --ticks 30
step loop-real 150 "$py" bench/loop_cost.py --real --seconds 40 --spawns 20
step footprint-real 90 "$py" bench/footprint.py --real --seconds 60
step growth-real 240 "$py" bench/footprint.py --real --interval 0.1 --seconds 180
step rss-stages 60 "$py" bench/rss_stages.py
step tick-fake 120 "$py" bench/tick_cost.py --ticks 25
step publish-node 120 "$py" bench/publish_path.py --messages 5000 --rounds 2 --cold-rounds 5
step consume-node 60 "$py" bench/consume_path.py --seconds 3
exit $failed
