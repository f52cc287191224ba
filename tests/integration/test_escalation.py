"""Escalation inside the sandbox (issue 19, hole 5), tried as a hostile job
would: a real server and agent (root, so each task has its own uid), the
default sandbox, and a job script that attempts each attack and prints what
happened. The test asserts every attempt failed.

  - setuid binaries: a root-owned setuid copy of `id` on a path the job
    sees; no_new_privs must keep its effective uid the job's own;
  - nested user namespaces (and through them mounts and capabilities);
  - mounts, /proc/sys writes, sysrq, new device nodes;
  - ptrace and signals to another task (another uid), its shim and the agent;
  - an abstract UNIX socket of the host (per network namespace);
  - /dev/shm shared with the host;
  - device nodes other than the task's own GPUs.
"""
import base64
import json
import os
import shutil
import socket
import subprocess
import threading

import pytest

from pool import wait_for

PYTHON = "/usr/bin/python3"

# Each attack prints "ATTACK <name> <what happened>"; "ok ..." means it worked.
ATTACKS = r"""
import ctypes, errno, json, os, socket, subprocess, sys
libc = ctypes.CDLL(None, use_errno=True)
def say(name, what):
    print(f"ATTACK {name} {what}", flush=True)
def err(e):
    return "error " + (errno.errorcode.get(e.errno, str(e.errno)) if getattr(e, "errno", None) else type(e).__name__)
def run(name, argv):
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=20)
        say(name, ("ok " if r.returncode == 0 else f"failed {r.returncode} ") + (r.stdout + r.stderr).strip().replace("\n", " | ")[:200])
    except OSError as e:
        say(name, err(e))
t = json.loads(os.environ["TARGETS"])

status = open("/proc/self/status").read()
say("no-new-privs", "set" if "NoNewPrivs:\t1" in status else "missing")
run("setuid-binary", [t["suid"], "-u"])
try:
    os.setuid(0); say("setuid-call", "ok")
except OSError as e:
    say("setuid-call", err(e))
run("nested-userns", ["unshare", "--user", "--map-root-user", "id", "-u"])
run("nested-userns-mount", ["unshare", "--user", "--map-root-user", "--mount", "mount", "-t", "tmpfs", "none", "/tmp"])
CLONE_NEWUSER = 0x10000000
say("unshare-syscall", "ok" if libc.unshare(CLONE_NEWUSER) == 0 else "error " + errno.errorcode.get(ctypes.get_errno(), "?"))
run("mount", ["mount", "-t", "tmpfs", "none", "/tmp"])
r = libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)
say("mount-syscall", "ok" if r == 0 else "error " + errno.errorcode.get(ctypes.get_errno(), "?"))
for name, path, data in [("proc-sys-kernel", "/proc/sys/kernel/domainname", "evil"),
                         ("proc-sys-vm", "/proc/sys/vm/drop_caches", "3"),
                         ("proc-sys-net", "/proc/sys/net/ipv4/ip_forward", "1"),
                         ("sysrq", "/proc/sysrq-trigger", "h")]:
    try:
        with open(path, "w") as f:
            f.write(data)
        say(name, "ok")
    except OSError as e:
        say(name, err(e))
r = libc.mknod(b"/tmp/mem", 0o20600, os.makedev(1, 1))
say("mknod", "ok" if r == 0 else "error " + errno.errorcode.get(ctypes.get_errno(), "?"))
for dev in ["/dev/mem", "/dev/kmem", "/dev/port", "/dev/kmsg", "/dev/sda", "/dev/vda", "/dev/nvme0n1",
            "/dev/nvidia1", "/dev/fuse", "/dev/net/tun", "/dev/kvm", "/dev/loop0"]:
    try:
        os.close(os.open(dev, os.O_RDONLY))
        say("open-" + dev, "ok")
    except OSError as e:
        say("open-" + dev, err(e))
say("dev-listing", " ".join(sorted(os.listdir("/dev"))))
PTRACE_ATTACH = 16
for name, pid in t["pids"].items():
    try:
        os.kill(pid, 0)
        say("signal-" + name, "ok")
    except OSError as e:
        say("signal-" + name, err(e))
    r = libc.ptrace(PTRACE_ATTACH, pid, None, None)
    say("ptrace-" + name, "ok" if r == 0 else "error " + errno.errorcode.get(ctypes.get_errno(), "?"))
    say("proc-" + name, "ok" if os.path.exists(f"/proc/{pid}/environ") and pid > 10 else "absent")
try:
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(5)
    s.connect("\0" + t["abstract"])
    say("abstract-socket", "ok " + s.recv(100).decode().strip())
except OSError as e:
    say("abstract-socket", err(e))
say("shm-listing", " ".join(sorted(os.listdir("/dev/shm"))) or "(empty)")
open("/dev/shm/" + t["shm_from_job"], "w").write("x")
say("done", "")
"""


def run_line(script):
    b64 = base64.b64encode(script.encode()).decode()
    return f"echo {b64} | base64 -d > /tmp/a.py && exec {PYTHON} /tmp/a.py"


@pytest.fixture
def suid_dir():
    """A root-owned directory with a setuid-root copy of `id`, which a
    host path of the sandbox makes visible to jobs."""
    d = f"/var/tmp/gpupool-suid-{os.getpid()}"  # not under /tmp: the job has its own
    os.makedirs(d, mode=0o755, exist_ok=True)
    os.chmod(d, 0o755)
    shutil.copy("/usr/bin/id", f"{d}/id")
    os.chown(f"{d}/id", 0, 0)
    os.chmod(f"{d}/id", 0o4755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def host_bait():
    """An abstract UNIX socket and a /dev/shm file of the host."""
    name = f"gpupool-escalation-{os.getpid()}"
    s = socket.socket(socket.AF_UNIX)
    s.bind("\0" + name)
    s.listen(4)
    stop = threading.Event()

    def serve():
        s.settimeout(0.2)
        while not stop.is_set():
            try:
                c, _ = s.accept()
            except OSError:
                continue
            c.sendall(b"host-abstract-secret\n")
            c.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    shm = f"/dev/shm/gpupool-host-secret-{os.getpid()}"
    with open(shm, "w") as f:
        f.write("secret")
    yield {"abstract": name, "shm": os.path.basename(shm), "shm_from_job": f"gpupool-from-job-{os.getpid()}"}
    stop.set()
    t.join()
    s.close()
    os.unlink(shm)
    if os.path.exists(f"/dev/shm/gpupool-from-job-{os.getpid()}"):
        os.unlink(f"/dev/shm/gpupool-from-job-{os.getpid()}")


def parse(lines):
    out = {}
    for line in lines:
        if line.startswith("ATTACK "):
            parts = line.split(" ", 2)
            out[parts[1]] = parts[2] if len(parts) > 2 else ""
    return out


def test_a_hostile_job_cannot_escalate(pool, tmp_path, suid_dir, host_bait):
    hosts = ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", suid_dir]
    config = tmp_path / "agent.yaml"
    config.write_text(f"sandbox: {{host_paths: [{', '.join(hosts)}]}}\n")
    pool.start_server()
    pool.start_agent("box", extra=["--config", str(config)])
    pool.wait_nodes_ready(1)

    # A neighbour: another task, another uid, whose pids the attacker is given.
    victim = pool.submit({"name": "victim", "run": "echo victim-up; exec sleep 600"})
    pool.wait_state(victim, "running", timeout=60)
    wait_for(lambda: "victim-up" in pool.logs_text(victim), timeout=30, what="the victim to start")

    def victim_sleep():
        """The victim's `sleep 600`: a descendant of our agent (its shim's)."""
        parents = {}
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    parents[int(pid)] = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
                except OSError:
                    pass
        agent = pool.agents["box"].pid
        for pid in parents:
            p = pid
            while p in parents and p != agent and p > 1:
                p = parents[p]
            if p != agent:
                continue
            try:
                if open(f"/proc/{pid}/cmdline").read() == "sleep\x00600\x00":
                    return pid
            except OSError:
                pass
        return None
    victim_pid = wait_for(victim_sleep, timeout=30, what="the victim's process")
    shim_pid = victim_pid
    while open(f"/proc/{shim_pid}/comm").read().strip() != "gpupool-shim":
        shim_pid = int(open(f"/proc/{shim_pid}/stat").read().rsplit(")", 1)[1].split()[1])
    targets = {"suid": f"{suid_dir}/id", "abstract": host_bait["abstract"],
               "shm_from_job": host_bait["shm_from_job"],
               "pids": {"other-task": victim_pid, "victim-shim": shim_pid, "agent": pool.agents["box"].pid}}
    job_id = pool.submit({"name": "attacker", "run": run_line(ATTACKS), "env": {"TARGETS": json.dumps(targets)}})
    job = pool.wait_finished(job_id, timeout=90)
    lines = pool.logs_text(job_id)
    assert job["state"] == "succeeded", (job, lines)
    got = parse(lines)
    assert "done" in got, lines
    own_uid = os.stat(f"/proc/{victim_pid}").st_uid

    assert got["no-new-privs"] == "set", got
    # The setuid copy runs, but as the job: never uid 0.
    assert got["setuid-binary"].startswith("ok ") and got["setuid-binary"] != "ok 0", got
    assert got["setuid-call"] in ("error EPERM", "error EINVAL"), got  # EINVAL: uid 0 is not mapped
    for attack in ["nested-userns", "nested-userns-mount", "unshare-syscall", "mount", "mount-syscall",
                   "proc-sys-kernel", "proc-sys-vm", "proc-sys-net", "sysrq", "mknod"]:
        assert not got[attack].startswith("ok"), f"{attack} worked: {got[attack]}"
    for dev in ["/dev/mem", "/dev/kmem", "/dev/port", "/dev/kmsg", "/dev/sda", "/dev/vda", "/dev/nvme0n1",
                "/dev/nvidia1", "/dev/fuse", "/dev/net/tun", "/dev/kvm", "/dev/loop0"]:
        assert got["open-" + dev].startswith("error"), f"the job opened {dev}: {got['open-' + dev]}"
    allowed = {"console", "core", "fd", "full", "mqueue", "null", "ptmx", "pts", "random", "shm", "stderr",
               "stdin", "stdout", "tty", "urandom", "zero"}
    assert set(got["dev-listing"].split()) <= allowed, got["dev-listing"]
    for name in ["other-task", "victim-shim", "agent"]:
        assert got["signal-" + name] == "error ESRCH", (name, got)
        assert got["ptrace-" + name] == "error ESRCH", (name, got)
        assert got["proc-" + name] == "absent", (name, got)
    assert got["abstract-socket"].startswith("error"), f"the job reached the host's abstract socket: {got}"
    assert host_bait["shm"] not in got["shm-listing"], got["shm-listing"]
    assert not os.path.exists(f"/dev/shm/{host_bait['shm_from_job']}"), "the job's /dev/shm is the host's"
    # The neighbour ran on, untouched, as another account.
    assert pool.job(victim)["state"] == "running"
    assert own_uid != 0
    pool.api("POST", f"/v1/jobs/{victim}/cancel")
