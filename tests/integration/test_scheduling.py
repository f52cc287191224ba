"""End-to-end scheduling: GPU shares, constraints with reasons, preemption
by an interactive job, queue order and fair-share usage, with a real server
and real agents (simulated GPUs) on loopback."""
import json
import re
import signal

from pool import wait_for

# A job that checkpoints when it is told to stop. Before a preemption its
# whole process group gets its checkpoint signal (SIGUSR1), then SIGTERM;
# the shell's trap saves and exits 0 on the first.
CHECKPOINTING = ("trap 'echo checkpointing; exit 0' USR1 TERM; echo attempt=$GPUPOOL_ATTEMPT_ID; "
                 "while true; do sleep 0.2; done")


def start(pool, agents=("a",), gpus="1xA100:80GiB", config=None):
    extra = ()
    if config is not None:
        path = pool.dir / "scheduler.yaml"
        path.write_text(config)
        extra = ("--scheduler-config", str(path))
    pool.start_server(extra=extra)
    for name in agents:
        pool.start_agent(name, gpus=gpus)
    pool.wait_nodes_ready(len(agents))


def wait_reason(pool, job_id, text, timeout=20.0):
    return wait_for(lambda: (lambda j: j if text in j["reason"] else None)(pool.job(job_id)),
                    timeout=timeout, what=f"job {job_id}'s reason to mention {text!r}")


def wait_positioned(pool, job_ids):
    return wait_for(lambda: all(pool.job(i)["position"] for i in job_ids),
                    what=f"jobs {job_ids} to have queue positions")


def test_two_half_shares_share_a_gpu_and_a_third_waits(pool):
    start(pool)
    spec = {"run": "echo milli=$GPUPOOL_GPU_MILLI mem=$GPUPOOL_GPU_MEMORY_MIB "
                   "cuda=$CUDA_VISIBLE_DEVICES; sleep 60",
            "resources": {"gpus": 0.5, "gpu_memory": "20GiB"}}
    first, second, third = (pool.submit(spec) for _ in range(3))
    pool.wait_state(first, "running")
    pool.wait_state(second, "running")
    gpu = pool.nodes()[0]["gpus"][0]["uuid"]
    for job_id in (first, second):
        attempt = pool.job(job_id)["attempt_list"][0]
        assert attempt["gpus"] == [gpu]
        assert attempt["gpu_milli"] == 500 and attempt["gpu_memory_mib"] == 20480
        wait_for(lambda: pool.logs_text(job_id), what="the share's output")
        assert pool.logs_text(job_id)[0] == f"milli=500 mem=20480 cuda={gpu}"
    node_gpu = pool.nodes()[0]["gpus"][0]
    assert sorted(node_gpu["attempts"]) == [f"{first}.1", f"{second}.1"]
    assert node_gpu["used_milli"] == 1000
    job = wait_reason(pool, third, "waiting")
    assert job["state"] == "pending"
    assert job["position"] >= 1 and job["explanation"].startswith("position ")
    assert not job["unsatisfiable"]
    r = pool.cli("job", str(third), check=True)
    assert "Position:" in r.stdout and job["reason"] in r.stdout
    r = pool.cli("job", str(first), check=True)
    # The cap, with what the share holds of it once a heartbeat has said so.
    assert re.search(r"0\.5 of it, (20 GiB\)|\S+ \S+ of 20 GiB cap\))", r.stdout), r.stdout
    # When a share ends, the waiting one takes its place on the same GPU.
    pool.cli("cancel", str(first), check=True)
    pool.wait_state(third, "running")
    assert pool.job(third)["attempt_list"][0]["gpus"] == [gpu]


def test_unsatisfiable_constraints_say_why(pool):
    start(pool, gpus="1xA100:80GiB,1xT4:16GiB")
    cc = pool.submit({"run": "true", "resources": {"gpus": 1, "min_compute_capability": "9.0"}})
    model = pool.submit({"run": "true", "resources": {"gpus": 1, "gpu_models": ["H100"]}})
    label = pool.submit({"run": "true", "resources": {"gpus": 1, "node_labels": {"zone": "eu-1"}}})
    job = wait_reason(pool, cc, "compute capability")
    assert job["reason"] == "no node has a GPU with compute capability >= 9.0"
    assert job["unsatisfiable"]
    assert "H100" in wait_reason(pool, model, "no node")["reason"]
    assert "zone=eu-1" in wait_reason(pool, label, "no ")["reason"]
    r = pool.cli("queue", check=True)
    assert "compute capability >= 9.0" in r.stdout and "H100" in r.stdout
    # A satisfiable job still runs beside them, on the GPU it asks for.
    ok = pool.submit({"run": "true", "resources": {"gpus": 1, "min_compute_capability": "7.5",
                                                  "gpu_models": "T4"}})
    job = pool.wait_finished(ok)
    assert job["state"] == "succeeded"
    t4 = [g["uuid"] for g in pool.nodes()[0]["gpus"] if g["name"] == "T4"]
    assert job["attempt_list"][0]["gpus"] == t4


def test_interactive_job_preempts_a_checkpointing_job_of_an_over_quota_group(pool):
    start(pool, gpus="2xA100:80GiB", config="""
groups:
  lab-a: {weight: 1, guaranteed_gpus: 0}
  lab-b: {weight: 1, guaranteed_gpus: 1}
anti_thrash_window: 30m
""")
    keeper = pool.submit({"name": "keeper", "group": "lab-a", "run": "sleep 120",
                          "resources": {"gpus": 1}})
    victim = pool.submit({"name": "victim", "group": "lab-a", "run": CHECKPOINTING,
                          "resources": {"gpus": 1}, "checkpoint": {"grace": "5s"}})
    pool.wait_state(keeper, "running")
    pool.wait_state(victim, "running")
    assert pool.job(victim)["preemptible"] and not pool.job(keeper)["preemptible"]
    # Its trap is set before it prints: a signal sent sooner would kill the
    # shell before it could save, as it would any program not yet listening.
    wait_for(lambda: f"attempt={victim}.1" in pool.logs_text(victim), what="attempt 1's output")

    interactive = pool.submit({"name": "notebook", "group": "lab-b", "priority": "interactive",
                               "run": "sleep 2", "resources": {"gpus": 1}})
    # The victim goes back to pending, not failed, and says for whom.
    job = wait_for(lambda: (lambda j: j if j["state"] == "pending" and j["attempts"] == 1
                            else None)(pool.job(victim)), what="the victim to be requeued")
    first = job["attempt_list"][0]
    assert first["state"] == "preempted"
    assert f"job {interactive}" in first["reason"] and "interactive" in first["reason"]
    assert first["preempted_for_job"] == interactive
    assert job["last_preempted_ms"] is not None and job["exit_code"] is None
    assert "checkpointing" in pool.logs_text(victim)  # it got the signal and saved
    pool.wait_state(interactive, "running")

    # The interactive job ends; the victim runs again as attempt 2.
    assert pool.wait_finished(interactive)["state"] == "succeeded"
    job = wait_for(lambda: (lambda j: j if j["state"] == "running" and j["attempts"] == 2
                            else None)(pool.job(victim)), timeout=30,
                   what="the victim's second attempt")
    assert job["current_attempt"] == f"{victim}.2"
    wait_for(lambda: f"attempt={victim}.2" in pool.logs_text(victim), what="attempt 2's output")

    # Another interactive job finds nothing to preempt: the keeper has no
    # checkpoint section and the victim was preempted within the window.
    second = pool.submit({"group": "lab-b", "priority": "interactive", "run": "true",
                          "resources": {"gpus": 1}})
    wait_positioned(pool, [second])
    assert pool.job(second)["state"] == "pending"
    keeper_job = pool.job(keeper)
    assert keeper_job["state"] == "running" and keeper_job["attempts"] == 1
    assert pool.job(victim)["current_attempt"] == f"{victim}.2"
    assert pool.job(victim)["state"] == "running"

    r = pool.cli("groups", check=True)
    rows = {line.split()[0]: line for line in r.stdout.splitlines()[1:]}
    assert "lab-a" in rows and "lab-b" in rows
    status, body = pool.api("GET", "/v1/groups")
    assert status == 200
    groups = {g["name"]: g for g in body["groups"]}
    assert groups["lab-a"]["allocated_gpu_milli"] == 2000
    assert groups["lab-b"]["guaranteed_gpu_milli"] == 1000
    assert groups["lab-b"]["usage_gpu_milli_ms"] > 0  # the interactive job's run was charged


def test_queue_lists_pending_jobs_in_class_order(pool):
    start(pool)
    blocker = pool.submit({"run": "sleep 60", "resources": {"gpus": 1}})
    pool.wait_state(blocker, "running")
    opportunistic = pool.submit({"name": "opp", "priority": "opportunistic", "run": "true",
                                 "resources": {"gpus": 1}})
    normal = pool.submit({"name": "norm", "run": "true", "resources": {"gpus": 1}})
    r = pool.cli("submit", "--priority", "interactive", "--group", "vision", "--name", "inter",
                 "--gpus", "1", "--", "true", check=True)
    interactive = int(r.stdout.strip())
    wait_positioned(pool, [opportunistic, normal, interactive])

    r = pool.cli("queue", check=True)
    lines = r.stdout.splitlines()
    assert lines[0].split()[:6] == ["POS", "ID", "NAME", "OWNER", "GROUP", "CLASS"]
    rows = [line.split() for line in lines[1:]]
    assert [int(row[1]) for row in rows] == [interactive, normal, opportunistic]
    assert [row[5] for row in rows] == ["interactive", "normal", "opportunistic"]
    assert rows[0][4] == "vision"
    positions = [int(row[0]) for row in rows]
    assert positions == sorted(positions) and len(set(positions)) == 3

    r = pool.cli("queue", "-o", "json", check=True)
    assert [j["id"] for j in json.loads(r.stdout)] == [interactive, normal, opportunistic]
    r = pool.cli("jobs", check=True)
    assert "POS" in r.stdout.splitlines()[0]


def test_usage_survives_a_server_kill(pool):
    start(pool)
    job_id = pool.submit({"group": "astro", "run": "sleep 1", "resources": {"gpus": 1}})
    assert pool.wait_finished(job_id)["state"] == "succeeded"
    status, body = pool.api("GET", "/v1/groups")
    before = {g["name"]: g for g in body["groups"]}["astro"]["usage_gpu_milli_ms"]
    assert before >= 1000 * 900  # one GPU for about a second
    pool.kill_server()
    pool.start_server()
    status, body = pool.api("GET", "/v1/groups")
    after = {g["name"]: g for g in body["groups"]}["astro"]["usage_gpu_milli_ms"]
    # Decayed a little with the default 7-day half-life, never lost.
    assert before * 0.999 <= after <= before


def test_sighup_reloads_the_scheduler_config_and_keeps_it_when_broken(pool):
    start(pool, config="groups: {vision: {weight: 2, guaranteed_gpus: 1}}\n")

    def vision():
        status, body = pool.api("GET", "/v1/groups")
        assert status == 200
        return {g["name"]: g for g in body["groups"]}.get("vision")

    assert vision()["weight"] == 2
    path = pool.dir / "scheduler.yaml"
    path.write_text("groups: {vision: {weight: 5, guaranteed_gpus: 1}}\n")
    pool.server.send_signal(signal.SIGHUP)
    wait_for(lambda: vision()["weight"] == 5, what="the new weight")
    path.write_text("groups: {vision: {weight: 0}}\n")  # invalid: the old config stays
    pool.server.send_signal(signal.SIGHUP)
    wait_for(lambda: "keeping the config in force" in (pool.dir / "server.log").read_text(),
             what="the reload error in the server log")
    assert vision()["weight"] == 5
    assert pool.server.poll() is None
