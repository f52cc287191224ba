#!/usr/bin/env bash
# Configures and builds gpupool. The executable lands in build/bin/gpupool.
#   scripts/build.sh            RelWithDebInfo build in build/
#   scripts/build.sh --asan     AddressSanitizer + UBSan build in build-asan/
#   scripts/build.sh --fuzz     the libFuzzer targets (clang, ASan + UBSan) in
#                               build-fuzz/fuzz/ (tests/fuzz/README.md)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=build
# Line tables only (-g1, not -g): profiles and backtraces keep functions,
# files and lines, and the build compiles about a third faster, which the
# suite's 45-minute budget needs (docs/performance.md, "The test suite").
args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG"
      "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG")
targets=()
if [ "${1:-}" = "--asan" ]; then
  dir=build-asan
  # Line tables only here too: sanitizer reports keep files and lines, and
  # the objects are about a seventh smaller and faster to compile and link.
  args=(-DCMAKE_BUILD_TYPE=Debug -DGPUPOOL_SANITIZE=ON -DCMAKE_CXX_FLAGS_DEBUG=-g1
        -DCMAKE_C_FLAGS_DEBUG=-g1)
  shift
elif [ "${1:-}" = "--fuzz" ]; then
  dir=build-fuzz
  args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DGPUPOOL_FUZZ=ON)
  export CC=clang CXX=clang++
  # Only the targets and the libraries they link, not the whole tree.
  targets=(fuzz_job_spec fuzz_api_json fuzz_agent_proto fuzz_manifest fuzz_oci_image)
  shift
fi
# GPUPOOL_UNIT_TESTS=OFF: without the unit tests (scripts/test.sh).
# A unity build, 8 sources to a file, compiles the tree about 40 % faster
# (CMakeLists.txt); GPUPOOL_UNITY_BUILD=OFF when editing one file at a time.
cmake -S . -B "$dir" -G Ninja "${args[@]}" "-DGPUPOOL_UNIT_TESTS=${GPUPOOL_UNIT_TESTS:-ON}" \
  "-DCMAKE_UNITY_BUILD=${GPUPOOL_UNITY_BUILD:-ON}" > /dev/null
# Beast-heavy sources need about 1 GiB each to compile; two at a time fit.
ninja -C "$dir" -j "${GPUPOOL_BUILD_JOBS:-$(nproc)}" "${targets[@]}" "$@"
