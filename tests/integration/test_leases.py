"""Attempt leases, end to end (issue 19, hole 2): a job never runs twice at once.

An agent cut off from the server (SIGSTOP: its connection stays open, as in
a silent network cut or a hung agent) does not stop its jobs itself; the
shim of each task does, when the lease the agent last renewed ends, and the
server starts the job elsewhere only after that lease, counted from its own
last receipt of a renewal request, has certainly ended. Both jobs of a
pair of attempts read /proc/uptime, the same clock for every process of
this machine, so the test sees whether they overlapped.

Then what a stale attempt says once its replacement runs is refused: its
success, its output, its checkpoint.
"""
import os
import signal
import subprocess

from pool import wait_for

LEASE = ["--attempt-lease", "3s", "--node-lost-after-ms", "1000", "--heartbeat-ms", "500"]


def records(path):
    """The records of a task's output.log: (kind, ts, payload)."""
    out = []
    if not os.path.exists(path):
        return out
    with open(path, errors="replace") as f:
        for line in f:
            kind, ts, payload = (line.rstrip("\n").split(" ", 2) + ["", ""])[:3]
            out.append((kind, ts, payload))
    return out


def task_log(pool, agent, attempt):
    return os.path.join(pool.agent_dir(agent), "tasks", attempt, "output.log")


def pids_of(pool, agent, attempt):
    """(shim pid, job pid) from the task's 'p' record."""
    def find():
        for kind, _, payload in records(task_log(pool, agent, attempt)):
            if kind == "p":
                shim, _, job = payload.split()
                return int(shim), int(job)
        return None
    return wait_for(find, timeout=30, what=f"{attempt} to start")


def start_pool(pool, tmp_path):
    pool.start_server(extra=LEASE)
    for name in ("a", "b"):
        path = tmp_path / f"agent-{name}.yaml"
        path.write_text("executors: [sandbox, process]\n")
        pool.start_agent(name, extra=["--config", str(path)])
    pool.wait_nodes_ready(2)


def node_of(pool, job_id):
    job = pool.job(job_id)
    names = pool.node_names()
    return names[job["attempt_list"][-1]["node_id"]]


def test_a_cut_off_agents_job_stops_before_it_starts_elsewhere(pool, tmp_path):
    start_pool(pool, tmp_path)
    job_id = pool.submit({
        "run": 'if [ "$GPUPOOL_ATTEMPT_ID" = "$GPUPOOL_JOB_ID.1" ]; then '
               "while true; do echo tick $(cut -d' ' -f1 /proc/uptime); sleep 0.05; done; "
               "else echo start $(cut -d' ' -f1 /proc/uptime); fi",
        "resources": {"gpus": 1}})
    pool.wait_state(job_id, "running")
    first = node_of(pool, job_id)
    other = "b" if first == "a" else "a"
    attempt = f"{job_id}.1"
    wait_for(lambda: sum(1 for k, _, t in records(task_log(pool, first, attempt)) if k == "o") >= 3,
             what="the first attempt to tick")

    agent = pool.agents[first]
    agent.send_signal(signal.SIGSTOP)  # cut off: the connection stays open, nothing is said
    try:
        job = pool.wait_finished(job_id, timeout=90)
        assert job["state"] == "succeeded", job
        assert [a["state"] for a in job["attempt_list"]] == ["lost", "succeeded"], job
        assert node_of(pool, job_id) == other

        # The first attempt's shim stopped it on its own, for its lease ...
        recs = records(task_log(pool, first, attempt))
        result = [p for k, _, p in recs if k == "r"]
        assert result and "attempt lease" in result[0], recs[-5:]
        ticks = [float(t.split()[1]) for k, _, t in recs if k == "o" and t.startswith("tick ")]
        # ... before the second started: never two at once.
        second = [l for l in pool.logs_text(job_id) if l.startswith("start ")]
        assert len(second) == 1, pool.logs_text(job_id)
        started = float(second[0].split()[1])
        assert ticks and max(ticks) < started, (max(ticks), started)
    finally:
        agent.send_signal(signal.SIGCONT)
    # The agent comes back and hears its attempt is stale; nothing changes.
    wait_for(lambda: pool.nodes() and {n["name"]: n["state"] for n in pool.nodes()}[first] == "ready",
             timeout=30, what="the cut-off agent to return")
    assert pool.job(job_id)["state"] == "succeeded"


def test_a_stale_attempts_success_and_output_are_refused(pool, tmp_path):
    """The agent hangs; its job ends well while the agent cannot say so; the
    job starts elsewhere; the agent returns and reports the old success and
    the old output: both refused, the replacement's result stands."""
    start_pool(pool, tmp_path)
    go = tmp_path / "go"
    job_id = pool.submit({
        "executor": "process",
        "run": f'if [ "$GPUPOOL_ATTEMPT_ID" = "$GPUPOOL_JOB_ID.1" ]; then echo first-up; '
               f"while [ ! -e {go} ]; do sleep 0.05; done; echo STALE-OUTPUT; exit 0; "
               "else echo second-ran; sleep 1; exit 3; fi",
        "resources": {"gpus": 1}})
    pool.wait_state(job_id, "running")
    first = node_of(pool, job_id)
    attempt = f"{job_id}.1"
    wait_for(lambda: "first-up" in pool.logs_text(job_id), what="the first attempt to run")

    agent = pool.agents[first]
    agent.send_signal(signal.SIGSTOP)
    try:
        go.write_text("")
        # The shim records the job's success; the agent cannot report it.
        wait_for(lambda: any(k == "r" for k, _, _ in records(task_log(pool, first, attempt))),
                 what="the first attempt's result on its agent's disk")
        assert '"exit_code":0' in [p for k, _, p in records(task_log(pool, first, attempt)) if k == "r"][0]
        job = pool.wait_finished(job_id, timeout=90)  # elsewhere, exit 3: a failure
    finally:
        agent.send_signal(signal.SIGCONT)
    assert job["state"] == "failed", job
    wait_for(lambda: {n["name"]: n["state"] for n in pool.nodes()}[first] == "ready",
             timeout=30, what="the hung agent to return")
    # Its reports are applied (or refused) before its hello is answered and
    # its logs shipped before anything else it sends: a job event from it
    # would be too late to matter. Wait until its task is acknowledged gone.
    wait_for(lambda: not os.path.exists(os.path.join(pool.agent_dir(first), "tasks", attempt)),
             timeout=30, what="the agent to hand over and drop the stale task")
    job = pool.job(job_id)
    assert job["state"] == "failed" and job["exit_code"] == 3, job
    assert [a["state"] for a in job["attempt_list"]] == ["lost", "failed"], job
    text = pool.logs_text(job_id)
    assert "STALE-OUTPUT" not in text, text
    assert "second-ran" in text


def test_a_frozen_machines_late_checkpoint_is_refused(pool, tmp_path):
    """The whole machine freezes (agent, shim and job): nothing local can
    keep the lease, so the job starts elsewhere. When it thaws, the old job
    commits a checkpoint and its shim uploads it: refused, and the shim stops
    what is left of the stale attempt."""
    start_pool(pool, tmp_path)
    go = tmp_path / "go"
    job_id = pool.submit({
        "executor": "process",
        "checkpoint": {"interval": "1h"},
        "run": f'if [ "$GPUPOOL_ATTEMPT_ID" = "$GPUPOOL_JOB_ID.1" ]; then echo first-up; '
               f'while [ ! -e {go} ]; do sleep 0.05; done; d="$GPUPOOL_CHECKPOINT_DIR"; '
               'mkdir "$d/.staging" && echo stale > "$d/.staging/state" && mv "$d/.staging" "$d/ckpt-1"; '
               "echo STALE-OUTPUT; sleep 60; "
               "else echo second-ran; sleep 1; fi",
        "resources": {"gpus": 1}})
    pool.wait_state(job_id, "running")
    first = node_of(pool, job_id)
    attempt = f"{job_id}.1"
    wait_for(lambda: "first-up" in pool.logs_text(job_id), what="the first attempt to run")
    shim, job_pid = pids_of(pool, first, attempt)

    agent = pool.agents[first]
    frozen = [(agent.pid, False), (shim, False), (job_pid, True)]
    for pid, group in frozen:
        os.kill(-pid if group else pid, signal.SIGSTOP)
    try:
        job = pool.wait_finished(job_id, timeout=90)  # elsewhere
        assert job["state"] == "succeeded", job
        # The job thaws first and commits; then its shim.
        go.write_text("")
        os.kill(-job_pid, signal.SIGCONT)
        wait_for(lambda: os.path.isdir(os.path.join(pool.agent_dir(first), "tasks", attempt,
                                                    "work", ".checkpoints", "ckpt-1")),
                 what="the stale checkpoint commit")
        os.kill(shim, signal.SIGCONT)
        wait_for(lambda: any(k == "r" for k, _, _ in records(task_log(pool, first, attempt))),
                 what="the stale shim to end its task")
    finally:
        for pid, group in frozen:
            try:
                os.kill(-pid if group else pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
    events = [p for k, _, p in records(task_log(pool, first, attempt)) if k == "v"]
    assert any("was not uploaded" in e for e in events) or any("attempt lease" in e for e in events), events
    status, body = pool.api("GET", f"/v1/jobs/{job_id}/checkpoints")
    assert status == 200, body
    assert all(c["attempt_id"] != attempt for c in body["checkpoints"]), body
    # No process of the stale attempt is left.
    wait_for(lambda: subprocess.run(["pgrep", "-f", str(go)], capture_output=True).returncode != 0,
             timeout=30, what="the stale job to be gone")
    wait_for(lambda: {n["name"]: n["state"] for n in pool.nodes()}[first] == "ready",
             timeout=30, what="the frozen agent to return")
    assert "STALE-OUTPUT" not in pool.logs_text(job_id)
    assert pool.job(job_id)["state"] == "succeeded"
