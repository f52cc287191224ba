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
# In the full run the unit tests run in the sanitizer build only, and the
# sanitizer and fuzz trees compile at the lowest priority while the normal
# build's end-to-end tests run (they mostly wait): together that keeps the
# suite within CI's budget on 2 cores (docs/performance.md, "The test suite").
# Each stage's time is printed at the end.
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
stop_background() {
  if [ -n "${background:-}" ]; then kill -- "-$background" 2>/dev/null || true; fi
}
trap 'stop_background; report' EXIT

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

# The sanitizer and fuzz builds, one after the other, in the background at
# the lowest CPU and I/O priority, in a process group of their own (stopped
# if the run ends first); their output goes to a log, shown if one fails.
background=""
background_builds() {
  mkdir -p build-logs
  rm -f build-logs/*.seconds
  local low=(nice -n 19)
  if ionice -c 3 true 2>/dev/null; then low+=(ionice -c 3); fi
  setsid -w bash -c '
    set -e
    for what in asan fuzz; do
      t0=$SECONDS
      "$@" scripts/build.sh --$what > build-logs/$what.log 2>&1
      echo $((SECONDS - t0)) > build-logs/$what.seconds
    done' background-builds "${low[@]}" &
  background=$!
}
# Waits for the background build of `what` (asan or fuzz) to be done.
wait_for_build() {
  local what=$1 t0=$SECONDS
  while [ ! -f "build-logs/$what.seconds" ]; do
    if ! kill -0 "$background" 2>/dev/null; then
      echo "the $what build failed:" >&2
      tail -n 60 "build-logs/$what.log" >&2
      exit 1
    fi
    sleep 2
  done
  timings+=("$(printf '%-34s %5d s' "$what build (background; waited $((SECONDS - t0)) s)" \
    "$(cat "build-logs/$what.seconds")")")
}

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
    if $full; then wait_for_build fuzz; else timed "fuzz build" scripts/build.sh --fuzz; fi
    # Each target from a copy of its seeds plus the past crashes; a crash, a
    # sanitizer report or a broken invariant fails the test.
    timed "fuzz run" bash -c 'cd build-fuzz && GPUPOOL_FUZZ_SECONDS="${GPUPOOL_FUZZ_SECONDS:-30}" \
      ASAN_OPTIONS=halt_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
      ctest -L fuzz --output-on-failure -j "$(nproc)"'
    continue
  fi
  if [ "$mode" = asan ]; then
    echo "== tests under AddressSanitizer + UBSan"
    if $full; then wait_for_build asan; else timed "sanitizer build" scripts/build.sh --asan; fi
    # Leak checks stay on; any sanitizer report fails the process.
    export ASAN_OPTIONS=abort_on_error=0:halt_on_error=1
    export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
    timed "sanitizer tests" run_tests build-asan
    unset ASAN_OPTIONS UBSAN_OPTIONS
  else
    echo "== tests"
    if $full; then
      # The unit tests run under the sanitizers (next stage) only.
      GPUPOOL_UNIT_TESTS=OFF timed "normal build (no unit tests)" scripts/build.sh
      background_builds
      timed "normal tests (end to end)" run_tests build
    else
      GPUPOOL_UNIT_TESTS=ON timed "normal build" scripts/build.sh
      timed "normal tests" run_tests build
    fi
  fi
done
