"""GPU sharing through NVIDIA MPS (`policy.sharing: mps`, src/agent/mps.h),
end to end against tests/fake_mps/nvidia-cuda-mps-control, which records
every command line and stdin command it gets (to FAKE_MPS_RECORD) and runs
a stand-in MPS server that a test can kill.

The agent runs on the fake NVML (one GPU of 8 GiB, as in
test_gpu_shares.py), with libgpushare.so: an MPS share still has the
interposer's memory cap. Each job prints the CUDA_MPS_* variables it got,
its uid and whether it sees the daemon's control socket, then holds its
share until a `release` file appears in its work directory."""
import glob
import json
import os
import shutil
import signal
import subprocess
import tempfile

import pytest

from fake_gpus import GPU, NVML, fake_driver
from pool import GPUPOOL, wait_for

FAKE_MPS = os.path.join(os.path.dirname(__file__), "..", "fake_mps", "nvidia-cuda-mps-control")

HOLD = ('echo "mps $(env | grep ^CUDA_MPS_ | sort | tr \'\\n\' \' \')"; echo "uid $(id -u)"; '
        'test -S /gpupool/mps/control && echo "pipe ok"; echo "shm $(ls /dev/shm)"; '
        'for i in $(seq 1800); do [ -e release ] && break; sleep 0.1; done; echo released')


@pytest.fixture
def mps_dir():
    """The agent's mps_dir: short, as MPS's sockets live in it (a pytest
    directory is too long for a Unix socket's path). The fake daemons
    outlive a killed agent, as NVIDIA's would: stopped here, whatever the
    test left."""
    path = tempfile.mkdtemp(prefix="gpupool-mps-", dir="/tmp")
    yield path
    for pid_file in glob.glob(os.path.join(path, "*", "pipe", "nvidia-cuda-mps-control.pid")):
        try:
            os.kill(int(open(pid_file).read()), signal.SIGKILL)
        except (OSError, ValueError):
            pass
    shutil.rmtree(path, ignore_errors=True)


def start_agent(pool, tmp_path, mps_dir, policy, mps_control=None, wait=True, extra=()):
    """An agent on the fake GPU whose config says `policy` and names the
    fake MPS control (or `mps_control`)."""
    driver, nvml, sandbox = fake_driver(tmp_path, NVML)
    config = tmp_path / "agent.yaml"
    config.write_text(sandbox +
                      f"mps_control: {mps_control or os.path.abspath(FAKE_MPS)}\n"
                      f"mps_dir: {mps_dir}\n"
                      f"policy: {policy}\n")
    pool.start_server()
    agent = pool.start_agent("gpu-box", gpus=None,
                             env={"FAKE_NVML_CONFIG": str(nvml),
                                  "FAKE_MPS_RECORD": str(tmp_path / "mps.record")},
                             extra=["--gpu-driver-dir", str(driver), "--config", str(config),
                                    *extra])
    if wait:
        pool.wait_nodes_ready(1)
    return agent


def record(tmp_path):
    path = tmp_path / "mps.record"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def commands(tmp_path):
    return [r["command"] for r in record(tmp_path)]


def user_token(pool, name):
    add = subprocess.run([GPUPOOL, "admin", "user", "add", name], capture_output=True, text=True,
                         env=pool.cli_env(), stdin=subprocess.DEVNULL, timeout=60)
    assert add.returncode == 0, add.stderr
    return pool.cli("token", "create", "--user", name, "--name", name, check=True).stdout.strip()


def submit_as(pool, token, gpus):
    status, job = pool.api("POST", "/v1/jobs", {"run": HOLD, "resources": {"gpus": gpus}},
                           token=token)
    assert status == 201, job
    return job["id"]


def said(pool, job_id, label):
    lines = [l for l in pool.logs_text(job_id) if l.startswith(label + " ")]
    return lines[0][len(label) + 1:] if lines else None


def wait_said(pool, job_id, label):
    return wait_for(lambda: said(pool, job_id, label), timeout=60,
                    what=f"job {job_id} to say {label}")


def work_dir(pool, job_id):
    return os.path.join(pool.agent_dir("gpu-box"), "tasks", pool.job(job_id)["current_attempt"],
                        "work")


def release(pool, job_id):
    open(os.path.join(work_dir(pool, job_id), "release"), "w").close()
    job = pool.wait_finished(job_id, timeout=60)
    assert job["state"] == "succeeded", (job, pool.logs_text(job_id))


def test_one_users_shares_share_one_mps_daemon(pool, tmp_path, mps_dir):
    start_agent(pool, tmp_path, mps_dir, "{sharing: mps}")
    node = pool.nodes()[0]
    assert node["lending"]["sharing"] == "mps", node
    alice, bob = user_token(pool, "alice"), user_token(pool, "bob")

    # Two shares of alice's land on the one GPU; its daemon starts once,
    # with its own pipe and log directories and that GPU alone.
    a1, a2 = submit_as(pool, alice, 0.3), submit_as(pool, alice, 0.5)
    for job_id in (a1, a2):
        pool.wait_state(job_id, "running", timeout=60)
    gpu_dirs = glob.glob(os.path.join(mps_dir, "*"))
    assert len(gpu_dirs) == 1, gpu_dirs
    gpu_dir = gpu_dirs[0]
    assert open(os.path.join(gpu_dir, "gpu")).read().strip() == GPU
    started = [r for r in record(tmp_path) if r["command"] == "-d"]
    assert len(started) == 1, record(tmp_path)
    assert started[0]["argv"] == ["-d"]
    assert started[0]["pipe_dir"] == os.path.join(gpu_dir, "pipe")
    assert started[0]["log_dir"] == os.path.join(gpu_dir, "log")
    assert started[0]["visible_devices"] == GPU

    # Each is an MPS client with its own limits (0.3 of 8 GiB: 2457 MiB),
    # reaching the daemon through the pipe directory bound into its sandbox.
    assert wait_said(pool, a1, "mps") == (
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30 CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=2457M "
        "CUDA_MPS_PIPE_DIRECTORY=/gpupool/mps ")
    assert wait_said(pool, a2, "mps") == (
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=4096M "
        "CUDA_MPS_PIPE_DIRECTORY=/gpupool/mps ")
    assert wait_said(pool, a1, "pipe") == "ok" and wait_said(pool, a2, "pipe") == "ok"
    if os.geteuid() == 0:
        # The daemon's /dev/shm (its own directory, not the machine's) is
        # the clients' too, for MPS's shared memory.
        assert wait_said(pool, a1, "shm") == "fake-mps-daemon"
        assert os.path.exists(os.path.join(gpu_dir, "shm", "fake-mps-daemon"))
        assert not os.path.exists("/dev/shm/fake-mps-daemon")
    # One MPS server serves one account: alice's tasks there share theirs
    # (a root agent gives every other task an account of its own).
    assert wait_said(pool, a1, "uid") == wait_said(pool, a2, "uid")
    uids = [json.loads(open(os.path.join(work_dir(pool, j), "..", "exec.json")).read())["uid"]
            for j in (a1, a2)]
    assert uids[0] == uids[1], uids
    if os.geteuid() == 0:
        assert uids[0] >= 0, uids

    # Bob's share fits in what is left, but MPS serves one user: it waits.
    b1 = submit_as(pool, bob, 0.1)
    job = pool.wait_considered(b1, timeout=60)
    assert job["state"] == "pending", job

    # The stand-in MPS server dies (a client's fatal fault): both of
    # alice's jobs hear of it, and the agent says so in its log.
    # A second question means the first one was answered (the agent asks one
    # at a time) and the agent knows the server: killing it while the first
    # was in flight would answer that one with no server at all, and no
    # server would then be missed.
    wait_for(lambda: commands(tmp_path).count("get_server_list") >= 2, timeout=60,
             what="the agent to have asked the daemon for its servers")
    with open(os.path.join(gpu_dir, "pipe", "fake-server.pid")) as f:
        os.kill(int(f.read()), signal.SIGKILL)
    for job_id in (a1, a2):
        event = wait_for(lambda: [l for l in pool.logs_text(job_id) if "MPS failure" in l],
                         timeout=60, what=f"job {job_id}'s MPS failure event")
        assert f"MPS failure on GPU {GPU}: the MPS server (pid" in event[0], event
    agent_log = (tmp_path / "agent-gpu-box.log").read_text()
    assert f"MPS on GPU {GPU}: the MPS server" in agent_log

    # Alice's shares end: the failed daemon is quit, and bob's share gets
    # the GPU with a daemon started afresh, quit again when it ends.
    assert "quit" not in commands(tmp_path)
    release(pool, a1)
    release(pool, a2)
    pool.wait_state(b1, "running", timeout=60)
    assert wait_said(pool, b1, "mps").startswith("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=10 ")
    cmds = commands(tmp_path)
    starts = [i for i, c in enumerate(cmds) if c == "-d"]
    assert len(starts) == 2 and cmds.count("quit") == 1 and cmds.index("quit") < starts[1], cmds
    release(pool, b1)
    wait_for(lambda: commands(tmp_path).count("quit") == 2, timeout=60,
             what="the daemon to be quit when the last share left")
    assert all(r["pipe_dir"] == os.path.join(gpu_dir, "pipe") for r in record(tmp_path))


def test_an_agent_that_stops_its_jobs_on_exit_quits_their_daemons(pool, tmp_path, mps_dir):
    agent = start_agent(pool, tmp_path, mps_dir, "{sharing: mps}", extra=["--on-exit", "kill"])
    job_id = submit_as(pool, user_token(pool, "alice"), 0.5)
    pool.wait_state(job_id, "running", timeout=60)
    assert "quit" not in commands(tmp_path)
    agent.send_signal(signal.SIGTERM)
    assert agent.wait(timeout=60) == 0
    assert commands(tmp_path)[-1] == "quit", commands(tmp_path)


def test_a_node_that_shares_nothing_gets_no_share(pool, tmp_path, mps_dir):
    start_agent(pool, tmp_path, mps_dir, "{sharing: none}")
    assert pool.nodes()[0]["lending"]["sharing"] == "none"
    status, share = pool.api("POST", "/v1/jobs", {"run": "true", "resources": {"gpus": 0.5}})
    assert status == 201, share
    job = pool.wait_considered(share["id"], timeout=60)
    assert job["state"] == "pending", job
    assert "sharing is none" in job["reason"], job
    # A whole GPU is still lent, and MPS was never started.
    whole = pool.submit({"run": "true", "resources": {"gpus": 1}})
    assert pool.wait_finished(whole, timeout=60)["state"] == "succeeded"
    assert pool.job(share["id"])["state"] == "pending"
    assert record(tmp_path) == []


def test_mps_without_its_control_program_is_a_clear_startup_error(pool, tmp_path, mps_dir):
    agent = start_agent(pool, tmp_path, mps_dir, "{sharing: mps}",
                        mps_control="/nonexistent/mps-control", wait=False)
    assert agent.wait(timeout=60) != 0
    log = (tmp_path / "agent-gpu-box.log").read_text()
    assert "sharing: mps needs NVIDIA's /nonexistent/mps-control" in log, log
