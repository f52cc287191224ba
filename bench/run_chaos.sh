#!/usr/bin/env bash
# Chaos migration success (docs/performance.md, "Chaos"): the chaos test of
# tests/integration/test_chaos.py, run longer, its JSON report kept.
#
#   bench/run_chaos.sh [BUILD_DIR]    (SECONDS_OF_CHAOS=600 JOBS=240 SEED=<time>: enough jobs to last the 10 minutes)
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
report=${REPORT:-$PWD/chaos-report.json}
cd "$(dirname "$0")/../tests/integration"
env GPUPOOL_BIN="$build/bin/gpupool" FAKE_NVML_DIR="$build/tests/fake_nvml" \
  GPUPOOL_CHAOS_SECONDS="${SECONDS_OF_CHAOS:-600}" GPUPOOL_CHAOS_JOBS="${JOBS:-240}" \
  ${SEED:+GPUPOOL_CHAOS_SEED=$SEED} GPUPOOL_CHAOS_REPORT="$report" \
  /usr/bin/python3 -m pytest -q -s -p no:cacheprovider test_chaos.py
echo "report: $report"
