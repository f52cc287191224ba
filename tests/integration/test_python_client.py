"""The Python client (python/gpupool, issue 25) against a real pool: a
server with TLS (its own CA, pinned by fingerprint) and an agent with
simulated GPUs whose jobs run in the process executor.

Jobs, logs, cancel, typed errors, idempotent submission (also when the
answer to a submission is lost on the way back), work directories
uploaded as the CLI uploads them, checkpoints downloaded, Jupyter sessions,
the Executor, the CLI's config file, a list of servers with redirects, and
the CA pinning against servers that present the wrong chain."""
import concurrent.futures
import hashlib
import http.server
import json
import math
import os
import pathlib
import pickle
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "python"))
import gpupool  # noqa: E402

from pool import TIME_SCALE, wait_for  # noqa: E402

PROCESS = {"executor": "process"}
# The jobs' interpreter: the one running the tests (Debian's, with cloudpickle
# like this client), not whichever python3 comes first on the job's PATH.
PYTHON = sys.executable


def start(pool, gpus="2xA100:80GiB", server_flags=()):
    """A pool with TLS and one agent that offers the sandbox and process
    executors; returns a client with the pool's CA pinned."""
    pool.start_server(extra=server_flags)
    config = pool.dir / "agent-a.yaml"
    config.write_text("executors: [sandbox, process]\n")
    pool.start_agent("a", gpus=gpus, extra=["--config", str(config)])
    pool.wait_nodes_ready(1)
    assert pool.url.startswith("https://") and pool.ca_fingerprint
    return gpupool.Client(pool.url, pool.token, pool.ca_fingerprint)


def live_jobs(pool):
    status, body = pool.api("GET", "/v1/jobs?state=pending,scheduled,running")
    assert status == 200, body
    return body["jobs"]


# ---- jobs ------------------------------------------------------------------

def test_submit_follow_logs_and_wait(pool):
    client = start(pool)
    job = client.submit(command=["sh", "-c", "for i in 1 2 3 4 5; do echo line $i; sleep 0.1; done; "
                                             "echo oops >&2; exit 3"],
                        gpus=1, name="py-logs", env={"X": "1"}, **PROCESS)
    assert isinstance(job.id, int) and job.name == "py-logs"
    # Followed from submission on: the long poll runs until every line is read.
    lines = list(job.logs(follow=True))
    assert [l for l in lines if l.stream == "stdout"] == [f"line {i}" for i in range(1, 6)]
    assert [(str(l), l.stream) for l in lines if l.stream == "stderr"] == [("oops", "stderr")]
    assert all(l.attempt_id == f"{job.id}.1" for l in lines)
    assert job.wait(timeout=60 * TIME_SCALE) == "failed"
    assert job.exit_code == 3 and job.reason == "exited with code 3"
    assert pool.job(job.id)["exit_code"] == 3
    # Read again without following: the same lines, and a later cursor gives the rest.
    again = list(job.logs())
    assert again == lines
    assert list(job.logs(after=lines[1].cursor)) == lines[2:]
    assert [j.id for j in client.jobs(state="failed")] == [job.id]
    assert client.job(job.id).exit_code == 3
    assert [n["name"] for n in client.nodes()] == ["a"]


def test_wait_times_out_and_cancel_stops_the_job(pool):
    client = start(pool)
    job = client.submit(run="echo started; exec sleep 300", gpus=1, **PROCESS)
    assert job.wait(until="running", timeout=60 * TIME_SCALE) == "running"
    with pytest.raises(TimeoutError):
        job.wait(timeout=0.5)
    assert job.cancel() is job
    assert job.wait(timeout=30 * TIME_SCALE) == "cancelled"
    assert pool.job(job.id)["state"] == "cancelled"
    assert live_jobs(pool) == []


def test_errors_are_typed(pool):
    client = start(pool, server_flags=["--max-pending-jobs-per-user", "1"])
    with pytest.raises(gpupool.InvalidSpec) as e:
        client.submit(command=["true"], gpus=-1, **PROCESS)
    assert e.value.field == "resources.gpus" and e.value.status == 400
    assert e.value.code == "INVALID_ARGUMENT" and "got -1" in e.value.message
    assert isinstance(e.value, gpupool.BadRequest) and isinstance(e.value, gpupool.GpupoolError)
    with pytest.raises(gpupool.InvalidSpec) as e:
        client.submit(command=["true"], max_runtime="soon", **PROCESS)
    assert e.value.field == "max_runtime"
    with pytest.raises(gpupool.NotFound) as e:
        client.job(999999)
    assert e.value.status == 404 and e.value.code == "NOT_FOUND"
    with pytest.raises(gpupool.Unauthorized):
        gpupool.Client(pool.url, "gpt_not_a_token", pool.ca_fingerprint).jobs()
    # A job that is not running cannot be reached into: 409.
    done = client.submit(command=["true"], **PROCESS)
    assert done.wait(timeout=60 * TIME_SCALE) == "succeeded"
    with pytest.raises(gpupool.Conflict):
        gpupool.Session(done).new_link()
    # One job waits (no node has 8 GPUs); the next is over the pending limit.
    waiting = client.submit(command=["true"], gpus=8, **PROCESS)
    with pytest.raises(gpupool.RateLimited, match="pending jobs"):
        client.submit(command=["true"], **PROCESS)
    waiting.cancel()
    assert live_jobs(pool) == []


# ---- idempotent submission ---------------------------------------------------

def test_a_repeated_idempotency_key_makes_one_job(pool):
    client = start(pool)
    spec = {"command": ["true"], "name": "once", **PROCESS}
    first = client.submit(spec=spec, idempotency_key="train-2024.11:run-1")
    again = client.submit(spec=spec, idempotency_key="train-2024.11:run-1")
    assert again.id == first.id
    assert not first.replayed and again.replayed
    with pytest.raises(gpupool.Conflict) as e:
        client.submit(spec={**spec, "name": "other"}, idempotency_key="train-2024.11:run-1")
    assert str(first.id) in e.value.message
    with pytest.raises(gpupool.BadRequest):
        client.submit(spec=spec, idempotency_key="not a key!")
    # Without a key each call is its own job.
    assert client.submit(spec=spec).id != client.submit(spec=spec).id
    names = [j.name for j in client.jobs()]
    assert names.count("once") == 3 and "other" not in names


class LosesOneAnswer:
    """A TCP relay to the server that, on the first connection carrying more
    than `big` bytes from the client (a request, not just a TLS handshake),
    swallows the server's answer and closes both ends: an answer lost on the
    way back. Other connections are relayed as they are."""

    def __init__(self, port, big=16000):
        self.target, self.big = ("127.0.0.1", port), big
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.lost = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            state = {"sent": 0}
            threading.Thread(target=self._pipe, args=(client, server, state, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, state, False), daemon=True).start()

    def _pipe(self, src, dst, state, upstream):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if upstream:
                    state["sent"] += len(data)
                elif state["sent"] > self.big and not self.lost.is_set():
                    self.lost.set()
                    break  # the answer goes nowhere
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self):
        self.listener.close()


def test_a_submission_whose_answer_was_lost_is_retried_with_its_key(pool):
    start(pool)
    proxy = LosesOneAnswer(pool.port)
    try:
        client = gpupool.Client(f"https://127.0.0.1:{proxy.port}", pool.token, pool.ca_fingerprint)
        # A large run line makes the request stand out from the handshake.
        job = client.submit(run="true # " + "x" * 20000, name="lost-answer", **PROCESS)
        assert proxy.lost.is_set()
        assert job.replayed  # the retry was answered from the key
        names = [j["name"] for j in pool.api("GET", "/v1/jobs")[1]["jobs"]]
        assert names == ["lost-answer"], names
    finally:
        proxy.close()


# ---- work directories and checkpoints -----------------------------------------

def test_a_workdir_is_uploaded_as_the_cli_uploads_it(pool, tmp_path):
    client = start(pool)
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    (work / "data.txt").write_text("hello from the workdir\n")
    (work / "sub" / "nested.txt").write_text("nested\n")
    big = os.urandom(300_000)  # several chunks
    (work / "big.bin").write_bytes(big)
    (work / "ignored.log").write_text("left out\n")
    (work / ".gpupoolignore").write_text("*.log\n")
    os.symlink("data.txt", work / "link")
    job = client.submit(command=["sh", "-c", "cat data.txt sub/nested.txt link; sha256sum big.bin; "
                                             "ls -A | sort"], workdir=str(work), **PROCESS)
    assert job.wait(timeout=60 * TIME_SCALE) == "succeeded", job.reason
    lines = [str(l) for l in job.logs()]
    assert lines[:3] == ["hello from the workdir", "nested", "hello from the workdir"]
    assert lines[3] == hashlib.sha256(big).hexdigest() + "  big.bin"
    # (.checkpoints is the pool's own, made by the agent)
    assert lines[4:] == [".checkpoints", ".gpupoolignore", "big.bin", "data.txt", "link", "sub"]
    assert job.spec["workdir"] == str(work) and len(job.spec["inputs"]) == 64
    # The CLI uploads the same directory to the same manifest: same chunks,
    # same text.
    cli_job = pool.submit_cli({"command": ["true"], "workdir": str(work), **PROCESS})
    assert pool.job(cli_job)["spec"]["inputs"] == job.spec["inputs"]
    # So it does for a tree that exercises the chunker's edges, the rules of
    # .gpupoolignore, modes, empty directories and names beyond ASCII.
    rich = tmp_path / "rich"
    for d in ("src/cache", "build", "docs/build", "out/x", "logs", "empty", "données"):
        (rich / d).mkdir(parents=True)
    sizes = {"zero": 0, "min": 4096, "min1": 4097, "avg": 16384, "max1": 65537, "big": 1_000_003}
    for name, size in sizes.items():
        (rich / "src" / f"{name}.bin").write_bytes(os.urandom(size))
    (rich / "src" / "same.bin").write_bytes((rich / "src" / "big.bin").read_bytes())
    (rich / "zeros.bin").write_bytes(bytes(300_000))
    for path in ("src/cache/c.txt", "build/b.o", "docs/build/keep.txt", "out/x/y.txt", "logs/a.txt",
                 "logs/a.log", "keep.log", "#hash", "a1.tmp", "c1.tmp", "données/é.txt"):
        (rich / path).write_text(path)
    (rich / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(rich / "run.sh", 0o755)
    os.chmod(rich / "empty", 0o700)
    os.symlink("../zeros.bin", rich / "src" / "zeros")
    (rich / ".gpupoolignore").write_text("# comment\n*.log\n!keep.log\n/build\n**/cache\nout/**\n"
                                         "logs/*.txt\n\\#hash\n[ab]?.tmp\n")
    cli_rich = pool.submit_cli({"command": ["true"], "workdir": str(rich), **PROCESS})
    uploaded = client.upload(str(rich))
    assert uploaded.manifest == pool.job(cli_rich)["spec"]["inputs"]
    entries = {e.path: e for e in gpupool.blobs.fetch_manifest(client, uploaded.manifest).entries}
    assert {"src/big.bin", "src/same.bin", "keep.log", "docs/build/keep.txt", "données/é.txt", "out",
            "logs", "c1.tmp", "empty"} <= set(entries)
    assert not {"build", "src/cache", "out/x", "logs/a.txt", "logs/a.log", "#hash", "a1.tmp"} & set(entries)
    assert entries["src/zeros"].type == "symlink" and entries["src/zeros"].target == "../zeros.bin"
    assert entries["run.sh"].mode == 0o755 and entries["empty"].mode == 0o700
    assert entries["src/same.bin"].chunks == entries["src/big.bin"].chunks
    assert len(entries["src/big.bin"].chunks) > 20
    # A second upload finds every chunk there.
    again = client.upload(str(work))
    assert again.manifest == job.spec["inputs"] and again.new_chunks == 0 and again.files == 4
    # Without the zstandard package chunks travel as raw zstd frames, which
    # the server takes alike.
    raw = tmp_path / "raw"
    raw.mkdir()
    blob = os.urandom(100_000)
    (raw / "blob.bin").write_bytes(blob)
    uploaded = gpupool.blobs.upload_tree(client, str(raw), raw_frames=True)
    assert uploaded.new_chunks >= 2 and uploaded.uploaded_bytes > len(blob)
    raw_job = client.submit(spec={"command": ["sha256sum", "blob.bin"], "inputs": uploaded.manifest,
                                  **PROCESS})
    assert raw_job.wait(timeout=60 * TIME_SCALE) == "succeeded"
    assert list(raw_job.logs()) == [hashlib.sha256(blob).hexdigest() + "  blob.bin"]
    # A YAML spec file's workdir is relative to the file, as for the CLI.
    (tmp_path / "job.yaml").write_text("name: from-yaml\nexecutor: process\nworkdir: work\n"
                                       "command: [cat, sub/nested.txt]\n")
    yaml_job = client.submit(spec_file=str(tmp_path / "job.yaml"))
    assert yaml_job.spec["workdir"] == str(work) and yaml_job.spec["inputs"] == job.spec["inputs"]
    assert yaml_job.wait(timeout=60 * TIME_SCALE) == "succeeded"
    assert list(yaml_job.logs()) == ["nested"]


def test_a_workdir_with_a_file_in_checkpoints_is_refused(pool, tmp_path):
    client = start(pool)
    (tmp_path / ".checkpoints").mkdir()
    (tmp_path / ".checkpoints" / "x").write_text("x")
    with pytest.raises(gpupool.BadRequest, match=r"\.checkpoints is reserved"):
        client.submit(command=["true"], workdir=str(tmp_path), **PROCESS)
    assert client.jobs() == []


def test_download_checkpoint(pool, tmp_path):
    client = start(pool)
    script = ('ck="$GPUPOOL_CHECKPOINT_DIR"; mkdir -p "$ck/.staging-1/sub"; '
              'echo state-42 > "$ck/.staging-1/state.txt"; '
              'head -c 200000 /dev/urandom > "$ck/.staging-1/sub/weights.bin"; '
              'sha256sum "$ck/.staging-1/sub/weights.bin" | cut -d" " -f1; '
              'mv -T "$ck/.staging-1" "$ck/ckpt-1"; exec sleep 300')
    job = client.submit(run=script, checkpoint={}, **PROCESS)
    checkpoints = wait_for(job.checkpoints, timeout=60, what="a checkpoint")
    assert [c.number for c in checkpoints] == [1] and checkpoints[0].files == 2
    digest = str(next(job.logs(follow=True)))  # the long poll waits for the line
    dest = tmp_path / "restored"
    c = job.download_checkpoint(str(dest))
    assert c.number == 1 and c.manifest == checkpoints[0].manifest
    # The tree the agent uploads holds just the commit, ckpt-1.
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*")) == [
        "ckpt-1", "ckpt-1/state.txt", "ckpt-1/sub", "ckpt-1/sub/weights.bin"]
    assert (dest / "ckpt-1" / "state.txt").read_text() == "state-42\n"
    assert hashlib.sha256((dest / "ckpt-1" / "sub" / "weights.bin").read_bytes()).hexdigest() == digest
    # Nothing is written over: a second download into it is refused.
    with pytest.raises(gpupool.BadRequest, match="not an empty directory"):
        job.download_checkpoint(str(dest), number=1)
    with pytest.raises(gpupool.NotFound):
        job.download_checkpoint(str(tmp_path / "none"), number=7)
    assert not (tmp_path / "none").exists()
    job.cancel()
    assert job.wait(timeout=30 * TIME_SCALE) == "cancelled"


# ---- sessions ----------------------------------------------------------------

def test_start_a_jupyter_session(pool):
    client = start(pool)
    session = client.start_session(jupyter=True, gpus=1, timeout=120 * TIME_SCALE)
    assert session.job.state == "running" and session.kind == "jupyter"
    assert session.url.startswith(pool.sessions_url + f"/v1/sessions/{session.id}/login?code=")
    assert [s.id for s in client.sessions()] == [session.id]
    # The link signs a browser in, once.
    opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=pool.ssl), NoRedirects())
    with opener.open(session.url, timeout=30) as r:
        assert r.status == 302
        assert r.headers["Location"] == f"/v1/sessions/{session.id}/proxy/"
    session.stop()
    assert session.job.wait(timeout=30 * TIME_SCALE) == "cancelled"


class NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None

    def http_error_302(self, req, fp, code, msg, headers):
        return fp


# ---- the Executor -------------------------------------------------------------

def test_executor_round_trip(pool, tmp_path):
    client = start(pool)

    def scale(values, factor=1):
        print("scaling", len(values), "values")
        return [v * factor for v in values]

    def fails(n):
        raise ValueError(f"bad value {n}")

    with gpupool.Executor(client, gpus=1, python=PYTHON, **PROCESS) as ex:
        ok = ex.submit(scale, [1, 2, 3], factor=10)
        bad = ex.submit(fails, 3)
        big = ex.submit(os.urandom, 100_000)  # a result of many lines
        assert ok.result(timeout=120 * TIME_SCALE) == [10, 20, 30]
        with pytest.raises(ValueError, match="bad value 3") as e:
            bad.result(timeout=120 * TIME_SCALE)
        assert "in fails" in e.value.remote_traceback
        assert "in fails" in str(e.value.__cause__)
        assert len(big.result(timeout=120 * TIME_SCALE)) == 100_000
        assert list(ex.map(math.factorial, [5, 6], timeout=120 * TIME_SCALE)) == [120, 720]
    assert ok.job.state == "succeeded" and bad.job.state == "failed"
    assert any(str(l) == "scaling 3 values" for l in ok.job.logs())
    assert ok.job.spec["resources"]["gpus"] == 1 and ok.job.name == "py-scale"
    # Standard pickle ships functions by name: one importable there works.
    with gpupool.Executor(client, gpus=0, python=PYTHON, pickler=pickle, **PROCESS) as ex:
        assert ex.submit(math.factorial, 20).result(timeout=120 * TIME_SCALE) == 2432902008176640000
    # A module of one's own travels in the work directory (pickled by name,
    # even by cloudpickle, as it imports here).
    code = tmp_path / "code"
    code.mkdir()
    (code / "helper_gpupool_test.py").write_text("def double(x):\n    return 2 * x\n")
    sys.path.insert(0, str(code))
    try:
        import helper_gpupool_test
        with gpupool.Executor(client, gpus=0, python=PYTHON, workdir=str(code), **PROCESS) as ex:
            assert ex.submit(helper_gpupool_test.double, 21).result(timeout=120 * TIME_SCALE) == 42
    finally:
        sys.path.remove(str(code))
    # JSON results: errors come back as RemoteError with the traceback text.
    with gpupool.Executor(client, gpus=0, python=PYTHON, results="json", **PROCESS) as ex:
        assert ex.submit(scale, [1.5], factor=2).result(timeout=120 * TIME_SCALE) == [3.0]
        with pytest.raises(gpupool.RemoteError) as e:
            ex.submit(fails, 4).result(timeout=120 * TIME_SCALE)
        assert e.value.type_name == "ValueError" and e.value.remote_message == "bad value 4"
        assert "in fails" in e.value.remote_traceback


def test_executor_cancels_jobs(pool):
    client = start(pool)
    ex = gpupool.Executor(client, gpus=1, python=PYTHON, **PROCESS)
    futures = [ex.submit(time.sleep, 300) for _ in range(3)]
    # Two GPUs: two calls run, the third waits in the queue.
    running = lambda: [f for f in futures if f.job is not None and f.job.refresh().state == "running"]  # noqa: E731
    first = wait_for(lambda: len(running()) == 2 and running(), timeout=60, what="two calls running")[0]
    assert first.cancel() and first.cancelled()
    assert first.job.wait(timeout=30 * TIME_SCALE) == "cancelled"
    done, _ = concurrent.futures.wait([first], timeout=5 * TIME_SCALE)
    assert done == {first}
    # The waiting call starts in the GPU freed.
    wait_for(lambda: len(running()) == 2, timeout=60, what="the third call to start")
    ex.shutdown(wait=True, cancel_futures=True)
    assert all(f.cancelled() for f in futures)
    wait_for(lambda: live_jobs(pool) == [], timeout=30, what="every job to end")
    assert {j.state for j in client.jobs()} <= {"cancelled"}
    with pytest.raises(RuntimeError):
        ex.submit(time.sleep, 1)


# ---- configuration and the server list ------------------------------------------

def test_from_config_follows_the_cli_precedence(pool, tmp_path):
    start(pool)
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"server": pool.url, "token": pool.token,
                                  "ca_fingerprint": pool.ca_fingerprint,
                                  "servers": {pool.url + "/": {"token": pool.token,
                                                               "ca_fingerprint": pool.ca_fingerprint}}}))
    env = {"GPUPOOL_CONFIG": str(config), "HOME": str(tmp_path)}
    assert gpupool.Client.from_config(env=env).whoami()["subject"] == "admin"
    # The environment's token wins for the server it names...
    with pytest.raises(gpupool.Unauthorized):
        gpupool.Client.from_config(env={**env, "GPUPOOL_TOKEN": "gpt_wrong"}).whoami()
    # ...and the file's credentials go only to the server they were stored with.
    other = gpupool.Client.from_config(env={**env, "GPUPOOL_SERVER": "https://127.0.0.1:1"})
    assert other.endpoint.token == "" and other.endpoint.ca_fingerprint == ""
    with pytest.raises(gpupool.GpupoolError, match="no server"):
        gpupool.Client.from_config(env={"HOME": str(tmp_path)})


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Redirector(http.server.ThreadingHTTPServer):
    """A plain-HTTP stand-in for a standby: answers every request with a
    307 to `location` + the path, and records what it was sent."""

    def __init__(self, location):
        self.location, self.seen = location, []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self):
                outer.seen.append((self.command, self.path, self.headers.get("Authorization")))
                body = json.dumps({"error": "this server is a standby"}).encode()
                self.send_response(307)
                self.send_header("Location", outer.location + self.path)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        threading.Thread(target=self.serve_forever, daemon=True).start()


def test_a_server_list_is_followed_as_the_cli_does(pool):
    start(pool)
    dead = f"https://127.0.0.1:{free_port()}"
    # The first server cannot be reached: GET and POST go on to the next.
    client = gpupool.Client(f"{dead},{pool.url}", pool.token, pool.ca_fingerprint)
    assert client.whoami()["subject"] == "admin"
    assert client.submit(command=["true"], **PROCESS).id == 1
    # A standby's 307 to a server of the list is followed...
    standby = Redirector(pool.url)
    try:
        client = gpupool.Client(f"{standby.url},{pool.url}", pool.token, pool.ca_fingerprint)
        assert client.job(1).id == 1
        assert standby.seen == [("GET", "/v1/jobs/1", f"Bearer {pool.token}")]
        # ...and then the leader is asked first.
        client.job(1)
        assert len(standby.seen) == 1
    finally:
        standby.shutdown()
    # A redirect to a server outside the list is not followed: the token
    # goes nowhere else.
    elsewhere = Redirector("http://127.0.0.1:1")
    outside = Redirector(elsewhere.url)
    try:
        with pytest.raises(gpupool.GpupoolError) as e:
            gpupool.Client(outside.url, pool.token).job(1)
        assert e.value.status == 307
        assert elsewhere.seen == []
    finally:
        outside.shutdown()
        elsewhere.shutdown()


# ---- TLS: the pool CA pinned as the CLI pins it -----------------------------------

def test_the_pinned_ca_must_match(pool):
    start(pool)
    wrong = "sha256:" + "0" * 64
    with pytest.raises(gpupool.TLSVerificationError, match="does not contain the pinned CA"):
        gpupool.Client(pool.url, pool.token, wrong).whoami()
    with pytest.raises(gpupool.TLSVerificationError):  # no pin: the system's CAs do not know the pool's
        gpupool.Client(pool.url, pool.token).whoami()
    # The CLI's other forms of the fingerprint, and a CA file, work too.
    colons = ":".join(pool.ca_fingerprint[7 + i:9 + i] for i in range(0, 64, 2)).upper()
    assert gpupool.Client(pool.url, pool.token, colons).whoami()["subject"] == "admin"
    assert gpupool.Client(pool.url, pool.token, ca_file=pool.ca_file()).whoami()["subject"] == "admin"
    with pytest.raises(gpupool.BadRequest):
        gpupool.Client(pool.url, pool.token, "sha256:1234")


class FakeServer:
    """A TLS server that presents `chain` (PEM file: leaf first) with `key`
    and answers any request with 200 {"subject": "impostor"}, counting the
    requests it got."""

    def __init__(self, chain, key):
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(chain, key)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"https://127.0.0.1:{self.listener.getsockname()[1]}"
        self.requests = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                raw, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(raw,), daemon=True).start()

    def _answer(self, raw):
        try:
            with self.ctx.wrap_socket(raw, server_side=True) as s:
                s.settimeout(10)
                head = b""
                while b"\r\n\r\n" not in head:
                    more = s.recv(4096)
                    if not more:
                        break
                    head += more
                if head:
                    self.requests += 1
                    body = b'{"subject": "impostor"}'
                    s.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                              b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        except (OSError, ssl.SSLError):
            pass

    def close(self):
        self.listener.close()


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def test_pinning_refuses_chains_that_only_show_the_ca(pool, tmp_path):
    start(pool)
    tls = pathlib.Path(pool.server_dir) / "tls"
    ca_pem = (tls / "ca.crt").read_text()
    server_pem = (tls / "server.crt").read_text()
    leaf_pem = server_pem[:server_pem.index("-----END CERTIFICATE-----") + 26]
    # An impostor's own CA signs a server certificate; the chain it presents
    # names the pool's CA too, whose certificate is public.
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", "evil-ca.key", "-out", "evil-ca.crt", "-days", "1", "-subj", "/CN=gpupool CA",
            cwd=tmp_path)
    openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", "evil.key", "-out", "evil.csr", "-subj", "/CN=127.0.0.1", cwd=tmp_path)
    (tmp_path / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    openssl("x509", "-req", "-in", "evil.csr", "-CA", "evil-ca.crt", "-CAkey", "evil-ca.key",
            "-CAcreateserial", "-out", "evil.crt", "-days", "1", "-extfile", "ext.cnf", cwd=tmp_path)
    agent = pathlib.Path(pool.agent_dir("a")) / "credentials"
    cases = {
        # a certificate the pool CA did not sign, with the CA's beside it
        "forged": ((tmp_path / "evil.crt").read_text() + ca_pem, tmp_path / "evil.key",
                   "does not verify against the pinned CA"),
        # the pool CA did sign it, but for an agent (clientAuth), not a server
        "agent": ((agent / "client.crt").read_text() + ca_pem, agent / "client.key",
                  "does not verify against the pinned CA"),
        # the server's own certificate, but without the CA in the chain (the CLI refuses it)
        "no CA": (leaf_pem, tls / "server.key", "does not contain the pinned CA"),
        # what the real server presents: accepted (so the cases above fail for their reason)
        "real": (server_pem, tls / "server.key", None),
    }
    for name, (chain, key, refusal) in cases.items():
        chain_file = tmp_path / f"{name}.pem"
        chain_file.write_text(chain)
        fake = FakeServer(str(chain_file), str(key))
        try:
            client = gpupool.Client(fake.url, pool.token, pool.ca_fingerprint)
            if refusal is None:
                assert client.whoami() == {"subject": "impostor"}, name
                assert fake.requests == 1
            else:
                with pytest.raises(gpupool.TLSVerificationError, match=refusal):
                    client.whoami()
                assert fake.requests == 0, name  # nothing, the token least of all, was sent
        finally:
            fake.close()
