"""A hostile enrolled agent against real binaries (issue 19, hole 7): node a
uses its own, genuine node credential to read the blobs of a job running on
node b and to post a checkpoint for b's attempt. Each request is refused and
shows in `gpupool admin audit`; b's jobs still run and finish. (The channel
attacks, reports about others' attempts, impossible GPU claims and floods,
are in src/server/agent_guard_test.cpp, driven message by message.)"""
import json
import os
import urllib.error
import urllib.request

from pool import wait_for


def node_token(pool, name):
    with open(os.path.join(pool.agent_dir(name), "credentials", "node.json")) as f:
        return json.load(f)["token"]


def as_agent(pool, token, method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(pool.url + path, data=data, method=method)
    req.add_header("Authorization", "Bearer " + token)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=60, context=pool.ssl) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_an_agent_reads_and_posts_only_for_its_own_node(pool, tmp_path):
    pool.start_server()
    pool.start_agent("a", extra=["--label", "site=a"])
    pool.start_agent("b", extra=["--label", "site=b"])
    pool.wait_nodes_ready(2)
    project = tmp_path / "project"
    project.mkdir()
    (project / "secret.txt").write_text("alice's secret\n")
    spec = tmp_path / "job.yaml"
    spec.write_text("name: private\nworkdir: project\nrun: cat secret.txt; sleep 300\n"
                    "resources: {node_labels: {site: b}}\n")
    r = pool.cli("submit", str(spec))
    assert r.returncode == 0, r.stderr
    job_id = int(r.stdout.strip().splitlines()[-1])
    job = pool.wait_state(job_id, "running", timeout=60)
    b = next(n for n in pool.nodes() if n["name"] == "b")
    assert job["attempt_list"][0]["node_id"] == b["id"]
    inputs = job["spec"]["inputs"]
    a_token, b_token = node_token(pool, "a"), node_token(pool, "b")

    # b reads its job's inputs (its shim did, to start it); a may not.
    status, body = as_agent(pool, b_token, "GET", f"/v1/blobs/manifests/{inputs}")
    assert status == 200, body
    chunks = sorted({c[0] for e in json.loads(body)["entries"] for c in e.get("chunks", [])})
    assert chunks
    status, body = as_agent(pool, a_token, "GET", f"/v1/blobs/manifests/{inputs}")
    assert status == 403, body
    assert b"belongs to no job running on this node" in body
    status, body = as_agent(pool, a_token, "POST", "/v1/blobs/chunks/fetch", {"chunks": chunks})
    assert status == 403, body
    assert b"alice's secret" not in body
    # a posts a checkpoint (any stored manifest) for b's attempt.
    status, body = as_agent(pool, a_token, "POST", f"/v1/jobs/{job_id}/checkpoints",
                            {"attempt": f"{job_id}.1", "manifest": inputs})
    assert status == 403, body
    assert b"does not run on node a" in body
    status, listed = pool.api("GET", f"/v1/jobs/{job_id}/checkpoints")
    assert status == 200 and listed["checkpoints"] == [], listed

    audit = pool.cli("admin", "audit", "--limit", "100", check=True).stdout
    refusals = [l for l in audit.splitlines() if "node:a" in l and "refused" in l]
    assert sum("agent.blob_read" in l for l in refusals) == 2, audit
    assert sum("agent.checkpoint" in l for l in refusals) == 1, audit
    assert not any("node:b" in l and "refused" in l for l in audit.splitlines()), audit

    # The pool goes on serving b and its users.
    other = pool.submit({"run": "echo fine", "resources": {"node_labels": {"site": "b"}}})
    assert pool.wait_finished(other, timeout=60)["state"] == "succeeded"
    assert pool.logs_text(other) == ["fine"]
    wait_for(lambda: "alice's secret" in pool.logs_text(job_id), what="job 1's output")
    assert pool.cli("cancel", str(job_id)).returncode == 0
    assert pool.wait_finished(job_id)["state"] == "cancelled"
