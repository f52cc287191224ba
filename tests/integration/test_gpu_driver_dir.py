"""--gpu-driver-dir: the NVIDIA user-space libraries come from a directory of
the provider's choosing instead of the system's, for the agent's own GPU
discovery and for every job with GPUs. The directory here holds the test
tree's fake libnvidia-ml.so.1 (a symlink to it, as a driver's sonames are)."""
import json
import os
import signal
import subprocess

from pool import FAKE_NVML_DIR, GPUPOOL, wait_for

CONFIG = {
    "driver_version": "550.54.15",
    "cuda_version": 12040,
    "devices": [
        {"name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-11111111-2222-3333-4444-555555555555",
         "memory_total_mib": 81920, "memory_used_mib": 0, "cc": [8, 0]},
        {"name": "Tesla T4", "uuid": "GPU-66666666-7777-8888-9999-000000000000",
         "memory_total_mib": 15360, "memory_used_mib": 0, "cc": [7, 5]},
    ],
}

# Run in the job's sandbox: loads libnvidia-ml.so.1 the way CUDA programs
# do (by soname, through LD_LIBRARY_PATH) and shows which one it got.
PROBE = """
import ctypes
l = ctypes.CDLL("libnvidia-ml.so.1")
print("fake=%s" % hasattr(l, "fakeNvmlCallCount"))
count = ctypes.c_uint(0)
print("init=%d" % l.nvmlInit_v2())
print("count_rc=%d count=%d" % (l.nvmlDeviceGetCount_v2(ctypes.byref(count)), count.value))
maps = open("/proc/self/maps").read().split()
print("loaded=%s" % sorted(set(p for p in maps if p.endswith("libnvidia-ml.so.1"))))
"""


def driver_dir(tmp_path):
    """A driver directory holding the fake NVML, and its JSON config."""
    assert FAKE_NVML_DIR, "FAKE_NVML_DIR must name the fake NVML build directory"
    d = tmp_path / "driver"
    d.mkdir()
    os.symlink(os.path.join(FAKE_NVML_DIR, "libnvidia-ml.so.1"), d / "libnvidia-ml.so.1")
    config = tmp_path / "nvml.json"
    config.write_text(json.dumps(CONFIG))
    return d, config


def agent_config(tmp_path, text=""):
    """An agent config whose sandbox finds GPU device nodes (stand-ins) in a temp dir."""
    dev = tmp_path / "dev"
    dev.mkdir(exist_ok=True)
    for name in ["nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"]:
        (dev / name).write_text("")
    path = tmp_path / "agent.yaml"
    path.write_text(f"sandbox: {{devices_dir: {dev}}}\n{text}")
    return path


def test_the_agent_and_its_jobs_use_the_driver_directory(pool, tmp_path):
    driver, nvml_config = driver_dir(tmp_path)
    # The flag wins over the config file's gpu_driver_dir (which does not exist).
    config = agent_config(tmp_path, f"gpu_driver_dir: {tmp_path}/no-such-driver\n")
    pool.start_server()
    pool.start_agent("gpu-box", gpus=None, env={"FAKE_NVML_CONFIG": str(nvml_config)},
                     extra=["--gpu-driver-dir", str(driver), "--config", str(config)])
    pool.wait_nodes_ready(1)
    node = pool.nodes()[0]
    assert node["driver_version"] == "550.54.15"
    assert [(g["name"], g["simulated"]) for g in node["gpus"]] == [
        ("NVIDIA A100-SXM4-80GB", False), ("Tesla T4", False)]

    # The job's sandbox has no /tmp of the host: it writes the fake's config itself.
    run = ('printf "%s" "$NVML_JSON" > nvml.json; /usr/bin/python3 -c "$PROBE"; '
           'echo ls=$(ls /gpupool/driver/lib); echo ld=$LD_LIBRARY_PATH')
    job_id = pool.submit({"run": run, "resources": {"gpus": 1},
                          "env": {"PROBE": PROBE, "NVML_JSON": json.dumps(CONFIG),
                                  "FAKE_NVML_CONFIG": "/work/nvml.json",
                                  "LD_LIBRARY_PATH": "/opt/job-libs"}})
    job = pool.wait_finished(job_id)
    out = pool.logs_text(job_id)
    assert job["state"] == "succeeded", (job, out, pool.agent_log_tails())
    assert "fake=True" in out, out  # only the fake exports fakeNvmlCallCount
    assert "init=0" in out and "count_rc=0 count=2" in out, out
    assert "loaded=['/gpupool/driver/lib/libnvidia-ml.so.1']" in out, out
    assert "ls=libnvidia-ml.so.1" in out, out
    assert "ld=/gpupool/driver/lib:/opt/job-libs" in out, out

    # A job without GPUs gets nothing of the driver.
    job_id = pool.submit({"run": "ls /gpupool 2>&1; echo ld=$LD_LIBRARY_PATH", "resources": {"gpus": 0}})
    assert pool.wait_finished(job_id)["state"] == "succeeded"
    out = pool.logs_text(job_id)
    assert "ld=" in out and not any("driver" in line for line in out), out


def test_a_missing_driver_directory_stops_the_agent_naming_the_flag(pool, tmp_path):
    missing = tmp_path / "no-such-driver"
    a_file = tmp_path / "file"
    a_file.write_text("")
    for path, why in [(missing, "No such file or directory"), (a_file, "is not a directory")]:
        r = subprocess.run([GPUPOOL, "agent", "--server", "https://127.0.0.1:9", "--join-token", "x",
                            "--data-dir", str(tmp_path / "agent"), "--gpu-driver-dir", str(path)],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 2, (r.stdout, r.stderr)
        assert "gpupool agent: --gpu-driver-dir: " in r.stderr and why in r.stderr, r.stderr
        assert str(path) in r.stderr

    # The config file's, once the agent has enrolled: its name and the field.
    pool.start_server()
    config = agent_config(tmp_path, f"gpu_driver_dir: {missing}\n")
    agent = pool.start_agent("box", extra=["--config", str(config)])
    assert agent.wait(timeout=30) == 2
    log = (tmp_path / "agent-box.log").read_text()
    assert f"{config}: gpu_driver_dir: cannot use {missing}: No such file or directory" in log, log

    r = subprocess.run([GPUPOOL, "dev", "--data-dir", str(tmp_path / "dev-pool"), "--gpu-driver-dir", str(missing)],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert f"gpupool dev: --gpu-driver-dir: cannot use {missing}" in r.stderr, r.stderr
    assert not (tmp_path / "dev-pool").exists()  # nothing started


def test_dev_passes_the_driver_directory_to_its_agents(tmp_path):
    driver, nvml_config = driver_dir(tmp_path)
    env_file = tmp_path / "env"
    env = dict(os.environ, FAKE_NVML_CONFIG=str(nvml_config))
    log = open(tmp_path / "dev.log", "ab")
    # No --simulate-gpus: with a driver directory the agents read their GPUs through it.
    p = subprocess.Popen([GPUPOOL, "dev", "--agents", "1", "--listen", "127.0.0.1:0", "--data-dir",
                          str(tmp_path / "dev"), "--env-file", str(env_file), "--no-config", "--log-level",
                          "warn", "--gpu-driver-dir", str(driver)],
                         stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    log.close()
    try:
        wait_for(lambda: env_file.exists() and "GPUPOOL_TOKEN" in env_file.read_text(), what="env file")
        for line in env_file.read_text().splitlines():
            k, v = line.replace("export ", "").split("=", 1)
            env[k] = v
        env["GPUPOOL_CONFIG"] = str(tmp_path / "none.json")

        def nodes():
            r = subprocess.run([GPUPOOL, "nodes"], env=env, capture_output=True, text=True, timeout=30)
            return r.stdout if "NVIDIA A100-SXM4-80GB" in r.stdout else None
        out = wait_for(nodes, timeout=30, what="the dev agent's GPUs from the driver directory")
        assert "simulated" not in out, out
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=30)
