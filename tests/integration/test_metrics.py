"""The server's Prometheus metrics, end to end: an agent with "real" GPUs (the
fake NVML, through the agent's ordinary loader path) reports telemetry, a job
holds one of them, and a real Prometheus server (Debian's `prometheus`)
scrapes the pool twice, through the API with a scrape-only token over TLS and
on the open --metrics-listen address, and answers PromQL about it. promtool
checks what the server serves."""
import json
import os
import re
import shutil
import socket
import subprocess
import urllib.error
import urllib.parse
import urllib.request

from pool import FAKE_NVML_DIR, wait_for

NVML = {
    "driver_version": "550.54.15",
    "cuda_version": 12040,
    "devices": [
        {"name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-11111111-2222-3333-4444-555555555555",
         "memory_total_mib": 81920, "memory_used_mib": 1024, "cc": [8, 0], "utilization": 37,
         "temperature": 55, "power_mw": 210000, "energy_mj": 7200000},
        {"name": "Tesla T4", "uuid": "GPU-66666666-7777-8888-9999-000000000000",
         "memory_total_mib": 15360, "memory_used_mib": 0, "cc": [7, 5], "utilization": 0,
         "temperature": 40, "power_mw": 30000, "energy_mj": 1000},
    ],
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_gpu_agent(pool, tmp_path):
    assert FAKE_NVML_DIR, "FAKE_NVML_DIR must name the fake NVML build directory"
    config = tmp_path / "nvml.json"
    config.write_text(json.dumps(NVML))
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ["nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"]:
        (dev / name).write_text("")
    agent_config = tmp_path / "agent.yaml"
    agent_config.write_text(f"sandbox: {{devices_dir: {dev}}}\n")
    env = {"GPUPOOL_NVML_LIBRARY": os.path.join(FAKE_NVML_DIR, "libnvidia-ml.so.1"),
           "FAKE_NVML_CONFIG": str(config)}
    pool.start_agent("gpu-box", gpus=None, env=env, extra=["--config", str(agent_config)])
    pool.wait_nodes_ready(1)


def metrics_url(pool):
    """The --metrics-listen URL, as the server printed it."""
    def find():
        text = (pool.dir / "server.log").read_text(errors="replace")
        m = re.search(r"gpupool server metrics on (http://\S+/metrics)", text)
        return m.group(1) if m else None
    return wait_for(find, what="the metrics address in the server's output")


def get(url, token=None, context=None):
    req = urllib.request.Request(url)
    if token:
        req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req, timeout=30, context=context) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read().decode()


def promtool_check(text):
    r = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
    assert r.returncode == 0 and not r.stdout.strip() and not r.stderr.strip(), r.stdout + r.stderr


def check_dashboard(scraped, tmp_path):
    """examples/grafana's dashboard names only metrics the server serves,
    and every query parses (promtool, as recording rules)."""
    source = os.environ.get("GPUPOOL_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "../.."))
    with open(os.path.join(source, "examples/grafana/gpupool-dashboard.json")) as f:
        dashboard = json.load(f)
    served = set(re.findall(r"^# TYPE (\S+)", scraped, re.M))
    exprs = []
    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("expr"), str):
                exprs.append(node["expr"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)
    walk(dashboard)
    assert len(exprs) >= 10, exprs
    missing = [(name, expr) for expr in exprs
               for name in re.findall(r"\b((?:gpupool|process)_[a-z_]+)", expr)
               if name not in served and re.sub(r"_(bucket|sum|count)$", "", name) not in served]
    assert not missing, f"not served: {missing}"
    rules = tmp_path / "dashboard-rules.yml"
    rules.write_text("groups:\n  - name: dashboard\n    rules:\n" + "".join(
        f"      - record: dashboard:q{i}\n        expr: {json.dumps(e.replace('$node', '.*'))}\n"
        for i, e in enumerate(exprs)))
    r = subprocess.run(["promtool", "check", "rules", str(rules)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def scrape_token(pool):
    status, body = pool.api("POST", "/v1/tokens", {"name": "prometheus", "scopes": "metrics"})
    assert status in (200, 201), body
    return body["token"]


def test_metrics_served_checked_and_scraped_by_prometheus(pool, tmp_path):
    metrics_port = free_port()
    pool.start_server(extra=["--heartbeat-ms", "300", "--metrics-listen",
                             f"127.0.0.1:{metrics_port}"])
    start_gpu_agent(pool, tmp_path)
    job = pool.submit({"name": "holds-a-gpu", "run": "sleep 600", "resources": {"gpus": 1}})
    pool.wait_state(job, ["running"])
    open_url = metrics_url(pool)
    assert open_url == f"http://127.0.0.1:{metrics_port}/metrics"

    # The open address serves the metrics without a token, and nothing else.
    def scraped_with_telemetry():
        status, content_type, text = get(open_url)
        assert status == 200, text
        return text if 'gpupool_gpu_temperature_celsius{node="gpu-box",gpu="0"}' in text else None
    text = wait_for(scraped_with_telemetry, what="GPU telemetry in the metrics")
    promtool_check(text)
    assert ('gpupool_gpu_info{node="gpu-box",gpu="0",uuid="GPU-11111111-2222-3333-4444-555555555555",'
            'model="NVIDIA A100-SXM4-80GB",simulated="false"} 1\n') in text
    a100 = '{node="gpu-box",gpu="0"}'
    assert f"gpupool_gpu_utilization_ratio{a100} 0.37\n" in text
    assert f"gpupool_gpu_power_watts{a100} 210\n" in text
    assert f"gpupool_gpu_energy_joules_total{a100} 7200\n" in text
    assert f"gpupool_gpu_memory_total_bytes{a100} 85899345920\n" in text
    held = re.findall(r'gpupool_gpu_allocated_ratio\{node="gpu-box",gpu="\d"\} (\S+)', text)
    assert sorted(held) == ["0", "1"], held  # the job holds one GPU of two
    assert 'gpupool_jobs{state="running",class="normal",group="default"} 1\n' in text
    assert "gpupool_agents_connected 1\n" in text
    assert "gpupool_scheduling_placements_total 1\n" in text
    status, _, body = get(open_url.replace("/metrics", "/v1/jobs"))
    assert status == 404, body
    check_dashboard(text, tmp_path)

    # Through the API: a scrape-only token over TLS; no token is refused.
    token = scrape_token(pool)
    status, content_type, body = get(pool.url + "/metrics", token, pool.ssl)
    assert status == 200 and content_type.startswith("text/plain; version=0.0.4"), body
    promtool_check(body)
    assert get(pool.url + "/metrics", None, pool.ssl)[0] == 401
    assert get(pool.url + "/v1/jobs", token, pool.ssl)[0] == 403

    # A real Prometheus scrapes both and answers PromQL.
    assert shutil.which("prometheus"), "Debian's prometheus package (scripts/setup.sh)"
    (tmp_path / "token").write_text(token)
    prom_port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(f"""
global: {{scrape_interval: 1s, scrape_timeout: 1s}}
scrape_configs:
  - job_name: gpupool-open
    static_configs: [{{targets: ["127.0.0.1:{metrics_port}"]}}]
  - job_name: gpupool-api
    scheme: https
    authorization: {{credentials_file: {tmp_path / "token"}}}
    tls_config: {{ca_file: {pool.ca_file()}}}
    static_configs: [{{targets: ["127.0.0.1:{pool.port}"]}}]
""")
    log = open(tmp_path / "prometheus.log", "wb")
    prom = subprocess.Popen(["prometheus", f"--config.file={config}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{prom_port}"],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        def query(promql):
            url = (f"http://127.0.0.1:{prom_port}/api/v1/query?" +
                   urllib.parse.urlencode({"query": promql}))
            try:
                status, _, body = get(url)
            except OSError:
                return []  # not listening yet
            if status != 200:
                return []
            return json.loads(body)["data"]["result"]

        def value(promql):
            result = query(promql)
            return float(result[0]["value"][1]) if result else None

        wait_for(lambda: value('sum(up{job=~"gpupool-.*"})') == 2, timeout=60,
                 what="Prometheus scraping both endpoints")
        assert value('gpupool_gpu_utilization_ratio{job="gpupool-api",node="gpu-box",gpu="0"}') == 0.37
        # The model joined from the info metric, as a dashboard groups by it.
        assert value('avg by (model) (gpupool_gpu_utilization_ratio{job="gpupool-open"}'
                     ' * on (node, gpu) group_left (model) gpupool_gpu_info{job="gpupool-open",'
                     'model="Tesla T4"})') == 0.0
        assert value('sum by (node) (gpupool_gpu_allocated_ratio{job="gpupool-open"})') == 1.0
        assert value('sum(gpupool_gpu_memory_total_bytes{job="gpupool-open"})') == (81920 + 15360) * 2**20
        # Allocation beside real use, the comparison the metrics are for.
        assert value('sum(gpupool_gpu_allocated_ratio{job="gpupool-open"})'
                     ' - sum(gpupool_gpu_utilization_ratio{job="gpupool-open"})') is not None
    finally:
        prom.terminate()
        prom.wait(timeout=30)
        log.close()
    pool.api("POST", f"/v1/jobs/{job}/cancel")


def test_telemetry_history_is_recorded_and_survives_a_kill(pool, tmp_path):
    """The server's own history (DATA_DIR/telemetry.db): a node's GPUs, the
    pool and a job's GPU, read back through the API, and still there after
    the server is killed with SIGKILL and started again."""
    args = ["--heartbeat-ms", "300", "--telemetry-tiers", "1s:1h,5s:1d"]
    pool.start_server(extra=args)
    start_gpu_agent(pool, tmp_path)
    job = pool.submit({"name": "holds-a-gpu", "run": "sleep 600", "resources": {"gpus": 1}})
    pool.wait_state(job, ["running"])

    def node_points():
        status, body = pool.api("GET", "/v1/nodes/gpu-box/telemetry?since=10m&step=1s")
        assert status == 200, body
        gpu0 = [g for g in body["gpus"] if g["gpu"] == 0]
        return gpu0[0]["points"] if gpu0 and len(gpu0[0]["points"]) >= 3 else None
    points = wait_for(node_points, timeout=30, what="three 1 s points of GPU 0")
    status, body = pool.api("GET", "/v1/nodes/gpu-box/telemetry?since=10m&step=1s")
    fields = body["fields"]
    first = dict(zip(fields, points[0]))
    # Means of equal readings, as floating point sums them.
    assert abs(first["utilization"] - 0.37) < 1e-9 and abs(first["power_w"] - 210) < 1e-9, first
    assert first["memory_total_mib"] == 81920, first

    # A bucket wholly after the job started: the node, its two GPUs, one of
    # them allocated, one job running (earlier buckets may mix in moments
    # from before the agent connected or before the job ran).
    def pool_point():
        status, body = pool.api("GET", "/v1/pool/telemetry?since=10m&step=1s")
        assert status == 200, body
        points = [dict(zip(body["fields"], p)) for p in body["points"]]
        assert all(p["gpus"] <= 2 and p["jobs_running"] <= 1 for p in points), points
        return [p for p in points if p["gpus"] == 2 and p["nodes_connected"] == 1
                and p["allocated_gpus"] == 1.0 and p["jobs_running"] == 1]
    wait_for(pool_point, timeout=30, what="a pool point with the running job")

    def job_points():
        status, body = pool.api("GET", f"/v1/jobs/{job}/telemetry")
        assert status == 200, body
        assert body["attempts"] and body["attempts"][0]["node"] == "gpu-box", body
        return body["attempts"][0]["gpus"][0]["points"]
    wait_for(job_points, timeout=30, what="the job's GPU points")

    # Killed and started again: what was written is still there.
    before = points[0][0]
    pool.kill_server()
    pool.start_server(extra=args)
    status, body = pool.api("GET", "/v1/nodes/gpu-box/telemetry?since=10m&step=1s")
    assert status == 200, body
    times = [p[0] for g in body["gpus"] for p in g["points"]]
    assert before in times, (before, times[:5])
    pool.api("POST", f"/v1/jobs/{job}/cancel")
