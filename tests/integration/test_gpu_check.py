"""scripts/gpu-check.sh on a machine without an NVIDIA GPU (ours and CI's):
it must say so plainly and measure nothing, with its own exit status, so a
report from it can never be mistaken for a measurement."""
import os
import subprocess

SOURCE = os.environ.get("GPUPOOL_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))


def test_without_a_gpu_the_check_says_so_and_measures_nothing(tmp_path):
    assert not os.path.exists("/dev/nvidiactl"), "this test is for machines without an NVIDIA GPU"
    r = subprocess.run([os.path.join(SOURCE, "scripts", "gpu-check.sh"), str(tmp_path / "out")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "NO NVIDIA GPU FOUND" in r.stdout
    assert "nothing was measured" in r.stdout
    assert "PASS" not in r.stdout and " us," not in r.stdout
