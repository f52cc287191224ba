#!/usr/bin/env bash
# Incremental checkpoint upload vs rsync (docs/performance.md, "Incremental
# upload").
#
# A checkpoint of SIZE_MIB (default 1024) random bytes is uploaded once; then
# 1% of its bytes change, in 4 KiB blocks at scattered random offsets, and it
# is uploaded again. The second upload is measured, for gpupool (the agent's
# upload path: gpupool-upload-bench into a real `gpupool server`) and for
# rsync (3.2, Debian; its delta algorithm against an rsync daemon, both on
# loopback). Bytes are counted on the loopback interface (both directions,
# headers included), so both tools are measured the same way. Each tool gets
# a fresh destination per run; medians of RUNS (default 3).
#
#   bench/run_upload_bench.sh [BUILD_DIR]      (AVG=16KiB SIZE_MIB=1024 RUNS=3)
set -euo pipefail

build=${1:-build}
gpupool="$build/bin/gpupool"
upload="$build/bin/gpupool-upload-bench"
size_mib=${SIZE_MIB:-1024}
runs=${RUNS:-3}
avg=${AVG:-16KiB}
for tool in "$gpupool" "$upload" rsync python3 jq; do
  command -v "$tool" >/dev/null || { echo "missing $tool (scripts/setup.sh installs it)" >&2; exit 1; }
done

work=$(mktemp -d /var/tmp/gpupool-upload-bench.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

mkdir -p "$work/v1" "$work/v2"
python3 - "$work" "$size_mib" <<'EOF'
import os, random, sys
work, mib = sys.argv[1], int(sys.argv[2])
size = mib << 20
with open(f"{work}/v1/state.bin", "wb") as f:
    for _ in range(mib):
        f.write(os.urandom(1 << 20))
data = bytearray(open(f"{work}/v1/state.bin", "rb").read())
rng = random.Random(1)
block = 4096
for _ in range(size // 100 // block):  # 1% of the bytes, in scattered 4 KiB blocks
    at = rng.randrange(0, size - block)
    data[at:at + block] = os.urandom(block)
open(f"{work}/v2/state.bin", "wb").write(data)
EOF

lo_bytes() { cat /sys/class/net/lo/statistics/tx_bytes; }
now() { date +%s.%N; }

gp_results=() rs_results=()
for run in $(seq "$runs"); do
  # ---- gpupool: a fresh server holding v1, then v2 ----
  data="$work/server-$run"
  # Plain HTTP, as the earlier figures (TLS costs: gpupool-tls-bench).
  "$gpupool" server --insecure --data-dir "$data" --listen 127.0.0.1:0 >"$work/server-$run.log" 2>&1 &
  pids+=($!)
  server_pid=$!
  for _ in $(seq 100); do [ -s "$data/server.url" ] && break; sleep 0.1; done
  url=$(cat "$data/server.url")
  "$upload" --server "$url" --token-file "$data/admin.token" --dir "$work/v1" --avg-chunk "$avg" >/dev/null
  before=$(lo_bytes)
  out=$("$upload" --server "$url" --token-file "$data/admin.token" --dir "$work/v2" --avg-chunk "$avg")
  wire=$(($(lo_bytes) - before))
  gp_results+=("$(jq -c --argjson wire "$wire" '. + {wire_bytes: $wire}' <<<"$out")")
  kill "$server_pid"; wait "$server_pid" 2>/dev/null || true
  rm -rf "$data"

  # ---- rsync: a fresh daemon module holding v1, then v2 ----
  dest="$work/rsync-$run"
  mkdir -p "$dest"
  port=$((20000 + RANDOM % 20000))
  cat >"$work/rsyncd.conf" <<EOF
pid file = $work/rsyncd-$run.pid
use chroot = no
[ckpt]
  path = $dest
  read only = no
  uid = root
  gid = root
EOF
  rsync --daemon --no-detach --address=127.0.0.1 --port="$port" --config="$work/rsyncd.conf" &
  pids+=($!)
  daemon_pid=$!
  sleep 0.5
  rsync -a "$work/v1/" "rsync://127.0.0.1:$port/ckpt/"
  before=$(lo_bytes)
  t0=$(now)
  stats=$(rsync -a --no-whole-file --ignore-times --stats "$work/v2/" "rsync://127.0.0.1:$port/ckpt/")
  t1=$(now)
  wire=$(($(lo_bytes) - before))
  sent=$(sed -n 's/^Total bytes sent: \([0-9,]*\).*/\1/p' <<<"$stats" | tr -d ,)
  received=$(sed -n 's/^Total bytes received: \([0-9,]*\).*/\1/p' <<<"$stats" | tr -d ,)
  rs_results+=("{\"seconds\": $(awk "BEGIN {print $t1 - $t0}"), \"sent\": $sent, \"received\": $received, \"wire_bytes\": $wire}")
  cmp "$work/v2/state.bin" "$dest/state.bin"
  kill "$daemon_pid"; wait "$daemon_pid" 2>/dev/null || true
  rm -rf "$dest"
done

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
gp_s=$(printf '%s\n' "${gp_results[@]}" | jq '.seconds' | median)
gp_w=$(printf '%s\n' "${gp_results[@]}" | jq '.wire_bytes' | median)
gp_c=$(printf '%s\n' "${gp_results[@]}" | jq '.chunk_bytes_sent + .manifest_bytes' | median)
rs_s=$(printf '%s\n' "${rs_results[@]}" | jq '.seconds' | median)
rs_w=$(printf '%s\n' "${rs_results[@]}" | jq '.wire_bytes' | median)
rs_c=$(printf '%s\n' "${rs_results[@]}" | jq '.sent + .received' | median)
echo "runs (gpupool):"; printf '  %s\n' "${gp_results[@]}"
echo "runs (rsync):";   printf '  %s\n' "${rs_results[@]}"
printf '%-10s %12s %16s %16s\n' tool seconds wire_bytes payload_bytes
printf '%-10s %12.2f %16d %16d\n' gpupool "$gp_s" "$gp_w" "$gp_c"
printf '%-10s %12.2f %16d %16d\n' rsync "$rs_s" "$rs_w" "$rs_c"
printf 'gpupool/rsync: time %.2f, wire bytes %.2f\n' "$(awk "BEGIN {print $gp_s / $rs_s}")" \
  "$(awk "BEGIN {print $gp_w / $rs_w}")"
