"""Reference runs of examples/distributed/train_ddp.py outside the pool.

The pool's distributed tests compare a gang's final parameters with these:
the same script and arguments, its ranks started as plain processes on
127.0.0.1 with torchrun's variables (or by torchrun itself), each rank with
its own checkpoint directory, as each rank has in the pool.

    /usr/bin/python3 ddp_reference.py      # checks the script itself (about 20 s):
                                           # uninterrupted, torchrun, killed and resumed
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "../.."))
EXAMPLE_DIR = os.path.join(REPO, "examples/distributed")
TRAIN_DDP = os.path.join(EXAMPLE_DIR, "train_ddp.py")
# Debian's python3-torch is installed for the system Python only.
PYTHON = os.environ.get("GPUPOOL_TORCH_PYTHON", "/usr/bin/python3")
TORCHRUN = os.environ.get("GPUPOOL_TORCHRUN", "/usr/bin/torchrun")
FINAL = re.compile(r"GPUPOOL_DDP_FINAL (\{.*\})")


def parse_final(lines):
    """The result dict of the (single) GPUPOOL_DDP_FINAL line in `lines`."""
    found = [FINAL.search(l) for l in lines]
    found = [m for m in found if m]
    assert len(found) == 1, f"expected one GPUPOOL_DDP_FINAL line, got {len(found)}"
    return json.loads(found[0].group(1))


def assert_same_params(got, want, tol=1e-5):
    """Same steps and world size, and every parameter within `tol`."""
    assert (got["steps"], got["world_size"], got["param_count"]) == \
        (want["steps"], want["world_size"], want["param_count"]), (got, want)
    if got["params_sha256"] == want["params_sha256"]:
        return
    assert got["params"] is not None and want["params"] is not None, "hashes differ, no params listed"
    worst = max(abs(a - b) for a, b in zip(got["params"], want["params"]))
    assert worst <= tol, f"parameters differ from the reference by up to {worst}"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env():
    """This environment without the pool's variables or a rendezvous."""
    drop = ("GPUPOOL_", "MASTER_", "TORCHELASTIC_")
    names = {"WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK"}
    return {k: v for k, v in os.environ.items() if not k.startswith(drop) and k not in names}


def start_ranks(args, workdir, world=2):
    """Starts `world` ranks as plain processes; rank r's checkpoints in workdir/rank-r."""
    port = free_port()
    procs = []
    for rank in range(world):
        env = clean_env()
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(world),
                   RANK=str(rank), LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")
        ckpt = os.path.join(workdir, f"rank-{rank}")
        os.makedirs(ckpt, exist_ok=True)
        out = open(os.path.join(workdir, f"rank-{rank}.out"), "ab")
        procs.append(subprocess.Popen([PYTHON, TRAIN_DDP, *args, "--checkpoint-dir", ckpt],
                                      stdout=out, stderr=subprocess.STDOUT, env=env, cwd=workdir,
                                      start_new_session=True))
        out.close()
    return procs


def output_of(workdir, rank):
    path = os.path.join(workdir, f"rank-{rank}.out")
    with open(path, errors="replace") as f:
        return f.read().splitlines()


def wait_all(procs, workdir, timeout=120):
    deadline = time.time() + timeout
    try:
        for rank, p in enumerate(procs):
            code = p.wait(timeout=max(1, deadline - time.time()))
            assert code == 0, f"rank {rank} exited {code}:\n" + "\n".join(output_of(workdir, rank)[-30:])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def run_ranks(args, world=2, workdir=None):
    """Runs the script to its end as `world` plain processes; returns rank 0's result."""
    with tempfile.TemporaryDirectory(prefix="ddp-ref-") as tmp:
        workdir = workdir or tmp
        procs = start_ranks(args, workdir, world)
        wait_all(procs, workdir)
        return parse_final(output_of(workdir, 0))


_references = {}


def reference(args, world=2):
    """The result of an uninterrupted run (computed once per argument list)."""
    key = (tuple(args), world)
    if key not in _references:
        _references[key] = run_ranks(list(args), world)
    return _references[key]


def run_torchrun(args, nproc=2):
    """The same on one node under torchrun: the ranks share ./checkpoints.

    Debian's torchrun (PyTorch 1.13 on Python 3.11) fails with its default
    --redirects 0 (Python 3.11 no longer lists Std.NONE among the flag's
    members); redirecting stdout to its log directory and teeing it back works."""
    with tempfile.TemporaryDirectory(prefix="ddp-torchrun-") as tmp:
        r = subprocess.run([TORCHRUN, "--nnodes", "1", "--nproc_per_node", str(nproc),
                            "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
                            "--redirects", "1", "--tee", "1", "--log_dir", os.path.join(tmp, "logs"),
                            TRAIN_DDP, *args], cwd=tmp, env=clean_env(), capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        # torchrun prefixes each line with "[default<rank>]:"
        return parse_final([l for l in r.stdout.splitlines() if l.startswith("[default0]:")])


def run_killed_and_resumed(args, kill_after_checkpoint, world=2):
    """Runs until rank 0 reports ckpt-<kill_after_checkpoint>, kill -9 every
    rank, then runs again from the checkpoints; returns (result, resumed lines)."""
    with tempfile.TemporaryDirectory(prefix="ddp-kill-") as tmp:
        procs = start_ranks(args, tmp, world)
        marker = f"checkpoint ckpt-{kill_after_checkpoint} "
        deadline = time.time() + 60
        try:
            while not any(marker in l for l in output_of(tmp, 0)):
                assert time.time() < deadline and all(p.poll() is None for p in procs), \
                    "\n".join(output_of(tmp, 0))
                time.sleep(0.02)
        finally:
            for p in procs:
                p.send_signal(signal.SIGKILL)
                p.wait()
        for rank in range(world):
            os.rename(os.path.join(tmp, f"rank-{rank}.out"), os.path.join(tmp, f"rank-{rank}.first"))
        procs = start_ranks(args, tmp, world)
        wait_all(procs, tmp)
        resumed = [l for rank in range(world) for l in output_of(tmp, rank) if "resumed from step" in l]
        return parse_final(output_of(tmp, 0)), resumed


def main():
    args = ["--steps", "60", "--checkpoint-every", "10", "--sleep", "0.02"]
    began = time.time()
    want = reference(args)
    print(f"reference: sha256 {want['params_sha256'][:16]}..., {want['param_count']} params, "
          f"median step {want['median_step_ms']} ms")
    again = run_ranks(args)
    assert again["params_sha256"] == want["params_sha256"], "two uninterrupted runs differ"
    print("uninterrupted again: identical")
    tr = run_torchrun(args)
    assert_same_params(tr, want)
    print(f"torchrun --nproc_per_node 2: {'identical' if tr['params_sha256'] == want['params_sha256'] else 'within 1e-5'}")
    got, resumed = run_killed_and_resumed(args, 30)
    assert_same_params(got, want)
    assert len(resumed) == 2 and all("resumed from step 30 " in l for l in resumed), resumed
    print(f"kill -9 after ckpt-30, resumed: "
          f"{'identical' if got['params_sha256'] == want['params_sha256'] else 'within 1e-5'}")
    print(f"ok in {time.time() - began:.1f} s")


if __name__ == "__main__":
    main()
