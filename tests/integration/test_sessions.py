"""Interactive sessions end to end (issue 9): `gpupool shell` on a real
terminal (tmux), `gpupool exec` with and without a PTY, `gpupool session
connect` forwarding a local port into the job, who may get in, the idle
timeout, and a provider's reclaim ending a connected session."""
import hashlib
import os
import re
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from pool import GPUPOOL, wait_for


def start(pool, agent_config=""):
    pool.start_server()
    extra = []
    if agent_config:
        path = pool.dir / "agent-a.yaml"
        path.write_text(agent_config)
        extra = ["--config", str(path)]
    pool.start_agent("a", gpus="1xA100:80GiB", extra=extra)
    pool.wait_nodes_ready(1)


def start_session(pool, *args):
    """`gpupool session start --gpus 1 ARGS`; returns the id once it runs."""
    r = pool.cli("session", "start", "--no-wait", "--gpus", "1", *args, check=True)
    job_id = int(r.stdout.strip().splitlines()[-1])
    pool.wait_state(job_id, "running")
    return job_id


def run(pool, *args, input=None, env=None, timeout=60):
    """The CLI with stdin from `input` (else /dev/null), as a user runs it."""
    return subprocess.run([GPUPOOL, *args], input=input, capture_output=True, timeout=timeout,
                          env=env or pool.cli_env(), stdin=None if input is not None else subprocess.DEVNULL)


def add_user_token(pool, name):
    add = subprocess.run([GPUPOOL, "admin", "user", "add", name], capture_output=True, text=True,
                         env=pool.cli_env(), stdin=subprocess.DEVNULL, timeout=60)
    assert add.returncode == 0, add.stderr
    return pool.cli("token", "create", "--user", name, "--name", name, check=True).stdout.strip()


def upgrade_status(pool, path, token):
    """The status line the server answers a WebSocket upgrade of `path` with."""
    raw = socket.create_connection(("127.0.0.1", pool.port), timeout=10)
    sock = pool.ssl.wrap_socket(raw, server_hostname="127.0.0.1") if pool.ssl else raw
    sock.sendall((f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
                  "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                  "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n").encode())
    answer = b""
    while b"\r\n" not in answer:
        chunk = sock.recv(4096)
        if not chunk:
            break
        answer += chunk
    sock.close()
    return answer.split(b"\r\n", 1)[0].decode()


class Tmux:
    """A detached tmux session on its own socket, running one command."""

    def __init__(self, pool, command, width=100, height=30):
        self.sock = str(pool.dir / "tmux.sock")
        script = pool.dir / "pane.sh"
        env = pool.cli_env()
        exports = "".join(f"export {k}='{env[k]}'\n" for k in
                          ("GPUPOOL_SERVER", "GPUPOOL_TOKEN", "GPUPOOL_CA_FINGERPRINT", "GPUPOOL_CONFIG"))
        script.write_text(exports + command + "\n")
        self.tmux("new-session", "-d", "-s", "t", "-x", str(width), "-y", str(height), f"sh {script}")

    def tmux(self, *args):
        r = subprocess.run(["tmux", "-S", self.sock, *args], capture_output=True, text=True, timeout=20)
        assert r.returncode == 0, r.stderr
        return r.stdout

    def keys(self, *keys):
        self.tmux("send-keys", "-t", "t", *keys)

    def line(self, text):
        self.keys(text, "Enter")

    def screen(self):
        return self.tmux("capture-pane", "-p", "-t", "t", "-S", "-500")

    def wait(self, pattern, timeout=20.0):
        """Waits for a line matching `pattern` (a regex) on the pane."""
        rx = re.compile(pattern, re.M)
        try:
            return wait_for(lambda: rx.search(self.screen()), timeout=timeout, interval=0.1,
                            what=f"{pattern!r} on the pane")
        except AssertionError:
            raise AssertionError(f"no {pattern!r} on the pane:\n{self.screen()}")

    def kill(self):
        subprocess.run(["tmux", "-S", self.sock, "kill-server"], capture_output=True, timeout=20)


def test_shell_on_a_real_terminal(pool):
    start(pool)
    job_id = start_session(pool)
    # After each shell: its exit code, and whether the terminal is cooked
    # again. The first one fails (no such job) after raw mode was set.
    mode = "stty -a | tr ' ;' '\\n\\n' | grep -x -- '-\\{0,1\\}icanon'"
    pane = Tmux(pool, f"{GPUPOOL} shell 999; echo \"BAD=$?\"; {mode} | sed 's/^/MODE0=/'; "
                      f"{GPUPOOL} shell {job_id}; echo \"EXIT=$?\"; {mode} | sed 's/^/MODE=/'; "
                      "sleep 60")
    try:
        pane.wait(r"^BAD=255\s*$")
        pane.wait(r"^MODE0=icanon\s*$", timeout=60)
        assert "job 999 does not exist" in pane.screen()
        pane.line("echo \"ID=$GPUPOOL_JOB_ID\"")
        pane.wait(rf"^ID={job_id}\s*$")
        pane.line("echo \"SZ=$(stty size)\"")
        pane.wait(r"^SZ=30 100\s*$")
        pane.tmux("resize-window", "-t", "t", "-x", "120", "-y", "40")
        pane.line("echo \"SZ=$(stty size)\"")
        pane.wait(r"^SZ=40 120\s*$")
        # Ctrl-C is a byte for the remote PTY, which interrupts the sleep.
        pane.line("echo \"SLEEPING=$((1 + 1))\"; sleep 600")
        pane.wait(r"^SLEEPING=2\s*$")
        pane.keys("C-c")
        pane.line("echo \"AFTER=$((40 + 2))\"")
        pane.wait(r"^AFTER=42\s*$", timeout=120)  # uninterrupted, the sleep lasts 600 s
        pane.line("exit 3")
        pane.wait(r"^EXIT=3\s*$")
        pane.wait(r"^MODE=icanon\s*$", timeout=60)  # raw mode was undone
    finally:
        pane.kill()


def test_exec_exit_codes_streams_and_stdin(pool):
    start(pool)
    job_id = start_session(pool)
    r = run(pool, "exec", str(job_id), "--", "sh", "-c", "echo out; echo err >&2; exit 4")
    assert (r.returncode, r.stdout, r.stderr) == (4, b"out\n", b"err\n"), r
    r = run(pool, "exec", str(job_id), "-T", "--", "cat", input=b"hello\n")
    assert (r.returncode, r.stdout) == (0, b"hello\n"), r
    # Without -T but with stdin not a terminal: no PTY either.
    r = run(pool, "exec", str(job_id), "--", "sh", "-c", "test -t 0 || echo notty")
    assert r.stdout == b"notty\n", r
    r = run(pool, "exec", str(job_id), "--", "no-such-program-xyz", "arg")
    assert r.returncode == 127, r
    assert b"no-such-program-xyz" in r.stderr, r
    # Bulk bytes both ways, in any split, unchanged.
    data = os.urandom(24 << 20)
    t0 = time.time()
    r = run(pool, "exec", str(job_id), "-T", "--", "sha256sum", input=data, timeout=120)
    took = time.time() - t0
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[0].decode() == hashlib.sha256(data).hexdigest()
    r = run(pool, "exec", str(job_id), "--", "head", "-c", str(24 << 20), "/dev/zero", timeout=120)
    assert r.returncode == 0 and r.stdout == bytes(24 << 20), (r.returncode, r.stderr)
    print(f"24 MiB through exec stdin in {took:.2f}s")
    # A signal to the CLI reaches a command without a terminal.
    p = subprocess.Popen([GPUPOOL, "exec", str(job_id), "--", "sh", "-c",
                          "trap 'echo got INT; exit 7' INT; echo ready; while :; do sleep 0.1; done"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=pool.cli_env())
    try:
        assert p.stdout.readline() == b"ready\n"
        p.send_signal(2)
        out, err = p.communicate(timeout=60)
        assert (p.returncode, out) == (7, b"got INT\n"), (p.returncode, out, err)
    finally:
        p.kill()


def test_exec_into_a_job_that_does_not_run(pool):
    start(pool)
    r = run(pool, "exec", "999", "--", "true")
    assert r.returncode == 255 and b"job 999 does not exist" in r.stderr, r


def forward(pool, job_id, spec, env=None):
    """Starts `session connect ID -p SPEC`; returns (process, local port)."""
    p = subprocess.Popen([GPUPOOL, "session", "connect", str(job_id), "-p", spec], env=env or pool.cli_env(),
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    m = re.match(rf"Forwarding 127\.0\.0\.1:(\d+) -> job {job_id} port (\d+)$", line.strip())
    assert m, (line, p.stderr.read() if p.poll() is not None else "")
    return p, int(m.group(1))


def test_session_connect_forwards_a_declared_port_only(pool):
    start(pool)
    job_id = start_session(pool, "--port", "8123")
    # A web server inside the session, serving a file of random bytes.
    r = run(pool, "exec", str(job_id), "-T", "--", "sh", "-c",
            "mkdir -p www && head -c 20000000 /dev/urandom > www/big.bin && sha256sum www/big.bin && "
            "cd www && (setsid nohup python3 -m http.server 8123 >/dev/null 2>&1 &)")
    assert r.returncode == 0, r.stderr
    digest = r.stdout.split()[0].decode()
    # The session has a network of its own: wait for the server from inside
    # it, so that no forwarded connection is refused while it starts.
    def listening():
        r = run(pool, "exec", str(job_id), "-T", "--", "python3", "-c",
                "import socket; socket.create_connection(('127.0.0.1', 8123), timeout=1).close()")
        return r.returncode == 0
    wait_for(listening, timeout=30, interval=0.2, what="the web server to listen")
    # ... and only there: its port is not one of the provider's machine.
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", 8123), timeout=1).close()
    p, port = forward(pool, job_id, "0:8123")
    try:
        def get(path):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=20) as resp:
                    return resp.status, resp.read()
            except OSError:
                return None
        status, body = wait_for(lambda: get("/"), timeout=20, interval=0.3, what="the web server")
        assert status == 200 and b"big.bin" in body
        t0 = time.time()
        status, body = get("/big.bin")
        took = time.time() - t0
        assert status == 200 and hashlib.sha256(body).hexdigest() == digest
        print(f"20 MB through session connect in {took:.2f}s")
        # Several at once.
        import concurrent.futures
        with concurrent.futures.ThreadPoolExecutor(4) as ex:
            results = list(ex.map(lambda _: get("/big.bin"), range(4)))
        assert all(r and r[0] == 200 and hashlib.sha256(r[1]).hexdigest() == digest for r in results)
        assert p.poll() is None
    finally:
        p.terminate()
        _, err = p.communicate(timeout=60)
    assert p.returncode == 0 and err == "", (p.returncode, err)  # a clean stop

    # A port the session did not declare: the server's refusal, naming it.
    p, port = forward(pool, job_id, "0:9999")
    try:
        c = socket.create_connection(("127.0.0.1", port), timeout=10)
        assert c.recv(100) == b""  # closed without a byte
        c.close()
        _, err = p.communicate(timeout=60)
        assert p.returncode != 0 and "port 9999" in err and "declared" in err, (p.returncode, err)
    finally:
        p.kill()


def test_session_connect_ends_when_the_session_does(pool):
    start(pool)
    job_id = start_session(pool, "--port", "8123")
    p, port = forward(pool, job_id, "0:8123")
    try:
        pool.cli("session", "stop", str(job_id), check=True)
        _, err = p.communicate(timeout=120)
        assert p.returncode != 0 and "session ended" in err, (p.returncode, err)
    finally:
        p.kill()


def test_session_connect_to_jupyter_prints_a_working_url(pool):
    start(pool)
    r = pool.cli("session", "start", "--jupyter", "--gpus", "1", "--no-wait", check=True)
    job_id = int(r.stdout.strip().splitlines()[-1])
    pool.wait_state(job_id, "running", timeout=60)
    p = subprocess.Popen([GPUPOOL, "session", "connect", str(job_id)], env=pool.cli_env(),
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = p.stdout.readline().strip()
        assert re.match(rf"Forwarding 127\.0\.0\.1:\d+ -> job {job_id} jupyter$", first), first
        url = p.stdout.readline().strip()
        m = re.match(rf"Jupyter: (http://127\.0\.0\.1:\d+/v1/sessions/{job_id}/proxy/)\?token=(\S+)$", url)
        assert m, url
        base, token = m.groups()

        def status():
            req = urllib.request.Request(base + "api/status", headers={"Authorization": "token " + token})
            try:
                with urllib.request.urlopen(req, timeout=20) as resp:
                    return resp.status == 200 and b"kernels" in resp.read()
            except OSError:
                return False
        wait_for(status, timeout=60, interval=0.5, what="Jupyter through the forwarded port")
        # Jupyter checks the token: without it, no API.
        try:
            urllib.request.urlopen(base + "api/kernels", timeout=20)
            assert False, "Jupyter answered without its token"
        except urllib.error.HTTPError as e:
            assert e.code in (401, 403), e.code
    finally:
        p.terminate()
        p.communicate(timeout=60)


def test_another_users_token_is_refused(pool):
    start(pool)
    job_id = start_session(pool, "--port", "8123")
    bob = add_user_token(pool, "bob")
    bob_env = pool.cli_env(token=bob)
    r = run(pool, "exec", str(job_id), "--", "true", env=bob_env)
    assert r.returncode == 255 and f"job {job_id} does not exist".encode() in r.stderr, r
    r = run(pool, "shell", str(job_id), env=bob_env)
    assert r.returncode == 255 and f"job {job_id} does not exist".encode() in r.stderr, r
    r = run(pool, "session", "connect", str(job_id), "-p", "0:8123", env=bob_env)
    assert r.returncode != 0 and f"job {job_id} does not exist".encode() in r.stderr, r
    # The endpoints themselves, past the CLI's own checks.
    for path in (f"/v1/jobs/{job_id}/connect?port=8123", f"/v1/jobs/{job_id}/exec"):
        assert upgrade_status(pool, path, bob).startswith("HTTP/1.1 404"), path
        assert upgrade_status(pool, path, pool.token).startswith("HTTP/1.1 101"), path
    status, body = pool.api("GET", f"/v1/sessions/{job_id}/proxy/", token=bob, base=pool.sessions_url)
    assert status in (401, 403, 404), (status, body)
    assert pool.api("POST", f"/v1/sessions/{job_id}/link", {}, token=bob)[0] in (401, 403, 404)
    # The owner still gets in.
    r = run(pool, "exec", str(job_id), "--", "echo", "mine")
    assert (r.returncode, r.stdout) == (0, b"mine\n"), r


def test_an_idle_session_is_stopped_and_its_gpu_freed(pool):
    start(pool)
    job_id = start_session(pool, "--idle-timeout", "3s")
    job = pool.wait_state(job_id, {"cancelled", "succeeded", "failed"}, timeout=120)
    assert job["state"] == "cancelled", job
    assert "idle" in job["reason"], job
    # Its GPU (the node's only one) runs the next job.
    next_id = pool.submit({"name": "next", "run": "sleep 30", "resources": {"gpus": 1}})
    pool.wait_state(next_id, "running", timeout=60)


def test_a_reclaim_ends_a_connected_session(pool):
    start(pool, agent_config="policy: {reclaim_grace: 2s}\n")
    job_id = start_session(pool)
    p = subprocess.Popen([GPUPOOL, "exec", str(job_id), "--", "sh", "-c", "echo ready; sleep 100"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=pool.cli_env())
    try:
        assert p.stdout.readline() == b"ready\n"
        t0 = time.time()
        r = pool.cli("agent", "reclaim", "--data-dir", pool.agent_dir("a"))
        assert r.returncode == 0, r.stderr
        out, err = p.communicate(timeout=30)
        took = time.time() - t0
        assert p.returncode != 0, (out, err)
        assert b"session ended" in err or b"reclaim" in err, err
        print(f"exec ended {took:.2f}s after the reclaim: {err.decode().strip()}")
    finally:
        p.kill()
