"""Trees a hostile party changes while the pool reads or writes them (issue
19, hole 3), end to end through a real server, agent and sandbox:

- a job that keeps swapping directories of its committed checkpoints for
  symlinks to a host directory of secrets while the agent (root) uploads
  them: no host byte may ever reach the blob store or any checkpoint;
- a user whose inputs aim the job's checkpoint directory, through a chain of
  symlinks that each look inside, at an empty host directory, hoping the
  restore of the job's next attempt writes there as root;
- a workdir whose directory is swapped for a symlink to elsewhere while the
  CLI uploads it.
"""
import hashlib
import json
import os
import pathlib
import secrets
import threading
import time

from pool import wait_for

HERE = pathlib.Path(__file__).resolve().parent


def host_secret(tmp_path):
    """A directory only root can read (the job's account cannot even list
    it), holding secret.txt with a marker the test looks for everywhere."""
    d = tmp_path / "host-secret"
    d.mkdir()
    marker = "HOST-SECRET-" + secrets.token_hex(16)
    (d / "secret.txt").write_text(marker)
    (d / "big.bin").write_text(marker)
    os.chmod(d / "secret.txt", 0o600)
    os.chmod(d, 0o700)
    return d, marker


def chunk_id(data):
    """A small file is one chunk, whose id is the SHA-256 of its bytes."""
    return hashlib.sha256(data).hexdigest()


def stored_chunk_paths(pool):
    return {p.name for p in (pool.dir / "server").rglob("*") if p.is_file()}


def manifest(pool, manifest_id):
    status, body = pool.api("GET", f"/v1/blobs/manifests/{manifest_id}")  # JSON text
    assert status == 200, body
    return body


def files_with_marker(root, marker):
    found = []
    for p in pathlib.Path(root).rglob("*"):
        if p.is_symlink() or not p.is_file():
            continue
        if marker.encode() in p.read_bytes():
            found.append(str(p))
    return found


SWAPPER_JOB = r'''
import os, shutil, sys, time
ck = os.environ["GPUPOOL_CHECKPOINT_DIR"]
target, seconds = sys.argv[1], float(sys.argv[2])
pid = os.fork()
if pid == 0:
    # Flip sub/ of every committed checkpoint to a symlink to the host's
    # secrets and back, as fast as it can, while the agent uploads them.
    flips, end = 0, time.time() + seconds + 3
    while time.time() < end:
        for name in os.listdir(ck):
            if not name.startswith("ckpt-"):
                continue
            d = os.path.join(ck, name)
            try:
                os.rename(d + "/sub", d + "/sub.real")
                os.symlink(target, d + "/sub")
                time.sleep(0.002)
                os.unlink(d + "/sub")
                os.rename(d + "/sub.real", d + "/sub")
                flips += 1
            except OSError:
                pass
        time.sleep(0.001)
    print("FLIPS", flips, flush=True)
    os._exit(0)
big = os.urandom(8 << 20)
n, start = 0, time.time()
while time.time() - start < seconds:
    n += 1
    stage = os.path.join(ck, ".staging-%d" % n)
    os.makedirs(stage + "/sub")
    with open(stage + "/sub/big.bin", "wb") as f:
        f.write(big)
    with open(stage + "/sub/secret.txt", "w") as f:
        f.write("decoy %d\n" % n)
    os.rename(stage, os.path.join(ck, "ckpt-%d" % n))
    old = os.path.join(ck, "ckpt-%d" % (n - 3))
    if os.path.isdir(old) and not os.path.islink(old):
        shutil.rmtree(old, ignore_errors=True)
    time.sleep(0.4)
os.waitpid(pid, 0)
print("COMMITS", n, flush=True)
'''


def test_a_job_swapping_its_checkpoints_for_links_never_ships_a_host_byte(pool, tmp_path):
    secret_dir, marker = host_secret(tmp_path)
    pool.start_server(extra=["--checkpoint-keep", "1000"])
    pool.start_agent("a")
    pool.wait_nodes_ready(1)
    workdir = tmp_path / "job"
    workdir.mkdir()
    (workdir / "swap.py").write_text(SWAPPER_JOB)
    job_id = pool.submit_cli({"name": "swapper", "workdir": str(workdir), "checkpoint": {},
                              "run": f"exec /usr/bin/python3 swap.py {secret_dir} 24"})
    job = pool.wait_finished(job_id, timeout=180)
    assert job["state"] == "succeeded", job
    lines = pool.logs_text(job_id)
    commits = int(next(l.split()[1] for l in lines if l.startswith("COMMITS")))
    flips = int(next(l.split()[1] for l in lines if l.startswith("FLIPS")))
    assert commits >= 20 and flips > 100, lines[-20:]

    # Many commits were uploaded meanwhile (the attack had its chances).
    status, body = pool.api("GET", f"/v1/jobs/{job_id}/checkpoints")
    assert status == 200, body
    stored = body["checkpoints"]
    assert len(stored) >= 5, (len(stored), [l for l in lines if "checkpoint" in l][-20:])
    left_out = sum("left out" in l for l in lines)
    refused = sum("was not uploaded" in l for l in lines)
    print(f"{commits} commits, {flips} flips: {len(stored)} checkpoints stored, {left_out} of them "
          f"with entries left out, {refused} uploads refused")

    # Not one chunk of the host's secret reached the server, whether or not
    # its manifest was accepted...
    assert chunk_id(marker.encode()) not in stored_chunk_paths(pool)
    # ...and every stored checkpoint, downloaded, is the job's own tree.
    for c in stored:
        out = tmp_path / f"download-{c['number']}"
        pool.cli("checkpoint", "download", str(job_id), "--id", str(c["number"]), "--to", str(out),
                 check=True)
        assert files_with_marker(out, marker) == [], c
        for secret in out.rglob("secret.txt"):
            assert secret.read_text().startswith("decoy "), (c, secret)


def symlink_chain_to(target, work_depth, name=".checkpoints"):
    """Manifest entries that make `name` a symlink to the absolute
    directory `target`, each link of the chain "inside the tree" on its own
    (as the manifest rules check it), the chain as a whole climbing out of a
    work directory `work_depth` levels below /."""
    entries = [{"path": "d", "type": "dir", "mode": 0o755},
               {"path": "d/l", "type": "symlink", "target": ".."},   # -> work/
               {"path": "u1", "type": "symlink", "target": "d/l/.."}]  # -> work/..
    for i in range(2, work_depth + 2):
        entries.append({"path": f"u{i}", "type": "symlink", "target": f"u{i - 1}/.."})
    entries.append({"path": name, "type": "symlink",
                    "target": f"u{work_depth + 1}/" + str(target).lstrip("/")})
    return {"version": 1, "entries": entries}


def put_manifest(pool, m):
    """Stores manifest `m` as a hostile user would, through the API."""
    mid = hashlib.sha256(json.dumps(m).encode()).hexdigest()  # the text pool.api sends
    status, body = pool.api("PUT", f"/v1/blobs/manifests/{mid}", m)
    assert status in (200, 201), body
    return mid


def job_pids(marker):
    """Processes whose command line holds `marker` (the job's own)."""
    pids = []
    for d in pathlib.Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if marker.encode() in (d / "cmdline").read_bytes():
                pids.append(int(d.name))
        except OSError:
            pass
    return pids


def test_inputs_cannot_aim_the_checkpoint_restore_at_a_host_directory(pool, tmp_path):
    victim = tmp_path / "victim"  # an empty host directory, root's
    victim.mkdir(mode=0o700)
    pool.start_server()
    pool.start_agent("a")
    pool.wait_nodes_ready(1)
    work_depth = len(pathlib.Path(pool.agent_dir("a"), "tasks", "1.1", "work").parts) - 1
    inputs = put_manifest(pool, symlink_chain_to(victim, work_depth))
    marker = "restore-target-" + secrets.token_hex(6)
    # Attempt 1 makes a real checkpoint directory, commits, and waits to be
    # killed; attempt 2 (restored) ends at once.
    run = ('if [ -n "$GPUPOOL_RESTORED" ]; then echo RESTORED; exit 0; fi; '
           'rm -f .checkpoints; mkdir -p .checkpoints/.s; echo planted > .checkpoints/.s/planted; '
           f'mv .checkpoints/.s .checkpoints/ckpt-1; exec sleep 300 # {marker}')
    job_id = pool.submit({"name": "aim", "inputs": inputs, "checkpoint": {}, "max_restarts": 1,
                          "run": run})

    def attempt_one_running_or_refused():
        j = pool.job(job_id)
        if j["state"] == "failed":
            return j
        ckpts = pool.api("GET", f"/v1/jobs/{job_id}/checkpoints")[1]["checkpoints"]
        return j if j["state"] == "running" and ckpts else None
    job = wait_for(attempt_one_running_or_refused, timeout=60, what="checkpoint 1 or a refusal")
    if job["state"] == "running":
        # Fail attempt 1, so that attempt 2 restores checkpoint 1.
        for pid in wait_for(lambda: job_pids(marker), what="the job's process"):
            os.kill(pid, 9)
        job = pool.wait_finished(job_id, timeout=90)
    assert os.listdir(victim) == [], "the restore wrote into a host directory"
    # The agent refused the inputs, naming why.
    assert job["state"] == "failed", job
    assert ".checkpoints is reserved for its checkpoints" in job["reason"], job["reason"]


def test_a_workdir_swapped_while_the_cli_uploads_it_never_uploads_elsewhere(pool, tmp_path):
    secret_dir, marker = host_secret(tmp_path)
    pool.start_server()
    wd = tmp_path / "wd"
    (wd / "sub").mkdir(parents=True)
    (wd / "sub" / "big.bin").write_bytes(os.urandom(8 << 20))
    (wd / "sub" / "secret.txt").write_text("decoy")
    stop = threading.Event()

    def swap():
        while not stop.is_set():
            try:
                os.rename(wd / "sub", wd / "sub.real")
                os.symlink(secret_dir, wd / "sub")
                time.sleep(0.003)
                os.unlink(wd / "sub")
                os.rename(wd / "sub.real", wd / "sub")
            except OSError:
                pass
            time.sleep(0.003)
    swapper = threading.Thread(target=swap)
    swapper.start()
    uploaded, errors = [], []
    try:
        # 25 s of races; on a slow machine longer, until 3 uploads got through.
        start = time.monotonic()
        while len(uploaded) < 25 and (time.monotonic() < start + 25 or
                                      (len(uploaded) < 3 and time.monotonic() < start + 180)):
            r = pool.cli("submit", "--quiet", "--workdir", str(wd), "--", "true")
            if r.returncode == 0:
                uploaded.append(pool.job(int(r.stdout.strip().splitlines()[-1]))["spec"]["inputs"])
            else:
                errors.append(r.stderr)
    finally:
        stop.set()
        swapper.join()
    secret_chunk = chunk_id(marker.encode())
    leaked = [mid for mid in uploaded
              if secret_chunk in {c[0] for e in manifest(pool, mid)["entries"]
                                  if e["type"] == "file" for c in e.get("chunks", [])}]
    assert leaked == [], f"{len(leaked)} of {len(uploaded)} uploads hold the host's secret"
    assert secret_chunk not in stored_chunk_paths(pool)
    assert len(uploaded) >= 3, (uploaded, errors)
    # The only refusal: the walk saw sub/ as the symlink itself, and said so.
    for e in errors:
        assert "a link to" in e, e


def test_a_session_cannot_point_its_jupyter_socket_at_a_host_socket(pool, tmp_path):
    """The agent connects to a Jupyter session's socket in the job's work
    directory, which the job owns: a job that makes it a symlink to a socket
    of the host's (a container engine's, say) must not be connected to it
    by the root agent."""
    import socket
    import urllib.parse
    import http.client
    hidden = tmp_path / "host-service"
    hidden.mkdir(mode=0o700)
    path = str(hidden / "svc.sock")
    marker = "HOST-SERVICE-" + secrets.token_hex(8)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    os.chmod(path, 0o600)
    server.listen(8)
    server.settimeout(0.2)
    accepted = []
    stop = threading.Event()

    def serve():
        body = marker.encode()
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            accepted.append(1)
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
                         % (len(body), body))
            conn.close()
    t = threading.Thread(target=serve)
    t.start()
    try:
        pool.start_server()
        pool.start_agent("a")
        pool.wait_nodes_ready(1)
        run = (f'ln -s {path} "$GPUPOOL_JUPYTER_SOCKET" && echo linked; '
               f'ls -l "$GPUPOOL_JUPYTER_SOCKET"; exec sleep 300')
        job_id = pool.submit({"name": "jupyter-link", "session": {"kind": "jupyter"}, "run": run})
        pool.wait_state(job_id, "running")
        wait_for(lambda: "linked" in pool.logs_text(job_id), what="the job's symlink")
        u = urllib.parse.urlsplit(pool.sessions_url)
        conn = http.client.HTTPSConnection(u.hostname, u.port, context=pool.ssl, timeout=60)
        conn.request("GET", f"/v1/sessions/{job_id}/proxy/api/status",
                     headers={"Authorization": "Bearer " + pool.token})
        r = conn.getresponse()
        body = r.read().decode(errors="replace")
        conn.close()
        assert marker not in body, (r.status, body)
        assert accepted == [], "the agent connected to the host's socket"
        assert r.status >= 400, (r.status, body)
        pool.cli("cancel", str(job_id), check=True)
    finally:
        stop.set()
        t.join()
        server.close()


def test_inputs_cannot_have_the_shim_give_a_host_directory_to_a_session(pool, tmp_path):
    """A Jupyter session's socket directory is made (and given to the task)
    in the work directory after the inputs are restored: inputs that put a
    symlink there must not make the root shim chmod and chown its target."""
    victim = tmp_path / "victim"
    victim.mkdir()
    os.chmod(victim, 0o755)
    pool.start_server()
    pool.start_agent("a")
    pool.wait_nodes_ready(1)
    work_depth = len(pathlib.Path(pool.agent_dir("a"), "tasks", "1.1", "work").parts) - 1
    inputs = put_manifest(pool, symlink_chain_to(victim, work_depth, ".gpupool-jupyter"))
    job_id = pool.submit({"name": "give", "inputs": inputs, "session": {"kind": "jupyter"},
                          "run": "sleep 300"})
    # Running means the shim made the directory; failed, that it refused.
    job = pool.wait_state(job_id, {"running", "failed"}, timeout=60)
    st = os.stat(victim)
    assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (0, 0, 0o755), "the shim changed it"
    assert job["state"] == "failed", job
    assert ".gpupool-jupyter is a symlink or not a directory" in job["reason"], job["reason"]
