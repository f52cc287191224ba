"""The provider stays in control: the agent enforces the owner's policy
(windows, users, idle-only lending) and obeys the owner's local commands
(reclaim, pause, resume, leave) over its control socket, with or without a
server; displaced jobs are requeued and finish elsewhere."""
import datetime
import json
import os
import subprocess
import tempfile
import time

import pytest

from pool import FAKE_NVML_DIR, GPUPOOL, wait_for

# A job that asks to be told, finishes by itself after `secs` seconds, and
# leaves cleanly when asked to stop (as a checkpointing job would).
# `first_secs`: its first attempt's time instead (one that a slow machine
# cannot see end before the test stops it).
def polite_job(name, secs, gpus=1, first_secs=None):
    ticks = f"$(( {secs * 10} ))"
    if first_secs is not None:
        ticks = (f'$( [ "$GPUPOOL_ATTEMPT_ID" = "$GPUPOOL_JOB_ID.1" ] && echo {first_secs * 10} '
                 f"|| echo {secs * 10} )")
    run = (f"trap 'echo got SIGTERM; exit 0' TERM; echo listening; n={ticks}; i=0; "
           f"while [ $i -lt $n ]; do "
           f"sleep 0.1; i=$((i+1)); done; echo done")
    return {"name": name, "run": run, "resources": {"gpus": gpus}}


def stubborn_job(name, marker):
    """Ignores SIGTERM: only SIGKILL ends it. `marker` finds its process."""
    return {"name": name, "run": f"trap '' TERM; while :; do sleep 0.1; done; echo {marker}",
            "resources": {"gpus": 1}}


def agent_cmd(pool, name, *args, timeout=120, data_dir=None):
    return pool.cli("agent", *args, "--data-dir", data_dir or pool.agent_dir(name), timeout=timeout)


def attempts(pool, job_id):
    return pool.job(job_id)["attempt_list"]


def node(pool, name):
    return next(n for n in pool.nodes() if n["name"] == name)


def node_id(pool, name):
    return node(pool, name)["id"]


def start_with(pool, tmp_path, name, config="", gpus="1xA100:80GiB", env=None, data_dir=None):
    extra = []
    if config:
        path = tmp_path / f"agent-{name}.yaml"
        path.write_text(config)
        extra = ["--config", str(path)]
    pool.start_agent(name, gpus=gpus, env=env, extra=extra, data_dir=data_dir)
    wait_for(lambda: any(n["name"] == name and n["state"] == "ready" for n in pool.nodes()),
             what=f"node {name} ready")


def running_on(pool, job_id, name):
    j = pool.wait_state(job_id, "running")
    assert j["attempt_list"][-1]["node_id"] == node_id(pool, name), j
    return j


def listening(pool, job_id):
    """Waits until a polite job has set its SIGTERM trap (a signal sent
    sooner kills the shell before it can answer, as it would any program)."""
    wait_for(lambda: "listening" in pool.logs_text(job_id), what=f"job {job_id}'s trap")


def test_graceful_reclaim_requeues_and_the_job_finishes_elsewhere(pool, tmp_path):
    pool.start_server()
    start_with(pool, tmp_path, "a", "policy: {reclaim_grace: 5s}\n")
    job_id = pool.submit(polite_job("polite", 2, first_secs=3600))
    running_on(pool, job_id, "a")
    listening(pool, job_id)
    start_with(pool, tmp_path, "b")

    r = agent_cmd(pool, "a", "reclaim")
    assert r.returncode == 0, r.stderr
    assert "vacated 1 tasks" in r.stdout, r.stdout
    job = pool.wait_finished(job_id, timeout=60)
    assert job["state"] == "succeeded", job
    first, second = job["attempt_list"]
    assert first["state"] == "vacated", first
    assert "reclaimed by the owner" in first["reason"], first
    assert first["lost_work_ms"] > 0 and job["lost_work_ms"] == first["lost_work_ms"], job
    assert second["node_id"] == node_id(pool, "b")
    out = pool.logs_text(job_id)
    assert out.count("got SIGTERM") == 1 and out[-1] == "done", out

    # The node shows what happened, and the reclaim is on record.
    assert node(pool, "a")["status"] == "reclaimed"
    status, body = pool.api("GET", "/v1/nodes/a/events")
    assert status == 200, body
    reclaims = [e for e in body["events"] if e["kind"] == "reclaim"]
    assert reclaims and "reclaimed by the owner" in reclaims[0]["reason"], body
    assert reclaims[0]["attempts"] == [first["id"]], body
    nodes = pool.cli("nodes", check=True).stdout
    assert "reclaimed" in nodes and "reclaimed by the owner" in nodes, nodes
    events = pool.cli("events", "--node", "a", check=True).stdout
    assert "reclaim" in events and first["id"] in events, events

    # `resume` lends the GPU again.
    assert agent_cmd(pool, "a", "resume").returncode == 0
    wait_for(lambda: node(pool, "a")["status"] == "available", what="a available again")


def test_reclaim_now_frees_the_gpu_without_waiting_for_the_grace(pool, tmp_path):
    pool.start_server()
    start_with(pool, tmp_path, "a", "policy: {reclaim_grace: 1h}\n")
    marker = f"stubborn-{os.getpid()}-{time.time_ns()}"
    job_id = pool.submit(stubborn_job("stubborn", marker))
    running_on(pool, job_id, "a")
    # A graceful reclaim first: the job ignores SIGTERM and has an hour to go.
    graceful = subprocess.Popen([GPUPOOL, "agent", "reclaim", "--data-dir", pool.agent_dir("a")],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: any("vacating" in t for t in json.loads(
        agent_cmd(pool, "a", "status", "--json").stdout)["tasks"]), what="the job vacating")
    # The owner cannot wait: --now hurries it along.
    r = agent_cmd(pool, "a", "reclaim", "--now")
    assert r.returncode == 0, r.stderr
    out, err = graceful.communicate(timeout=120)
    assert graceful.returncode == 0 and "vacated 1 tasks" in out, (out, err)
    assert subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode == 1
    job = wait_for(lambda: (lambda j: j if j["attempt_list"][0]["state"] == "vacated" else None)(
        pool.job(job_id)), what="attempt vacated")
    assert job["state"] == "pending", job  # no other node: it waits at the front


def test_pause_lets_running_work_finish_and_takes_nothing_new(pool, tmp_path):
    pool.start_server()
    start_with(pool, tmp_path, "a", gpus="2xA100:80GiB")
    first = pool.submit(polite_job("first", 3))
    running_on(pool, first, "a")
    r = agent_cmd(pool, "a", "pause")
    assert r.returncode == 0 and "paused" in r.stdout, r.stderr
    wait_for(lambda: node(pool, "a")["status"] == "paused", what="a paused")
    second = pool.submit(polite_job("second", 1))
    assert pool.wait_considered(second)["state"] == "pending"
    assert pool.wait_finished(first)["state"] == "succeeded"
    # A job submitted once the GPU is free is considered in a pass that
    # also considers the second: both wait.
    third = pool.submit(polite_job("third", 1))
    assert pool.wait_considered(third)["state"] == "pending"
    assert pool.job(second)["state"] == "pending"
    assert agent_cmd(pool, "a", "resume").returncode == 0
    assert pool.wait_finished(second)["state"] == "succeeded"
    assert pool.wait_finished(third)["state"] == "succeeded"


def test_leave_drains_and_deregisters(pool, tmp_path):
    pool.start_server()
    start_with(pool, tmp_path, "a")
    job_id = pool.submit(polite_job("last", 3))
    running_on(pool, job_id, "a")
    r = agent_cmd(pool, "a", "leave", timeout=60)
    assert r.returncode == 0, r.stderr
    assert "left the pool" in r.stdout
    assert pool.job(job_id)["state"] == "succeeded"  # drained: it finished first
    assert node(pool, "a")["status"] == "left"
    assert pool.agents["a"].wait(timeout=20) == 0
    # A job submitted now waits: nobody is left to run it.
    later = pool.submit(polite_job("later", 1))
    assert pool.wait_considered(later)["state"] == "pending"


def test_the_control_socket_refuses_other_users(pool, tmp_path):
    # A world-traversable data dir, so that the refusal comes from the agent.
    data = tempfile.mkdtemp(prefix="gpupool-ctl-", dir="/tmp")
    os.chmod(data, 0o755)
    pool.start_server()
    config = tmp_path / "agent-a.yaml"
    config.write_text("policy: {}\n")
    start_with(pool, tmp_path, "a", data_dir=data)
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", GPUPOOL]
    r = subprocess.run(nobody + ["agent", "pause", "--data-dir", data], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert "permission denied: uid 65534" in r.stderr, r.stderr
    assert node(pool, "a")["status"] == "available"
    # Root may; so may the configured owner once the config names them.
    assert agent_cmd(pool, "a", "status", data_dir=data).returncode == 0
    pool.kill_agent("a")
    start_with(pool, tmp_path, "a", "owner: nobody\n", data_dir=data)
    r = subprocess.run(nobody + ["agent", "pause", "--data-dir", data], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    wait_for(lambda: node(pool, "a")["status"] == "paused", what="paused by its owner")


def test_a_bad_policy_is_refused_with_its_line_and_the_old_one_stays(pool, tmp_path):
    pool.start_server()
    start_with(pool, tmp_path, "a", "policy: {users: {allow: [admin]}}\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text("users: {allow: [alice]}\nmax_runtime: soon\n")
    r = agent_cmd(pool, "a", "policy", str(bad))
    assert r.returncode == 1
    assert "policy.max_runtime (line 2)" in r.stderr and "previous policy stays" in r.stderr
    status = json.loads(agent_cmd(pool, "a", "status", "--json").stdout)
    assert status["policy"]["users"]["allow"] == ["admin"]
    # Users outside the allowed set: the server does not place their jobs here.
    good = tmp_path / "good.yaml"
    good.write_text("users: {allow: [alice]}\n")
    assert agent_cmd(pool, "a", "policy", str(good)).returncode == 0
    wait_for(lambda: node(pool, "a")["lending"]["allow_users"] == ["alice"], what="new lending")
    job_id = pool.submit(polite_job("admins", 1))  # the admin token's user is not alice
    job = pool.wait_considered(job_id)
    assert job["state"] == "pending", job
    assert job["attempt_list"] == [], job


def next_minute_boundary(min_seconds=10):
    now = datetime.datetime.now(datetime.timezone.utc)
    edge = (now + datetime.timedelta(minutes=1)).replace(second=0, microsecond=0)
    if (edge - now).total_seconds() < min_seconds:
        edge += datetime.timedelta(minutes=1)
    return edge


def test_a_window_closing_stops_lent_jobs_with_the_server_down(pool, tmp_path):
    edge = next_minute_boundary()
    start = edge - datetime.timedelta(hours=2)
    days = sorted({start.strftime("%a").lower(), edge.strftime("%a").lower()})
    policy = (f"policy:\n  reclaim_grace: 2s\n  windows:\n    timezone: UTC\n    weekly:\n"
              f"      - {{days: [{', '.join(days)}], from: \"{start:%H:%M}\", to: \"{edge:%H:%M}\"}}\n")
    # A lease longer than the wait for the window's end: the window, not the
    # lease, stops the job.
    pool.start_server(extra=["--attempt-lease", "3m"])
    start_with(pool, tmp_path, "a", policy)
    marker = f"lent-{os.getpid()}-{time.time_ns()}"
    job_id = pool.submit({"name": "lent", "run": f"while :; do sleep 0.1; done; echo {marker}",
                          "resources": {"gpus": 1}})
    running_on(pool, job_id, "a")
    pool.kill_server()
    alive = lambda: subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode == 0
    assert alive()
    wait_for(lambda: not alive(), timeout=(edge - datetime.datetime.now(datetime.timezone.utc))
             .total_seconds() + 10, interval=0.2, what="the job to stop when the window closed")
    closed_at = datetime.datetime.now(datetime.timezone.utc)
    assert closed_at >= edge
    pool.start_server()
    job = wait_for(lambda: (lambda j: j if j["attempt_list"][0]["state"] == "vacated" else None)(
        pool.job(job_id)), what="the vacated report after the server came back")
    assert "outside the availability windows" in job["attempt_list"][0]["reason"]
    assert job["state"] == "pending"
    assert node(pool, "a")["status"] == "reclaimed"


def test_an_owner_process_on_a_lent_gpu_reclaims_it(pool, tmp_path):
    assert FAKE_NVML_DIR, "FAKE_NVML_DIR must name the fake NVML build directory"
    dev = tmp_path / "dev"
    dev.mkdir()
    for n in ["nvidia0", "nvidiactl"]:
        (dev / n).write_text("")
    gpu = {"name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-aaaaaaaa-0000-0000-0000-000000000001",
           "memory_total_mib": 81920, "memory_used_mib": 0, "cc": [8, 0], "utilization": 0}
    nvml = tmp_path / "nvml.json"
    nvml.write_text(json.dumps({"driver_version": "550.54.15", "cuda_version": 12040,
                                "devices": [gpu]}))
    env = {"GPUPOOL_NVML_LIBRARY": os.path.join(FAKE_NVML_DIR, "libnvidia-ml.so.1"),
           "FAKE_NVML_CONFIG": str(nvml)}
    pool.start_server()
    start_with(pool, tmp_path, "a",
               f"sandbox: {{devices_dir: {dev}}}\n"
               "policy: {idle_only: {max_utilization: 10, for: 1s}, reclaim_grace: 2s}\n",
               gpus=None, env=env)
    job_id = pool.submit(polite_job("borrowed", 60))
    running_on(pool, job_id, "a")
    listening(pool, job_id)
    # The owner starts their own work on the GPU (a process the pool did not start).
    gpu["processes"] = [{"pid": 1, "used_mib": 4000}]
    gpu["utilization"] = 90
    nvml.write_text(json.dumps({"driver_version": "550.54.15", "cuda_version": 12040,
                                "devices": [gpu]}))
    # Taken back once a sample sees the owner's process (the job leaves on
    # SIGTERM, within the 2 s grace); the deadline is generous for a loaded
    # machine.
    job = wait_for(lambda: (lambda j: j if j["attempt_list"][0]["state"] == "vacated" else None)(
        pool.job(job_id)), timeout=60, what="the owner's process to reclaim the GPU")
    assert "its owner runs process 1 on it" in job["attempt_list"][0]["reason"], job
    assert "got SIGTERM" in pool.logs_text(job_id)
    assert node(pool, "a")["status"] == "reclaimed"
    assert 'gpupool_reclaims_total{cause="owner_activity"} 1\n' in pool.metrics()
