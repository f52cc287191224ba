"""Crash tests: kill -9 of the server or an agent loses no acknowledged work."""
import os
import pathlib
import signal
import subprocess

from pool import wait_for


def lines_of(n):
    return [f"tick {i}" for i in range(1, n + 1)]


TICKS = "for i in $(seq 1 {n}); do echo tick $i; sleep {delay}; done"


def wait_output_grows(pool, agent="a"):
    """Waits until a task on `agent` writes more output (its TASK_DIR/output.log
    grows): the job runs on while the server or the agent is down."""
    tasks = pathlib.Path(pool.agent_dir(agent)) / "tasks"

    def size():
        return sum(p.stat().st_size for p in tasks.glob("*/output.log"))
    before = size()
    wait_for(lambda: size() > before, what=f"more output from the job on {agent}")


def test_server_kill9_loses_nothing_and_running_jobs_carry_on(pool):
    pool.start_server()
    pool.start_agent("a", gpus="2xA100:80GiB")
    pool.wait_nodes_ready(1)
    done = pool.submit({"run": "echo finished-before"})
    pool.wait_finished(done)
    running = pool.submit({"run": TICKS.format(n=40, delay=0.1), "resources": {"gpus": 1}})
    pool.wait_state(running, "running")
    wait_for(lambda: len(pool.logs_text(running)) >= 5, what="some output")
    pending = pool.submit({"run": "true", "resources": {"gpus": 8}})  # can never run here

    pool.kill_server()
    wait_output_grows(pool)  # the job keeps running and writing output meanwhile
    pool.start_server()

    assert pool.job(done)["state"] == "succeeded"
    assert pool.logs_text(done) == ["finished-before"]
    assert pool.job(pending)["state"] == "pending"
    job = pool.wait_finished(running, timeout=40)
    assert job["state"] == "succeeded", job
    assert len(job["attempt_list"]) == 1  # the same attempt carried on
    assert pool.logs_text(running) == lines_of(40)  # nothing lost, nothing twice


def test_agent_kill9_and_restart_finds_its_task_again(pool):
    pool.start_server()
    pool.start_agent("a")
    pool.wait_nodes_ready(1)
    job_id = pool.submit({"run": TICKS.format(n=30, delay=0.1), "resources": {"gpus": 1}})
    pool.wait_state(job_id, "running")
    wait_for(lambda: len(pool.logs_text(job_id)) >= 3, what="some output")
    pool.kill_agent("a")
    wait_output_grows(pool)  # its shim and job run on
    pool.start_agent("a")
    job = pool.wait_finished(job_id, timeout=40)
    assert job["state"] == "succeeded", job
    assert len(job["attempt_list"]) == 1
    assert pool.logs_text(job_id) == lines_of(30)


def test_agent_losing_its_task_gets_it_requeued(pool):
    pool.start_server()
    pool.start_agent("a")
    pool.wait_nodes_ready(1)
    job_id = pool.submit({"run": "if [ $GPUPOOL_ATTEMPT_ID = ${GPUPOOL_JOB_ID}.1 ]; then sleep 307; fi; "
                                 "echo ran as $GPUPOOL_ATTEMPT_ID",
                          "resources": {"gpus": 1}})
    pool.wait_state(job_id, "running")
    # The machine "reboots": the agent and everything it started die.
    pool.kill_agent("a")
    subprocess.run(["pkill", "-KILL", "-f", "--", f"--data-dir {pool.dir}/agent-a"], check=False)
    subprocess.run(["pkill", "-KILL", "-f", "sleep 307"], check=False)
    pool.start_agent("a")
    job = pool.wait_finished(job_id, timeout=40)
    assert job["state"] == "succeeded", job
    attempts = job["attempt_list"]
    assert [a["state"] for a in attempts] == ["lost", "succeeded"]
    assert pool.logs_text(job_id) == [f"ran as {job_id}.2"]


def test_node_that_never_returns_has_its_jobs_requeued(pool):
    pool.start_server(extra=["--node-lost-after-ms", "1500", "--attempt-lease", "3s"])
    pool.start_agent("a")
    pool.wait_nodes_ready(1)
    job_id = pool.submit({"run": "if [ $GPUPOOL_ATTEMPT_ID = ${GPUPOOL_JOB_ID}.1 ]; then sleep 309; fi; echo ok",
                          "resources": {"gpus": 1}})
    pool.wait_state(job_id, "running")
    pool.kill_agent("a")
    pool.start_agent("b")
    job = pool.wait_finished(job_id, timeout=30)
    assert job["state"] == "succeeded"
    assert [a["state"] for a in job["attempt_list"]] == ["lost", "succeeded"]
    assert {n["name"]: n["state"] for n in pool.nodes()} == {"a": "lost", "b": "ready"}
    # The old agent comes back with its stale attempt: it is told to stop it.
    pool.start_agent("a")
    wait_for(lambda: subprocess.run(["pgrep", "-f", "sleep 309"], capture_output=True).returncode != 0,
             timeout=20, what="the stale attempt to be killed")
    assert pool.job(job_id)["state"] == "succeeded"


def test_dev_restart_with_same_data_dir_keeps_history(tmp_path):
    from pool import GPUPOOL
    env_file = tmp_path / "env"
    data = tmp_path / "dev"

    def start_dev():
        if env_file.exists():
            env_file.unlink()
        log = open(tmp_path / "dev.log", "ab")  # both starts, kept for a failure's message
        p = subprocess.Popen([GPUPOOL, "dev", "--agents", "1", "--listen", "127.0.0.1:0", "--data-dir", str(data),
                              "--env-file", str(env_file), "--no-config", "--log-level", "warn"],
                             stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        wait_for(lambda: env_file.exists() and "GPUPOOL_TOKEN" in env_file.read_text(), what="env file")
        env = dict(os.environ)
        for line in env_file.read_text().splitlines():
            k, v = line.replace("export ", "").split("=", 1)
            env[k] = v
        env["GPUPOOL_CONFIG"] = str(tmp_path / "none.json")
        return p, env

    p, env = start_dev()
    r = subprocess.run([GPUPOOL, "submit", "--wait", "--", "echo", "kept"], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=30) == 0
    p, env = start_dev()
    try:
        r = subprocess.run([GPUPOOL, "jobs"], env=env, capture_output=True, text=True, timeout=30)
        assert r.returncode == 0 and "succeeded" in r.stdout
        r = subprocess.run([GPUPOOL, "logs", "1"], env=env, capture_output=True, text=True, timeout=30)
        assert r.stdout == "kept\n"
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=30)
