#!/usr/bin/env python3
"""The web dashboard on a big pool (docs/performance.md, "The dashboard").

A real `gpupool server` (loopback, no TLS: the simulated agents speak plain
WebSocket) on a state database filled as a busy campus pool's
(`gpupool-pool-fill`: HISTORY finished jobs, 10 nodes of 8 GPUs whose
history it is, written through the server's own Pool), AGENTS simulated
agents connected (`gpupool-agent-load`, 2 GPUs each, heartbeats every 5 s),
and PENDING jobs submitted through the API that wait (4 GPUs on one node:
no agent has them), so that the queue is long. Then, RUNS times each:

- **API**: each request a dashboard page makes, over one keep-alive
  connection as a browser does, with the dashboard's cookie: the wall
  time from sending the request to the last byte of the answer, and the
  answer's size.
- **First paint**: headless Chromium (Debian's chromium, through Selenium),
  signed in, loads each page cold (`/ui#/...` after about:blank, the
  browser's cache on, as a returning user's): the time from navigation
  start to the first contentful paint, and to the page's data in the DOM
  (the first row of its table).

Prints each figure's median over the runs.

    python3 bench/dashboard_bench.py [BUILD_DIR]   (AGENTS=1000 HISTORY=100000 PENDING=1000 RUNS=5)
"""
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests/integration"))
build = Path(sys.argv[1] if len(sys.argv) > 1 else REPO / "build").resolve()
os.environ["GPUPOOL_BIN"] = str(build / "bin/gpupool")

from pool import Pool, wait_for  # noqa: E402

AGENTS = int(os.environ.get("AGENTS", "1000"))
HISTORY = int(os.environ.get("HISTORY", "100000"))
PENDING = int(os.environ.get("PENDING", "1000"))
RUNS = int(os.environ.get("RUNS", "5"))
PASSWORD = "dashboard-bench-password"

# The requests behind each page, as the page makes them on load.
API = [
    ("overview: nodes", "/v1/nodes"),
    ("overview: pool telemetry", "/v1/pool/telemetry?since=24h&step=5m"),
    ("overview: events", "/v1/events?newest=1&limit=50"),
    ("jobs: first page", "/v1/jobs?limit=51"),
    ("jobs: a page deep in history", "/v1/jobs?limit=51&before={mid}"),
    ("jobs: first page, succeeded", "/v1/jobs?limit=51&state=succeeded"),
    ("queue: a page of 100", "/v1/queue?limit=100&offset=0"),
    ("queue, whole", "/v1/queue"),
    ("groups", "/v1/groups"),
    ("admin: audit", "/v1/audit?newest=1&limit=50"),
    ("machine telemetry (one node)", "/v1/nodes/load-0/telemetry?since=1h&step=10s"),
]
# Each page and the element that says its data is shown (a table's first
# row: a job's, or the row saying there is none).
PAGES = [
    ("overview", "#/", "#nodes-table tbody tr"),
    ("jobs", "#/jobs", "#jobs-table tbody tr"),
    ("machines", "#/machines", "#machines article[data-node]"),
    ("queue", "#/queue", "#queue-table tbody tr"),
]


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def submit_waiting(pool, count):
    """`count` jobs that wait: 4 GPUs on one node, which no agent has."""
    u = urllib.parse.urlsplit(pool.url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    spec = json.dumps({"name": "waits", "run": "true", "resources": {"gpus": 4}})
    for _ in range(count):
        conn.request("POST", "/v1/jobs", body=spec, headers={
            "Authorization": "Bearer " + pool.token, "Content-Type": "application/json"})
        r = conn.getresponse()
        body = r.read()
        assert r.status == 201, body
    conn.close()


def api_times(pool, cookie, mid):
    u = urllib.parse.urlsplit(pool.url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    out = {}
    for _ in range(RUNS):
        for name, path in API:
            path = path.format(mid=mid)
            t0 = time.perf_counter()
            conn.request("GET", path, headers={"Cookie": "gpupool_dashboard=" + cookie})
            r = conn.getresponse()
            body = r.read()
            ms = (time.perf_counter() - t0) * 1000
            assert r.status == 200, (path, r.status, body[:300])
            out.setdefault(name, []).append((ms, len(body)))
    conn.close()
    return out


WAIT_FOR_DATA = """
const [css, done] = arguments;
const t0 = performance.timeOrigin;
function paint() {
  const p = performance.getEntriesByName("first-contentful-paint")[0];
  return p ? p.startTime : null;
}
function check() {
  if (document.querySelector(css)) {
    const data = performance.now();
    // The paint entry may land a frame later.
    requestAnimationFrame(() => done({data, fcp: paint()}));
    return true;
  }
  return false;
}
if (!check()) {
  const mo = new MutationObserver(() => { if (check()) mo.disconnect(); });
  mo.observe(document.documentElement, {childList: true, subtree: true});
}
"""


def paint_times(pool, driver):
    out = {}
    for _ in range(RUNS):
        for name, frag, css in PAGES:
            driver.get("about:blank")
            driver.get(pool.url + "/ui" + frag)
            r = driver.execute_async_script(WAIT_FOR_DATA, css)
            out.setdefault(name, []).append((r["fcp"], r["data"]))
    return out


def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,900"):
        options.add_argument(arg)
    d = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    d.set_script_timeout(60)
    return d


def main():
    tmp = Path(tempfile.mkdtemp(prefix="gpupool-dashboard-bench-"))
    pool = Pool(tmp)
    load = None
    driver = None
    try:
        t0 = time.time()
        fill = subprocess.run([str(build / "bin/gpupool-pool-fill"), "--dir", pool.server_dir,
                               "--history", str(HISTORY), "--pending", "0"],
                              capture_output=True, text=True, check=True)
        print(fill.stdout.strip())
        pool.start_server(extra=["--insecure", "--rate-limit", "0/s", "--heartbeat-ms", "5000"],
                          log_level="warn")
        ready = tmp / "ready"
        load = subprocess.Popen(
            [str(build / "bin/gpupool-agent-load"), "--server", pool.url, "--join-token-file",
             os.path.join(pool.server_dir, "join.token"), "--agents", str(AGENTS),
             "--heartbeat-ms", "5000", "--duration-s", "3600", "--ready-file", str(ready),
             "--name-prefix", "load-"],
            stdout=open(tmp / "load.log", "w"), stderr=subprocess.STDOUT)
        wait_for(lambda: ready.exists() and ready.read_text().strip(), timeout=300,
                 what=f"{AGENTS} agents welcomed")
        status, body = pool.api("POST", "/v1/users", {"name": "dana", "role": "admin",
                                                       "password": PASSWORD})
        assert status == 201, body
        submit_waiting(pool, PENDING)
        nodes = len(pool.nodes())
        jobs_total = pool.api("GET", "/v1/jobs?limit=1")[1]["jobs"][0]["id"]
        print(f"pool: {nodes} nodes ({AGENTS} connected), {jobs_total} jobs in the store; "
              f"ready after {time.time() - t0:.0f} s")

        driver = browser()
        driver.get(pool.url + "/ui")
        wait_for(lambda: driver.find_elements("css selector", "#signin #user"), what="sign-in form")
        driver.find_element("css selector", "#user").send_keys("dana")
        driver.find_element("css selector", "#password").send_keys(PASSWORD)
        driver.find_element("css selector", "#signin-submit").click()
        wait_for(lambda: "dana" in driver.find_element("css selector", "#whoami").text,
                 what="signed in")
        cookie = next(c["value"] for c in driver.get_cookies() if c["name"] == "gpupool_dashboard")

        api = api_times(pool, cookie, jobs_total // 2)
        paint = paint_times(pool, driver)
        print(f"\nAPI answers (median of {RUNS}, one keep-alive connection, cookie auth):")
        for name, runs in api.items():
            print(f"  {name:34s} {median([m for m, _ in runs]):8.1f} ms  {median([b for _, b in runs]) / 1024:9.1f} KiB")
        print(f"\nPages in headless Chromium (median of {RUNS}; from navigation start):")
        for name, runs in paint.items():
            print(f"  {name:10s} first contentful paint {median([f for f, _ in runs if f is not None]):7.0f} ms"
                  f"   data shown {median([d for _, d in runs]):7.0f} ms")
    finally:
        if driver:
            driver.quit()
        if load:
            load.terminate()
            load.wait()
        pool.stop()


if __name__ == "__main__":
    main()
