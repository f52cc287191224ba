"""A job's output cannot flood its provider or the pool (issue 19, hole 1).

Hostile jobs print without end, each its own way: `yes`, one endless line
without a newline, binary junk. The pool runs with a small output limit.
Each job must keep running past the limit and end normally; its log holds
at most the limit, then the marker event exactly once; the agent's copy of
its output stays bounded while it runs; the server's data directory does
not grow with the flood; and another user is served meanwhile.
"""
import json
import os
import subprocess

from pool import GPUPOOL, wait_for

LIMIT = 1 << 20  # --max-job-output for these tests
LINE_OVERHEAD = 20  # model/job_output.h kLogLineOverheadBytes
EVENT_ALLOWANCE = 64 * 1024  # model/job_output.h kLogEventAllowanceBytes
MARKER = "output limit of 1 MiB reached: further output dropped"

# Each floods far past the limit (tens of MB), says so on stderr (dropped),
# then waits for the test to let it end, so that the test sees it running
# after its limit.
FLOODS = {
    "yes": "yes | head -c 40000000",
    "endless-line": "head -c 30000000 /dev/zero | tr '\\000' x",
    "binary-junk": "head -c 30000000 /dev/urandom",
}
WAIT_FOR_RELEASE = "; echo 'flood done' >&2; while [ ! -e release ]; do sleep 0.05; done; echo bye"


def dir_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except FileNotFoundError:
                pass
    return total


def all_log_lines(pool, job_id):
    lines, cursor = [], 0
    while True:
        status, page = pool.api("GET", f"/v1/jobs/{job_id}/logs?after={cursor}&limit=10000")
        assert status == 200, page
        lines += page["lines"]
        if not page["lines"]:
            return lines
        cursor = page["next_cursor"]


def attempts(job):
    """What became of each attempt of `job`, for an assertion's message."""
    return [(a["id"], a["state"], a.get("reason", "")) for a in job.get("attempt_list", [])]


def test_floods_are_cut_at_the_limit_and_the_job_goes_on(pool):
    pool.start_server(extra=("--max-job-output", "1MiB"))
    pool.start_agent("a", gpus="3xA100:80GiB")
    pool.wait_nodes_ready(1)
    add = subprocess.run([GPUPOOL, "admin", "user", "add", "bob"], capture_output=True, text=True,
                         env=pool.cli_env(), stdin=subprocess.DEVNULL, timeout=60)
    assert add.returncode == 0, add.stderr
    bob = pool.cli("token", "create", "--user", "bob", "--name", "bob", check=True).stdout.strip()
    server_before = dir_bytes(pool.server_dir)

    jobs = {kind: pool.submit({"name": kind, "run": flood + WAIT_FOR_RELEASE,
                               "resources": {"gpus": 1}})
            for kind, flood in FLOODS.items()}
    tasks = os.path.join(pool.agent_dir("a"), "tasks")
    for kind, job_id in jobs.items():
        # The marker arrives while the job still runs: it kept running past its limit.
        wait_for(lambda: any(l["text"] == MARKER for l in all_log_lines(pool, job_id)),
                 timeout=120, what=f"the {kind} job's output limit marker")
        # Still its first attempt: the flood ended nothing (an earlier
        # attempt's end is in the message).
        job = pool.job(job_id)
        assert job["state"] == "running" and job["current_attempt"] == f"{job_id}.1", (kind, attempts(job))
        # The shim has written everything it ever will but the end (the
        # marker came from its output.log), so the agent's copy is bounded now.
        task_dir = os.path.join(tasks, job["current_attempt"])
        assert os.path.isdir(os.path.join(task_dir, "work")), (kind, attempts(job))
        assert dir_bytes(task_dir) <= LIMIT + EVENT_ALLOWANCE + 16 * 1024, (kind, dir_bytes(task_dir))
        # Another user is served meanwhile.
        env = dict(pool.cli_env(), GPUPOOL_TOKEN=bob)
        other = subprocess.run([GPUPOOL, "jobs"], capture_output=True, text=True, env=env, timeout=60)
        assert other.returncode == 0, other.stderr

    for kind, job_id in jobs.items():
        job = pool.job(job_id)
        assert job["state"] == "running" and job["current_attempt"] == f"{job_id}.1", (kind, attempts(job))
        open(os.path.join(tasks, f"{job_id}.1", "work", "release"), "w").close()
    for kind, job_id in jobs.items():
        job = pool.wait_finished(job_id, timeout=120)
        assert job["state"] == "succeeded" and job["exit_code"] == 0, (kind, job)

        lines = all_log_lines(pool, job_id)
        markers = [l for l in lines if l["text"] == MARKER]
        assert len(markers) == 1 and markers[0]["stream"] == "event", (kind, markers)
        output = sum(len(l["text"].encode()) + LINE_OVERHEAD
                     for l in lines if l["stream"] in ("stdout", "stderr"))
        assert output <= LIMIT, (kind, output)
        assert output > LIMIT - 20 * 1024, (kind, output)  # the limit, not less, was kept
        # Nothing after the marker but the task's own events.
        after = lines[lines.index(markers[0]) + 1:]
        assert all(l["stream"] == "event" for l in after), (kind, after[:3])
        assert not any(l["text"] in ("bye", "flood done") for l in lines), kind
        # The job says so, once.
        assert [l["event"] for l in job["output"]["limit_reached"]] == [MARKER], (kind, job["output"])
        assert job["output"]["bytes"] <= LIMIT + EVENT_ALLOWANCE, (kind, job["output"])
        shown = pool.cli("job", str(job_id), check=True).stdout
        assert shown.count(MARKER) == 1, shown
        r = pool.cli("logs", str(job_id), check=True)
        assert r.stderr.count(f"[gpupool] {MARKER}") == 1, (kind, r.stderr[-2000:])

    # The whole flood (100 MB) left the server's data directory about as it
    # was: three logs of at most 1 MiB, compressed.
    grown = dir_bytes(pool.server_dir) - server_before
    assert grown <= 3 * LIMIT + 8 * 1024 * 1024, grown


def test_the_providers_policy_lowers_the_limit(pool, tmp_path):
    pool.start_server(extra=("--max-job-output", "1MiB"))
    config = tmp_path / "agent.yaml"
    config.write_text("policy:\n  max_job_output: 256KiB\n")
    pool.start_agent("a", extra=("--config", str(config)))
    pool.wait_nodes_ready(1)
    job_id = pool.submit({"run": "yes | head -c 10000000; echo tail >&2", "resources": {"gpus": 1}})
    job = pool.wait_finished(job_id, timeout=120)
    assert job["state"] == "succeeded", job
    lines = all_log_lines(pool, job_id)
    marker = "output limit of 256 KiB reached: further output dropped"
    assert [l["text"] for l in lines if l["stream"] == "event" and "output limit" in l["text"]] == [marker]
    output = sum(len(l["text"]) + LINE_OVERHEAD for l in lines if l["stream"] == "stdout")
    assert 256 * 1024 - 1024 < output <= 256 * 1024, output
    assert [l["event"] for l in job["output"]["limit_reached"]] == [marker]


def test_a_policy_cannot_raise_the_limit(pool, tmp_path):
    pool.start_server(extra=("--max-job-output", "256KiB"))
    config = tmp_path / "agent.yaml"
    config.write_text("policy:\n  max_job_output: 100MiB\n")
    pool.start_agent("a", extra=("--config", str(config)))
    pool.wait_nodes_ready(1)
    job_id = pool.submit({"run": "yes | head -c 10000000", "resources": {"gpus": 1}})
    job = pool.wait_finished(job_id, timeout=120)
    assert job["state"] == "succeeded", job
    assert [l["event"] for l in job["output"]["limit_reached"]] == [
        "output limit of 256 KiB reached: further output dropped"]
    assert job["output"]["bytes"] <= 256 * 1024 + EVENT_ALLOWANCE


def test_output_counts_toward_the_disk_limit(pool):
    pool.start_server(extra=("--max-job-output", "8MiB"))
    pool.start_agent("a")
    pool.wait_nodes_ready(1)
    # Its work directory stays empty: only its output can pass 2 MiB.
    job_id = pool.submit({"run": "yes | head -c 100000000; sleep 30",
                          "resources": {"gpus": 1, "disk": "2MiB"}})
    job = pool.wait_finished(job_id, timeout=120)
    assert job["state"] == "failed", job
    assert job["reason"] == "exceeded its disk limit of 2 MiB (work directory)", job["reason"]
    events = [l["text"] for l in all_log_lines(pool, job_id) if l["stream"] == "event"]
    assert any("of output" in e and "exceeded its disk limit" in e for e in events), events


def test_log_retention_removes_old_logs_and_says_so(pool):
    # A retention of a second: every ended job's logs go at the next gc.
    pool.start_server(extra=("--log-retention", "1s"))
    pool.start_agent("a")
    pool.wait_nodes_ready(1)
    job_id = pool.submit({"run": "echo hello; echo world", "resources": {"gpus": 1}})
    pool.wait_finished(job_id)
    assert [l["text"] for l in all_log_lines(pool, job_id)] == ["hello", "world"]
    running = pool.submit({"run": "echo still here; sleep 600", "resources": {"gpus": 1}})
    wait_for(lambda: "still here" in pool.logs_text(running), timeout=60, what="the running job's line")

    def collected():
        pool.cli("admin", "gc", check=True)
        return pool.api("GET", f"/v1/jobs/{job_id}/logs?after=0")[0] == 410
    wait_for(collected, timeout=60, interval=0.5, what="the ended job's logs to pass the retention")

    status, body = pool.api("GET", f"/v1/jobs/{job_id}/logs?after=0")
    assert status == 410, body
    assert f"the output of job {job_id} was removed on" in body["error"]["message"]
    assert "--log-retention" in body["error"]["message"]
    r = pool.cli("logs", str(job_id))
    assert r.returncode != 0 and "was removed on" in r.stderr, r.stderr
    shown = pool.cli("job", str(job_id), check=True).stdout
    assert "removed" in shown and "--log-retention" in shown, shown
    # The running job's logs are kept, whatever their age.
    assert "still here" in pool.logs_text(running)
    again = json.loads(pool.cli("-o", "json", "admin", "gc", check=True).stdout)["logs"]
    assert again["jobs_removed"] == 0 and again["jobs_kept"] == 1, again
