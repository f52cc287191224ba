"""The server's own limits, attacked as a hostile user would: pending jobs
per user, request bodies, storage quotas (uploads, job inputs and
checkpoints), failed logins per address and per user. Each refusal is 429
or 413 with a message naming the limit, and nothing is stored. Real server
(and agent where a job must run) over TLS on loopback."""
import concurrent.futures
import http.client
import json
import os
import socket
import sqlite3
import ssl
import subprocess

from pool import GPUPOOL, wait_for


def add_user(pool, name, password=None):
    """Creates a member and returns a token of theirs."""
    add = subprocess.run([GPUPOOL, "admin", "user", "add", name] +
                         (["--password-stdin"] if password else []),
                         input=(password + "\n") if password else None,
                         stdin=None if password else subprocess.DEVNULL,
                         capture_output=True, text=True, env=pool.cli_env(), timeout=60)
    assert add.returncode == 0, add.stderr
    return pool.cli("token", "create", "--user", name, "--name", name, check=True).stdout.strip()


def cli_as(pool, token, *args, timeout=120):
    return subprocess.run([GPUPOOL, *args], capture_output=True, text=True, timeout=timeout,
                          env=pool.cli_env(token))


def state_db(pool, sql):
    """A query on the server's database, read-only beside the running server."""
    db = sqlite3.connect(f"file:{pool.server_dir}/state.db?mode=ro", uri=True, timeout=10)
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


def blob_files(pool):
    """Every chunk and manifest file of the server's blob store, with its size."""
    out = {}
    for root, _, files in os.walk(os.path.join(pool.server_dir, "blobs")):
        for f in files:
            path = os.path.join(root, f)
            out[path] = os.path.getsize(path)
    return out


def write_random(path, size):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(size))


# ---- pending jobs


def test_a_user_cannot_queue_more_than_the_pending_job_limit(pool):
    # No agent: every job stays pending.
    pool.start_server(extra=("--max-pending-jobs-per-user", "5"))
    mallory = add_user(pool, "mallory")
    spec = {"run": "true", "resources": {"gpus": 1}}
    # All at once, as a script would: the limit holds however they interleave.
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as ex:
        answers = list(ex.map(lambda _: pool.api("POST", "/v1/jobs", spec, token=mallory),
                              range(20)))
    codes = sorted(status for status, _ in answers)
    assert codes == [201] * 5 + [429] * 15, codes
    refused = next(body for status, body in answers if status == 429)
    assert refused["error"]["code"] == "RESOURCE_EXHAUSTED"
    assert refused["error"]["message"] == (
        "user mallory has 5 pending jobs, the limit (--max-pending-jobs-per-user); "
        "wait for some to start or cancel some")
    # Nothing of the refused ones is stored.
    assert state_db(pool, "SELECT count(*) FROM jobs WHERE owner = 'mallory'") == [(5,)]
    # The CLI says the same.
    r = cli_as(pool, mallory, "submit", "--gpus", "1", "--", "true")
    assert r.returncode != 0 and "--max-pending-jobs-per-user" in r.stderr, r.stderr
    # Others are not held back; cancelling makes room again.
    assert pool.api("POST", "/v1/jobs", spec)[0] == 201
    mine = [body["id"] for status, body in answers if status == 201]
    assert pool.api("POST", f"/v1/jobs/{mine[0]}/cancel", token=mallory)[0] == 200
    assert pool.api("POST", "/v1/jobs", spec, token=mallory)[0] == 201
    assert state_db(pool, "SELECT count(*) FROM jobs WHERE owner = 'mallory'") == [(6,)]


# ---- request bodies


def raw_request(pool, head, body=b""):
    """Sends bytes over TLS and returns (status, headers, parsed JSON body)."""
    ctx = ssl.create_default_context(cafile=pool.ca_file())
    with socket.create_connection(("127.0.0.1", pool.port), timeout=30) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
            s.sendall(head.encode() + body)
            resp = http.client.HTTPResponse(s)
            resp.begin()
            return resp.status, dict(resp.getheaders()), json.loads(resp.read() or b"null")


def test_an_oversized_body_is_refused_before_it_is_read(pool):
    pool.start_server(extra=("--max-request-body", "10MiB"))
    # The client announces 64 GiB and waits for the go-ahead, as curl does:
    # the answer comes from the headers alone and no byte of the body is read.
    head = (f"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {pool.token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {64 << 30}\r\n"
            "Expect: 100-continue\r\n\r\n")
    status, _, body = raw_request(pool, head)
    assert status == 413, body
    assert body["error"]["code"] == "RESOURCE_EXHAUSTED"
    assert body["error"]["message"] == (
        f"request body exceeds {10 << 20} bytes, the server's limit (--max-request-body)")
    # Just past the limit, sent whole: refused the same, nothing stored.
    spec = json.dumps({"run": "true", "env": {"PAD": "x" * (10 << 20)}}).encode()
    head = (f"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {pool.token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(spec)}\r\n"
            "Expect: 100-continue\r\n\r\n")
    status, _, body = raw_request(pool, head)
    assert status == 413 and "--max-request-body" in body["error"]["message"]
    assert state_db(pool, "SELECT count(*) FROM jobs") == [(0,)]
    # Below the limit the API itself answers (here: the spec's own limits).
    assert pool.api("POST", "/v1/jobs", {"run": "true", "env": {"PAD": "x" * (1 << 20)}})[0] == 400
    assert state_db(pool, "SELECT count(*) FROM jobs") == [(0,)]


# ---- storage quotas


def submit_workdir(pool, token, workdir, *args):
    return cli_as(pool, token, "submit", "--quiet", "--workdir", str(workdir), *args,
                  "--", "true")


def test_storage_quota_bounds_a_users_uploads_and_inputs_across_jobs(pool, tmp_path):
    # No agent: jobs stay pending, so their inputs stay charged.
    pool.start_server(extra=("--user-storage-quota", "1MiB"))
    mallory = add_user(pool, "mallory")
    write_random(tmp_path / "a" / "data.bin", 600 << 10)
    first = submit_workdir(pool, mallory, tmp_path / "a")
    assert first.returncode == 0, first.stderr
    job_a = int(first.stdout.strip().splitlines()[-1])
    inputs_a = pool.job(job_a)["spec"]["inputs"]

    # Another 600 KiB in another job: the upload itself is refused, and none
    # of its chunks are kept.
    before = blob_files(pool)
    write_random(tmp_path / "b" / "data.bin", 600 << 10)
    second = submit_workdir(pool, mallory, tmp_path / "b")
    assert second.returncode != 0
    assert "storage quota exceeded" in second.stderr, second.stderr
    assert "but user mallory stores 600 KiB (+" in second.stderr, second.stderr
    assert "of the 1 MiB it may (the server's --user-storage-quota)" in second.stderr
    assert blob_files(pool) == before
    assert state_db(pool, "SELECT count(*) FROM jobs WHERE owner = 'mallory'") == [(1,)]

    # Naming inputs someone else uploaded does not evade it: the job's
    # inputs are charged to its owner at submission (429, nothing stored).
    write_random(tmp_path / "c" / "data.bin", 600 << 10)
    other = submit_workdir(pool, pool.token, tmp_path / "c")
    assert other.returncode == 0, other.stderr
    inputs_c = pool.job(int(other.stdout.strip().splitlines()[-1]))["spec"]["inputs"]
    status, body = pool.api("POST", "/v1/jobs", {"run": "true", "inputs": inputs_c},
                            token=mallory)
    assert status == 429, body
    assert body["error"]["message"].startswith(
        "storage quota exceeded: the inputs of this job needs 600 KiB more"), body
    assert state_db(pool, "SELECT count(*) FROM jobs WHERE owner = 'mallory'") == [(1,)]
    # The same inputs again are stored once and counted once.
    assert pool.api("POST", "/v1/jobs", {"run": "true", "inputs": inputs_a}, token=mallory)[0] == 201

    # Where she stands, as she sees it.
    mine = json.loads(cli_as(pool, mallory, "-o", "json", "quota").stdout)["quotas"]
    me = next(q for q in mine if q["kind"] == "user" and q["name"] == "mallory")
    assert me["limit_bytes"] == 1 << 20 and me["limit_is_default"]
    assert 600 << 10 <= me["used_bytes"] < (600 << 10) + 4096
    assert all(q["name"] == "mallory" or q["kind"] == "group" for q in mine)

    # An admin gives her more; then the job is accepted.
    r = pool.cli("admin", "quota", "set", "--user", "mallory", "10MiB", check=True)
    assert "quota 10 MiB" in r.stdout, r.stdout
    assert pool.api("POST", "/v1/jobs", {"run": "true", "inputs": inputs_c}, token=mallory)[0] == 201
    listed = pool.cli("admin", "quota", "list", check=True).stdout
    assert "mallory" in listed and "10 MiB" in listed, listed
    audit = pool.cli("-o", "json", "admin", "audit", check=True).stdout
    assert "quota.set" in audit


def test_upload_submit_cancel_in_a_loop_cannot_pass_the_quota_on_disk(pool, tmp_path):
    pool.start_server(extra=("--user-storage-quota", "1MiB"))
    mallory = add_user(pool, "mallory")
    write_random(tmp_path / "a" / "data.bin", 700 << 10)
    r = submit_workdir(pool, mallory, tmp_path / "a")
    assert r.returncode == 0, r.stderr
    job = int(r.stdout.strip().splitlines()[-1])
    assert pool.api("POST", f"/v1/jobs/{job}/cancel", token=mallory)[0] == 200
    # Nothing is stored in her name any more, but the cancelled job's inputs
    # stay on disk until garbage collection: they still count for uploads.
    me = pool.api("GET", "/v1/quotas/users/mallory", token=mallory)[1]
    assert me["used_bytes"] == 0, me
    before = blob_files(pool)
    write_random(tmp_path / "b" / "data.bin", 700 << 10)
    r = submit_workdir(pool, mallory, tmp_path / "b")
    assert r.returncode != 0 and "storage quota exceeded" in r.stderr, r.stderr
    assert "freed and not collected yet" in r.stderr, r.stderr
    assert blob_files(pool) == before
    me = pool.api("GET", "/v1/quotas/users/mallory", token=mallory)[1]
    assert me["transient_bytes"] >= 700 << 10, me


def test_a_group_quota_bounds_its_members_together(pool, tmp_path):
    pool.start_server()
    alice, bob = add_user(pool, "alice"), add_user(pool, "bob")
    pool.cli("admin", "group", "add", "vision", check=True)
    pool.cli("admin", "group", "members", "vision", "--add", "alice", "--add", "bob", check=True)
    pool.cli("admin", "quota", "set", "--group", "vision", "1MiB", check=True)
    write_random(tmp_path / "a" / "data.bin", 700 << 10)
    assert submit_workdir(pool, alice, tmp_path / "a", "--group", "vision").returncode == 0
    write_random(tmp_path / "b" / "data.bin", 700 << 10)
    # Bob's upload is his own (he has no quota), but the job charged to the
    # lab does not fit the lab's quota.
    r = submit_workdir(pool, bob, tmp_path / "b", "--group", "vision")
    assert r.returncode != 0 and "group vision stores 700 KiB of the 1 MiB" in r.stderr, r.stderr
    assert state_db(pool, "SELECT count(*) FROM jobs WHERE owner = 'bob'") == [(0,)]
    assert submit_workdir(pool, bob, tmp_path / "b").returncode == 0  # his own group: fine


CHECKPOINTS = (
    'ck=$GPUPOOL_CHECKPOINT_DIR; '
    'commit() { mkdir -p "$ck/.s$1" && head -c $2 /dev/urandom > "$ck/.s$1/data" && '
    'mv "$ck/.s$1" "$ck/ckpt-$1"; }; '
    'commit 1 200000; sleep 4; commit 2 3000000; sleep 6; commit 3 100000; sleep 6; echo done')


def test_a_checkpoint_over_quota_is_refused_and_the_job_keeps_running(pool):
    pool.start_server(extra=("--user-storage-quota", "1MiB"))
    pool.start_agent("a")
    pool.wait_nodes_ready(1)
    mallory = add_user(pool, "mallory")
    status, job = pool.api("POST", "/v1/jobs", {"run": CHECKPOINTS, "checkpoint": {}},
                           token=mallory)
    assert status == 201, job
    done = pool.wait_finished(job["id"], timeout=120)
    assert done["state"] == "succeeded", done
    logs = "\n".join(pool.logs_text(job["id"]))
    # The job was told why its second checkpoint was not kept, and went on.
    refusals = [l for l in logs.splitlines() if "checkpoint ckpt-2 was not uploaded" in l]
    assert len(refusals) == 1, logs
    assert "storage quota exceeded" in refusals[0] and "user mallory" in refusals[0], refusals[0]
    assert "done" in logs
    numbers = [c["bytes"] for c in pool.api("GET", f"/v1/jobs/{job['id']}/checkpoints")[1]["checkpoints"]]
    assert numbers == [200000, 100000], numbers
    # The refused checkpoint's bytes never reached the blob store.
    stored = sum(size for path, size in blob_files(pool).items() if "/chunks/" in path)
    assert stored < 1 << 20, stored
    # Deleting a finished job's checkpoints frees the quota.
    r = cli_as(pool, mallory, "checkpoint", "delete", str(job["id"]), "--all")
    assert r.returncode == 0 and "deleted 2 checkpoints" in r.stdout, r.stderr
    me = pool.api("GET", "/v1/quotas/users/mallory", token=mallory)[1]
    assert me["used_bytes"] == 0, me


# ---- failed logins


def login(pool, user, password, source):
    """POST /v1/login from the address `source` (any 127.x.y.z is local)."""
    ctx = ssl.create_default_context(cafile=pool.ca_file())
    conn = http.client.HTTPSConnection("127.0.0.1", pool.port, context=ctx, timeout=60,
                                       source_address=(source, 0))
    try:
        conn.request("POST", "/v1/login", json.dumps({"user": user, "password": password}),
                     {"Content-Type": "application/json"})
        r = conn.getresponse()
        return r.status, r.headers, json.loads(r.read() or b"null")
    finally:
        conn.close()


def test_failed_logins_are_limited_per_address_and_per_user(pool):
    pool.start_server(extra=("--login-failures-per-address", "1/h,4",
                             "--login-failures-per-user", "1/h,3"))
    add_user(pool, "alice", "alice's real password")
    add_user(pool, "bob", "bob's real password")
    # Guessing alice's password from one address after another...
    for source in ("127.0.0.2", "127.0.0.3", "127.0.0.4"):
        assert login(pool, "alice", "guess", source)[0] == 401
    # ...locks her name: even the right password waits, from anywhere.
    status, headers, body = login(pool, "alice", "alice's real password", "127.0.0.5")
    assert status == 429, body
    assert body["error"]["message"].startswith(
        "too many failed logins for user alice (at most 3 at once, then 1 an hour: "
        "--login-failures-per-user); try again in "), body
    assert int(headers.get("Retry-After")) > 3000
    # Bob is not locked out by it.
    assert login(pool, "bob", "bob's real password", "127.0.0.5")[0] == 200
    # One address spraying guesses over many names runs out of its own budget.
    for name in ("u1", "u2", "u3", "u4"):
        assert login(pool, name, "guess", "127.0.0.6")[0] == 401
    status, headers, body = login(pool, "bob", "bob's real password", "127.0.0.6")
    assert status == 429 and "--login-failures-per-address" in body["error"]["message"], body
    assert int(headers.get("Retry-After")) > 0
    # Right passwords cost nothing: bob logs in again and again elsewhere.
    for _ in range(6):
        assert login(pool, "bob", "bob's real password", "127.0.0.7")[0] == 200
    # Every checked guess is audited; the refused attempts (checked nothing) are not.
    entries = pool.api("GET", "/v1/audit?limit=500")[1]["entries"]
    failed = [e for e in entries if e["action"] == "login" and not e["ok"]]
    assert len(failed) == 7, failed
