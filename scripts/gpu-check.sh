#!/usr/bin/env bash
# Checks gpupool's GPU sharing on a machine with an NVIDIA GPU and driver,
# and prints a short report. Needs only a C and C++ compiler, Python 3 and
# PyTorch with CUDA (no CUDA toolkit, no gpupool build): it compiles
# libgpushare.so from src/gpushare and the share harness from src/share
# itself.
#
#   scripts/gpu-check.sh [OUT_DIR]
#
# What it runs, each as its own process:
#   1. the GPUs NVML reports (name, UUID, memory), as the agent discovers them;
#   2. memory caps: a PyTorch job under a cap of half the GPU sees that cap
#      in torch.cuda.mem_get_info(), and allocating past it raises
#      torch.cuda.OutOfMemoryError; two such jobs at once each get their half;
#   3. the interposer's overhead: a training step (a small MLP, forward,
#      backward, optimizer) and a launch-bound loop (many tiny kernels), each
#      timed with and without the library, medians of 5 runs;
#   4. compute shares: two compute-bound matmul loops under the interposer's
#      launch gate with shares 0.3 and 0.7, the agent's arbiter run by the
#      test tree's share harness (built here with g++ from src/share), both
#      saturating at once: their throughput ratio (target 7:3 within ±10%);
#      then the 0.3 share alone, work-conserving and strict.
# Exit status: 0 when every check passed, 1 when one failed, 2 when this
# machine has no usable NVIDIA GPU (nothing is measured then).
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:-$(mktemp -d /tmp/gpu-check.XXXXXX)}"
mkdir -p "$out"
PY="${PYTHON:-python3}"

no_gpu() {
  echo "gpu-check: NO NVIDIA GPU FOUND: $1"
  echo "gpu-check: nothing was measured on this machine."
  exit 2
}

# -- 0. Is there a GPU at all? ------------------------------------------------
[ -e /dev/nvidiactl ] || no_gpu "no /dev/nvidiactl (no NVIDIA driver loaded)"
"$PY" - <<'EOF' >"$out/nvml.txt" 2>&1 || no_gpu "NVML cannot be used: $(tail -1 "$out/nvml.txt")"
import ctypes
nvml = ctypes.CDLL("libnvidia-ml.so.1")
assert nvml.nvmlInit_v2() == 0, "nvmlInit_v2 failed"
n = ctypes.c_uint()
assert nvml.nvmlDeviceGetCount_v2(ctypes.byref(n)) == 0 and n.value > 0, "no devices"
class Mem(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]
for i in range(n.value):
    h = ctypes.c_void_p()
    nvml.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h))
    name = ctypes.create_string_buffer(96); uuid = ctypes.create_string_buffer(96); m = Mem()
    nvml.nvmlDeviceGetName(h, name, 96); nvml.nvmlDeviceGetUUID(h, uuid, 96)
    nvml.nvmlDeviceGetMemoryInfo(h, ctypes.byref(m))
    print(f"gpu {i}: {name.value.decode()} {uuid.value.decode()} {m.total >> 20} MiB")
EOF
"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null ||
  no_gpu "PyTorch cannot use CUDA here (torch.cuda.is_available() is false or torch is missing)"

echo "== gpu-check on $(hostname), $(date -u +%Y-%m-%dT%H:%MZ)"
cat "$out/nvml.txt"
fail=0

# -- Build the interposer with the C compiler alone ----------------------------
cc -std=c11 -O2 -fPIC -fvisibility=hidden -shared -Isrc src/gpushare/limits.c \
  src/gpushare/ledger.c src/gpushare/allocs.c src/gpushare/resolve.c src/gpushare/memory.c \
  src/gpushare/launch.c src/gpushare/nvml.c -o "$out/libgpushare.so" -ldl -lpthread ||
  { echo "build failed"; exit 1; }

total_mib=$("$PY" -c "import torch; print(torch.cuda.mem_get_info()[1] >> 20)")
cap_mib=$((total_mib / 2))

# A task's limits and ledger, as the agent writes them.
task_files() { # NAME CAP_MIB
  : >"$out/usage-$1"
  printf 'gpushare 1\nmemory_bytes %d\nusage %s\n' $(($2 * 1048576)) "$out/usage-$1" >"$out/limits-$1"
}
under_share() { # NAME CMD...
  local name="$1"; shift
  GPUSHARE_LIMITS="$out/limits-$name" LD_PRELOAD="$out/libgpushare.so" "$@"
}

# -- 2. Memory caps --------------------------------------------------------------
cat >"$out/cap_job.py" <<'EOF'
import sys, time, torch
cap = int(sys.argv[1]) << 20
free, total = torch.cuda.mem_get_info()
print(f"mem_get_info total {total >> 20} MiB free {free >> 20} MiB", flush=True)
held, chunk = [], 256 << 20
try:
    while True:
        held.append(torch.empty(chunk, dtype=torch.uint8, device="cuda"))
except torch.cuda.OutOfMemoryError:
    pass
got = len(held) * chunk
print(f"allocated {got >> 20} MiB before OutOfMemoryError", flush=True)
ok = total == cap and got <= cap and got >= cap - (1 << 30)
time.sleep(float(sys.argv[2]) if len(sys.argv) > 2 else 0)
sys.exit(0 if ok else 1)
EOF
echo "== memory caps (cap ${cap_mib} MiB of ${total_mib} MiB)"
task_files a "$cap_mib"; task_files b "$cap_mib"
if under_share a "$PY" "$out/cap_job.py" "$cap_mib" >"$out/cap-a.txt" 2>&1; then
  echo "one share: PASS: $(tr '\n' ';' <"$out/cap-a.txt")"
else
  echo "one share: FAIL: $(tr '\n' ';' <"$out/cap-a.txt")"; fail=1
fi
task_files a "$cap_mib"
under_share a "$PY" "$out/cap_job.py" "$cap_mib" 5 >"$out/two-a.txt" 2>&1 & pa=$!
under_share b "$PY" "$out/cap_job.py" "$cap_mib" 5 >"$out/two-b.txt" 2>&1 & pb=$!
if wait $pa && wait $pb; then
  echo "two shares at once: PASS: a: $(tr '\n' ';' <"$out/two-a.txt") b: $(tr '\n' ';' <"$out/two-b.txt")"
else
  echo "two shares at once: FAIL: a: $(tr '\n' ';' <"$out/two-a.txt") b: $(tr '\n' ';' <"$out/two-b.txt")"; fail=1
fi

# -- 3. Overhead -----------------------------------------------------------------
cat >"$out/overhead.py" <<'EOF'
import sys, time, torch
kind = sys.argv[1]
torch.manual_seed(0)
if kind == "train":
    model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 4096)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(256, 4096, device="cuda")
    def step():
        opt.zero_grad(); model(x).square().mean().backward(); opt.step()
    n = 200
else:
    x = torch.zeros(16, device="cuda")
    def step():
        for _ in range(100):
            x.add_(1)
    n = 200
for _ in range(20):
    step()
torch.cuda.synchronize()
t = time.perf_counter()
for _ in range(n):
    step()
torch.cuda.synchronize()
print((time.perf_counter() - t) / n * 1e6)
EOF
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "== interposer overhead (median of 5 runs; microseconds per step)"
task_files o "$total_mib"
for kind in train launch; do
  # Alternating, so that a drift of the machine (clocks, a neighbour) moves both.
  : >"$out/base-$kind"; : >"$out/hooked-$kind"
  for i in 1 2 3 4 5; do
    "$PY" "$out/overhead.py" $kind >>"$out/base-$kind"
    under_share o "$PY" "$out/overhead.py" $kind >>"$out/hooked-$kind"
  done
  base=$(median <"$out/base-$kind")
  hooked=$(median <"$out/hooked-$kind")
  echo "$kind: without ${base} us, with ${hooked} us, $(awk -v a="$base" -v b="$hooked" 'BEGIN {printf "%+.2f%%", (b - a) / a * 100}')"
done

# -- 4. Compute shares -------------------------------------------------------------
# The harness plays the agent's part (src/share/testing/share_harness.cpp):
# it writes each task's want/grant files and limits, runs `PROBE spin
# SECONDS START_NS` for each under the library, ticks the arbiter every 5 ms
# and prints a line per task with the probe's "launches" (here: matmuls).
g++ -std=c++20 -O2 -Isrc src/share/testing/share_harness.cpp src/share/arbiter.cpp \
  src/share/share_files.cpp src/common/safe_fs.cpp src/common/status.cpp -o "$out/share_harness" ||
  { echo "share harness build failed"; exit 1; }
cat >"$out/matmul.py" <<'EOF'
import sys, time, torch
seconds, start_ns = float(sys.argv[2]), int(sys.argv[3])
a = torch.randn(4096, 4096, device="cuda")
b = torch.randn(4096, 4096, device="cuda")
(a @ b).sum().item()  # load the kernels before the common start
while time.monotonic_ns() < start_ns:
    time.sleep(0.001)
t0 = time.monotonic()
n = 0
while time.monotonic() - t0 < seconds:
    for _ in range(4):
        a @ b
    torch.cuda.synchronize()
    n += 4
print(f"launches {n}\nwall_us {int((time.monotonic() - t0) * 1e6)}\nfirst_us 0\nbusy 0")
EOF
printf '#!/bin/sh\nexec %s %s "$@"\n' "$(command -v "$PY")" "$out/matmul.py" >"$out/matmul-probe"
chmod +x "$out/matmul-probe"
harness() { "$out/share_harness" --probe "$out/matmul-probe" --preload "$out/libgpushare.so" "$@"; }
launches() { sed -n "s/^task $1 .* launches \([0-9]*\).*/\1/p" "$2"; }
echo "== compute shares (matmul 4096x4096; the agent's arbiter every 5 ms; 10 s each)"
if harness --dir "$out/share-free" --task a:1000:wc:0:10 >"$out/share-free.txt" 2>&1 &&
  harness --dir "$out/share-pair" --task a:300:wc:0:10 --task b:700:wc:0:10 >"$out/share-pair.txt" 2>&1 &&
  harness --dir "$out/share-alone" --task a:300:wc:0:10 >"$out/share-alone.txt" 2>&1 &&
  harness --dir "$out/share-strict" --task a:300:strict:0:10 >"$out/share-strict.txt" 2>&1; then
  awk -v free="$(launches a "$out/share-free.txt")" -v a="$(launches a "$out/share-pair.txt")" \
    -v b="$(launches b "$out/share-pair.txt")" -v alone="$(launches a "$out/share-alone.txt")" \
    -v strict="$(launches a "$out/share-strict.txt")" 'BEGIN {
    ok = a > 0 && b / a >= 7 / 3 * 0.9 && b / a <= 7 / 3 * 1.1
    printf "0.3 and 0.7 at once: %d and %d matmuls, ratio 1:%.2f (target 1:%.2f, within 10%%): %s\n",
      a, b, (a > 0 ? b / a : 0), 7 / 3, (ok ? "PASS" : "FAIL")
    printf "0.3 alone, work-conserving: %d matmuls, %.1f%% of the unshared %d\n", alone, alone / free * 100, free
    printf "0.3 alone, strict: %d matmuls, %.1f%% of the unshared (its part: 30%%)\n", strict, strict / free * 100
    exit (ok ? 0 : 1) }' || fail=1
else
  echo "compute shares: FAIL: $(cat "$out"/share-*.txt | tr '\n' ';')"; fail=1
fi

echo "== files in $out"
exit $fail
