#!/usr/bin/env python3
"""Submit -> running latency against a live server (bench/run_agent_load.sh
--submit N): submits N one-GPU jobs, RATE per second, each polled (every
20 ms) until it runs; prints the latencies' median, p90 and worst, and the
scheduling passes the server made meanwhile (count and mean duration, from
its /metrics).

    submit_latency.py URL TOKEN N RATE
"""
import json
import statistics
import sys
import threading
import time
import urllib.request


def call(url, token, method="GET", body=None):
    req = urllib.request.Request(url, method=method,
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"Authorization": "Bearer " + token,
                                          "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return r.read()


def passes(url, token):
    """(count, sum of seconds) of the server's scheduling passes so far."""
    text = call(url + "/metrics", token).decode()
    values = {}
    for line in text.splitlines():
        for name in ("gpupool_scheduling_pass_duration_seconds_count",
                     "gpupool_scheduling_pass_duration_seconds_sum"):
            if line.startswith(name + " "):
                values[name] = float(line.split()[1])
    return (values["gpupool_scheduling_pass_duration_seconds_count"],
            values["gpupool_scheduling_pass_duration_seconds_sum"])


def main():
    url, token, n, rate = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    before = passes(url, token)
    latencies, failures = [], []
    lock = threading.Lock()

    def one(i):
        try:
            t0 = time.monotonic()
            job = json.loads(call(url + "/v1/jobs", token, "POST",
                                  {"command": ["true"], "name": f"lat{i}",
                                   "resources": {"gpus": 1}}))["id"]
            while True:
                state = json.loads(call(f"{url}/v1/jobs/{job}", token))["state"]
                if state in ("running", "succeeded"):
                    break
                if state in ("failed", "cancelled"):
                    raise RuntimeError(f"job {job} {state}")
                time.sleep(0.02)
            with lock:
                latencies.append(time.monotonic() - t0)
        except Exception as e:  # reported below, and the run fails
            with lock:
                failures.append(repr(e))

    threads = []
    for i in range(n):
        t = threading.Thread(target=one, args=(i,))
        t.start()
        threads.append(t)
        time.sleep(1 / rate)
    for t in threads:
        t.join()
    after = passes(url, token)
    if failures:
        print(f"submit latency: {len(failures)} of {n} failed: {failures[:3]}")
        sys.exit(1)
    latencies.sort()
    count = after[0] - before[0]
    mean_ms = (after[1] - before[1]) / count * 1000 if count else float("nan")
    print(f"submit -> running: {n} jobs at {rate:g}/s: median "
          f"{statistics.median(latencies) * 1000:.0f} ms, p90 "
          f"{latencies[int(0.9 * (n - 1))] * 1000:.0f} ms, worst {latencies[-1] * 1000:.0f} ms; "
          f"scheduling passes meanwhile: {count:.0f}, mean {mean_ms:.1f} ms")


if __name__ == "__main__":
    main()
