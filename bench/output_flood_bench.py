#!/usr/bin/env python3
"""A job that floods its output at full speed, and the pool around it
(docs/performance.md, "Output floods").

A real server and agent on loopback. The job runs `yes` (FLOOD=yes, the
default) or `cat /dev/urandom` (FLOOD=junk) for FLOOD_S seconds (default
60) under the server's --max-job-output LIMIT (default 1GiB, the default
limit). Meanwhile another user runs `gpupool jobs` in a
loop; each call is timed from the process start to its exit. Measured per
run: those times before the flood (baseline) and during it, until the
job has ended and its output is all stored (median, 95th percentile,
max); the growth of the server's data directory and the largest the
agent's task directory got (sampled every 0.2 s); how long the job took
to end; the server's CPU time. RUNS runs (default 3); medians of the runs.

    python3 bench/output_flood_bench.py [BUILD_DIR]    (FLOOD=yes LIMIT=1GiB FLOOD_S=60 RUNS=3)
    LIMIT=none MEASURE_S=40 FLOOD_S=20 python3 bench/output_flood_bench.py OLD_BUILD_DIR
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests/integration"))
build = Path(sys.argv[1] if len(sys.argv) > 1 else REPO / "build").resolve()
os.environ["GPUPOOL_BIN"] = str(build / "bin/gpupool")

from pool import GPUPOOL, Pool, wait_for  # noqa: E402

LIMIT = os.environ.get("LIMIT", "1GiB")
# What floods: `yes` (the most lines per byte), or binary junk from
# /dev/urandom (incompressible; each invalid UTF-8 byte becomes U+FFFD).
FLOODS = {"yes": "yes", "junk": "cat /dev/urandom"}
FLOOD = os.environ.get("FLOOD", "yes")
FLOOD_S = int(os.environ.get("FLOOD_S", "60"))
# For servers without an output limit (LIMIT=none, e.g. an older build):
# measure for MEASURE_S seconds after the submit instead of until the job
# has ended and all its output is stored (which may then take hours).
MEASURE_S = int(os.environ.get("MEASURE_S", "0"))
RUNS = int(os.environ.get("RUNS", "3"))


def dir_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except FileNotFoundError:
                pass
    return total


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def time_jobs(env):
    t0 = time.monotonic()
    r = subprocess.run([GPUPOOL, "jobs"], capture_output=True, text=True, env=env, timeout=120)
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    return took


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def one_run():
    with tempfile.TemporaryDirectory(dir="/var/tmp") as d:
        pool = Pool(Path(d))
        try:
            limit = () if LIMIT == "none" else ("--max-job-output", LIMIT)
            pool.start_server(extra=limit, log_level="info")
            pool.start_agent("a", log_level="info")
            pool.wait_nodes_ready(1)
            subprocess.run([GPUPOOL, "admin", "user", "add", "bob"], env=pool.cli_env(), check=True,
                           capture_output=True, stdin=subprocess.DEVNULL, timeout=60)
            bob = pool.cli("token", "create", "--user", "bob", "--name", "bench",
                           check=True).stdout.strip()
            env = dict(pool.cli_env(), GPUPOOL_TOKEN=bob)
            baseline = [time_jobs(env) for _ in range(20)]

            server_before = dir_bytes(pool.server_dir)
            cpu_before = cpu_seconds(pool.server.pid)
            tasks = os.path.join(pool.agent_dir("a"), "tasks")
            peaks = {"server": server_before, "agent": 0}
            done = threading.Event()

            def sample():
                while not done.is_set():
                    peaks["server"] = max(peaks["server"], dir_bytes(pool.server_dir))
                    peaks["agent"] = max(peaks["agent"], dir_bytes(tasks))
                    time.sleep(0.2)

            sampler = threading.Thread(target=sample)
            sampler.start()
            t0 = time.monotonic()
            job_id = pool.submit({"name": "flood", "run": f"timeout {FLOOD_S} {FLOODS[FLOOD]}; exit 0",
                                  "resources": {"gpus": 1}})
            during = []

            def measuring():
                if MEASURE_S:
                    return time.monotonic() - t0 < MEASURE_S
                return pool.job(job_id)["state"] not in ("succeeded", "failed", "cancelled")
            while measuring():
                during.append(time_jobs(env))
                time.sleep(0.2)
            took = time.monotonic() - t0
            done.set()
            sampler.join()
            job = pool.job(job_id)
            assert MEASURE_S or job["state"] == "succeeded", job
            output = job.get("output", {"bytes": -1, "lines": -1, "stored_bytes": -1,
                                        "limit_reached": []})
            return {
                "baseline_median_s": statistics.median(baseline),
                "baseline_max_s": max(baseline),
                "during_n": len(during),
                "during_median_s": statistics.median(during),
                "during_p95_s": pct(during, 95),
                "during_max_s": max(during),
                "job_s": took,
                "output_bytes": output["bytes"],
                "output_lines": output["lines"],
                "stored_bytes": output["stored_bytes"],
                "limit_reached": [l["event"] for l in output["limit_reached"]],
                "server_grew_peak": peaks["server"] - server_before,
                "server_grew_final": dir_bytes(pool.server_dir) - server_before,
                "agent_task_peak": peaks["agent"],
                "server_cpu_s": cpu_seconds(pool.server.pid) - cpu_before,
            }
        finally:
            pool.stop()


def main():
    runs = []
    for i in range(RUNS):
        r = one_run()
        print(f"run {i + 1}: " + json.dumps(r), flush=True)
        runs.append(r)
    print(f"\nFLOOD={FLOOD} LIMIT={LIMIT} FLOOD_S={FLOOD_S} MEASURE_S={MEASURE_S} RUNS={RUNS}; "
          "medians of the runs:")
    for key in runs[0]:
        if key == "limit_reached":
            continue
        values = [r[key] for r in runs]
        med = statistics.median(values)
        unit = " MiB" if "grew" in key or "peak" in key or key.endswith("bytes") else ""
        shown = med / (1 << 20) if unit else med
        print(f"  {key:20s} {shown:12.3f}{unit}   (runs: {', '.join(f'{v:.3f}' if isinstance(v, float) else str(v) for v in values)})")


if __name__ == "__main__":
    main()
