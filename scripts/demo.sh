#!/usr/bin/env bash
# The main job, end to end: installs what is needed, builds, starts a local
# pool (a server and two agents with simulated GPUs), submits
# examples/hello-gpu.yaml, streams its output, and stops the pool.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
bin=build/bin/gpupool
work=$(mktemp -d /tmp/gpupool-demo.XXXXXX)
"$bin" dev --agents 2 --simulate-gpus 2xA100:80GiB --listen 127.0.0.1:0 \
  --data-dir "$work/pool" --env-file "$work/env" --no-config --log-level warn &
dev=$!
trap 'kill -TERM $dev 2>/dev/null; wait $dev 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 100); do [ -s "$work/env" ] && break; sleep 0.1; done
# shellcheck disable=SC1091
source "$work/env"
for _ in $(seq 50); do
  [ "$("$bin" nodes -o json | grep -c '"state": "ready"')" -ge 2 ] && break
  sleep 0.1
done
echo; echo "\$ gpupool nodes"; "$bin" nodes
echo; echo "\$ gpupool submit examples/hello-gpu.yaml --follow"
"$bin" submit examples/hello-gpu.yaml --follow
echo; echo "\$ gpupool jobs"; "$bin" jobs
