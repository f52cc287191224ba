#!/usr/bin/env python3
"""What a job's own network costs (docs/performance.md, "Job networking").

A real server and agent; the agent runs on a "machine" of its own (a
network namespace, tests/integration/machines.py) and a second machine
stands for the outside world, running a small sink/echo server. Jobs in the
default sandbox run a client against it, once with the default network (its
own namespace, connected by pasta) and once with `network: host` (the
machine's network; the agent's policy allows it here), alternately, RUNS
times each. Each job measures, from inside the sandbox:

  throughput  MiB/s of MIB MiB sent over one TCP connection (until the
              server acknowledged the last byte)
  rtt         round trips of one byte on one connection (TCP_NODELAY),
              median and p99 in microseconds over PINGS
  connect     time to connect (and close) a new TCP connection, median in
              microseconds over CONNECTS

Reported: the median over the runs of each figure, per network.

A run whose job fails (a connection reset: see docs/performance.md) is
counted and left out of the medians.

    python3 bench/net_bench.py [BUILD_DIR]     (RUNS=5 MIB=256 PINGS=5000 CONNECTS=300)
"""
import base64
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests/integration"))
build = Path(sys.argv[1] if len(sys.argv) > 1 else REPO / "build").resolve()
os.environ["GPUPOOL_BIN"] = str(build / "bin/gpupool")

from machines import Machines  # noqa: E402
from pool import Pool  # noqa: E402

RUNS = int(os.environ.get("RUNS", "5"))
MIB = int(os.environ.get("MIB", "256"))
PINGS = int(os.environ.get("PINGS", "5000"))
CONNECTS = int(os.environ.get("CONNECTS", "300"))
PYTHON = "/usr/bin/python3"
PORT = 7300

# The outside machine's server: "T" then bytes until EOF, answered with the
# count; "P" then one-byte pings, each echoed; anything else: closed.
SERVER = r"""
import socket, sys, threading
def handle(c):
    with c:
        kind = c.recv(1)
        if kind == b"T":
            n = 0
            while True:
                b = c.recv(1 << 20)
                if not b:
                    break
                n += len(b)
            c.sendall(n.to_bytes(8, "little"))
        elif kind == b"P":
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            while True:
                b = c.recv(1)
                if not b:
                    break
                c.sendall(b)
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(64)
print("ready", flush=True)
while True:
    c, _ = s.accept()
    threading.Thread(target=handle, args=(c,), daemon=True).start()
"""

CLIENT = r"""
import json, os, socket, statistics, time
host, port = os.environ["TARGET"].rsplit(":", 1); port = int(port)
mib, pings, connects = (int(os.environ[k]) for k in ("MIB", "PINGS", "CONNECTS"))
out = {}
s = socket.create_connection((host, port)); s.sendall(b"T")
buf = bytes(1 << 20)
t0 = time.perf_counter()
for _ in range(mib):
    s.sendall(buf)
s.shutdown(socket.SHUT_WR)
got = int.from_bytes(s.recv(8), "little")
out["throughput_mib_s"] = mib / (time.perf_counter() - t0)
assert got == mib << 20, got
s.close()
s = socket.create_connection((host, port)); s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
s.sendall(b"P")
rtts = []
for _ in range(pings):
    t = time.perf_counter_ns(); s.sendall(b"x"); s.recv(1); rtts.append(time.perf_counter_ns() - t)
s.close()
rtts.sort()
out["rtt_p50_us"] = rtts[len(rtts) // 2] / 1000
out["rtt_p99_us"] = rtts[int(len(rtts) * 0.99)] / 1000
cs = []
for _ in range(connects):
    t = time.perf_counter_ns(); c = socket.create_connection((host, port)); cs.append(time.perf_counter_ns() - t); c.close()
out["connect_p50_us"] = statistics.median(cs) / 1000
print("RESULT " + json.dumps(out), flush=True)
"""


def run_line(script):
    b64 = base64.b64encode(script.encode()).decode()
    return f"echo {b64} | base64 -d > /tmp/c.py && exec {PYTHON} /tmp/c.py"


def main():
    tmp = Path(tempfile.mkdtemp(prefix="gpupool-net-bench-"))
    m = Machines()
    pool = Pool(tmp)
    server = None
    try:
        ns_a, _ = m.add("a")
        _, outside = m.add("outside")
        server = m.run("outside", [PYTHON, "-c", SERVER, outside, str(PORT)], stdout=subprocess.PIPE, text=True)
        assert server.stdout.readline().strip() == "ready"
        pool.start_server(host=m.gateway)
        config = tmp / "agent.yaml"
        config.write_text("executors: [sandbox]\npolicy: {allow_host_network: true}\n")
        pool.start_agent("a", extra=["--config", str(config)], netns=ns_a)
        pool.wait_nodes_ready(1, timeout=30)
        results = {"private": [], "host": []}
        failed = {"private": [], "host": []}
        env = {"TARGET": f"{outside}:{PORT}", "MIB": str(MIB), "PINGS": str(PINGS), "CONNECTS": str(CONNECTS)}
        for i in range(RUNS):
            for mode in ("private", "host"):
                spec = {"name": f"net-{mode}", "run": run_line(CLIENT), "env": env}
                if mode == "host":
                    spec["network"] = "host"
                job_id = pool.submit(spec)
                job = pool.wait_finished(job_id, timeout=600)
                lines = pool.logs_text(job_id)
                if job["state"] != "succeeded":
                    failed[mode].append(lines[-1] if lines else job["reason"])
                    print(f"run {i + 1} {mode}: FAILED: {failed[mode][-1]}", flush=True)
                    continue
                r = json.loads(next(l for l in lines if l.startswith("RESULT "))[7:])
                results[mode].append(r)
                print(f"run {i + 1} {mode}: {json.dumps(r)}", flush=True)
        print(f"\nmedians of {RUNS} runs ({MIB} MiB, {PINGS} pings, {CONNECTS} connects):")
        for mode, rs in results.items():
            med = {k: round(statistics.median(r[k] for r in rs), 1) for k in rs[0]} if rs else {}
            print(f"  {mode:8s} {json.dumps(med)}  ({len(rs)} runs, {len(failed[mode])} failed)")
    finally:
        if server:
            server.kill()
            server.wait()
        pool.stop()
        m.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
