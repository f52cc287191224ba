"""A machine's NVIDIA driver, faked for the tests that run real jobs on
"GPUs": the test tree's fake NVML (tests/fake_nvml) and fake CUDA driver
(tests/fake_cuda) in a driver directory, as `--gpu-driver-dir` takes one,
NVML's device file, and stand-ins for the device nodes the sandbox binds."""
import json
import os

from pool import FAKE_CUDA_DIR, FAKE_NVML_DIR

# One 8 GiB GPU: the machine of the share and MPS tests.
GPU = "GPU-11111111-2222-3333-4444-555555555555"
NVML = {
    "driver_version": "550.54.15",
    "cuda_version": 12040,
    "devices": [{"name": "NVIDIA L4", "uuid": GPU, "memory_total_mib": 8192,
                 "memory_used_mib": 0, "cc": [8, 9]}],
}


def fake_driver(tmp_path, nvml, cuda=True, minors=(0,)):
    """Writes the driver directory (the fake NVML; with `cuda`, the fake
    libcuda.so.1 too), `nvml` (a dict: the fake NVML's devices) as its device
    file, and /dev/nvidia<minor> for each of `minors` plus nvidiactl and
    nvidia-uvm. Returns (driver directory, device file, the agent config's
    line that points its sandbox at the device nodes)."""
    assert FAKE_NVML_DIR, "FAKE_NVML_DIR must name the fake NVML build directory"
    assert FAKE_CUDA_DIR or not cuda, "FAKE_CUDA_DIR must name the fake CUDA build directory"
    driver = tmp_path / "driver"
    driver.mkdir()
    os.symlink(os.path.join(FAKE_NVML_DIR, "libnvidia-ml.so.1"), driver / "libnvidia-ml.so.1")
    if cuda:
        os.symlink(os.path.join(FAKE_CUDA_DIR, "libcuda.so.1"), driver / "libcuda.so.1")
    device_file = tmp_path / "nvml.json"
    device_file.write_text(json.dumps(nvml))
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in [f"nvidia{m}" for m in minors] + ["nvidiactl", "nvidia-uvm"]:
        (dev / name).write_text("")
    return driver, device_file, f"sandbox: {{devices_dir: {dev}}}\n"
