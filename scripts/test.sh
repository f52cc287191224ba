#!/usr/bin/env bash
# Installs what is needed, builds, and runs the whole test suite (unit tests
# and end-to-end tests that start real gpupool servers and agents).
#   scripts/test.sh           normal build
#   scripts/test.sh --asan    the same tests under AddressSanitizer + UBSan
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
mode=""
dir=build
if [ "${1:-}" = "--asan" ]; then mode=--asan; dir=build-asan; fi
scripts/build.sh $mode
cd "$dir"
ctest --output-on-failure -j "${GPUPOOL_TEST_JOBS:-2}" --timeout 600
