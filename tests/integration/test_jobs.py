"""End-to-end job tests: a real server and real agents on loopback."""
import os
import subprocess

from pool import wait_for


def start(pool, agents=("a",), gpus="1xA100:80GiB"):
    pool.start_server()
    for name in agents:
        pool.start_agent(name, gpus=gpus)
    pool.wait_nodes_ready(len(agents))


def test_success_with_environment_and_logs(pool):
    start(pool, gpus="2xA100:80GiB")
    job_id = pool.submit({"name": "env", "run": "echo job=$GPUPOOL_JOB_ID attempt=$GPUPOOL_ATTEMPT_ID; "
                                             "echo cuda=$CUDA_VISIBLE_DEVICES gpus=$GPUPOOL_GPUS; "
                                             "echo oops >&2; echo X=$X; pwd",
                          "env": {"X": "42"}, "resources": {"gpus": 2}})
    job = pool.wait_finished(job_id)
    assert job["state"] == "succeeded" and job["exit_code"] == 0
    attempt = job["attempt_list"][0]
    uuids = ",".join(attempt["gpus"])
    assert len(attempt["gpus"]) == 2
    lines = pool.logs_text(job_id)
    assert lines[0] == f"job={job_id} attempt={job_id}.1"
    assert lines[1] == f"cuda={uuids} gpus={uuids}"
    assert "oops" in lines and "X=42" in lines
    # stdout and stderr are separate pipes: lines keep their order within a stream.
    stdout = [l for l in lines if l != "oops"]
    assert stdout[-1] == "/work"  # its own fresh work directory, inside the sandbox


def test_failure_exit_code_through_cli(pool):
    start(pool)
    r = pool.cli("submit", "--wait", "--", "sh", "-c", "echo failing; exit 3")
    assert r.returncode == 3, r.stderr
    job_id = int(r.stderr.split("submitted job ")[1].split()[0])
    job = pool.job(job_id)
    assert job["state"] == "failed" and job["exit_code"] == 3
    assert job["reason"] == "exited with code 3"
    assert pool.cli("logs", str(job_id)).stdout == "failing\n"


def test_max_restarts_reruns_a_failed_job_then_fails_it(pool):
    start(pool)
    r = pool.cli("submit", "--wait", "--max-restarts", "2", "--",
                 "sh", "-c", "echo try $GPUPOOL_ATTEMPT_ID; exit 3")
    assert r.returncode == 3, r.stderr
    job_id = int(r.stderr.split("submitted job ")[1].split()[0])
    job = pool.job(job_id)
    assert job["state"] == "failed" and job["exit_code"] == 3
    assert job["restarts"] == 2
    assert [a["state"] for a in job["attempt_list"]] == ["failed"] * 3
    out = pool.cli("logs", str(job_id)).stdout
    assert out == f"try {job_id}.1\ntry {job_id}.2\ntry {job_id}.3\n", out


def test_command_not_found_fails_clearly(pool):
    start(pool)
    job_id = pool.submit({"command": ["/no/such/program"]})
    job = pool.wait_finished(job_id)
    assert job["state"] == "failed"
    assert "cannot start /no/such/program" in job["reason"]


def test_cancel_kills_the_whole_process_group(pool, tmp_path):
    start(pool)
    job_id = pool.submit({"run": "sleep 301 & echo started; wait"})
    pool.wait_state(job_id, "running")

    def sleeper():
        r = subprocess.run(["pgrep", "-f", "^sleep 301$"], capture_output=True, text=True)
        return r.stdout.split()[0] if r.returncode == 0 else None
    child = int(wait_for(sleeper, what="the job's background child"))
    r = pool.cli("cancel", str(job_id), check=True)
    assert "cancelled" in r.stdout
    assert pool.job(job_id)["state"] == "cancelled"

    def gone():
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return True
        return open(f"/proc/{child}/stat").read().split()[2] == "Z"
    wait_for(gone, timeout=60, what="the job's background child to be killed")
    attempt = wait_for(lambda: (lambda a: a if a["state"] == "cancelled" else None)(
        pool.job(job_id)["attempt_list"][0]), what="attempt cancelled")
    assert attempt["state"] == "cancelled"


def test_max_runtime_is_enforced(pool):
    start(pool)
    # Unbounded, it would run 10 minutes: ending within the deadline is
    # the limit at work.
    job_id = pool.submit({"run": "echo begin; sleep 600", "max_runtime": "1s"})
    job = pool.wait_finished(job_id, timeout=120)
    assert job["state"] == "failed"
    assert "exceeded max_runtime of 1s" in job["reason"]
    assert pool.logs_text(job_id) == ["begin"]


def test_logs_in_order_with_follow(pool):
    start(pool)
    job_id = pool.submit({"run": "for i in $(seq 1 300); do echo line $i; "
                                 "if [ $((i % 50)) = 0 ]; then sleep 0.2; fi; done"})
    r = pool.cli("logs", "-f", str(job_id), timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [f"line {i}" for i in range(1, 301)]


def test_two_agents_share_work(pool):
    start(pool, agents=("a", "b"))
    ids = [pool.submit({"run": "sleep 0.5", "resources": {"gpus": 1}}) for _ in range(4)]
    nodes = set()
    for job_id in ids:
        job = pool.wait_finished(job_id, timeout=30)
        assert job["state"] == "succeeded"
        nodes.add(job["attempt_list"][0]["node_id"])
    assert len(nodes) == 2


def test_bad_specs_are_rejected_and_nothing_is_stored(pool, tmp_path):
    start(pool)
    bad = [
        ({"run": "x", "resources": {"gpus": -1}}, "resources.gpus"),
        ({"run": "x", "resources": {"gpu_memory": "24XB"}}, "resources.gpu_memory"),
        ({"run": "x", "bogus": 1}, "bogus"),
        ({"run": "x", "max_runtime": "soon"}, "max_runtime"),
        ({"name": "only-a-name"}, "run"),
        ({"command": "not-a-list"}, "command"),
    ]
    for spec, field in bad:
        status, body = pool.api("POST", "/v1/jobs", spec)
        assert status == 400, (spec, body)
        assert field in body["error"]["message"], (spec, body)
    status, body = pool.api("POST", "/v1/jobs", None)
    assert status == 400
    spec_file = tmp_path / "bad.yaml"
    spec_file.write_text("run: echo hi\nresources:\n  gpus: lots\n")
    r = pool.cli("submit", str(spec_file))
    assert r.returncode == 2
    assert "resources.gpus" in r.stderr
    r = pool.cli("submit", "--gpu-memory", "many", "--", "true")
    assert r.returncode == 2 and "gpu_memory" in r.stderr
    assert pool.api("GET", "/v1/jobs")[1]["jobs"] == []


def test_auth_is_required(pool):
    start(pool)
    assert pool.api("GET", "/v1/jobs", token=None)[0] == 401
    assert pool.api("GET", "/v1/jobs", token="wrong")[0] == 401
    # The join token connects agents but cannot use the API.
    assert pool.api("GET", "/v1/jobs", token=pool.join_token())[0] == 403
    assert pool.api("GET", "/healthz", token=None)[0] == 200
    r = pool.cli("admin", "join-token", check=True)
    assert r.stdout.strip() == pool.join_token()


def test_unsatisfiable_job_says_why(pool):
    start(pool)
    job_id = pool.submit({"run": "true", "resources": {"gpus": 1, "gpu_memory": "200GiB"}})
    job = wait_for(lambda: (lambda j: j if "no node" in j["reason"] else None)(pool.job(job_id)),
                   what="a reason")
    assert job["state"] == "pending"
    assert job["reason"] == "no node has a GPU with 200 GiB"
    r = pool.cli("jobs", check=True)
    assert "no node has a GPU with 200 GiB" in r.stdout


def test_nodes_show_simulated_gpus(pool):
    start(pool, gpus="2xA100:80GiB,1xT4:16GiB")
    node = pool.nodes()[0]
    assert [g["name"] for g in node["gpus"]] == ["A100", "A100", "T4"]
    assert all(g["simulated"] for g in node["gpus"])
    r = pool.cli("nodes", check=True)
    assert "A100 (simulated)" in r.stdout and "T4 (simulated)" in r.stdout


def test_client_flags_before_or_after_the_command(pool):
    start(pool)
    r = pool.cli("-o", "json", "submit", "--wait", "--", "true")
    assert r.returncode == 0, r.stderr
    assert '"state": "succeeded"' in r.stdout
    r = pool.cli("jobs", "-o", "json")
    assert r.returncode == 0, r.stderr
    assert '"state": "succeeded"' in r.stdout
    r = pool.cli("--server", "http://127.0.0.1:1", "jobs")
    assert r.returncode == 1 and "cannot connect" in r.stderr
