#!/usr/bin/env bash
# Configures and builds gpupool. The executable lands in build/bin/gpupool.
#   scripts/build.sh            RelWithDebInfo build in build/
#   scripts/build.sh --asan     AddressSanitizer + UBSan build in build-asan/
set -euo pipefail
cd "$(dirname "$0")/.."
dir=build
args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo)
if [ "${1:-}" = "--asan" ]; then
  dir=build-asan
  args=(-DCMAKE_BUILD_TYPE=Debug -DGPUPOOL_SANITIZE=ON)
  shift
fi
cmake -S . -B "$dir" -G Ninja "${args[@]}" > /dev/null
# Beast-heavy sources need about 1 GiB each to compile; two at a time fit.
ninja -C "$dir" -j "${GPUPOOL_BUILD_JOBS:-$(nproc)}" "$@"
