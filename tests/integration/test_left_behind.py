"""What a pool leaves behind (issue 19, hole 12), with the real binaries: a
`gpupool dev` killed while a job runs takes its server, agents, shims and the
job with it; a second server or agent on a data directory in use is refused;
the CLI keeps a CA pin and a token with the server they belong to."""
import http.server
import json
import os
import signal
import subprocess
import threading
import time

import pytest

from pool import GPUPOOL, Pool, wait_for


def processes_naming(text):
    """(pid, comm, cmdline) of every process whose command line contains `text`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{entry}/comm") as f:
                comm = f.read().strip()
        except OSError:
            continue
        if text in cmd:
            found.append((int(entry), comm, cmd))
    return found


def kill_leftovers(text):
    for pid, _, _ in processes_naming(text):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class Dev:
    """A `gpupool dev` with two agents on `data`, driven through its env file."""

    def __init__(self, tmp_path, data):
        self.tmp_path = tmp_path
        self.data = data
        self.env_file = tmp_path / "dev.env"
        self.log = open(tmp_path / "dev.log", "ab")
        self.proc = None
        self.env = None

    def start(self):
        if self.env_file.exists():
            self.env_file.unlink()
        self.proc = subprocess.Popen(
            [GPUPOOL, "dev", "--agents", "2", "--listen", "127.0.0.1:0", "--data-dir", str(self.data),
             "--env-file", str(self.env_file), "--no-config", "--log-level", "info"],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        wait_for(lambda: self.env_file.exists() and "GPUPOOL_TOKEN" in self.env_file.read_text(),
                 timeout=60, what="the dev pool's env file")
        env = dict(os.environ, GPUPOOL_CONFIG=str(self.tmp_path / "none.json"))
        for line in self.env_file.read_text().splitlines():
            k, v = line.replace("export ", "").split("=", 1)
            env[k] = v
        self.env = env

    def cli(self, *args):
        return subprocess.run([GPUPOOL, *args], env=self.env, capture_output=True, text=True,
                              timeout=120)

    def ready_nodes(self):
        r = self.cli("nodes", "-o", "json")
        if r.returncode != 0:
            return []
        return [n for n in json.loads(r.stdout) if n["state"] == "ready"]


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM then SIGKILL"])
def test_a_killed_dev_pool_leaves_nothing_behind(tmp_path, how):
    data = tmp_path / "devpool"
    marker = f"left-behind-{os.getpid()}-{how.split()[0]}"
    dev = Dev(tmp_path, data)
    try:
        dev.start()
        wait_for(lambda: len(dev.ready_nodes()) == 2, timeout=60, what="two ready agents")
        # The job's command line carries the marker, so it can be found however it runs.
        r = dev.cli("submit", "--", "sh", "-c", f"while true; do sleep 1; done # {marker}")
        assert r.returncode == 0, r.stderr
        job_id = r.stdout.strip().splitlines()[-1]
        wait_for(lambda: json.loads(dev.cli("job", job_id, "-o", "json").stdout)["state"] == "running",
                 timeout=60, what="the job to run")
        wait_for(lambda: processes_naming(marker), timeout=30, what="the job's process")
        started = processes_naming(str(data))
        assert any(" server " in cmd for _, _, cmd in started), started
        assert any(comm == "gpupool-shim" for _, comm, _ in started), started

        if how == "SIGKILL":
            dev.proc.send_signal(signal.SIGKILL)
        else:
            dev.proc.send_signal(signal.SIGTERM)
            time.sleep(0.1)
            dev.proc.send_signal(signal.SIGKILL)
        dev.proc.wait(timeout=30)
        # Everything it started goes: server, agents, shims and the job.
        wait_for(lambda: not processes_naming(str(data)) and not processes_naming(marker),
                 timeout=90, what="every process of the killed dev pool to exit")

        # The same data directory starts again with one of each.
        dev.start()
        wait_for(lambda: len(dev.ready_nodes()) == 2, timeout=60, what="two ready agents again")
        # gpupool processes, not the shims (forks of the agents) or a job.
        procs = [(pid, comm, cmd) for pid, comm, cmd in processes_naming(str(data))
                 if comm == "gpupool"]
        servers = [p for p in procs if " server " in p[2]]
        agents = [p for p in procs if " agent " in p[2]]
        assert len(servers) == 1, procs
        assert len(agents) == 2, procs
        assert len(procs) == 4, procs  # dev, its server, its two agents
        assert {n["name"] for n in dev.ready_nodes()} == {"dev-agent-1", "dev-agent-2"}
        dev.proc.send_signal(signal.SIGTERM)
        assert dev.proc.wait(timeout=60) == 0
        wait_for(lambda: not processes_naming(str(data)), timeout=60, what="the dev pool to stop")
    finally:
        if dev.proc and dev.proc.poll() is None:
            dev.proc.send_signal(signal.SIGKILL)
            dev.proc.wait()
        kill_leftovers(str(data))
        kill_leftovers(marker)
        dev.log.close()


def test_an_agent_that_stops_its_jobs_on_exit_does_so_even_when_killed(pool):
    marker = f"orphan-{os.getpid()}"
    pool.start_server()
    pool.start_agent("a", extra=["--on-exit", "kill"])
    pool.wait_nodes_ready(1)
    job_id = pool.submit({"run": f"while true; do sleep 1; done # {marker}"})
    pool.wait_state(job_id, "running")
    wait_for(lambda: processes_naming(marker), what="the job's process")
    agent_dir = pool.agent_dir("a")
    pool.kill_agent("a")  # SIGKILL: no chance to stop anything itself
    wait_for(lambda: not processes_naming(marker) and not processes_naming(agent_dir),
             timeout=60, what="the shim to stop the job of its killed agent")
    # The next agent finds the task ended, and says why.
    pool.start_agent("a")
    attempt = wait_for(lambda: (lambda a: a if a["state"] not in ("scheduled", "running") else None)(
        pool.job(job_id)["attempt_list"][0]), timeout=60, what="the attempt's end")
    assert "its agent exited" in attempt["reason"], attempt


def test_a_data_directory_in_use_is_refused(pool):
    pool.start_server()
    second = subprocess.run([GPUPOOL, "server", "--data-dir", pool.server_dir, "--listen", "127.0.0.1:0"],
                            capture_output=True, text=True, timeout=60)
    assert second.returncode == 1, second
    assert (f"{pool.server_dir} is in use by another gpupool server (pid {pool.server.pid})"
            in second.stderr), second.stderr

    pool.start_agent("a")
    pool.wait_nodes_ready(1)
    job_id = pool.submit({"run": "sleep 300"})
    pool.wait_state(job_id, "running")
    second = subprocess.run([GPUPOOL, "agent", "--server", pool.url, "--join-token", pool.join_token(),
                             "--data-dir", pool.agent_dir("a"), "--name", "a"],
                            capture_output=True, text=True, timeout=60)
    assert second.returncode == 1, second
    assert (f"is in use by another gpupool agent (pid {pool.agents['a'].pid})"
            in second.stderr), second.stderr
    # The job's shim (a fork of the agent) does not hold the agent's lock:
    # an agent restarted while its job runs takes the directory back.
    pool.kill_agent("a")
    pool.start_agent("a")
    wait_for(lambda: any(n["name"] == "a" and n["state"] == "ready" and n.get("running_tasks") == 1
                         for n in pool.nodes()), timeout=30, what="the restarted agent with its job")
    assert pool.job(job_id)["state"] == "running"
    assert pool.cli("cancel", str(job_id)).returncode == 0
    assert pool.wait_finished(job_id)["state"] == "cancelled"


class HeaderCapture(http.server.BaseHTTPRequestHandler):
    """A server that is not our pool: records what the CLI sends it."""
    seen = []

    def do_GET(self):
        HeaderCapture.seen.append(dict(self.headers))
        body = b'{"error": {"code": "NOT_FOUND", "message": "not a pool"}}'
        self.send_response(404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_a_ca_pin_and_a_token_belong_to_their_server(pool, tmp_path):
    pool.start_server()
    other = Pool(tmp_path / "b")
    (tmp_path / "b").mkdir()
    config = tmp_path / "config.json"
    capture = http.server.ThreadingHTTPServer(("127.0.0.1", 0), HeaderCapture)
    threading.Thread(target=capture.serve_forever, daemon=True).start()
    try:
        other.start_server()
        # The config file knows pool A only (as `gpupool login` wrote it before).
        config.write_text(json.dumps({"server": pool.url, "token": pool.token,
                                      "ca_fingerprint": pool.ca_fingerprint}))
        base = {k: v for k, v in os.environ.items() if not k.startswith("GPUPOOL_")}
        base["GPUPOOL_CONFIG"] = str(config)

        def cli(*args, **env):
            return subprocess.run([GPUPOOL, *args], env=dict(base, **env), capture_output=True,
                                  text=True, timeout=60)

        assert cli("nodes").returncode == 0  # pool A, from the file
        # Pool B named by the environment, trusted through its CA file: A's pin stays A's.
        r = cli("nodes", GPUPOOL_SERVER=other.url, GPUPOOL_TOKEN=other.token,
                GPUPOOL_CA_FILE=other.ca_file())
        assert r.returncode == 0, r.stderr
        # ... and by --server, with B's fingerprint in the environment.
        r = cli("--server", other.url, "--token", other.token, "nodes",
                GPUPOOL_CA_FINGERPRINT=other.ca_fingerprint)
        assert r.returncode == 0, r.stderr
        # A server that is not a pool never sees pool A's token.
        url = f"http://127.0.0.1:{capture.server_address[1]}"
        cli("jobs", GPUPOOL_SERVER=url)
        cli("--server", url, "jobs")
        assert len(HeaderCapture.seen) == 2, HeaderCapture.seen
        for headers in HeaderCapture.seen:
            assert pool.token not in json.dumps(headers), headers

        # One config, two pools: log in to B, then to A again (A is the default).
        r = cli("login", "--server", other.url, "--token", other.token,
                "--ca-fingerprint", other.ca_fingerprint)
        assert r.returncode == 0, r.stderr
        r = cli("login", "--server", pool.url, "--token", pool.token,
                "--ca-fingerprint", pool.ca_fingerprint)
        assert r.returncode == 0, r.stderr
        stored = json.loads(config.read_text())
        assert stored["server"] == pool.url
        assert set(stored["servers"]) == {pool.url, other.url}
        assert oct(config.stat().st_mode & 0o777) == "0o600"
        r = cli("whoami", GPUPOOL_SERVER=other.url)  # B's pin and token, from the file
        assert r.returncode == 0, r.stderr
        assert cli("whoami").returncode == 0  # A's
    finally:
        capture.shutdown()
        other.stop()
