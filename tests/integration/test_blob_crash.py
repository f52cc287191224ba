"""A server killed with kill -9 in the middle of an upload never keeps a
manifest that names a missing or corrupt chunk, and the upload, tried again,
sends only what did not arrive."""
import json
import os
import re
import subprocess

from pool import GPUPOOL, TIME_SCALE, wait_for

SUMMARY = re.compile(r"\((\d+) new chunks of (\d+)\)")


CHUNK_NAME = re.compile(r"[0-9a-f]{64}")


def chunk_files(server_dir):
    """Stored chunks (not the temporary files of writes under way)."""
    root = os.path.join(server_dir, "blobs", "chunks")
    return sum(1 for _, _, files in os.walk(root) for f in files if CHUNK_NAME.fullmatch(f))


def check_manifests(pool):
    """Every stored manifest's chunks are stored and intact: the server
    verifies each chunk it sends (a corrupt one is a 500)."""
    manifest_dir = os.path.join(pool.server_dir, "blobs", "manifests")
    names = os.listdir(manifest_dir) if os.path.isdir(manifest_dir) else []
    for name in names:
        with open(os.path.join(manifest_dir, name)) as f:
            manifest = json.load(f)
        ids = [c[0] for e in manifest["entries"] for c in e.get("chunks", [])]
        for i in range(0, len(ids), 1000):
            status, body = fetch(pool, ids[i:i + 1000])
            assert status == 200, (name, status, body[:300])
    return len(names)


def fetch(pool, ids):
    import urllib.error
    import urllib.request
    req = urllib.request.Request(pool.url + "/v1/blobs/chunks/fetch", method="POST",
                                 data=json.dumps({"chunks": ids}).encode())
    req.add_header("Authorization", "Bearer " + pool.token)
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=60, context=pool.ssl) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_a_server_killed_during_an_upload_keeps_no_broken_manifest(pool, tmp_path):
    pool.start_server()
    tree = tmp_path / "inputs"
    tree.mkdir()
    (tree / "weights.bin").write_bytes(os.urandom(192 << 20))
    (tree / "small.txt").write_text("hello\n")
    env = pool.cli_env()
    upload = subprocess.Popen([GPUPOOL, "submit", "--workdir", str(tree), "--", "true"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: chunk_files(pool.server_dir) > 500, timeout=60, interval=0.01,
             what="the upload under way")
    pool.kill_server()
    _, err = upload.communicate(timeout=120 * TIME_SCALE)
    assert upload.returncode != 0, "the upload cannot have finished: the server was killed"
    arrived = chunk_files(pool.server_dir)

    pool.start_server()
    check_manifests(pool)
    status, jobs = pool.api("GET", "/v1/jobs")
    assert status == 200 and jobs["jobs"] == [], jobs  # nothing was submitted

    r = pool.cli("submit", "--workdir", str(tree), "--", "true")
    assert r.returncode == 0, r.stderr
    new, total = map(int, SUMMARY.search(r.stderr).groups())
    assert 0 < new < total, r.stderr  # what had arrived is not sent again
    assert new <= total - arrived, (new, total, arrived)
    assert check_manifests(pool) == 1
    job = pool.job(int(r.stdout.strip().splitlines()[-1]))
    manifest = os.listdir(os.path.join(pool.server_dir, "blobs", "manifests"))[0]
    assert job["spec"]["inputs"] + ".json" == manifest, (job["spec"], manifest)
