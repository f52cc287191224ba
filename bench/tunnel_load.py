#!/usr/bin/python3
"""Load client of bench/run_tunnel_bench.sh (issue 9's figures; see
docs/performance.md, "Interactive sessions and tunnels"). Standard library
only. Talks to the servers of bench/tunnel_servers.py, either directly
(127.0.0.1:PORT: the process executor shares the host's network) or
through `gpupool session connect` (127.0.0.1:LOCAL), and to the pool's API.

Subcommands (each prints its rows of the table, then RESULT lines):
  throughput  upload to the sink and download from the source, direct and
              through the tunnel, alternating; MB/s = 10^6 bytes/s, timed
              from connect() until the last byte is confirmed (the sink's
              count of the N bytes announced, the source's EOF)
  latency     ping-pong of SIZE bytes with the echo server, COUNT round trips
              per run on one connection (after 100 unmeasured); p50 and p99
  jupyter     `gpupool session start --jupyter` until the proxy's
              /v1/sessions/ID/proxy/api/status answers 200 (polled every
              50 ms), and until the command returns
  streams     N connections downloading from the source without end, until
              SIGTERM or --seconds; prints the bytes and MB/s
  probes      tiny jobs (`sleep 0.2`, gpus 0) submitted one after another:
              created->started and finished-started-0.2s (the exit
              report) from the API, and submit->seen finished from here;
              with --busy-port, first idle, then again while `streams`
              runs through the tunnel; /v1/nodes is polled every 200 ms
              throughout
The API is GPUPOOL_SERVER with GPUPOOL_TOKEN, trusting --ca (the pool CA).
"""
import argparse
import json
import os
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

CHUNK = 1024 * 1024
PROBE_SLEEP_MS = 200  # the probe jobs' command: sleep 0.2
BLOCK = memoryview(b"\xa5" * CHUNK)


def now():
    return time.perf_counter()


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def pct(xs, p):
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(p / 100.0 * (len(s) - 1))))]


def connect(port, timeout=60.0):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


# ---- throughput ----

def upload(port, nbytes):
    t0 = now()
    s = connect(port)
    s.sendall(f"{nbytes}\n".encode())
    left = nbytes
    while left > 0:
        n = min(left, CHUNK)
        s.sendall(BLOCK[:n])
        left -= n
    reply = b""
    while not reply.endswith(b"\n"):
        part = s.recv(64)
        if not part:
            break
        reply += part
    t1 = now()
    s.close()
    got = int(reply or b"-1")
    if got != nbytes:
        raise SystemExit(f"upload to port {port}: the sink counted {got} of {nbytes} bytes")
    return nbytes / (t1 - t0) / 1e6


def download(port, nbytes):
    t0 = now()
    s = connect(port)
    s.sendall(f"{nbytes}\n".encode())
    buf = bytearray(CHUNK)
    got = 0
    while True:
        n = s.recv_into(buf)
        if n == 0:
            break
        got += n
    t1 = now()
    s.close()
    if got != nbytes:
        raise SystemExit(f"download from port {port}: got {got} of {nbytes} bytes")
    return nbytes / (t1 - t0) / 1e6


def cmd_throughput(a):
    nbytes = a.mb * 1000 * 1000
    paths = {"direct": (a.sink_direct, a.source_direct), "tunnel": (a.sink_tunnel, a.source_tunnel)}
    res = {(p, d): [] for p in paths for d in ("upload", "download")}
    upload(a.sink_tunnel, 1000 * 1000)  # warm up: the first tunnel, caches
    download(a.source_tunnel, 1000 * 1000)
    for _ in range(a.runs):
        for d in ("upload", "download"):
            for p in ("direct", "tunnel"):
                sink, source = paths[p]
                res[(p, d)].append(upload(sink, nbytes) if d == "upload" else download(source, nbytes))
    print(f"throughput, {a.mb} MB per transfer, median of {a.runs} [min, max], MB/s = 10^6 B/s")
    for d in ("upload", "download"):
        t, di = res[("tunnel", d)], res[("direct", d)]
        print(f"  {d:9s} tunnel {median(t):7.1f} [{min(t):.1f}, {max(t):.1f}]   "
              f"direct {median(di):7.1f} [{min(di):.1f}, {max(di):.1f}]   "
              f"tunnel/direct {median(t) / median(di):.3f}")
        print(f"RESULT throughput_{d}_tunnel_mbps={median(t):.1f} direct_mbps={median(di):.1f} "
              f"ratio={median(t) / median(di):.3f} runs={a.runs} "
              f"tunnel_all={','.join(f'{x:.0f}' for x in t)} direct_all={','.join(f'{x:.0f}' for x in di)}")


# ---- latency ----

def pingpong(port, count, size):
    t_open = now()
    s = connect(port)
    msg = b"p" * size
    buf = bytearray(size)

    def one():
        s.sendall(msg)
        got = 0
        while got < size:
            n = s.recv_into(memoryview(buf)[got:])
            if n == 0:
                raise SystemExit(f"echo on port {port} closed")
            got += n

    one()
    first = now() - t_open  # connect + the first round trip (a tunnel opens)
    for _ in range(100):
        one()
    rtts = []
    for _ in range(count):
        t0 = time.perf_counter_ns()
        one()
        rtts.append((time.perf_counter_ns() - t0) / 1000.0)
    s.close()
    return pct(rtts, 50), pct(rtts, 99), first * 1000.0


def cmd_latency(a):
    res = {"direct": [], "tunnel": []}
    ports = {"direct": a.echo_direct, "tunnel": a.echo_tunnel}
    for _ in range(a.runs):
        for p in ("direct", "tunnel"):
            res[p].append(pingpong(ports[p], a.count, a.size))
    print(f"round trips of {a.size} bytes, {a.count} per run, median of {a.runs} runs' percentiles (us)")
    out = {}
    for p in ("direct", "tunnel"):
        p50 = median([r[0] for r in res[p]])
        p99 = median([r[1] for r in res[p]])
        first = median([r[2] for r in res[p]])
        out[p] = (p50, p99, first)
        print(f"  {p:7s} p50 {p50:8.1f}  p99 {p99:8.1f}   (per run p50: "
              f"{', '.join(f'{r[0]:.0f}' for r in res[p])}; connect + first round trip {first:.1f} ms)")
    added = out["tunnel"][0] - out["direct"][0]
    print(f"  added by the tunnel: p50 {added:.1f} us, p99 {out['tunnel'][1] - out['direct'][1]:.1f} us")
    print(f"RESULT latency_tunnel_p50_us={out['tunnel'][0]:.1f} tunnel_p99_us={out['tunnel'][1]:.1f} "
          f"direct_p50_us={out['direct'][0]:.1f} direct_p99_us={out['direct'][1]:.1f} "
          f"added_p50_us={added:.1f} tunnel_open_ms={out['tunnel'][2]:.1f} runs={a.runs} count={a.count}")


# ---- the API ----

class Api:
    def __init__(self, ca):
        self.url = os.environ["GPUPOOL_SERVER"]
        self.token = os.environ["GPUPOOL_TOKEN"]
        self.ctx = ssl.create_default_context(cafile=ca) if self.url.startswith("https") else None

    def call(self, method, path, body=None, timeout=90, base=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request((base or self.url) + path, data=data, method=method)
        req.add_header("Authorization", "Bearer " + self.token)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=self.ctx) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()
        except (urllib.error.URLError, OSError) as e:
            return 0, str(e).encode()

    def json(self, method, path, body=None, timeout=90):
        status, raw = self.call(method, path, body, timeout)
        if status // 100 != 2:
            raise SystemExit(f"{method} {path}: {status} {raw[:300]!r}")
        return json.loads(raw or b"null")

    def wait_finished(self, job_id, timeout=120):
        deadline = time.time() + timeout
        while time.time() < deadline:
            j = self.json("GET", f"/v1/jobs/{job_id}?until=finished&wait=30s")
            if j["state"] in ("succeeded", "failed", "cancelled"):
                return j
        raise SystemExit(f"job {job_id} did not finish")


# ---- jupyter ----

def cmd_jupyter(a):
    api = Api(a.ca)
    ready, returned = [], []
    for run in range(a.runs):
        args = [a.gpupool, "session", "start", "--jupyter", "--gpus", "1", "--idle-timeout", "0"]
        if a.executor:
            args += ["--executor", a.executor]
        t0 = now()
        p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ids = []

        def read_err():
            for line in p.stderr:
                if line.startswith("session ") and not ids:
                    ids.append(int(line.split()[1]))

        reader = threading.Thread(target=read_err, daemon=True)
        reader.start()
        t_ready = t_ret = None
        last = base = None
        while t_ready is None or t_ret is None:
            if t_ret is None and p.poll() is not None:
                t_ret = now()
                if p.returncode != 0:
                    raise SystemExit(f"session start exited {p.returncode}")
            if t_ready is None and ids and base is None:
                # The proxy is on the sessions' own address; a sign-in link names it.
                status, body = api.call("POST", f"/v1/sessions/{ids[0]}/link", {}, timeout=10)
                last = (status, body[:200])
                if status == 200:
                    url = json.loads(body)["url"]
                    base = url[:url.index("/v1/")]
            if t_ready is None and base is not None:
                status, body = api.call("GET", f"/v1/sessions/{ids[0]}/proxy/api/status", timeout=10,
                                        base=base)
                last = (status, body[:200])
                if status == 200:
                    t_ready = now()
                elif status == 409 and b"exited with" in body:
                    raise SystemExit(f"session {ids[0]}: {body[:300]!r}")
            if now() - t0 > 180:
                raise SystemExit(f"Jupyter did not answer within 180 s; last answer {last}")
            time.sleep(0.05)
        p.communicate()
        reader.join(timeout=5)
        job_id = ids[0]
        job = api.json("GET", f"/v1/jobs/{job_id}")
        ready.append((t_ready - t0) * 1000)
        returned.append((t_ret - t0) * 1000)
        api.call("POST", f"/v1/jobs/{job_id}/cancel", {})
        api.wait_finished(job_id)
        print(f"  run {run + 1}: session {job_id}: start returned {returned[-1]:.0f} ms, Jupyter answered "
              f"{ready[-1]:.0f} ms (API created->started {job['started_ms'] - job['created_ms']} ms)",
              flush=True)
        time.sleep(1.0)  # the agent reports the GPU free
    print(f"jupyter ({a.executor or 'default executor'}), median of {a.runs} [min, max]:")
    print(f"  session start returns   {median(returned):7.0f} ms [{min(returned):.0f}, {max(returned):.0f}]")
    print(f"  Jupyter answers (proxy) {median(ready):7.0f} ms [{min(ready):.0f}, {max(ready):.0f}]")
    print(f"RESULT jupyter_{a.executor or 'default'}_ready_ms={median(ready):.0f} "
          f"start_returns_ms={median(returned):.0f} runs={a.runs} "
          f"ready_all={','.join(f'{x:.0f}' for x in ready)} returns_all={','.join(f'{x:.0f}' for x in returned)}")


# ---- busy tunnels and probes ----

def cmd_streams(a):
    stop = threading.Event()
    counts = [0] * a.conns
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def stream(i):
        s = connect(a.port)
        s.sendall(b"0\n")
        buf = bytearray(CHUNK)
        while not stop.is_set():
            n = s.recv_into(buf)
            if n == 0:
                print(f"stream {i} ended early", file=sys.stderr)
                return
            counts[i] += n
        s.close()

    threads = [threading.Thread(target=stream, args=(i,), daemon=True) for i in range(a.conns)]
    t0 = now()
    for t in threads:
        t.start()
    print("streaming", flush=True)
    stop.wait(a.seconds)
    stop.set()
    dt = now() - t0
    for t in threads:
        t.join(timeout=5)
    total = sum(counts)
    print(f"RESULT streams={a.conns} seconds={dt:.1f} bytes={total} mbps={total / dt / 1e6:.1f} "
          f"per_stream_mb={','.join(str(c // 1000000) for c in counts)}", flush=True)


class NodeWatch:
    """Polls /v1/nodes every 200 ms: every (state, status, connected) seen."""

    def __init__(self, api):
        self.api = api
        self.seen = {}
        self.stop = threading.Event()
        self.polls = 0
        self.slowest_ms = 0.0
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop.is_set():
            t0 = now()
            status, raw = self.api.call("GET", "/v1/nodes", timeout=30)
            self.slowest_ms = max(self.slowest_ms, (now() - t0) * 1000)
            self.polls += 1
            if status == 200:
                for n in json.loads(raw)["nodes"]:
                    key = (n["state"], n["status"], n["connected"])
                    self.seen[key] = self.seen.get(key, 0) + 1
            else:
                self.seen[("api", status, None)] = self.seen.get(("api", status, None), 0) + 1
            self.stop.wait(0.2)

    def done(self):
        self.stop.set()
        self.thread.join()
        return self.seen


def probe(api, executor):
    spec = {"name": "probe", "run": f"sleep {PROBE_SLEEP_MS / 1000}", "resources": {"gpus": 0}}
    if executor:
        spec["executor"] = executor
    t0 = now()
    job_id = api.json("POST", "/v1/jobs", spec)["id"]
    job = api.wait_finished(job_id)
    seen = (now() - t0) * 1000
    if job["state"] != "succeeded":
        raise SystemExit(f"probe job {job_id} {job['state']}: {job.get('reason')}")
    if not job.get("started_ms"):
        # Seen now and then: a job that succeeded with started_ms 0 (no
        # running report applied before the exit). Counted, left out.
        print(f"        (probe job {job_id} succeeded with started_ms {job.get('started_ms')}; "
              f"attempts {json.dumps(job.get('attempt_list'))})", flush=True)
        return None
    # created->started: the server places it, sends the start order over the
    # agent channel, the agent starts it and reports it running; the exit
    # report: finished - started - the sleep.
    return (job["started_ms"] - job["created_ms"],
            job["finished_ms"] - job["started_ms"] - PROBE_SLEEP_MS, seen)


def probe_series(api, a, label):
    watch = NodeWatch(api)
    rows, missing = [], 0
    for _ in range(a.probes):
        r = probe(api, a.executor)
        if r is None:
            missing += 1
        else:
            rows.append(r)
        time.sleep(a.gap)
    seen = watch.done()
    started = [r[0] for r in rows]
    exited = [r[1] for r in rows]
    client = [r[2] - PROBE_SLEEP_MS for r in rows]
    states = "; ".join(f"{k[0]}/{k[1]}/connected={k[2]}: {v}" for k, v in sorted(seen.items(), key=str))
    print(f"  {label:5s} created->started {median(started):6.1f} ms [{min(started)}, {max(started)}]   "
          f"exit report {median(exited):6.1f} ms [{min(exited)}, {max(exited)}]   "
          f"submit->seen finished {median(client):6.1f} ms [{min(client):.0f}, {max(client):.0f}]")
    print(f"        exit report p90 {pct(exited, 90)} ms, created->started p90 {pct(started, 90)} ms")
    print(f"        node as /v1/nodes showed it ({watch.polls} polls, slowest {watch.slowest_ms:.0f} ms): {states}")
    ok = all(k[0] == "ready" and k[2] is True for k in seen)
    print(f"RESULT probes_{label}_started_ms={median(started):.1f} exit_report_ms={median(exited):.1f} "
          f"seen_ms={median(client):.1f} n={len(rows)} no_started_ms={missing} node_always_ready={int(ok)} "
          f"started_all={','.join(str(x) for x in started)} exit_all={','.join(str(x) for x in exited)}",
          flush=True)
    return ok


def cmd_probes(a):
    api = Api(a.ca)
    probe(api, a.executor)  # warm up
    print(f"tiny jobs (`sleep {PROBE_SLEEP_MS / 1000}`, gpus 0, executor {a.executor or 'default'}), "
          f"{a.probes} per case, median [min, max]; exit report = finished - started - {PROBE_SLEEP_MS} ms; "
          f"submit->seen finished less {PROBE_SLEEP_MS} ms:")
    ok = probe_series(api, a, "idle")
    if a.busy_port:
        p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "streams", "--port", str(a.busy_port),
                              "--conns", str(a.conns), "--seconds", "600"],
                             stdout=subprocess.PIPE, text=True)
        assert p.stdout.readline().strip() == "streaming"
        time.sleep(2.0)  # all streams at full speed
        ok = probe_series(api, a, "busy") and ok
        p.send_signal(signal.SIGTERM)
        out, _ = p.communicate(timeout=30)
        line = [l for l in out.splitlines() if l.startswith("RESULT")][0]
        mbps = line.split("mbps=")[1].split()[0]
        print(f"        during the busy probes {a.conns} tunnels carried {mbps} MB/s in all")
        print(line.replace("RESULT ", "RESULT busy_"))
    if not ok:
        print("the node was not ready and connected throughout", file=sys.stderr)
        sys.exit(1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("throughput")
    for f in ("sink-direct", "sink-tunnel", "source-direct", "source-tunnel"):
        t.add_argument("--" + f, type=int, required=True)
    t.add_argument("--mb", type=int, default=256)
    t.add_argument("--runs", type=int, default=7)
    lat = sub.add_parser("latency")
    lat.add_argument("--echo-direct", type=int, required=True)
    lat.add_argument("--echo-tunnel", type=int, required=True)
    lat.add_argument("--count", type=int, default=2000)
    lat.add_argument("--size", type=int, default=64)
    lat.add_argument("--runs", type=int, default=7)
    j = sub.add_parser("jupyter")
    j.add_argument("--gpupool", required=True)
    j.add_argument("--ca", required=True)
    j.add_argument("--executor", default="")
    j.add_argument("--runs", type=int, default=5)
    s = sub.add_parser("streams")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--conns", type=int, default=10)
    s.add_argument("--seconds", type=float, default=10)
    p = sub.add_parser("probes")
    p.add_argument("--ca", required=True)
    p.add_argument("--busy-port", type=int, default=0)
    p.add_argument("--conns", type=int, default=10)
    p.add_argument("--probes", type=int, default=15)
    p.add_argument("--gap", type=float, default=0.3)
    p.add_argument("--executor", default="process")
    a = ap.parse_args()
    {"throughput": cmd_throughput, "latency": cmd_latency, "jupyter": cmd_jupyter,
     "streams": cmd_streams, "probes": cmd_probes}[a.cmd](a)


if __name__ == "__main__":
    main()
