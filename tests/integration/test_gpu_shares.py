"""Memory caps of fractional GPU shares, enforced by libgpushare.so end to end.

The agent runs on a driver directory (--gpu-driver-dir) holding the test
tree's fake NVML and fake CUDA driver (symlinks to tests/fake_nvml and
tests/fake_cuda), with one fake GPU of 8 GiB: not --simulate-gpus, since the
jobs load the driver through /gpupool/driver/lib as they would a real one.
Each job is a Python script that uses the driver API through ctypes (cuInit,
cuMemGetInfo_v2, then cuMemAlloc_v2 of 256 MiB until refused). A share's
processes find libgpushare.so in the sandbox's /etc/ld.so.preload, so they
see the share's cap as the GPU's memory and are refused
CUDA_ERROR_OUT_OF_MEMORY (2) past it, across all the job's processes.

The compute share: two shares of the one GPU launch 1000-µs kernels on the
fake driver's one device timeline, and the agent's share loop
(agent/share_loop.h) gives each its share of the device time."""
import glob
import json
import os
import signal
import struct
import time

from fake_gpus import GPU, NVML, fake_driver
from pool import wait_for


# The job's own driver client. `python3 /work/alloc.py MODE LABEL`:
#   all      allocate until refused; print what it got
#   fork     hold 2 GiB, then a forked child allocates until refused
#   spawn    hold 2 GiB, then a subprocess started with `env -u LD_PRELOAD`
#            does `all`
#   hold     `all`, then keep it until /work/release exists
#   write    try to change the share's files; print each errno
#   nvml     hold 512 MiB, then print what NVML says of the GPU's memory
ALLOC = r"""
import ctypes, errno, os, subprocess, sys, time
cuda = ctypes.CDLL("libcuda.so.1")
CHUNK = 256 << 20
MiB = 1 << 20

def init():
    rc = cuda.cuInit(0)
    assert rc == 0, "cuInit: %d" % rc

def total_mib():
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    rc = cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))
    assert rc == 0, "cuMemGetInfo_v2: %d" % rc
    return total.value // MiB

def alloc(limit=None):
    got, ptrs = 0, []
    while limit is None or got < limit:
        p = ctypes.c_uint64()
        rc = cuda.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(CHUNK))
        if rc != 0:
            return got, rc, ptrs
        ptrs.append(p.value)
        got += CHUNK
    return got, 0, ptrs

def report(label):
    init()
    total = total_mib()
    got, rc, ptrs = alloc()
    print("%s total_mib=%d got_mib=%d rc=%d" % (label, total, got // MiB, rc), flush=True)
    return ptrs

mode, label = sys.argv[1], sys.argv[2]
if mode == "all":
    report(label)
elif mode == "hold":
    report(label)
    deadline = time.time() + 120
    while not os.path.exists("/work/release") and time.time() < deadline:
        time.sleep(0.1)
    print("%s released" % label, flush=True)
elif mode in ("fork", "spawn"):
    init()
    held, rc, _ = alloc(2 << 30)
    print("%s parent_mib=%d rc=%d" % (label, held // MiB, rc), flush=True)
    if mode == "fork":
        pid = os.fork()
        if pid == 0:
            report(label + "-child")
            os._exit(0)
        os.waitpid(pid, 0)
    else:
        subprocess.run(["env", "-u", "LD_PRELOAD", sys.executable, "/work/alloc.py", "all",
                        label + "-sub"], check=True)
elif mode == "nvml":
    init()
    held, rc, _ = alloc(512 * MiB)
    class Memory(ctypes.Structure):
        _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                    ("used", ctypes.c_ulonglong)]
    nvml = ctypes.CDLL("libnvidia-ml.so.1")
    device, memory = ctypes.c_void_p(), Memory()
    assert nvml.nvmlInit_v2() == 0
    assert nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(device)) == 0
    assert nvml.nvmlDeviceGetMemoryInfo(device, ctypes.byref(memory)) == 0
    print("%s total_mib=%d used_mib=%d free_mib=%d" % (label, memory.total // MiB,
          memory.used // MiB, memory.free // MiB), flush=True)
elif mode == "write":
    for path in ("/gpupool/share/limits", "/etc/ld.so.preload"):
        try:
            open(path, "w").close()
            print("%s write %s ok" % (label, path))
        except OSError as e:
            print("%s write %s errno=%s" % (label, path, errno.errorcode[e.errno]))
"""

# Every job writes the fake driver's device file and its client into /work
# first (the sandbox has no /tmp of the host).
PRELUDE = 'printf "%s" "$NVML_JSON" > nvml.json; printf "%s" "$ALLOC" > alloc.py; '
JOB_ENV = {"NVML_JSON": json.dumps(NVML), "ALLOC": ALLOC, "FAKE_NVML_CONFIG": "/work/nvml.json",
           "FAKE_CUDA_STATE_DIR": "/tmp/fake-cuda"}


def start_gpu_agent(pool, tmp_path, more_config="", server_extra=()):
    """An agent whose one GPU (8 GiB) and driver come from a driver directory;
    `more_config`: more of its config file."""
    driver, nvml, sandbox = fake_driver(tmp_path, NVML)
    config = tmp_path / "agent.yaml"
    config.write_text(sandbox + more_config)
    pool.start_server(extra=list(server_extra))
    pool.start_agent("gpu-box", gpus=None, env={"FAKE_NVML_CONFIG": str(nvml)},
                     extra=["--gpu-driver-dir", str(driver), "--config", str(config)])
    pool.wait_nodes_ready(1)
    assert [g["memory_mib"] for g in pool.nodes()[0]["gpus"]] == [8192], pool.nodes()


def run_job(pool, run, resources, timeout=90):
    job_id = pool.submit({"run": PRELUDE + run, "resources": resources, "env": JOB_ENV})
    job = pool.wait_finished(job_id, timeout=timeout)
    out = pool.logs_text(job_id)
    assert job["state"] == "succeeded", (job, out, pool.agent_log_tails())
    return out


def said(out, label):
    """The line of `out` that starts with `label `."""
    lines = [line for line in out if line.startswith(label + " ")]
    assert len(lines) == 1, (label, out)
    return lines[0][len(label) + 1:]


def test_shares_are_held_to_their_memory_cap(pool, tmp_path):
    start_gpu_agent(pool, tmp_path)

    # (a) Half the GPU: 4 GiB, whatever the driver has.
    out = run_job(pool, "python3 alloc.py all half; python3 alloc.py write files",
                  {"gpus": 0.5})
    assert said(out, "half") == "total_mib=4096 got_mib=4096 rc=2", out
    # (f) The limits and the preload file are the agent's: read-only to the job.
    assert "files write /gpupool/share/limits errno=EROFS" in out, out
    assert "files write /etc/ld.so.preload errno=EROFS" in out, out

    # (b) gpu_memory is the cap; NVML inside the task (nvidia-smi, pynvml)
    # shows the same GPU, with only the task's own use.
    out = run_job(pool, "python3 alloc.py all small; python3 alloc.py nvml seen",
                  {"gpus": 0.5, "gpu_memory": "1GiB"})
    assert said(out, "small") == "total_mib=1024 got_mib=1024 rc=2", out
    assert said(out, "seen") == "total_mib=1024 used_mib=512 free_mib=512", out

    # (c) One ledger for every process of the task: a process started
    # without LD_PRELOAD, and one forked while its parent holds 2 GiB.
    out = run_job(pool, "env -u LD_PRELOAD python3 alloc.py all bare; "
                        "python3 alloc.py fork forked; python3 alloc.py spawn spawned",
                  {"gpus": 0.5})
    assert said(out, "bare") == "total_mib=4096 got_mib=4096 rc=2", out
    assert said(out, "forked") == "parent_mib=2048 rc=0", out
    assert said(out, "forked-child") == "total_mib=4096 got_mib=2048 rc=2", out
    assert said(out, "spawned") == "parent_mib=2048 rc=0", out
    assert said(out, "spawned-sub") == "total_mib=4096 got_mib=2048 rc=2", out

    # (e) A whole GPU: all 8 GiB, and no interposer at all.
    out = run_job(pool, "python3 alloc.py all whole; echo gpupool=$(ls /gpupool | tr '\\n' ' '); "
                        "test -e /etc/ld.so.preload && echo preload=yes; echo done",
                  {"gpus": 1})
    assert said(out, "whole") == "total_mib=8192 got_mib=8192 rc=2", out
    assert "gpupool=driver" in out and "preload=yes" not in out and "done" in out, out


def share_use(pool, job_id):
    """The most a share's own processes held and its cap, from its job's
    telemetry history (None before a point of it is written)."""
    r = pool.api("GET", f"/v1/jobs/{job_id}/telemetry")[1]
    used_at, cap_at = r["fields"].index("memory_used_max_mib"), r["fields"].index("memory_total_mib")
    points = [p for a in r["attempts"] for s in a.get("share", []) for p in s["points"]]
    held = [(p[used_at], p[cap_at]) for p in points if p[used_at] is not None]
    return max(held) if held else None


def test_two_shares_of_one_gpu_each_get_their_own_cap(pool, tmp_path):
    start_gpu_agent(pool, tmp_path)
    # (d) Both run at once on the one GPU, each holding what it got until
    # both have reported.
    jobs = [pool.submit({"run": PRELUDE + f"python3 alloc.py hold job{i}",
                         "resources": {"gpus": 0.5}, "env": JOB_ENV}) for i in (1, 2)]
    for job_id in jobs:
        pool.wait_state(job_id, "running", timeout=60)

    def both_hold():
        outs = [pool.logs_text(job_id) for job_id in jobs]
        return outs if all(any(" total_mib=" in line for line in out) for out in outs) else None
    outs = wait_for(both_hold, timeout=60, what="both shares to allocate")
    assert [pool.job(job_id)["state"] for job_id in jobs] == ["running", "running"]
    assert said(outs[0], "job1") == "total_mib=4096 got_mib=4096 rc=2", outs
    assert said(outs[1], "job2") == "total_mib=4096 got_mib=4096 rc=2", outs

    works = glob.glob(os.path.join(pool.agent_dir("gpu-box"), "tasks", "*", "work"))
    assert len(works) == 2, works
    for work in works:
        open(os.path.join(work, "release"), "w").close()
    for job_id in jobs:
        job = pool.wait_finished(job_id, timeout=60)
        assert job["state"] == "succeeded", (job, pool.logs_text(job_id))


def test_a_share_whose_cap_does_not_fit_beside_the_others_is_refused(pool, tmp_path):
    """A share without gpu_memory reserves nothing in the scheduler (its
    GPU's size is not known at submission), so caps could add up past the
    GPU: one share's allocation would then fail for memory its neighbour
    holds. The agent refuses such a start instead."""
    start_gpu_agent(pool, tmp_path)
    big = pool.submit({"run": PRELUDE + "python3 alloc.py hold big", "env": JOB_ENV,
                       "resources": {"gpus": 0.25, "gpu_memory": "6GiB"}})
    pool.wait_state(big, "running", timeout=60)
    # Half the GPU: a 4 GiB cap, of which only 2 GiB are left beside 6.
    half = pool.submit({"run": "echo ran", "resources": {"gpus": 0.5}})

    def refused():
        job = pool.job(half)
        return job if [a for a in job["attempt_list"] if a["state"] == "refused"] else None
    job = wait_for(refused, timeout=60, what="the share's start to be refused")
    reason = job["attempt_list"][0]["reason"]
    assert "the share's GPU memory cap of 4 GiB does not fit on GPU " + GPU in reason, job
    assert "already take 6 GiB of the 8 GiB lent" in reason, job
    # Back in the queue, kept off that node for a while; it never ran.
    assert pool.job(half)["state"] == "pending", pool.job(half)
    assert "ran" not in pool.logs_text(half)
    pool.cli("cancel", str(half), check=True)


def job_host_pids(marker):
    """Host pids of the processes whose command line holds `marker`."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        pids.append(int(entry))
            except OSError:
                pass
    return pids


def test_a_share_that_goes_around_the_library_is_stopped_by_nvml(pool, tmp_path):
    """The backstop: whatever the library saw, NVML's figure for the task's
    processes decides. The fake NVML reports what its device file says, so
    the test makes NVML see the job's own process holding 6 GiB of a 4 GiB
    share, as a static binary or a raw ioctl would. Before that, what the
    share's processes hold is kept in its job's telemetry history."""
    # Heartbeats and history buckets of a second: points while it runs.
    start_gpu_agent(pool, tmp_path, server_extra=["--heartbeat-ms", "1000", "--telemetry-tiers", "1s:1h"])
    marker = "around-the-library"
    job_id = pool.submit({"run": PRELUDE + f"echo up; exec sleep 300 # {marker}",
                          "resources": {"gpus": 0.5}, "env": JOB_ENV})
    pool.wait_state(job_id, "running", timeout=60)
    wait_for(lambda: "up" in pool.logs_text(job_id), what="the job to start")
    pids = wait_for(lambda: job_host_pids(f"sleep 300 # {marker}"), what="the job's process")
    # Within its cap: `gpupool nodes` and `gpupool job` show the share's cap
    # and what NVML says its processes hold. (What lies within the cap and
    # each process's context allowance is left alone:
    # agent/gpu_backstop_test.cpp.)
    within = dict(NVML, devices=[dict(NVML["devices"][0],
                                      processes=[{"pid": pids[0], "used_mib": 1024}])])
    (tmp_path / "nvml.json").write_text(json.dumps(within))
    attempt = f"{job_id}.1"

    def reported():
        shares = pool.nodes()[0]["gpus"][0]["shares"]
        return shares if shares and shares[0]["memory_used_mib"] == 1024 else None
    shares = wait_for(reported, timeout=60, what="the share's use in a heartbeat")
    assert shares == [{"attempt": attempt, "memory_cap_mib": 4096, "memory_used_mib": 1024}]
    listed = pool.cli("job", str(job_id), check=True).stdout
    assert "0.5 of it, 1 GiB of 4 GiB cap" in listed, listed
    listed = pool.cli("nodes", check=True).stdout
    assert f"{attempt}: 1 GiB of 4 GiB cap" in listed, listed
    # Kept with the job: the share's own 1 GiB under its 4 GiB cap (the
    # GPU's own series says what the whole GPU held).
    held = wait_for(lambda: (lambda u: u if u and u[0] == 1024 else None)(share_use(pool, job_id)),
                    timeout=30, what=lambda: f"the share in its job's history: {share_use(pool, job_id)}")
    assert held == (1024, 4096), held
    over = dict(NVML, devices=[dict(NVML["devices"][0],
                                    processes=[{"pid": pids[0], "used_mib": 6144}])])
    (tmp_path / "nvml.json").write_text(json.dumps(over))
    job = pool.wait_finished(job_id, timeout=60)
    assert job["state"] == "failed", job
    assert "used 6 GiB of GPU memory on " + GPU in job["reason"], job
    assert "over its cap of 4 GiB" in job["reason"], job


# `python3 spin.py LABEL`: says it started, waits for ./go (its work
# directory's), launches 1000-µs kernels for 4 s, then prints the device time
# the fake driver gave this process.
SPIN = r"""
import ctypes, os, sys, time
cuda = ctypes.CDLL("libcuda.so.1")
label = sys.argv[1]
assert cuda.cuInit(0) == 0
f = ctypes.c_void_p()
assert cuda.fakeCudaGetFunction(ctypes.byref(f)) == 0
print("%s started" % label, flush=True)
deadline = time.time() + 120
while not os.path.exists("go") and time.time() < deadline:
    time.sleep(0.005)
launches, end = 0, time.monotonic() + 4
while time.monotonic() < end:
    rc = cuda.cuLaunchKernel(f, 1000, 1, 1, 1, 1, 1, 0, None, None, None)
    assert rc == 0, "cuLaunchKernel: %d" % rc
    launches += 1
cuda.cuCtxSynchronize()
cuda.fakeCudaBusyMicros.restype = ctypes.c_ulonglong
busy = cuda.fakeCudaBusyMicros(os.environ["GPU_UUID"].encode(), os.getpid())
print("%s-done launches=%d busy_us=%d" % (label, launches, busy), flush=True)
"""


def spin_jobs(pool, tmp_path, shares):
    """Runs `python3 spin.py LABEL` for each (label, share) in `shares` on the
    `process` executor, releases them together once all have started, and
    returns each one's device time in µs."""
    state = tmp_path / "cuda-state"
    state.mkdir(exist_ok=True)
    os.chmod(state, 0o777)
    env = {"SPIN": SPIN, "GPU_UUID": GPU, "FAKE_NVML_CONFIG": str(tmp_path / "nvml.json"),
           "FAKE_CUDA_STATE_DIR": str(state)}
    jobs = [pool.submit({"run": f'printf "%s" "$SPIN" > spin.py; python3 spin.py {label}',
                         "executor": "process", "resources": {"gpus": share}, "env": env})
            for label, share in shares]
    for job_id in jobs:
        pool.wait_state(job_id, "running", timeout=60)
    wait_for(lambda: all(any(line.endswith(" started") for line in pool.logs_text(j))
                         for j in jobs), timeout=60, what="the jobs to start")
    for job_id in jobs:
        work = glob.glob(os.path.join(pool.agent_dir("gpu-box"), "tasks", f"{job_id}.*", "work"))
        assert len(work) == 1, work
        with open(os.path.join(work[0], "go"), "w"):
            pass
    busy = {}
    for job_id, (label, _) in zip(jobs, shares):
        job = pool.wait_finished(job_id, timeout=60)
        out = pool.logs_text(job_id)
        assert job["state"] == "succeeded", (job, out, pool.agent_log_tails())
        busy[label] = int(said(out, label + "-done").split("busy_us=")[1])
    print("busy_us", busy)
    return busy


def test_two_shares_of_one_gpu_split_its_time_by_their_shares(pool, tmp_path):
    """0.25 and 0.75 of the GPU, both busy at once: the device time splits
    1:3. The jobs run on the `process` executor, so that both see the one
    fake device timeline (a state directory on the host): their gate is the
    advisory one (LD_PRELOAD and GPUSHARE_LIMITS naming the host's files),
    the same library, files and agent loop as in the sandbox (whose binds of
    want and grant are checked at the end)."""
    start_gpu_agent(pool, tmp_path, "executors: [sandbox, process]\n")
    busy = spin_jobs(pool, tmp_path, [("quarter", 0.25), ("three", 0.75)])
    ratio = busy["three"] / busy["quarter"]
    print("ratio", ratio)
    # In proportion, not first come first served (about 1:1). The ±10%
    # target is measured in docs/performance.md: a late tick of the agent on
    # a loaded machine moves the ratio, not the behaviour.
    assert 2.0 <= ratio <= 4.5, (busy, ratio)

    # In the sandbox, the grant is the agent's and the want the job's.
    out = run_job(pool, "python3 -c 'import os\n"
                        "for p in (\"/gpupool/share/want\", \"/gpupool/share/grant\"):\n"
                        "    try: os.close(os.open(p, os.O_WRONLY)); print(p, \"ok\")\n"
                        "    except OSError as e: print(p, e.strerror)'",
                  {"gpus": 0.5})
    assert "/gpupool/share/want ok" in out, out
    # (root's 0644 file, bound read-only: the permission check answers first)
    assert said(out, "/gpupool/share/grant") in ("Permission denied", "Read-only file system"), out


def test_a_strict_share_gets_its_part_even_alone(pool, tmp_path):
    """sharing_mode: strict: a quarter of the GPU, alone and busy for 4 s,
    gets about 1 s of device time (work-conserving, it would get all 4)."""
    start_gpu_agent(pool, tmp_path, "executors: [sandbox, process]\nsharing_mode: strict\n")
    busy = spin_jobs(pool, tmp_path, [("alone", 0.25)])
    # (less under a loaded machine: a turn is wall time, whether it launches or not)
    # About a quarter of 4 s (never more than its share; less on a loaded
    # machine), where a work-conserving share alone gets nearly all of it.
    assert 0.4e6 <= busy["alone"] <= 1.25e6, busy


def grant_beat(path):
    """The agent's beat in a grant file (gpushare/share_files.h)."""
    with open(path, "rb") as f:
        return struct.unpack_from("<QQ", f.read(16))[1]


def test_a_restarted_agent_takes_its_shares_back(pool, tmp_path):
    """The agent writes a share's grant every few ms; stopped, it leaves the
    beat to go stale (the library then runs the job ungated); restarted, it
    recovers the task and its share from exec.json and writes again."""
    start_gpu_agent(pool, tmp_path)
    job_id = pool.submit({"run": "echo up; while [ ! -e release ]; do sleep 0.1; done",
                          "resources": {"gpus": 0.5}})
    pool.wait_state(job_id, "running", timeout=60)
    wait_for(lambda: "up" in pool.logs_text(job_id), what="the job to start")
    task = glob.glob(os.path.join(pool.agent_dir("gpu-box"), "tasks", f"{job_id}.*"))[0]
    grant = os.path.join(task, "gpushare", "grant")

    def beats():
        first = grant_beat(grant)
        time.sleep(0.1)
        return grant_beat(grant) > first
    wait_for(beats, what="the agent to write the grant")
    pool.kill_agent("gpu-box", signal.SIGTERM)  # its jobs run on
    before = grant_beat(grant)
    time.sleep(0.3)
    assert grant_beat(grant) == before
    pool.start_agent("gpu-box", gpus=None, env={"FAKE_NVML_CONFIG": str(tmp_path / "nvml.json")},
                     extra=["--gpu-driver-dir", str(tmp_path / "driver"),
                            "--config", str(tmp_path / "agent.yaml")])
    wait_for(beats, timeout=30, what="the restarted agent to write the grant")
    open(os.path.join(task, "work", "release"), "w").close()
    job = pool.wait_finished(job_id, timeout=60)
    assert job["state"] == "succeeded", (job, pool.logs_text(job_id))
