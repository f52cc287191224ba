"""Starts real gpupool servers and agents for end-to-end tests.

Everything runs on 127.0.0.1 with ports picked by the kernel, in a temporary
directory per test. Processes are killed at the end of each test.
"""
import json
import os
import pathlib
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request

GPUPOOL = os.environ.get("GPUPOOL_BIN", os.path.join(os.path.dirname(__file__), "../../build/bin/gpupool"))
FAKE_NVML_DIR = os.environ.get("FAKE_NVML_DIR", "")
# The fake libcuda.so.1 (tests/fake_cuda); by default beside the fake NVML's
# build directory.
FAKE_CUDA_DIR = os.environ.get("FAKE_CUDA_DIR") or (
    os.path.join(os.path.dirname(FAKE_NVML_DIR.rstrip("/")), "fake_cuda") if FAKE_NVML_DIR else "")


SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:")


def check_sanitizer_reports(directory, pattern="*.log"):
    """Fails on a sanitizer report in any file of `directory` named by
    `pattern` (processes' logs; the reports of conftest's log_path)."""
    for path in sorted(directory.glob(pattern)):
        text = path.read_text(errors="replace")
        for marker in SANITIZER_MARKERS:
            if marker in text:
                start = text.index(marker)
                raise AssertionError(f"{path.name}: sanitizer report:\n{text[start:start + 3000]}")


# Sanitizer builds run several times slower, and CI runs their tests two
# per core: there the pool's own clocks (heartbeats, attempt leases, the
# time after which a silent node is lost) and the tests' waits stretch by
# this factor, so that a slow moment is not taken for a lost agent. The
# tests' logic is the same at any scale. 1 in the normal build.
TIME_SCALE = float(os.environ.get("GPUPOOL_TEST_TIME_SCALE") or 1)
SCALED_FLAGS = ("--heartbeat-ms", "--attempt-lease", "--node-lost-after-ms")


def scaled(duration):
    """A duration flag's value ("500", "3s", "3m") times TIME_SCALE."""
    text = str(duration)
    digits = len(text) - len(text.lstrip("0123456789."))
    number, unit = text[:digits], text[digits:]
    value = float(number) * TIME_SCALE
    return (str(int(value)) if unit in ("", "ms") else f"{value:g}") + unit


# The server's defaults of SCALED_FLAGS (server/pool.h), stretched too when
# a test leaves them alone.
SCALED_DEFAULTS = {"--heartbeat-ms": "5000", "--attempt-lease": "30s", "--node-lost-after-ms": "40000"}


def scaled_args(args):
    """The server's `args` with the values of SCALED_FLAGS scaled, and the
    SCALED_DEFAULTS it does not give, scaled, when TIME_SCALE is not 1."""
    out = list(args)
    for i in range(len(out) - 1):
        if out[i] in SCALED_FLAGS:
            out[i + 1] = scaled(out[i + 1])
    if TIME_SCALE != 1:
        for flag, value in SCALED_DEFAULTS.items():
            if flag not in out:
                out += [flag, scaled(value)]
    return out


def wait_for(predicate, timeout=20.0, interval=0.05, what="condition"):
    timeout *= TIME_SCALE
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    if callable(what):  # what was seen, said when the wait is over
        what = what()
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class Pool:
    def __init__(self, tmp_path):
        self.dir = tmp_path
        self.server_dir = str(tmp_path / "server")
        self.server = None
        self.agents = {}
        self.url = None
        self.sessions_url = None  # interactive sessions' own address (--sessions-listen)
        self.sessions_port = 0
        self.token = None
        self.port = 0
        self.logs = []

    # ---- processes ----
    def _spawn(self, args, name, env=None, netns=None):
        log = open(self.dir / f"{name}.log", "ab")
        self.logs.append(log)
        full_env = dict(os.environ)
        full_env.update(env or {})
        # In a network namespace (tests/integration/machines.py): `ip netns
        # exec` execs the program, so the process is still ours to signal.
        prefix = ["ip", "netns", "exec", netns] if netns else []
        return subprocess.Popen(prefix + [GPUPOOL] + args, stdout=log, stderr=subprocess.STDOUT,
                                env=full_env, start_new_session=True)

    def start_server(self, extra=(), host="127.0.0.1", log_level="debug"):
        """`host`: the address the server listens on (and its certificate names)."""
        url_file = os.path.join(self.server_dir, "server.url")
        sessions_file = os.path.join(self.server_dir, "sessions.url")
        for f in (url_file, sessions_file):
            if os.path.exists(f):
                os.remove(f)
        if host != "127.0.0.1":
            extra = ["--tls-san", host, *extra]
        # Interactive sessions' own address: any free port at first, then the
        # same one again (as the server's own) when the server restarts.
        if "--sessions-listen" not in extra:
            extra = ["--sessions-listen", f"{host}:{self.sessions_port}", *extra]
        self.server = self._spawn(["server", "--data-dir", self.server_dir, "--listen",
                                   f"{host}:{self.port}", "--log-level", log_level,
                                   *scaled_args(extra)], "server")
        wait_for(lambda: os.path.exists(sessions_file) and open(sessions_file).read().strip(),
                 what="server.url and sessions.url")
        self.url = open(url_file).read().strip()
        self.port = int(self.url.rsplit(":", 1)[1])
        self.sessions_url = open(sessions_file).read().strip()
        self.sessions_port = int(self.sessions_url.rsplit(":", 1)[1])
        self.token = open(os.path.join(self.server_dir, "admin.token")).read().strip()
        # TLS (the default): trust the pool CA the server made, as users do.
        self.ssl = None
        self.ca_fingerprint = ""
        if self.url.startswith("https://"):
            self.ssl = ssl.create_default_context(cafile=self.ca_file())
            self.ca_fingerprint = "sha256:" + self.join_token().split(".", 1)[1]
        return self

    def ca_file(self):
        return os.path.join(self.server_dir, "tls", "ca.crt")

    def cli_env(self, token=None):
        """The environment a user of this pool runs the CLI with."""
        return dict(os.environ, GPUPOOL_SERVER=self.url, GPUPOOL_TOKEN=token or self.token,
                    GPUPOOL_CA_FINGERPRINT=self.ca_fingerprint,
                    GPUPOOL_CONFIG=str(self.dir / "no-config.json"))

    def kill_server(self, sig=signal.SIGKILL):
        self.server.send_signal(sig)
        self.server.wait(timeout=20)

    def join_token(self):
        return open(os.path.join(self.server_dir, "join.token")).read().strip()

    def agent_dir(self, name):
        return str(self.dir / f"agent-{name}")

    def start_agent(self, name, gpus="1xA100:80GiB", env=None, extra=(), data_dir=None, netns=None,
                    log_level="debug", enroll_as=None):
        """gpus=None: no --simulate-gpus, so the agent uses NVML. `netns`: the
        network namespace of the "machine" it runs on (machines.py).
        `enroll_as`: a provider's API token to enroll with instead of the
        pool's join token (the node is then that provider's)."""
        data = data_dir or self.agent_dir(name)
        join = self.join_token()
        if enroll_as:
            join = enroll_as + "." + join.split(".", 1)[1]
        args = ["agent", "--server", self.url, "--join-token", join, "--data-dir", data,
                "--name", name, "--log-level", log_level, "--kill-grace-ms", "2000", *extra]
        if gpus:
            args += ["--simulate-gpus", gpus]
        self.agents[name] = self._spawn(args, f"agent-{name}", env, netns)
        return self.agents[name]

    def kill_agent(self, name, sig=signal.SIGKILL):
        p = self.agents.pop(name)
        p.send_signal(sig)
        p.wait(timeout=30)

    def stop(self):
        for p in list(self.agents.values()):
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
                p.wait()
        if self.server and self.server.poll() is None:
            self.server.send_signal(signal.SIGKILL)
            self.server.wait()
        # Jobs run under shims (forks of their agent, in their own sessions,
        # with the agent's command line): kill any left behind.
        subprocess.run(["pkill", "-KILL", "-f", "--", f"--data-dir {self.dir}/"], check=False)
        for log in self.logs:
            log.close()
        check_sanitizer_reports(self.dir)


    def log_digest(self, per_log=25):
        """The lines of each process log worth reading after a failure: its
        warnings and errors and its last lines, all but DEBUG, each marked
        "pool log|" (scripts/failure_digest.py shows them in CI's digest)."""
        out = []
        for log in self.logs:
            path = pathlib.Path(log.name)
            try:
                lines = path.read_text(errors="replace").splitlines()
            except OSError:
                continue
            lines = [l for l in lines if " DEBUG " not in l]
            notable = [i for i, l in enumerate(lines) if " WARN " in l or " ERROR " in l]
            keep = sorted(set(notable[-per_log // 2:]) | set(range(max(0, len(lines) - per_log // 2), len(lines))))
            out += [f"pool log| {path.name}: {lines[i][:300]}" for i in keep]
        return "\n".join(out)

    # ---- API and CLI ----
    def api(self, method, path, body=None, token="admin", headers=None, base=None):
        """`base`: another address of the server's (pool.sessions_url)."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request((base or self.url) + path, data=data, method=method)
        if token == "admin":
            token = self.token
        if token:
            req.add_header("Authorization", "Bearer " + token)
        for name, value in (headers or {}).items():
            req.add_header(name, value)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=90, context=self.ssl) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def metrics(self):
        """The server's Prometheus metrics (GET /metrics with the admin's token)."""
        req = urllib.request.Request(self.url + "/metrics")
        req.add_header("Authorization", "Bearer " + self.token)
        with urllib.request.urlopen(req, timeout=30, context=self.ssl) as r:
            return r.read().decode()

    def cli(self, *args, timeout=120, check=False):
        env = self.cli_env()
        r = subprocess.run([GPUPOOL, *args], capture_output=True, text=True,
                           timeout=timeout * TIME_SCALE, env=env)
        if check and r.returncode != 0:
            raise AssertionError(f"gpupool {' '.join(args)} exited {r.returncode}: {r.stderr}")
        return r

    def submit(self, spec):
        status, job = self.api("POST", "/v1/jobs", spec)
        assert status == 201, job
        return job["id"]

    def job(self, job_id):
        status, job = self.api("GET", f"/v1/jobs/{job_id}")
        assert status == 200, job
        return job

    def wait_state(self, job_id, states, timeout=30.0):
        states = {states} if isinstance(states, str) else set(states)
        return wait_for(lambda: (lambda j: j if j["state"] in states else None)(self.job(job_id)),
                        timeout=timeout, what=f"job {job_id} to reach {states}")

    def wait_considered(self, job_id, timeout=30.0):
        """The job once the scheduler has looked at it: placed, or pending with
        the reason it waits. Await this, not a sleep, before asserting that a
        job did not start. (A job the scheduler has not looked at yet is
        pending "waiting for the scheduler", the server's reason at submission.)"""
        def considered(j):
            waiting = j["state"] == "pending" and j["reason"] in ("", "waiting for the scheduler")
            return None if waiting else j
        return wait_for(lambda: considered(self.job(job_id)), timeout=timeout,
                        what=f"the scheduler to consider job {job_id}")

    def wait_finished(self, job_id, timeout=30.0):
        return self.wait_state(job_id, {"succeeded", "failed", "cancelled"}, timeout)

    def logs_text(self, job_id):
        lines, cursor = [], 0
        while True:
            status, page = self.api("GET", f"/v1/jobs/{job_id}/logs?after={cursor}&limit=1000")
            assert status == 200, page
            lines += [l["text"] for l in page["lines"]]
            if not page["lines"]:
                return lines
            cursor = page["next_cursor"]

    def nodes(self):
        status, body = self.api("GET", "/v1/nodes")
        assert status == 200, body
        return body["nodes"]

    def wait_nodes_ready(self, count, timeout=20.0):
        try:
            return wait_for(lambda: len([n for n in self.nodes() if n["state"] == "ready"]) >= count,
                            timeout=timeout, what=f"{count} ready nodes")
        except AssertionError as e:
            raise AssertionError(f"{e}; nodes: {self.nodes()}\n{self.agent_log_tails()}") from None

    def agent_log_tails(self, lines=15):
        """The end of every agent's log, for a failure's message."""
        out = []
        for name, p in self.agents.items():
            path = self.dir / f"agent-{name}.log"
            text = path.read_text(errors="replace") if path.exists() else "(no log)"
            state = "running" if p.poll() is None else f"exited {p.returncode}"
            out.append(f"--- agent {name} ({state}):\n" + "\n".join(text.splitlines()[-lines:]))
        return "\n".join(out)

    # ---- helpers for multi-node jobs ----
    def log_records(self, job_id, rank=None):
        """Every log line of a job as the API gives it (dicts with rank,
        attempt_id, text...); with `rank`, only that rank's. Pages until the
        cursor stops moving (a rank's page may be empty but not the last)."""
        records, cursor = [], 0
        query = f"&rank={rank}" if rank is not None else ""
        while True:
            status, page = self.api("GET", f"/v1/jobs/{job_id}/logs?after={cursor}&limit=1000{query}")
            assert status == 200, page
            records += page["lines"]
            if page["next_cursor"] == cursor:
                return records
            cursor = page["next_cursor"]

    def submit_cli(self, spec):
        """Submits a spec (a dict) through the CLI, which uploads its
        `workdir`; returns the job id."""
        path = self.dir / f"spec-{time.monotonic_ns()}.json"
        path.write_text(json.dumps(spec))
        r = self.cli("submit", "--quiet", str(path), check=True)
        return int(r.stdout.strip().splitlines()[-1])

    def node_names(self):
        """Node id -> name."""
        return {n["id"]: n["name"] for n in self.nodes()}
