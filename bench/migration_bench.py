#!/usr/bin/env python3
"""End-to-end migration of a job with a large checkpoint (docs/performance.md,
"Migration").

A real server and two real agents on loopback. The job is
examples/checkpointing/counter.py with a PAD_MIB (default 1024) checkpoint,
which it committed when the agent asked at its 45 s interval and the agent
uploaded in the background. Its provider reclaims the GPU (`gpupool agent reclaim`); the job
writes a fresh checkpoint (1% of it changed), the agent ships the delta and
reports the task vacated, the server requeues the job onto the other agent,
which restores the checkpoint and starts the job. Measured, from the reclaim
command: the GPU is free; the job is requeued (vacated); the job runs again
on the other agent. Medians of RUNS (default 3).

With STANDBY=1 (the default) the job asks for `checkpoint.standby`: agent b
is up before the first checkpoint, keeps a staged copy of it, and the
reclaim starts once that copy is complete. With STANDBY=0, b starts after
the first checkpoint and only the staging that the reclaim itself triggers
helps.

    python3 bench/migration_bench.py [BUILD_DIR]     (PAD_MIB=1024 RUNS=3 STANDBY=1 INTERVAL=45s)

INTERVAL is the job's checkpoint interval (when the agent asks for the first
checkpoint); the smoke test (bench/smoke_scripts.sh migration) runs one run
with PAD_MIB=1 INTERVAL=10s (the shortest interval a spec may ask for).
Exits non-zero when a run fails.
"""
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests/integration"))
build = Path(sys.argv[1] if len(sys.argv) > 1 else REPO / "build").resolve()
os.environ["GPUPOOL_BIN"] = str(build / "bin/gpupool")

from pool import Pool, wait_for  # noqa: E402


def node_id(pool, name):
    return next(n["id"] for n in pool.nodes() if n["name"] == name)


def one_run(pad_mib, standby, interval):
    with tempfile.TemporaryDirectory(dir="/var/tmp") as d:
        pool = Pool(Path(d))
        try:
            pool.start_server()
            pool.start_agent("a")
            pool.wait_nodes_ready(1)
            spec = {"name": "big-checkpoint", "workdir": str(REPO / "examples/checkpointing"),
                    "run": f"exec python3 counter.py --steps 100000 --sleep 0.05 "
                           f"--checkpoint-every 100000 --pad-bytes {pad_mib << 20}",
                    "resources": {"gpus": 1, "memory": f"{pad_mib * 3 + 512}MiB"},
                    "checkpoint": {"interval": interval, "grace": "60s", "standby": standby}}
            path = Path(d) / "spec.json"
            path.write_text(json.dumps(spec))
            job = int(pool.cli("submit", "--quiet", str(path), check=True).stdout.split()[-1])
            pool.wait_state(job, "running", timeout=60)
            b_log = pool.dir / "agent-b.log"
            if standby:
                # b is there when the first checkpoint arrives: it stands by.
                pool.start_agent("b")
                pool.wait_nodes_ready(2)
            # A first full checkpoint (asked for at the interval), uploaded
            # while the job runs.
            wait_for(lambda: checkpoints(pool, job) >= 1, timeout=180, what="first checkpoint")
            if standby:
                wait_for(lambda: "staged job" in b_log.read_text(errors="replace"), timeout=300,
                         what="the standby copy on b")
            else:
                pool.start_agent("b")
                pool.wait_nodes_ready(2)
            # Here server, a and b share one disk: let the writes of the setup
            # (checkpoint 1's upload, b's staged copy) reach it first, as
            # they would have on three machines.
            os.sync()
            t0, wall0 = time.monotonic(), time.time()
            r = pool.cli("agent", "reclaim", "--data-dir", pool.agent_dir("a"), timeout=300)
            freed = time.monotonic() - t0
            assert r.returncode == 0, r.stderr
            wait_for(lambda: pool.job(job)["attempt_list"][0]["state"] == "vacated", timeout=300,
                     interval=0.01, what="vacated")
            vacated = time.monotonic() - t0
            b = node_id(pool, "b")
            wait_for(lambda: (lambda j: j["state"] == "running" and
                              j["attempt_list"][-1]["node_id"] == b)(pool.job(job)),
                     timeout=300, interval=0.01, what="running on b")
            running = time.monotonic() - t0
            logs = "\n".join(f"{(line['ts_ms'] / 1000 - wall0):+7.2f} s  {line['text']}"
                             for line in log_lines(pool, job))
            staged = [l for l in b_log.read_text(errors="replace").splitlines() if "staged job" in l]
            print("\n".join("  b: " + l for l in staged), file=sys.stderr)
            return {"gpu_freed_s": freed, "vacated_s": vacated, "running_again_s": running,
                    "events": [l for l in logs.splitlines() if "checkpoint" in l or "restor" in l]}
        finally:
            pool.stop()


def log_lines(pool, job):
    lines, cursor = [], 0
    while True:
        status, page = pool.api("GET", f"/v1/jobs/{job}/logs?after={cursor}&limit=1000")
        if status != 200 or not page["lines"]:
            return lines
        lines += page["lines"]
        cursor = page["next_cursor"]


def checkpoints(pool, job):
    status, body = pool.api("GET", f"/v1/jobs/{job}/checkpoints")
    return len(body["checkpoints"]) if status == 200 else 0


def main():
    pad_mib = int(os.environ.get("PAD_MIB", "1024"))
    standby = os.environ.get("STANDBY", "1") == "1"
    interval = os.environ.get("INTERVAL", "45s")
    runs = [one_run(pad_mib, standby, interval) for _ in range(int(os.environ.get("RUNS", "3")))]
    for r in runs:
        print(json.dumps({k: v for k, v in r.items() if k != "events"}))
    for e in runs[-1]["events"]:
        print("  " + e)
    for key in ("gpu_freed_s", "vacated_s", "running_again_s"):
        print(f"{key:>16}: median {statistics.median(r[key] for r in runs):.2f} s "
              f"(runs: {', '.join(f'{r[key]:.2f}' for r in runs)})")


if __name__ == "__main__":
    main()
