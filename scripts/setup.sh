#!/usr/bin/env bash
# Installs everything gpupool needs to build and test, from Debian 12
# packages only. Safe to run again: when every package is already installed
# it changes nothing and needs no network.
set -euo pipefail

PACKAGES=(
  build-essential g++ cmake ninja-build pkg-config ccache clang-format
  libboost1.81-dev libssl-dev libsqlite3-dev sqlite3
  nlohmann-json3-dev libyaml-cpp-dev libcli11-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-pytest python3-yaml
  python3-zstandard python3-cloudpickle  # the Python client: checkpoints' chunks, Executor's functions
  python3-torch                 # the PyTorch (CPU) checkpointing example and its tests
  rsync                         # the incremental-upload benchmark compares against it
  procps ca-certificates
  curl jq                       # the benchmark scripts (bench/*.sh)
  bubblewrap skopeo umoci busybox-static
  passt                         # pasta: each sandboxed job's own network (exec/private_network.h)
  iproute2                      # `ip netns`: the network tests' machines (tests/integration/machines.py)
  libhowardhinnant-date-dev tzdata
  libzstd-dev
  libsodium-dev                 # argon2id password hashes
  libpq-dev postgresql          # the PostgreSQL store, and the tests' own PostgreSQL servers (on a
                                # machine with systemd Debian also starts a cluster of its own on
                                # :5432; the tests never use it: `systemctl disable --now
                                # postgresql` if you do not want it)
  prometheus-cpp-dev            # the server's /metrics (registry, text format)
  prometheus                    # promtool and a real Prometheus for the metrics tests (on a machine
                                # with systemd Debian also starts its own service on :9090; the
                                # tests start theirs on a free port: `systemctl disable --now
                                # prometheus` if you do not want it)
  jupyter-notebook python3-ipykernel  # Jupyter sessions (run inside sessions; their tests)
  python3-websocket tmux        # session tests: a kernel's WebSocket, a shell driven through tmux
  clang libclang-rt-14-dev      # libFuzzer targets (tests/fuzz)
  chromium chromium-driver python3-selenium  # the web dashboard's browser tests
  debootstrap systemd           # the package's test: a fresh Debian 12 root; systemd-analyze security
)
# npm fetches the dashboard's charting library (web/package.json); Debian's
# npm unless one is already installed.
command -v npm >/dev/null 2>&1 || PACKAGES+=(npm)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages are installed"
else
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The dashboard's front-end packages, exactly as web/package-lock.json pins
# them, from the npm registry (once; the build copies what it needs).
web="$(dirname "$0")/../web"
if [ -f "$web/package-lock.json" ] && [ ! -f "$web/node_modules/uplot/dist/uPlot.iife.min.js" ]; then
  echo "setup: installing the dashboard's npm packages (web/package-lock.json)"
  npm ci --prefix "$web" --no-audit --no-fund --loglevel=error
fi
