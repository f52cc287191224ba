#!/usr/bin/env python3
"""The whole pool on a machine with a real NVIDIA GPU: a server and one agent
(`gpupool dev --simulate-gpus none`), the agent discovering the GPU through
the driver's NVML, and PyTorch jobs run through the agent's normal path
(its default executor: the sandbox where bubblewrap works, else `process`).

    scripts/gpu-pool-check.py --gpupool build/bin/gpupool [--out DIR]

What it checks, each printed as PASS or FAIL with what was seen:
  1. the node's GPUs as the agent reports them (model, memory, not simulated);
  2. a whole-GPU job: PyTorch sees one device of the GPU's model and
     multiplies matrices on it;
  3. a share with a memory cap (gpus: 0.5, gpu_memory: CAP): PyTorch's
     mem_get_info() reports the cap and allocating past it raises
     torch.cuda.OutOfMemoryError;
  4. compute shares through the agent's arbiter: jobs with gpus 0.3 and 0.7,
     both multiplying 8192x8192 matrices for the same 15 s, split the GPU's
     throughput 3:7 (target within 10%).
Exit status 0 when all pass, 1 when one fails, 2 when there is no GPU here.
Only the standard library; the jobs use the `python3` given by --python
(default: the one on PATH), which must have PyTorch with CUDA.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

PREAMBLE = "import os, sys, time, torch\n"

WHOLE = PREAMBLE + """
n = torch.cuda.device_count()
name = torch.cuda.get_device_name(0)
free, total = torch.cuda.mem_get_info()
a = torch.randn(4096, 4096, device="cuda")
s = float((a @ a).sum().item())
print(f"devices {n}\\nname {name}\\ntotal_mib {total >> 20}\\n"
      f"visible {os.environ.get('CUDA_VISIBLE_DEVICES')}\\nmatmul_ok {s == s}", flush=True)
"""

CAP = PREAMBLE + """
cap = int(sys.argv[1]) << 20
free, total = torch.cuda.mem_get_info()
held, chunk = [], 256 << 20
try:
    while len(held) * chunk < 2 * cap:
        held.append(torch.empty(chunk, dtype=torch.uint8, device="cuda"))
    print("oom no", flush=True)
except torch.cuda.OutOfMemoryError:
    print("oom yes", flush=True)
print(f"total_mib {total >> 20}\\nallocated_mib {len(held) * chunk >> 20}", flush=True)
"""

SPIN = PREAMBLE + """
start, seconds = float(sys.argv[1]), float(sys.argv[2])
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
(a @ a).sum().item()
while time.time() < start:
    time.sleep(0.01)
n, t0 = 0, time.time()
while time.time() - t0 < seconds:
    for _ in range(8):
        a @ a
    torch.cuda.synchronize()
    n += 8
print(f"matmuls {n}\\nlate_s {t0 - start:.3f}", flush=True)
"""


class Pool:
    def __init__(self, gpupool, env):
        self.gpupool, self.env = gpupool, env

    def cli(self, *args, check=True):
        r = subprocess.run([self.gpupool, *args], env=self.env, capture_output=True, text=True,
                           timeout=60)
        if check and r.returncode != 0:
            raise RuntimeError(f"gpupool {' '.join(args)}: {r.stderr.strip()}")
        return r.stdout

    def nodes(self):
        return json.loads(self.cli("nodes", "-o", "json") or "[]")

    def submit(self, spec, workdir):
        path = os.path.join(workdir, f"spec-{time.monotonic_ns()}.json")
        with open(path, "w") as f:
            json.dump(spec, f)
        return json.loads(self.cli("submit", path, "-o", "json"))["id"]

    def job(self, job_id):
        return json.loads(self.cli("job", str(job_id), "-o", "json"))

    def wait(self, job_id, timeout=240):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            job = self.job(job_id)
            if job["state"] in ("succeeded", "failed", "cancelled"):
                return job
            time.sleep(0.5)
        raise RuntimeError(f"job {job_id} did not finish in {timeout} s: {self.job(job_id)}")

    def logs(self, job_id):
        """The job's output, stdout and stderr (which the CLI prints apart)."""
        r = subprocess.run([self.gpupool, "logs", str(job_id)], env=self.env, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
        return r.stdout


def said(out, key):
    for line in out.splitlines():
        if line.startswith(key + " "):
            return line[len(key) + 1:]
    return None


def start_pool(args, work):
    env = dict(os.environ)
    config = os.path.join(work, "agent.yaml")
    with open(config, "w") as f:
        # A sandboxed job without an image sees only the host paths listed
        # here: add where the jobs' Python and its PyTorch are installed.
        paths = ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt"]
        where = subprocess.run([args.python, "-c", "import os, sys; print(sys.prefix); "
                                "print(sys.base_prefix); print(os.path.realpath(sys.executable))"],
                               capture_output=True, text=True).stdout.split()
        for path in where[:2] + [os.path.dirname(p) for p in where[2:]]:
            if not any(path == p or path.startswith(p + "/") for p in paths):
                paths.append(path)
        f.write("executors: [sandbox, process]\nsandbox:\n  host_paths: [" + ", ".join(paths)
                + "]\n")
        if args.devices_dir:
            f.write(f"  devices_dir: {args.devices_dir}\n")
    cmd = [args.gpupool, "dev", "--agents", "1", "--simulate-gpus", "none", "--listen",
           "127.0.0.1:0", "--data-dir", os.path.join(work, "pool"), "--env-file",
           os.path.join(work, "env"), "--no-config", "--log-level", "info", "--agent-config",
           config]
    if args.gpu_driver_dir:
        cmd += ["--gpu-driver-dir", args.gpu_driver_dir]
    log = open(os.path.join(args.out, "pool.log"), "w")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    envfile = os.path.join(work, "env")
    for _ in range(300):
        if os.path.exists(envfile) and os.path.getsize(envfile) > 0:
            break
        if proc.poll() is not None:
            raise RuntimeError(f"gpupool dev exited {proc.returncode}; see pool.log")
        time.sleep(0.1)
    with open(envfile) as f:
        for line in f:
            key, _, value = line.strip().removeprefix("export ").partition("=")
            if key:
                env[key] = value.strip("'\"")
    return proc, Pool(args.gpupool, env)


def report(results, name, ok, detail):
    results.append(ok)
    print(f"{name}: {'PASS' if ok else 'FAIL'}: {detail}", flush=True)


def check_node(pool, args, results):
    for _ in range(600):
        nodes = [n for n in pool.nodes() if n.get("state") == "ready"]
        if nodes:
            break
        time.sleep(0.1)
    else:
        raise RuntimeError(f"no node became ready: {pool.nodes()}")
    node = nodes[0]
    gpus = node.get("gpus", [])
    print("node:", json.dumps(node))
    with open(os.path.join(args.out, "pool.log")) as f:
        print("".join(line for line in f if " executors: " in line or "sandbox" in line), end="")
    ok = len(gpus) > 0 and all(not g.get("simulated") and g.get("memory_mib", 0) > 0 for g in gpus)
    report(results, "1. node's GPUs from NVML", ok,
           "; ".join(f"{g.get('name')} {g.get('memory_mib')} MiB simulated={g.get('simulated')}"
                     for g in gpus))
    return node


def executor(args):
    return {"executor": args.executor} if args.executor else {}


def run_one(pool, work, args, script, argv, resources, label):
    spec = {"name": label, "command": [args.python, "-c", script, *argv],
            "resources": resources, "max_runtime": "10m", **executor(args)}
    job_id = pool.submit(spec, work)
    job = pool.wait(job_id)
    out = pool.logs(job_id)
    with open(os.path.join(args.out, f"job-{label}.log"), "w") as f:
        f.write(json.dumps(job, indent=1) + "\n" + out)
    return job, out


def check_whole(pool, work, args, node, results):
    job, out = run_one(pool, work, args, WHOLE, [], {"gpus": 1}, "whole")
    model = node["gpus"][0].get("name", "")
    ok = (job["state"] == "succeeded" and said(out, "devices") == "1"
          and said(out, "matmul_ok") == "True" and said(out, "name") == model)
    report(results, "2. whole GPU, PyTorch", ok,
           f"state {job['state']}, devices {said(out, 'devices')}, name {said(out, 'name')}, "
           f"memory {said(out, 'total_mib')} MiB, CUDA_VISIBLE_DEVICES {said(out, 'visible')}, "
           f"executor {args.executor or '(the node default)'}")


def check_cap(pool, work, args, node, results):
    cap_mib = node["gpus"][0]["memory_mib"] // 4
    job, out = run_one(pool, work, args, CAP, [str(cap_mib)],
                       {"gpus": 0.5, "gpu_memory": f"{cap_mib}MiB"}, "cap")
    total, got = int(said(out, "total_mib") or -1), int(said(out, "allocated_mib") or -1)
    ok = (job["state"] == "succeeded" and said(out, "oom") == "yes" and total == cap_mib
          and cap_mib - 1024 <= got <= cap_mib)
    report(results, "3. share with a memory cap", ok,
           f"cap {cap_mib} MiB: mem_get_info total {total} MiB, allocated {got} MiB, "
           f"OutOfMemoryError {said(out, 'oom')}, state {job['state']}")


def check_compute_shares(pool, work, args, results):
    seconds = 12
    start = time.time() + 30  # after both have imported PyTorch and started CUDA
    ids = {}
    for label, share in (("three", 0.3), ("seven", 0.7)):
        spec = {"name": label, "command": [args.python, "-c", SPIN, str(start), str(seconds)],
                "resources": {"gpus": share}, "max_runtime": "10m", **executor(args)}
        ids[label] = pool.submit(spec, work)
    counts, late = {}, {}
    for label, job_id in ids.items():
        job = pool.wait(job_id)
        out = pool.logs(job_id)
        with open(os.path.join(args.out, f"job-{label}.log"), "w") as f:
            f.write(json.dumps(job, indent=1) + "\n" + out)
        counts[label] = int(said(out, "matmuls") or 0) if job["state"] == "succeeded" else 0
        late[label] = said(out, "late_s")
    ratio = counts["seven"] / counts["three"] if counts["three"] else 0
    ok = abs(ratio / (7 / 3) - 1) <= 0.10
    report(results, "4. compute shares 0.3 and 0.7 at once", ok,
           f"{counts['three']} and {counts['seven']} bf16 8192^3 matmuls in {seconds} s, ratio "
           f"1:{ratio:.2f} (target 1:2.33 within 10%); late starts {late}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gpupool", required=True)
    parser.add_argument("--python", default=shutil.which("python3") or "python3")
    parser.add_argument("--out", default=tempfile.mkdtemp(prefix="gpu-pool-check."))
    parser.add_argument("--gpu-driver-dir", help="NVIDIA libraries from DIR (the tests' fakes)")
    parser.add_argument("--devices-dir", help="the device nodes' directory (the tests' fakes)")
    parser.add_argument("--executor", help="run the jobs with this executor (default: the node's)")
    parser.add_argument("--only", help="comma-separated check numbers to run (default all)")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if not args.gpu_driver_dir and not os.path.exists("/dev/nvidiactl"):
        print("gpu-pool-check: NO NVIDIA GPU FOUND (no /dev/nvidiactl); nothing was measured")
        return 2
    only = set((args.only or "1,2,3,4").split(","))
    work = tempfile.mkdtemp(prefix="gpc.")
    proc, pool = start_pool(args, work)
    results = []
    try:
        node = check_node(pool, args, results)
        if "2" in only:
            check_whole(pool, work, args, node, results)
        if "3" in only:
            check_cap(pool, work, args, node, results)
        if "4" in only:
            check_compute_shares(pool, work, args, results)
    except Exception as e:  # report, then stop the pool and keep the logs
        report(results, "error", False, str(e))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
    return 0 if results and all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
