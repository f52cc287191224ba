#!/usr/bin/env bash
# Installs what is needed, builds, and runs the whole test suite (unit tests
# and end-to-end tests that start real gpupool servers and agents), first in
# the normal build, then under AddressSanitizer + UBSan, and last the fuzz
# targets of the parsers for a bounded time (tests/fuzz/README.md).
#   scripts/test.sh             all three stages
#   scripts/test.sh --no-asan   the normal build only (faster)
#   scripts/test.sh --asan      the sanitizer build only
#   scripts/test.sh --fuzz      the fuzz stage only (clang; GPUPOOL_FUZZ_SECONDS
#                               per target, default 30)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
modes=(normal asan fuzz)
case "${1:-}" in
  --no-asan) modes=(normal) ;;
  --asan) modes=(asan) ;;
  --fuzz) modes=(fuzz) ;;
  "") ;;
  *) echo "usage: scripts/test.sh [--no-asan|--asan|--fuzz]" >&2; exit 2 ;;
esac
for mode in "${modes[@]}"; do
  if [ "$mode" = fuzz ]; then
    echo "== fuzz targets (libFuzzer, ASan + UBSan), ${GPUPOOL_FUZZ_SECONDS:-30} s each"
    scripts/build.sh --fuzz
    # Each target from a copy of its seeds plus the past crashes; a crash, a
    # sanitizer report or a broken invariant fails the test.
    (cd build-fuzz && GPUPOOL_FUZZ_SECONDS="${GPUPOOL_FUZZ_SECONDS:-30}" \
      ASAN_OPTIONS=halt_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
      ctest -L fuzz --output-on-failure -j "$(nproc)")
    continue
  fi
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
  # Twice as many tests as CPUs: the end-to-end tests spend much of their
  # time waiting (leases, grace periods, jobs' sleeps), not computing.
  # On failure the digest of reasons comes last, where a log cut to its
  # head and tail still shows it.
  if ! (cd "$dir" && ctest --output-on-failure -j "${GPUPOOL_TEST_JOBS:-$(($(nproc) * 2))}" --timeout 600); then
    python3 scripts/failure_digest.py "$dir" || true
    exit 8
  fi
done
