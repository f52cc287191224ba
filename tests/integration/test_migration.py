"""Jobs survive their providers: a checkpointing job that is reclaimed, whose
agent is killed, or whose migration is interrupted by a server restart
finishes on another agent with exactly the result of an uninterrupted run.

The job is examples/checkpointing/counter.py: it advances a counter and a
running SHA-256, checkpointing its state through the Python helper, so any
lost or repeated step would change its final hash."""
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import pytest

from pool import wait_for
from test_provider import agent_cmd, attempts, node_id, start_with

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "../.."))
EXAMPLE_DIR = os.path.join(REPO, "examples/checkpointing")
COUNTER = os.path.join(EXAMPLE_DIR, "counter.py")
RESULT = re.compile(r"RESULT steps=(\d+) hash=([0-9a-f]{64}) resumed_from=(\d+)")


def reference(steps):
    """The counter's result when nothing interrupts it."""
    with tempfile.TemporaryDirectory() as d:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPOOL_")}
        env["GPUPOOL_CHECKPOINT_DIR"] = d
        out = subprocess.run([sys.executable, COUNTER, "--steps", str(steps), "--sleep", "0"],
                             env=env, capture_output=True, text=True, check=True).stdout
    m = RESULT.search(out)
    assert m, out
    return m.group(1), m.group(2)


def submit_counter(pool, steps, sleep=0.1, every=0, grace="20s", interval=None, pad=0,
                   standby=False, first_sleep=None):
    """Submits the counter through the CLI, its directory uploaded as the
    job's inputs; it runs in the default executor (the sandbox).
    `first_sleep`: the first attempt's sleep per step instead, so that a slow
    machine does not see it end before the test moves it (the result does
    not depend on the sleep)."""
    if first_sleep is not None:
        sleep = (f'$( [ "$GPUPOOL_ATTEMPT_ID" = "$GPUPOOL_JOB_ID.1" ] && echo {first_sleep} '
                 f"|| echo {sleep} )")
    args = f"--steps {steps} --sleep {sleep}" + (f" --checkpoint-every {every}" if every else "")
    if pad:
        args += f" --pad-bytes {pad}"
    checkpoint = {"grace": grace}
    if interval:
        checkpoint["interval"] = interval
    if standby:
        checkpoint["standby"] = True
    spec = {"name": "counter", "workdir": EXAMPLE_DIR, "resources": {"gpus": 1},
            "run": f"exec python3 counter.py {args}", "checkpoint": checkpoint}
    path = pool.dir / f"counter-{time.monotonic_ns()}.json"
    path.write_text(json.dumps(spec))
    r = pool.cli("submit", "--quiet", str(path), check=True)
    return int(r.stdout.strip().splitlines()[-1])


def result_of(pool, job_id):
    lines = [l for l in pool.logs_text(job_id) if l.startswith("RESULT")]
    assert len(lines) == 1, lines  # exactly one run reached the end
    m = RESULT.match(lines[0])
    assert m, lines
    return m.group(1), m.group(2), int(m.group(3))


def checkpoints(pool, job_id):
    status, body = pool.api("GET", f"/v1/jobs/{job_id}/checkpoints")
    assert status == 200, body
    return body["checkpoints"]


def wait_checkpoint(pool, job_id, count=1, timeout=30):
    return wait_for(lambda: len(checkpoints(pool, job_id)) >= count and checkpoints(pool, job_id),
                    timeout=timeout, what=f"{count} checkpoints of job {job_id}")


def start_two(pool, tmp_path, **kw):
    pool.start_server(**kw)
    start_with(pool, tmp_path, "a")


def finishes_on_b(pool, tmp_path, job_id, steps):
    start_with(pool, tmp_path, "b")
    job = pool.wait_finished(job_id, timeout=90)
    assert job["state"] == "succeeded", job
    last = job["attempt_list"][-1]
    assert last["node_id"] == node_id(pool, "b"), job
    got_steps, got_hash, resumed_from = result_of(pool, job_id)
    assert (got_steps, got_hash) == reference(steps)
    assert resumed_from > 0, "the job started over instead of resuming"
    return job, resumed_from


def test_a_reclaimed_job_resumes_elsewhere_with_the_uninterrupted_result(pool, tmp_path):
    steps = 120
    start_two(pool, tmp_path)
    job_id = submit_counter(pool, steps, every=10, first_sleep=0.5)
    pool.wait_state(job_id, "running")
    wait_checkpoint(pool, job_id, 2)  # background uploads while it runs
    r = agent_cmd(pool, "a", "reclaim")
    assert r.returncode == 0, r.stderr
    job = pool.wait_state(job_id, "pending")
    first = job["attempt_list"][0]
    assert first["state"] == "vacated", first
    # The checkpoint asked for before the vacate was committed and shipped,
    # so the next attempt restores it.
    ckpts = checkpoints(pool, job_id)
    assert ckpts[-1]["attempt"] == first["id"], ckpts
    job, resumed_from = finishes_on_b(pool, tmp_path, job_id, steps)
    logs = "\n".join(pool.logs_text(job_id))
    assert "restoring checkpoint" in logs, logs
    # At most the work since that checkpoint is lost: it was taken at the reclaim.
    assert first["lost_work_ms"] < 3000, first
    # The metrics count the reclaim, the checkpoints and the move to b.
    metrics = pool.metrics()
    assert 'gpupool_reclaims_total{cause="command"} 1\n' in metrics, metrics
    assert "gpupool_migrations_total 1\n" in metrics, metrics
    uploads = re.search(r"^gpupool_checkpoint_uploads_total (\d+)$", metrics, re.M)
    assert uploads and int(uploads.group(1)) >= 2, metrics


STAGED = re.compile(r"restored checkpoint (\d+): ([\d.]+ [KMG]?i?B) fetched, ([\d.]+ [KMG]?i?B) "
                    r"already staged")


def megabytes(text):
    number, unit = text.split()
    return float(number) * {"B": 1 / 2**20, "KiB": 1 / 1024, "MiB": 1, "GiB": 1024}[unit]


def test_a_standby_node_keeps_the_checkpoint_so_a_migration_moves_only_the_delta(
        pool, tmp_path):
    steps = 150
    start_two(pool, tmp_path)
    # 8 MiB of checkpoint of which about 2% changes from one to the next.
    job_id = submit_counter(pool, steps, every=10, pad=8 << 20, standby=True, first_sleep=0.5)
    pool.wait_state(job_id, "running")
    start_with(pool, tmp_path, "b")
    wait_checkpoint(pool, job_id, 2)
    b_log = pool.dir / "agent-b.log"
    wait_for(lambda: "staged job" in b_log.read_text(errors="replace"), timeout=60,
             what="b's standby copy")
    r = agent_cmd(pool, "a", "reclaim")
    assert r.returncode == 0, r.stderr
    job = pool.wait_finished(job_id, timeout=90)
    assert job["state"] == "succeeded", job
    assert job["attempt_list"][-1]["node_id"] == node_id(pool, "b"), job
    got_steps, got_hash, resumed_from = result_of(pool, job_id)
    assert (got_steps, got_hash) == reference(steps)  # and the counter checked its pad
    assert resumed_from > 0
    logs = "\n".join(pool.logs_text(job_id))
    m = STAGED.search(logs)
    assert m, logs
    fetched, staged = megabytes(m.group(2)), megabytes(m.group(3))
    assert staged > 6 and fetched < 2, (fetched, staged)


def test_a_reclaim_stages_the_checkpoint_where_the_job_goes_next(pool, tmp_path):
    steps = 150
    start_two(pool, tmp_path)
    job_id = submit_counter(pool, steps, every=10, pad=8 << 20, first_sleep=0.5)  # no standby
    pool.wait_state(job_id, "running")
    start_with(pool, tmp_path, "b")
    wait_checkpoint(pool, job_id, 2)
    assert "staged job" not in (pool.dir / "agent-b.log").read_text(errors="replace")
    r = agent_cmd(pool, "a", "reclaim")
    assert r.returncode == 0, r.stderr
    job = pool.wait_finished(job_id, timeout=90)
    assert job["state"] == "succeeded", job
    got_steps, got_hash, _ = result_of(pool, job_id)
    assert (got_steps, got_hash) == reference(steps)
    # The reclaim sent b the newest checkpoint while a was still writing the
    # next one: the start restored over it.
    m = STAGED.search("\n".join(pool.logs_text(job_id)))
    assert m and megabytes(m.group(3)) > 6, m


def test_a_job_survives_kill_9_of_its_agent(pool, tmp_path):
    steps = 157  # found by pgrep below: no other test runs the counter so long
    start_two(pool, tmp_path, extra=["--node-lost-after-ms", "3000", "--attempt-lease", "4s"])
    job_id = submit_counter(pool, steps, every=10)
    pool.wait_state(job_id, "running")
    wait_checkpoint(pool, job_id, 2)
    pool.kill_agent("a")  # its shim and job run on, uploading checkpoints
    start_with(pool, tmp_path, "b")
    job = pool.wait_finished(job_id, timeout=120)
    assert job["state"] == "succeeded", job
    assert job["attempt_list"][0]["state"] == "lost", job
    got_steps, got_hash, resumed_from = result_of(pool, job_id)
    assert (got_steps, got_hash) == reference(steps)
    assert resumed_from > 0
    # The stale attempt on a is fenced: its next upload was refused and its
    # shim stopped the job; an agent restart on a reports it, and nothing of
    # it changes the job.
    start_with(pool, tmp_path, "a")
    wait_for(lambda: json.loads(agent_cmd(pool, "a", "status", "--json").stdout)["tasks"] == [],
             what="the restarted agent to have reported and dropped the stale task")
    again = pool.job(job_id)
    assert again["state"] == "succeeded" and len(again["attempt_list"]) == len(job["attempt_list"])
    assert subprocess.run(["pgrep", "-f", f"counter.py --steps {steps}"]).returncode != 0, \
        "the stale attempt still runs"


def test_a_migration_survives_a_server_restart(pool, tmp_path):
    steps = 120
    start_two(pool, tmp_path)
    job_id = submit_counter(pool, steps, every=10)
    pool.wait_state(job_id, "running")
    wait_checkpoint(pool, job_id, 1)
    pool.kill_server()
    # Reclaimed while the server is down: the job checkpoints and stops; the
    # upload waits for the server, and so does the vacated report.
    r = agent_cmd(pool, "a", "reclaim", timeout=60)
    assert r.returncode == 0, r.stderr
    pool.start_server()
    job = pool.wait_state(job_id, "pending", timeout=60)
    assert job["attempt_list"][0]["state"] == "vacated", job
    finishes_on_b(pool, tmp_path, job_id, steps)


def test_checkpoints_are_listed_and_downloadable(pool, tmp_path):
    start_two(pool, tmp_path)
    job_id = submit_counter(pool, 40, sleep=0.05, every=5)
    pool.wait_finished(job_id, timeout=60)
    r = pool.cli("checkpoints", str(job_id), check=True)
    assert "ckpt" not in r.stderr
    ckpts = checkpoints(pool, job_id)
    assert 1 <= len(ckpts) <= 3, ckpts  # retention keeps the newest 3
    dest = tmp_path / "download"
    pool.cli("checkpoint", "download", str(job_id), "--to", str(dest), check=True)
    (commit,) = [p.name for p in dest.iterdir()]
    assert re.fullmatch(r"ckpt-\d+", commit), commit
    assert any((dest / commit).iterdir())


def test_a_preempted_job_checkpoints_and_resumes(pool, tmp_path):
    steps = 120
    start_two(pool, tmp_path)
    job_id = submit_counter(pool, steps, every=1000)  # checkpoints only when asked
    pool.wait_state(job_id, "running")
    # Its checkpoint handler is in place once it says where it starts.
    wait_for(lambda: any("counter: start at step 0" in l for l in pool.logs_text(job_id)),
             what="the counter to start")
    # An interactive job needs the only GPU: the counter is preempted. It is
    # asked for a checkpoint first, and that checkpoint is its restore point.
    urgent = pool.submit({"name": "urgent", "run": "sleep 1", "priority": "interactive",
                          "resources": {"gpus": 1}})
    assert pool.wait_finished(urgent, timeout=60)["state"] == "succeeded"
    job = pool.wait_finished(job_id, timeout=90)
    assert job["state"] == "succeeded", job
    assert job["attempt_list"][0]["state"] == "preempted", job
    got_steps, got_hash, resumed_from = result_of(pool, job_id)
    assert (got_steps, got_hash) == reference(steps)
    # every=1000: the job makes no checkpoint of its own, so any restore point
    # is the one asked for before the preemption (how far it got depends on
    # the machine's load).
    assert resumed_from >= 1, "the checkpoint asked for before the preemption was not used"
