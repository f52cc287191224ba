"""`gpupool agent join` and `gpupool agent leave --purge` against a real
server: join checks the machine, writes the agent's files, enrolls and
(systemd not running here: the test machine has none) prints the command
that starts the agent, which then runs with those files; leave drains the
agent, deregisters the node and removes what join wrote. A join whose
checks fail writes nothing."""
import os
import shlex
import stat
import subprocess

from pool import GPUPOOL, wait_for


def join(pool, tmp_path, *extra, token=None):
    token_file = tmp_path / "join.token"
    token_file.write_text(token or pool.join_token())
    return subprocess.run(
        [GPUPOOL, "agent", "join", pool.url, "--token-file", str(token_file), "--config-dir",
         str(tmp_path / "etc"), "--data-dir", str(tmp_path / "agent"), *extra],
        capture_output=True, text=True, timeout=180)


def test_join_writes_enrolls_and_the_agent_runs_then_leave_purges(pool, tmp_path):
    """The server gives work only to verified nodes: a plain agent's node
    gets none, the joined one (its selftest passed) runs the job."""
    pool.start_server(extra=["--require-node-label", "gpupool/verified=true"])
    pool.start_agent("plain")
    pool.wait_nodes_ready(1)
    job = pool.submit({"command": ["echo", "verified"], "executor": "sandbox"})
    wait_for(lambda: "gpupool/verified=true" in pool.job(job).get("reason", ""), timeout=30,
             what=lambda: f"the job to wait for a verified node: {pool.job(job)}")
    r = join(pool, tmp_path, "--name", "lab-a-gpu1", "--owner-group", "vision",
             "--simulate-gpus", "1xA100:80GiB", "--label", "rack=r2")
    assert r.returncode == 0, r
    assert "Enrolled as node lab-a-gpu1" in r.stdout
    assert "pool CA" in r.stdout and "every user of the pool" in r.stdout
    etc = tmp_path / "etc"
    # The files: the commented default config, the token (owner only), the flags.
    assert "executors:" in (etc / "agent.yaml").read_text()
    assert stat.S_IMODE(os.stat(etc / "join.token").st_mode) == 0o600
    assert (etc / "join.token").read_text().strip() == pool.join_token()
    env = (etc / "agent.env").read_text()
    assert stat.S_IMODE(os.stat(etc / "agent.env").st_mode) == 0o600
    assert f"--server {pool.url}" in env and "--owner-group vision" in env, env
    assert os.path.isdir(tmp_path / "agent" / "credentials")  # enrolled now

    # No systemd here: join said how to start the agent; that command runs it.
    line = next(x for x in r.stdout.splitlines() if x.startswith("  gpupool agent "))
    argv = shlex.split(line)[1:] + ["--log-level", "debug"]
    log = open(tmp_path / "agent.log", "ab")
    agent = subprocess.Popen([GPUPOOL, *argv], stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
    try:
        def node():
            nodes = [n for n in pool.nodes() if n["name"] == "lab-a-gpu1"]
            return nodes[0] if nodes and nodes[0]["state"] == "ready" else None
        n = wait_for(node, timeout=60, what="the joined agent to be ready")
        assert n["owner_group"] == "vision", n
        assert n["labels"].get("rack") == "r2", n
        assert n["labels"].get("gpupool/verified") == "true", n
        table = subprocess.run([GPUPOOL, "nodes"], env=pool.cli_env(), capture_output=True,
                               text=True, timeout=60).stdout
        assert "verified 20" in table and "not verified" in table, table  # joined; plain
        done = pool.wait_finished(job, timeout=60)
        assert done["state"] == "succeeded", done
        assert [a["node"] for a in pool.job(job)["attempt_list"]] == ["lab-a-gpu1"]

        # leave --purge: drained and deregistered, then the files go.
        out = subprocess.run([GPUPOOL, "agent", "leave", "--purge", "--data-dir",
                              str(tmp_path / "agent"), "--config-dir", str(etc)],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out
        assert agent.wait(timeout=60) == 0
        assert not (tmp_path / "agent").exists()
        assert not etc.exists()
        wait_for(lambda: [x for x in pool.nodes() if x["name"] == "lab-a-gpu1"][0]["state"]
                 == "left", timeout=30, what="the node to be left")
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()


def test_a_join_whose_checks_fail_writes_nothing(pool, tmp_path):
    pool.start_server()
    forged = pool.join_token().split(".", 1)[0] + "." + "cd" * 32  # another CA
    r = join(pool, tmp_path, "--simulate-gpus", "1xA100:80GiB", token=forged)
    assert r.returncode == 1, r
    assert "pool CA" in r.stdout and "nothing was written" in r.stderr
    assert not (tmp_path / "etc").exists()
    assert not (tmp_path / "agent" / "credentials").exists()
    assert pool.nodes() == []


def test_a_value_that_would_break_the_service_file_is_refused(pool, tmp_path):
    pool.start_server()
    r = join(pool, tmp_path, "--name", "two words", "--simulate-gpus", "1xA100:80GiB")
    assert r.returncode == 2, r
    assert "no spaces" in r.stderr
    assert not (tmp_path / "etc").exists()
