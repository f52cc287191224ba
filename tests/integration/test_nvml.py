"""An agent on a machine with "real" GPUs: the fake libnvidia-ml.so.1 built by
the test tree, loaded through the agent's ordinary dlopen path."""
import json
import os

from pool import FAKE_NVML_DIR, wait_for

CONFIG = {
    "driver_version": "550.54.15",
    "cuda_version": 12040,
    "devices": [
        {"name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-11111111-2222-3333-4444-555555555555",
         "memory_total_mib": 81920, "memory_used_mib": 1024, "cc": [8, 0], "utilization": 37,
         "temperature": 55, "power_mw": 210000, "processes": [{"pid": 4321, "used_mib": 1000}]},
        {"name": "Tesla T4", "uuid": "GPU-66666666-7777-8888-9999-000000000000",
         "memory_total_mib": 15360, "memory_used_mib": 0, "cc": [7, 5], "utilization": 0,
         "temperature": 40, "power_mw": 30000},
    ],
}


def fake_devices(tmp_path, count):
    """An agent config whose sandbox finds GPU device nodes (stand-ins) in a temp dir."""
    dev = tmp_path / "dev"
    dev.mkdir(exist_ok=True)
    for name in [f"nvidia{i}" for i in range(count)] + ["nvidiactl", "nvidia-uvm"]:
        (dev / name).write_text("")
    config = tmp_path / "agent.yaml"
    config.write_text(f"sandbox: {{devices_dir: {dev}}}\n")
    return ["--config", str(config)]


def nvml_env(tmp_path, config):
    path = tmp_path / "nvml.json"
    path.write_text(json.dumps(config))
    return path, {"GPUPOOL_NVML_LIBRARY": os.path.join(FAKE_NVML_DIR, "libnvidia-ml.so.1"),
                  "FAKE_NVML_CONFIG": str(path)}


def test_agent_reports_nvml_gpus_and_telemetry(pool, tmp_path):
    assert FAKE_NVML_DIR, "FAKE_NVML_DIR must name the fake NVML build directory"
    path, env = nvml_env(tmp_path, CONFIG)
    pool.start_server(extra=["--heartbeat-ms", "300"])
    pool.start_agent("gpu-box", gpus=None, env=env, extra=fake_devices(tmp_path, 2))
    pool.wait_nodes_ready(1)
    node = pool.nodes()[0]
    assert node["driver_version"] == "550.54.15"
    assert node["cuda_version"] == "12.4"
    gpus = node["gpus"]
    assert [(g["name"], g["memory_mib"], g["compute_capability"], g["simulated"]) for g in gpus] == [
        ("NVIDIA A100-SXM4-80GB", 81920, "8.0", False), ("Tesla T4", 15360, "7.5", False)]
    tel = wait_for(lambda: node_telemetry(pool), what="telemetry from a heartbeat")
    assert tel["memory_used_mib"] == 1024
    assert tel["utilization_percent"] == 37
    assert tel["temperature_c"] == 55
    assert tel["power_mw"] == 210000
    assert tel["processes"] == [{"pid": 4321, "used_memory_mib": 1000}]

    # Telemetry follows the GPU: the next heartbeats carry the new values.
    CONFIG2 = json.loads(json.dumps(CONFIG))
    CONFIG2["devices"][0]["utilization"] = 99
    path.write_text(json.dumps(CONFIG2))
    wait_for(lambda: (node_telemetry(pool) or {}).get("utilization_percent") == 99, what="new utilization")

    # A job asking for a T4 lands on the T4 and sees its UUID.
    job_id = pool.submit({"run": "echo $CUDA_VISIBLE_DEVICES", "resources": {"gpus": 1, "gpu_models": ["T4"]}})
    assert pool.wait_finished(job_id)["state"] == "succeeded"
    assert pool.logs_text(job_id) == ["GPU-66666666-7777-8888-9999-000000000000"]
    r = pool.cli("nodes", check=True)
    assert "NVIDIA A100-SXM4-80GB" in r.stdout and "simulated" not in r.stdout and "99%" in r.stdout


def node_telemetry(pool):
    g = pool.nodes()[0]["gpus"][0]
    return g.get("telemetry")


def test_agent_without_a_driver_lends_cpu_only(pool, tmp_path):
    pool.start_server()
    env = {"GPUPOOL_NVML_LIBRARY": os.path.join(FAKE_NVML_DIR, "libnvidia-ml.so.1")}  # no config: init fails
    pool.start_agent("cpu-box", gpus=None, env=env)
    pool.wait_nodes_ready(1)
    assert pool.nodes()[0]["gpus"] == []
    job_id = pool.submit({"run": "echo cpu only", "resources": {"gpus": 0}})
    assert pool.wait_finished(job_id)["state"] == "succeeded"
    gpu_job = pool.submit({"run": "true", "resources": {"gpus": 1}})
    wait_for(lambda: "no node has" in pool.job(gpu_job)["reason"], what="a reason")
