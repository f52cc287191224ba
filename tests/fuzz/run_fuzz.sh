#!/usr/bin/env bash
# Runs one libFuzzer target for a bounded time (the CTest test fuzz_<name>):
#   run_fuzz.sh FUZZER CORPUS_DIR REGRESSIONS_DIR WORK_DIR [libFuzzer flags...]
# The repository's corpus is copied to WORK_DIR/corpus first, so that new
# inputs libFuzzer finds never land in the repository; the regressions (past
# crashes) are read-only extra inputs. Crashes go to WORK_DIR/artifacts.
# GPUPOOL_FUZZ_SECONDS (default 30) bounds the run.
set -euo pipefail
fuzzer=$1 corpus=$2 regressions=$3 work=$4
shift 4
rm -rf "$work/corpus"
mkdir -p "$work/corpus" "$work/artifacts"
cp "$corpus"/* "$work/corpus/"
inputs=("$work/corpus")
[ -d "$regressions" ] && inputs+=("$regressions")
exec "$fuzzer" -max_total_time="${GPUPOOL_FUZZ_SECONDS:-30}" -timeout=10 -rss_limit_mb=2048 \
  -print_final_stats=1 -artifact_prefix="$work/artifacts/" "$@" "${inputs[@]}"
