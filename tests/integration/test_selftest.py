"""`gpupool agent selftest` on this machine: the GPU driver (the test tree's
fake NVML and CUDA driver in a driver directory, loaded as the agent loads
them), CUDA inside the real sandbox (gpupool-cuda-probe run as a job with
the GPU), bubblewrap's namespaces, cgroups, disk, and a real server over
TLS (the join token's CA pin, the clock, a download); then what it says
when the driver is missing, the CA is not the pool's, CUDA fails in the
sandbox or the server cannot be reached."""
import json
import os
import shutil
import subprocess
import tempfile
import urllib.error
import urllib.request

import pytest

from fake_gpus import NVML, fake_driver
from pool import GPUPOOL, wait_for  # noqa: F401  (wait_for: the pool fixture's module)


def selftest(*args, env=None):
    """Runs the selftest with -o json; (exit status, report)."""
    r = subprocess.run([GPUPOOL, "agent", "selftest", "-o", "json", *args], capture_output=True,
                       text=True, timeout=180, env=dict(os.environ, **(env or {})))
    assert r.stdout, r.stderr
    return r.returncode, {c["name"]: c for c in json.loads(r.stdout)["checks"]}


@pytest.fixture
def gpu(tmp_path):
    """The fake driver, and a directory every account can read that holds its
    device file, which the agent config shows the sandbox (read-only) so
    that the fake CUDA driver finds it there (under /var/tmp: a job's /tmp
    is a tmpfs of its own). Yields (driver dir, device file, agent config)."""
    driver, _, sandbox = fake_driver(tmp_path, NVML)
    shared = tempfile.mkdtemp(prefix="gpupool-selftest-", dir="/var/tmp")
    os.chmod(shared, 0o755)
    device_file = os.path.join(shared, "nvml.json")
    with open(device_file, "w") as f:
        json.dump(NVML, f)
    os.chmod(device_file, 0o644)
    # nvidia-smi as the driver directory has it: one GPU, 3 uncorrected ECC errors.
    smi = driver / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho '0, 3'\n")
    smi.chmod(0o755)
    config = tmp_path / "agent.yaml"
    config.write_text(sandbox.rstrip("}\n") + ", host_paths: [/usr, /bin, /sbin, /lib, /lib64, "
                      f"/etc, {shared}]}}\n")
    yield driver, device_file, config
    shutil.rmtree(shared, ignore_errors=True)


def machine_args(tmp_path, driver, config):
    return ["--data-dir", str(tmp_path / "agent"), "--gpu-driver-dir", str(driver), "--config",
            str(config)]


def test_a_machine_ready_to_lend_passes_every_check(pool, tmp_path, gpu):
    pool.start_server()
    driver, device_file, config = gpu
    code, checks = selftest(
        "--server", pool.url, "--join-token", pool.join_token(),
        *machine_args(tmp_path, driver, config), "--probe-env", f"FAKE_NVML_CONFIG={device_file}",
        env={"FAKE_NVML_CONFIG": device_file})
    assert code == 0, checks
    assert checks["gpu driver"]["result"] == "pass", checks
    assert "NVIDIA L4" in checks["gpu driver"]["detail"]
    assert "550.54.15" in checks["gpu driver"]["detail"]
    # The ECC errors the driver's nvidia-smi reports: a warning, not a failure.
    assert checks["gpu health"]["result"] == "warn", checks["gpu health"]
    assert "GPU 0: 3 uncorrected ECC errors" in checks["gpu health"]["detail"]
    # cuInit ran in a job's sandbox and saw the one GPU.
    assert checks["cuda in sandbox"]["result"] == "pass", checks["cuda in sandbox"]
    assert "1 device(s) visible" in checks["cuda in sandbox"]["detail"]
    assert checks["user namespaces"]["result"] == "pass", checks["user namespaces"]
    # Delegation depends on how this machine runs the tests: never a failure.
    assert checks["cgroup v2"]["result"] in ("pass", "warn"), checks["cgroup v2"]
    assert checks["disk"]["result"] in ("pass", "warn"), checks["disk"]
    assert checks["server"]["result"] == "pass", checks["server"]
    assert checks["pool CA"]["result"] == "pass", checks["pool CA"]
    assert pool.ca_fingerprint[:23] in checks["pool CA"]["detail"]
    assert checks["clock"]["result"] == "pass", checks["clock"]  # the same clock
    assert checks["bandwidth"]["result"] == "pass", checks["bandwidth"]
    assert "Mbit/s" in checks["bandwidth"]["detail"]
    # The probe's scratch space is gone.
    assert not os.path.exists(tmp_path / "agent" / "selftest")


def test_cuda_failing_in_the_sandbox_is_a_failure_even_when_nvml_works(tmp_path, gpu):
    """The probe runs in the sandbox with a job's environment, not the
    agent's: without the device file's variable there, the fake CUDA driver
    finds no device, as a real one does without its device nodes."""
    driver, device_file, config = gpu
    code, checks = selftest(*machine_args(tmp_path, driver, config),
                            env={"FAKE_NVML_CONFIG": device_file})
    assert code == 1
    assert checks["gpu driver"]["result"] == "pass", checks
    assert checks["cuda in sandbox"]["result"] == "fail", checks["cuda in sandbox"]
    assert "cuInit failed (CUDA error 100)" in checks["cuda in sandbox"]["detail"]
    assert "nvidia-smi" in checks["cuda in sandbox"]["fix"]
    assert checks["server"]["result"] == "skip"


def test_no_driver_says_how_to_install_one(tmp_path):
    r = subprocess.run([GPUPOOL, "agent", "selftest", "--data-dir", str(tmp_path / "agent"),
                        "--nvml-library", str(tmp_path / "no" / "libnvidia-ml.so.1")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r
    assert "gpu driver" in r.stdout and "fail" in r.stdout
    assert "What to do:" in r.stdout
    assert "install the NVIDIA driver" in r.stdout
    code, checks = selftest("--data-dir", str(tmp_path / "agent"), "--nvml-library",
                            str(tmp_path / "no" / "libnvidia-ml.so.1"))
    assert checks["cuda in sandbox"]["result"] == "skip"


def test_a_server_whose_ca_is_not_the_pools_fails_the_ca_check(pool, tmp_path):
    """A join token naming another CA: what an agent would see behind an
    intercepting proxy or with a stale token. The server is reached (without
    trusting it), and the CA check fails, saying what to do."""
    pool.start_server()
    forged = pool.join_token().split(".", 1)[0] + "." + "ab" * 32
    code, checks = selftest("--server", pool.url, "--join-token", forged,
                            "--simulate-gpus", "1xA100:80GiB", "--data-dir", str(tmp_path / "a"))
    assert code == 1
    assert checks["server"]["result"] == "pass", checks["server"]
    assert checks["pool CA"]["result"] == "fail", checks["pool CA"]
    assert "gpupool admin join-token" in checks["pool CA"]["fix"]
    assert checks["gpu driver"]["result"] == "warn"  # simulated GPUs say so


def test_an_unreachable_server_fails_the_server_check(tmp_path):
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens
    code, checks = selftest("--server", f"https://127.0.0.1:{port}", "--simulate-gpus",
                            "1xA100:80GiB", "--data-dir", str(tmp_path / "a"))
    assert code == 1
    assert checks["server"]["result"] == "fail", checks["server"]
    assert "firewall" in checks["server"]["fix"]


def test_the_download_endpoint_takes_any_token_and_bounds_its_size(pool):
    pool.start_server()
    secret = pool.join_token().split(".", 1)[0]

    def get(n, token):
        req = urllib.request.Request(f"{pool.url}/v1/selftest/bytes?n={n}",
                                     headers={"Authorization": "Bearer " + token} if token else {})
        try:
            with urllib.request.urlopen(req, context=pool.ssl, timeout=30) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()
    status, body = get(4096, secret)
    assert (status, len(body)) == (200, 4096)
    assert len(set(body)) > 200  # not zeros: nothing on the way compresses it
    assert get(4096, "")[0] == 401
    assert get(64 * 2**20 + 1, secret)[0] == 400
    assert get(-1, secret)[0] == 400
    assert get("1e9", secret)[0] == 400
