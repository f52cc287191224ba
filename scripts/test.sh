#!/usr/bin/env bash
# Installs what is needed, builds, and runs the whole test suite: the
# end-to-end tests (real gpupool servers and agents) against the normal
# build; the unit tests and the end-to-end tests of hostile input under
# AddressSanitizer + UBSan; last the fuzz targets of the parsers for a
# bounded time (tests/fuzz/README.md).
#   scripts/test.sh             all three stages
#   scripts/test.sh --no-asan   the normal build only, unit tests included
#   scripts/test.sh --asan      the sanitizer build only
#   scripts/test.sh --fuzz      the fuzz stage only (clang; GPUPOOL_FUZZ_SECONDS
#                               per target, default 30)
#
# In the full run the unit tests run in the sanitizer build only, which
# runs only the end-to-end tests of hostile input (tests/CMakeLists.txt):
# that keeps the suite within CI's budget on 2 cores (docs/performance.md,
# "The test suite"). Each stage's time is printed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
timings=()
timed() {  # timed LABEL COMMAND...: runs it, records how long it took
  local label=$1 t0=$SECONDS
  shift
  "$@"
  timings+=("$(printf '%-34s %5d s' "$label" $((SECONDS - t0)))")
}
report() {
  echo "== stage times (whole run $((SECONDS - start)) s)"
  for t in "${timings[@]}"; do echo "   $t"; done
}
trap report EXIT

timed "setup" scripts/setup.sh
modes=(normal asan fuzz)
case "${1:-}" in
  --no-asan) modes=(normal) ;;
  --asan) modes=(asan) ;;
  --fuzz) modes=(fuzz) ;;
  "") ;;
  *) echo "usage: scripts/test.sh [--no-asan|--asan|--fuzz]" >&2; exit 2 ;;
esac
full=false
[ "${#modes[@]}" -eq 3 ] && full=true

run_tests() {  # run_tests DIR
  # Twice as many tests as CPUs: the end-to-end tests spend much of their
  # time waiting (leases, grace periods, jobs' sleeps), not computing.
  # On failure the digest of reasons comes last, where a log cut to its
  # head and tail still shows it.
  if ! (cd "$1" && ctest --output-on-failure -j "${GPUPOOL_TEST_JOBS:-$(($(nproc) * 2))}" --timeout 600); then
    python3 scripts/failure_digest.py "$1" || true
    exit 8
  fi
}

for mode in "${modes[@]}"; do
  if [ "$mode" = fuzz ]; then
    echo "== fuzz targets (libFuzzer, ASan + UBSan), ${GPUPOOL_FUZZ_SECONDS:-30} s each"
    timed "fuzz build" scripts/build.sh --fuzz
    # Each target from a copy of its seeds plus the past crashes; a crash, a
    # sanitizer report or a broken invariant fails the test.
    timed "fuzz run" bash -c 'cd build-fuzz && GPUPOOL_FUZZ_SECONDS="${GPUPOOL_FUZZ_SECONDS:-30}" \
      ASAN_OPTIONS=halt_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
      ctest -L fuzz --output-on-failure -j "$(nproc)"'
    continue
  fi
  if [ "$mode" = asan ]; then
    echo "== tests under AddressSanitizer + UBSan"
    timed "sanitizer build" scripts/build.sh --asan
    # Leak checks stay on; any sanitizer report fails the process.
    export ASAN_OPTIONS=abort_on_error=0:halt_on_error=1
    export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
    timed "sanitizer tests" run_tests build-asan
    unset ASAN_OPTIONS UBSAN_OPTIONS
  else
    echo "== tests"
    # In the full run the unit tests run under the sanitizers (next stage) only.
    unit_tests=ON
    if $full; then unit_tests=OFF; fi
    GPUPOOL_UNIT_TESTS=$unit_tests timed "normal build (unit tests $unit_tests)" scripts/build.sh
    timed "normal tests" run_tests build
  fi
done
