#!/usr/bin/env bash
# Installs what is needed, builds, and runs the whole test suite (unit tests
# and end-to-end tests that start real gpupool servers and agents), first in
# the normal build and then under AddressSanitizer + UBSan.
#   scripts/test.sh             both builds
#   scripts/test.sh --no-asan   the normal build only (faster)
#   scripts/test.sh --asan      the sanitizer build only
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
modes=(normal asan)
case "${1:-}" in
  --no-asan) modes=(normal) ;;
  --asan) modes=(asan) ;;
  "") ;;
  *) echo "usage: scripts/test.sh [--no-asan|--asan]" >&2; exit 2 ;;
esac
for mode in "${modes[@]}"; do
  if [ "$mode" = asan ]; then
    echo "== tests under AddressSanitizer + UBSan"
    scripts/build.sh --asan
    dir=build-asan
    # Leak checks stay on; any sanitizer report fails the process.
    export ASAN_OPTIONS=abort_on_error=0:halt_on_error=1
    export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
  else
    echo "== tests"
    scripts/build.sh
    dir=build
  fi
  (cd "$dir" && ctest --output-on-failure -j "${GPUPOOL_TEST_JOBS:-2}" --timeout 600)
done
