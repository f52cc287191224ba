"""Jobs run isolated: the bubblewrap sandbox, container images, GPU device
nodes and resource limits, end to end through a real server and agent (real
bwrap, skopeo and umoci; the agent runs as root here, so each task gets its
own unprivileged uid)."""
import json
import os
import pathlib
import shutil
import subprocess
import tempfile
import time

import pytest

from pool import FAKE_NVML_DIR, wait_for

HERE = pathlib.Path(__file__).resolve().parent
MAKE_IMAGE = HERE.parent / "images" / "make_test_image.sh"


def start(pool, config=None, tmp_path=None, env=None, gpus="2xA100:80GiB", name="box"):
    extra = []
    if config is not None:
        path = tmp_path / f"agent-{name}.yaml"
        path.write_text(config)
        extra = ["--config", str(path)]
    if pool.server is None:
        pool.start_server()
    pool.start_agent(name, gpus=gpus, env=env, extra=extra)
    pool.wait_nodes_ready(len(pool.agents))


def run(pool, spec, timeout=60):
    """Runs a job to its end; returns the job and its output lines (no events)."""
    job_id = pool.submit(spec)
    job = pool.wait_finished(job_id, timeout=timeout)
    return job, output(pool, job_id)


def events(pool, job_id):
    status, page = pool.api("GET", f"/v1/jobs/{job_id}/logs?after=0&limit=1000")
    assert status == 200, page
    return [l["text"] for l in page["lines"] if l["stream"] == "event"]


def output(pool, job_id):
    status, page = pool.api("GET", f"/v1/jobs/{job_id}/logs?after=0&limit=1000")
    assert status == 200, page
    return [l["text"] for l in page["lines"] if l["stream"] != "event"]


def readable_dir(prefix):
    """A directory under /tmp that task accounts can read: a root agent pulls
    images (and runs the tools named in its config) as the task's account,
    and pytest's own tmp dirs are root's alone."""
    d = pathlib.Path(tempfile.mkdtemp(prefix=prefix))
    os.chmod(d, 0o755)
    return d


@pytest.fixture(scope="module")
def image_dir():
    out = readable_dir("gpupool-test-images-")
    subprocess.run([str(MAKE_IMAGE), str(out)], check=True, capture_output=True, timeout=120)
    yield out
    shutil.rmtree(out, ignore_errors=True)


@pytest.fixture
def shared_tmp():
    d = readable_dir("gpupool-test-shared-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


# ---- isolation ---------------------------------------------------------------


def test_job_sees_neither_the_providers_files_nor_other_jobs(pool, tmp_path):
    start(pool)
    home = pathlib.Path(tempfile.mkdtemp(prefix="gpupool-provider-", dir="/home"))
    try:
        (home / "secret.txt").write_text("owner's secret\n")
        os.chmod(home, 0o755)
        os.chmod(home / "secret.txt", 0o644)  # readable by anyone on the host: only the sandbox hides it
        other = pool.submit({"name": "other", "run": "echo other-secret > mine.txt; sleep 60"})
        pool.wait_state(other, "running")
        other_work = pool.dir / "agent-box" / "tasks" / f"{other}.1" / "work"
        wait_for(lambda: (other_work / "mine.txt").exists(), what="the other job's file")
        job, _ = run(pool, {"run": f"cat {home}/secret.txt; echo rc=$?; "
                                   f"cat {other_work}/mine.txt; echo rc=$?; "
                                   f"ls {pool.dir}/agent-box; echo rc=$?; "
                                   "ls /home /root; echo rc=$?; ls /"})
        lines = output(pool, job["id"])
        assert "owner's secret" not in lines and "other-secret" not in lines
        assert lines.count("rc=1") + lines.count("rc=2") == 4, lines
        root_listing = [l for l in lines if not l.startswith(("cat:", "ls:", "rc="))]
        assert set(root_listing) <= {"bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc",
                                     "sbin", "sys", "tmp", "usr", "work"}, root_listing
        assert "work" in root_listing and "home" not in root_listing and "root" not in root_listing
        pool.cli("cancel", str(other), check=True)
    finally:
        shutil.rmtree(home)


def test_job_cannot_see_host_processes_or_signal_the_agent(pool):
    start(pool)
    agent_pid = pool.agents["box"].pid
    job, lines = run(pool, {"run": f"echo procs=$(ls /proc | grep -c '^[0-9]'); kill -0 {agent_pid}; "
                                   "echo kill=$?; echo pid=$$; echo uid=$(id -u)"})
    assert job["state"] == "succeeded", job

    # Each figure by its name: stdout and stderr lines are ordered as read.
    def value(name):
        [v] = [int(l[len(name) + 1:]) for l in lines if l.startswith(name + "=")]
        return v
    nprocs = value("procs")
    assert nprocs <= 5, lines  # bwrap's init, sh, its $(...) subshell, ls, grep: not the host's hundreds
    assert "kill=1" in lines
    assert any("No such process" in l for l in lines), lines
    assert "pid=2" in lines  # its own pid namespace: bwrap's init is 1
    uid = value("uid")
    assert uid >= 190000, "runs as an unprivileged account of the sandbox range"
    # The agent is still alive and well.
    assert pool.agents["box"].poll() is None


def test_job_cannot_write_outside_its_work_dir(pool, tmp_path):
    start(pool)
    marker = f"gpupool-host-tmp-{os.getpid()}"
    job, lines = run(pool, {"run": "for p in /usr/x /etc/x /x /sys/x; do touch $p 2>/dev/null; echo $p=$?; done; "
                                   f"touch /tmp/{marker} && echo tmp=ok; touch /dev/shm/s && echo shm=ok; "
                                   "echo data > kept.txt && echo work=ok; echo home=$HOME pwd=$(pwd)"})
    assert job["state"] == "succeeded", job
    for p in ("/usr/x", "/etc/x", "/x", "/sys/x"):
        assert f"{p}=1" in lines, lines
    assert {"tmp=ok", "shm=ok", "work=ok", "home=/work pwd=/work"} <= set(lines), lines
    assert not os.path.exists(f"/tmp/{marker}"), "the job's /tmp is private"


def test_only_the_assigned_gpu_device_nodes_are_visible(pool, tmp_path):
    assert FAKE_NVML_DIR, "FAKE_NVML_DIR must name the fake NVML build directory"
    devdir = tmp_path / "dev"
    devdir.mkdir()
    for name in ("nvidia0", "nvidia1", "nvidia2", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"):
        (devdir / name).write_text(name + "\n")
    nvml = tmp_path / "nvml.json"
    nvml.write_text(json.dumps({"driver_version": "550.54.15", "cuda_version": 12040, "devices": [
        {"name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-aaaaaaaa-0000-0000-0000-000000000000",
         "memory_total_mib": 81920, "cc": [8, 0], "minor": 2},
        {"name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-bbbbbbbb-0000-0000-0000-000000000000",
         "memory_total_mib": 81920, "cc": [8, 0], "minor": 0},
    ]}))
    env = {"GPUPOOL_NVML_LIBRARY": os.path.join(FAKE_NVML_DIR, "libnvidia-ml.so.1"),
           "FAKE_NVML_CONFIG": str(nvml)}
    start(pool, f"sandbox: {{devices_dir: {devdir}}}\n", tmp_path, env=env, gpus=None)
    job, lines = run(pool, {"run": "echo gpus=$CUDA_VISIBLE_DEVICES; ls /dev | grep nvidia; "
                                   "cat /dev/nvidia*", "resources": {"gpus": 1}})
    assert job["state"] == "succeeded", job
    uuid = lines[0].split("=", 1)[1]
    own = {"GPU-aaaaaaaa-0000-0000-0000-000000000000": "nvidia2",
           "GPU-bbbbbbbb-0000-0000-0000-000000000000": "nvidia0"}[uuid]
    listed = [l for l in lines[1:] if l.startswith("nvidia") and l.count("nvidia") == 1 and "\n" not in l]
    assert sorted(set(listed)) == sorted({own, "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"}), lines
    # A job without GPUs sees no NVIDIA device at all.
    job, lines = run(pool, {"run": "ls /dev | grep -c nvidia || true"})
    assert lines == ["0"], lines


def test_the_machines_loopback_is_reachable_only_with_the_host_network(pool, tmp_path):
    """The pool's server listens on this machine's 127.0.0.1: only a job with
    `network: host` (the provider allows it here) reaches it. (What the
    default network reaches and not: test_network.py.)"""
    start(pool, "policy: {allow_host_network: true}\n", tmp_path)
    probe = ("python3 -c \"import socket,sys; s=socket.socket(); s.settimeout(3); "
             f"s.connect(('127.0.0.1', {pool.port})); print('connected')\" 2>&1 | tail -1")
    job, lines = run(pool, {"run": probe, "network": "host"})
    assert lines == ["connected"], lines
    job, lines = run(pool, {"run": probe})
    assert lines != ["connected"] and any("refused" in l for l in lines), lines
    job, lines = run(pool, {"run": probe, "network": False})
    assert lines != ["connected"] and any("Network is unreachable" in l or "refused" in l for l in lines), lines


# ---- images ------------------------------------------------------------------


def test_image_job_honours_env_workdir_and_is_cached(pool, tmp_path, image_dir):
    start(pool)
    image = f"oci-archive:{image_dir}/busybox.tar"
    first, _ = run(pool, {"image": image, "run": "echo $GREETING; pwd; ls /; id -u; touch /bin/x || echo ro"})
    assert first["state"] == "succeeded", first
    lines = output(pool, first["id"])
    assert lines[:2] == ["hello-from-image", "/app"], lines
    assert "usr" not in lines and "bin" in lines and "work" in lines and "app" in lines
    assert "ro" in lines
    evs = events(pool, first["id"])
    assert any("1/1 layers" in e for e in evs), evs
    # The second start finds the unpacked root in the cache.
    second, lines = run(pool, {"image": image, "env": {"GREETING": "overridden"}, "run": "echo $GREETING"})
    assert lines == ["overridden"], lines
    assert not any("layers" in e for e in events(pool, second["id"])), events(pool, second["id"])
    # No run or command: the image's own entrypoint and command.
    third, lines = run(pool, {"image": image})
    assert lines == ["image-default-cmd"], lines
    # A command replaces the image's CMD and keeps its ENTRYPOINT (sh -c).
    fourth, lines = run(pool, {"image": f"docker-archive:{image_dir}/busybox-docker.tar",
                               "command": ["echo via-entrypoint $GREETING"]})
    assert lines == ["via-entrypoint hello-from-image"], lines


def test_broken_images_fail_with_a_clear_reason(pool, shared_tmp):
    start(pool)
    tmp_path = shared_tmp
    garbage = tmp_path / "garbage.tar"
    garbage.write_bytes(b"this is not an image" * 100)
    job, _ = run(pool, {"image": f"oci-archive:{garbage}", "run": "true"})
    assert job["state"] == "failed", job
    assert f"image oci-archive:{garbage}" in job["reason"], job["reason"]
    job, _ = run(pool, {"image": f"oci-archive:{tmp_path}/missing.tar", "run": "true"})
    assert job["state"] == "failed" and "missing.tar" in job["reason"], job


def test_cancelling_a_job_stops_its_image_pull(pool, tmp_path, shared_tmp):
    # A registry that never answers: the provider's skopeo is a script that hangs.
    skopeo = shared_tmp / "slow-skopeo"
    skopeo.write_text("#!/bin/sh\nexec sleep 317\n")
    skopeo.chmod(0o755)
    start(pool, f"images: {{skopeo: {skopeo}}}\n", tmp_path)
    job_id = pool.submit({"image": "docker://registry.example/slow:1", "run": "true"})
    wait_for(lambda: "pulling image" in pool.job(job_id)["reason"], what="the pull to start")
    pool.cli("cancel", str(job_id), check=True)
    job = pool.wait_finished(job_id, timeout=60)
    assert job["state"] == "cancelled", job
    wait_for(lambda: subprocess.run(["pgrep", "-f", "sleep 317"], capture_output=True).returncode != 0,
             timeout=60, what="the pull to be killed")
    # The agent logs the stop after it has killed the pull, so the event may trail the pgrep check.
    wait_for(lambda: any("stopped" in e for e in events(pool, job_id)), timeout=60,
             what="the stop event")


# ---- limits ------------------------------------------------------------------


def test_memory_hog_is_stopped_with_the_memory_reason(pool):
    start(pool)
    hog = ("python3 -c \"import time\nchunks=[]\nwhile True:\n"
           "    chunks.append(bytearray(16<<20)); time.sleep(0.01)\"")
    job, lines = run(pool, {"run": hog, "resources": {"memory": "128MiB"}})
    assert job["state"] == "failed", job
    assert job["reason"] == "exceeded its memory limit of 128 MiB", job["reason"]


def test_fork_bomb_is_contained_by_the_pid_limit(pool, tmp_path):
    # Its own uid range: other tests' agents (ctest runs files in parallel)
    # run their tasks from 190000 up.
    start(pool, "limits: {pids: 40}\nsandbox: {uids: 195000-195099}\n", tmp_path)
    # The job's shell forks once, before the bomb holds every allowed process,
    # and then becomes the sleep without forking (forking the bomb's pipeline
    # itself, its second fork could fail and end it early).
    job_id = pool.submit({"run": "bomb() { bomb | bomb & }; (bomb) & exec sleep 30", "max_runtime": "4s"})
    pool.wait_state(job_id, "running")

    def task_processes():
        r = subprocess.run(["ps", "-e", "-o", "uid="], capture_output=True, text=True)
        return [int(u) for u in r.stdout.split() if 195000 <= int(u) < 195100]
    peak = 0
    while pool.job(job_id)["state"] == "running":
        peak = max(peak, len(task_processes()))
        time.sleep(0.05)  # within the API's rate limit (50 requests a second per token)
    job = pool.wait_finished(job_id)
    assert job["state"] == "failed" and "max_runtime" in job["reason"], job
    assert 0 < peak <= 40, peak
    wait_for(lambda: not task_processes(), timeout=60, what="every process of the bomb to be gone")


def test_runaway_job_is_stopped_at_max_runtime_with_its_whole_tree(pool):
    start(pool)
    job, _ = run(pool, {"run": "sleep 313 & sleep 313 & sleep 313", "max_runtime": "2s"})
    assert job["state"] == "failed" and job["reason"] == "exceeded max_runtime of 2s", job
    wait_for(lambda: subprocess.run(["pgrep", "-f", "sleep 313"], capture_output=True).returncode != 0,
             timeout=60, what="the job's processes to be gone")


def test_disk_limit_on_the_work_dir(pool):
    start(pool)
    # Many small files: no single file reaches the cap, the agent's count does.
    job, _ = run(pool, {"run": "i=0; while true; do head -c 1048576 /dev/zero > f$i; i=$((i+1)); "
                               "sleep 0.01; done", "resources": {"disk": "32MiB"}})
    assert job["state"] == "failed", job
    assert job["reason"] == "exceeded its disk limit of 32 MiB (work directory)", job["reason"]
    # One big file: the file size limit stops it at once.
    job, _ = run(pool, {"run": "head -c 100000000 /dev/zero > big", "resources": {"disk": "16MiB"}})
    assert job["state"] == "failed", job
    assert job["reason"] == "exceeded its disk limit of 16 MiB (work directory)", job["reason"]


def test_a_job_cannot_raise_the_providers_limits(pool, tmp_path):
    # The provider lends at most 8 MiB of disk; a hostile job asks for a
    # pebibyte to fill the machine's disk anyway.
    start(pool, "limits: {disk: 8MiB}\n", tmp_path)
    job_id = pool.submit({"run": "i=0; while true; do head -c 1048576 /dev/zero > f$i; i=$((i+1)); "
                                 "sleep 0.01; done", "resources": {"disk": "1024TiB"}})
    job = pool.wait_finished(job_id, timeout=120)
    assert job["state"] == "failed", job
    assert job["reason"] == "exceeded its disk limit of 8 MiB (work directory)", job["reason"]
    assert "asked for 1 PiB of disk; this machine lends at most 8 MiB" in events(pool, job_id)


# ---- executors ---------------------------------------------------------------


def test_executor_choice_follows_the_providers_config(pool, tmp_path):
    pool.start_server()
    start(pool, name="plain")  # the default: sandbox only
    start(pool, "executors: [sandbox, process]\n", tmp_path, name="dev")
    start(pool, "executors: [docker, sandbox]\n", tmp_path, name="dockerless")
    nodes = {n["name"]: n for n in pool.nodes()}
    assert nodes["plain"]["labels"].get("gpupool/executor.sandbox") == "true"
    assert "gpupool/executor.process" not in nodes["plain"]["labels"]
    assert nodes["dev"]["labels"].get("gpupool/executor.process") == "true"
    # docker is allowed there but no engine answers: not offered.
    assert "gpupool/executor.docker" not in nodes["dockerless"]["labels"]
    log = (pool.dir / "agent-dockerless.log").read_text()
    assert "executor docker is allowed but does not work: docker" in log

    # `process` runs only where the provider opted in, and sees the host.
    job, lines = run(pool, {"executor": "process", "run": "hostname; test -d /home && echo host-home"})
    assert job["state"] == "succeeded", job
    assert "host-home" in lines
    assert pool.job(job["id"])["attempt_list"][0]["node_id"] == nodes["dev"]["id"]
    # Nobody offers docker: the job waits and says why.
    waiting = pool.submit({"executor": "docker", "image": "docker://busybox:1.36"})
    j = wait_for(lambda: (lambda j: j if "gpupool/executor.docker" in j["reason"] else None)(pool.job(waiting)),
                 what="the reason naming the missing executor")
    assert j["state"] == "pending"
