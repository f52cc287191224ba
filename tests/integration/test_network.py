"""A job's network, end to end (issue 19, hole 4): what a hostile job can
reach from the default sandbox.

The agent runs on a "machine" of its own (a network namespace, see
machines.py) with services a provider would run there: a server on its
loopback (a database, a token-less Jupyter), one on its own address and one
on a second address of its interface, and an abstract UNIX socket. Another
machine on the same network stands for the outside world (no internet
here): a server on its address and one on the cloud metadata address
169.254.169.254, which the provider's machine reaches on its link.

A job (the sandbox, as the task's account) tries every one of them, plus
the machine's loopback server through the gateway address (pasta would map
the gateway to the host's loopback unless told not to) and another job's
listening port. It must reach the outside machine and nothing else. Then
`network: false` reaches nothing at all, `network: host` is refused unless
the provider's policy allows it, and pasta, the job's network helper, ends
with its task (also when the shim is killed).
"""
import base64
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from machines import Machines
from pool import wait_for

PYTHON = "/usr/bin/python3"

# Serves a banner on each ADDR:PORT (and abstract UNIX socket @NAME) given
# as arguments, prints "ready" once all are bound, and runs until killed.
SERVER = r"""
import socket, sys, threading
def serve(sock, banner):
    while True:
        c, _ = sock.accept()
        try:
            c.sendall(banner.encode() + b"\n")
        finally:
            c.close()
for spec in sys.argv[1:]:
    where, banner = spec.split("=", 1)
    if where.startswith("@"):
        s = socket.socket(socket.AF_UNIX)
        s.bind("\0" + where[1:])
    else:
        host, port = where.rsplit(":", 1)
        s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, int(port)))
    s.listen(16)
    threading.Thread(target=serve, args=(s, banner), daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
"""

# Runs inside the job: tries each target of $PROBE and prints one line per
# target, "PROBE <name> ok <banner>" or "PROBE <name> error <errno name>".
# A target {"gateway": true} is the job's own default gateway.
PROBE = r"""
import errno, json, os, socket
def gateway():
    for line in open("/proc/net/route").read().splitlines()[1:]:
        f = line.split()
        if f[1] == "00000000":
            return socket.inet_ntoa(int(f[2], 16).to_bytes(4, "little"))
    return None
print("INTERFACES " + " ".join(l.split(":")[0].strip() for l in open("/proc/net/dev").read().splitlines()[2:]), flush=True)
for t in json.loads(os.environ["PROBE"]):
    try:
        if "abstract" in t:
            s = socket.socket(socket.AF_UNIX)
            s.settimeout(5)
            s.connect("\0" + t["abstract"])
        else:
            host = gateway() if t.get("gateway") else t["host"]
            if host is None:
                raise OSError(errno.ENETUNREACH, "no default route")
            s = socket.create_connection((host, t["port"]), timeout=5)
        out = "ok " + s.recv(200).decode(errors="replace").strip()
    except socket.timeout:
        out = "error timeout"
    except OSError as e:
        out = "error " + (errno.errorcode.get(e.errno, str(e.errno)) if e.errno else type(e).__name__)
    print(f"PROBE {t['name']} {out}", flush=True)
"""

# Listens on every address of its namespace and says so: another job.
LISTENER = r"""
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 7100)); s.listen(8)
print("listening", flush=True)
while True:
    c, _ = s.accept(); c.sendall(b"job-a-secret\n"); c.close()
"""


def shell_python(script, env_name=None):
    """A `run:` line that runs `script` with Debian's python3."""
    b64 = base64.b64encode(script.encode()).decode()
    return f"echo {b64} | base64 -d > /tmp/p.py && exec {PYTHON} /tmp/p.py"


@pytest.fixture
def world(pool):
    """Machine "a" (the agent's) with its services, machine "outside"."""
    m = Machines()
    servers = []
    try:
        _, a_addr = m.add("a", extra_addresses=[f"{m.net}.102/24"])
        _, out_addr = m.add("outside", extra_addresses=["169.254.169.254/16"])
        # The provider's machine reaches the metadata address on its link.
        subprocess.run(["ip", "-n", m.namespaces["a"], "route", "add", "169.254.0.0/16", "dev", "eth0"],
                       check=True)
        world = {"m": m, "a": a_addr, "a2": f"{m.net}.102", "outside": out_addr,
                 "abstract": f"gpupool-test-{m.tag}"}
        specs = {"a": [f"127.0.0.1:7001=machine-loopback-secret", f"{a_addr}:7002=machine-address-secret",
                       f"{m.net}.102:7003=machine-second-address-secret",
                       f"@{world['abstract']}=machine-abstract-secret"],
                 "outside": [f"{out_addr}:7004=hello-from-outside", "169.254.169.254:80=metadata-secret"]}
        for name, args in specs.items():
            p = m.run(name, [PYTHON, "-c", SERVER, *args], stdout=subprocess.PIPE, text=True)
            servers.append(p)
            assert p.stdout.readline().strip() == "ready"
        pool.start_server(host=m.gateway)
        yield world
    finally:
        for p in servers:
            p.kill()
            p.wait()
        pool.stop()  # before the namespaces go: its agents run in them
        m.close()


def start_agent(pool, world, policy=""):
    path = pool.dir / "agent-a.yaml"
    path.write_text("executors: [sandbox]\n" + (f"policy: {policy}\n" if policy else ""))
    pool.start_agent("a", extra=["--config", str(path)], netns=world["m"].namespaces["a"])
    pool.wait_nodes_ready(1, timeout=30)


def targets(world):
    return [
        {"name": "outside", "host": world["outside"], "port": 7004},
        {"name": "machine-loopback", "host": "127.0.0.1", "port": 7001},
        {"name": "machine-address", "host": world["a"], "port": 7002},
        {"name": "machine-second-address", "host": world["a2"], "port": 7003},
        {"name": "gateway-to-loopback", "gateway": True, "port": 7001},
        {"name": "metadata", "host": "169.254.169.254", "port": 80},
        {"name": "abstract-socket", "abstract": world["abstract"]},
    ]


def probe(pool, world, network=True, extra_targets=()):
    spec = {"name": "probe", "run": shell_python(PROBE),
            "env": {"PROBE": json.dumps(targets(world) + list(extra_targets))}}
    if network is not True:
        spec["network"] = network
    job_id = pool.submit(spec)
    job = pool.wait_finished(job_id, timeout=90)
    lines = pool.logs_text(job_id)
    assert job["state"] == "succeeded", (job, lines)
    results = {}
    for line in lines:
        if line.startswith("PROBE "):
            _, name, rest = line.split(" ", 2)
            results[name] = rest
    interfaces = next((l.split()[1:] for l in lines if l.startswith("INTERFACES")), None)
    return results, interfaces, lines


def test_a_job_reaches_the_outside_and_nothing_of_its_machine(pool, world):
    start_agent(pool, world)
    results, interfaces, lines = probe(pool, world)
    assert results.get("outside") == "ok hello-from-outside", lines
    for name in ["machine-loopback", "machine-address", "machine-second-address",
                 "gateway-to-loopback", "metadata", "abstract-socket"]:
        assert name in results, lines
        assert results[name].startswith("error"), f"the job reached {name}: {results[name]}"
    # Blocked destinations fail at once (a prohibit route), not by timeout.
    assert results["machine-second-address"] == "error EACCES", results
    assert results["metadata"] == "error EACCES", results
    assert "lo" in interfaces and len(interfaces) == 2, interfaces


def test_a_job_cannot_reach_another_jobs_port(pool, world):
    start_agent(pool, world)
    listener = pool.submit({"name": "listener", "run": shell_python(LISTENER)})
    wait_for(lambda: "listening" in pool.logs_text(listener), timeout=60, what="job A to listen")
    extra = [{"name": "other-job-loopback", "host": "127.0.0.1", "port": 7100},
             {"name": "other-job-machine-address", "host": world["a"], "port": 7100}]
    results, _, lines = probe(pool, world, extra_targets=extra)
    assert results.get("outside") == "ok hello-from-outside", lines  # the control
    for name in ["other-job-loopback", "other-job-machine-address"]:
        assert results[name].startswith("error"), f"job B reached job A through {name}: {results[name]}"
    pool.api("POST", f"/v1/jobs/{listener}/cancel")


def test_network_false_reaches_nothing(pool, world):
    start_agent(pool, world)
    results, interfaces, lines = probe(pool, world, network=False)
    assert interfaces == ["lo"], lines
    assert set(results) == {t["name"] for t in targets(world)}, lines
    for name, said in results.items():
        assert said.startswith("error"), f"network: false reached {name}: {said}"


def test_network_host_is_refused_unless_the_policy_allows_it(pool, world):
    start_agent(pool, world)
    job_id = pool.submit({"name": "host", "run": "true", "network": "host"})
    job = wait_for(lambda: (lambda j: j if "network: host" in (j.get("reason") or "") else None)(pool.job(job_id)),
                   timeout=30, what="the job to say why it waits")
    assert job["state"] == "pending", job
    assert "allow_host_network" in job["reason"], job
    assert job["attempt_list"] == [], job
    pool.api("POST", f"/v1/jobs/{job_id}/cancel")

    # The agent refuses it too, whatever the server says: its policy is the
    # provider's (the same check; see lending_test.cpp). With the policy, the
    # job shares the machine's network: its loopback included.
    pool.kill_agent("a")
    start_agent(pool, world, policy="{allow_host_network: true}")
    results, interfaces, lines = probe(pool, world, network="host")
    assert results["machine-loopback"] == "ok machine-loopback-secret", lines
    assert results["abstract-socket"] == "ok machine-abstract-secret", lines


def is_pasta(pid):
    try:
        comm = open(f"/proc/{pid}/comm").read().strip()
    except OSError:
        return False
    return comm.startswith("pasta") or comm.startswith("passt")


def parent_of(pid):
    try:
        return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def pastas(world):
    """pasta processes on machine "a" (as pids). pasta clones short-lived children of its own to
    act inside the task's namespace while it sets it up; those are not a second helper."""
    pids = subprocess.run(["ip", "netns", "pids", world["m"].namespaces["a"]], capture_output=True,
                          text=True).stdout.split()
    return [int(pid) for pid in pids if is_pasta(pid) and not is_pasta(parent_of(pid))]


def one_pasta(world):
    """The job's one pasta once exactly one runs on machine "a" (None before)."""
    found = pastas(world)
    return found[0] if len(found) == 1 else None


def test_the_network_helper_ends_with_its_task(pool, world):
    start_agent(pool, world)
    job_id = pool.submit({"name": "sleeper", "run": "echo up; exec sleep 600"})
    pool.wait_state(job_id, "running", timeout=60)
    helper = wait_for(lambda: one_pasta(world), timeout=30, what="the job's pasta")
    # It runs as the task's account, not as root.
    assert os.stat(f"/proc/{helper}").st_uid != 0
    status, body = pool.api("POST", f"/v1/jobs/{job_id}/cancel")
    assert status in (200, 202), body
    pool.wait_finished(job_id, timeout=60)
    wait_for(lambda: not pastas(world), timeout=30, what="pasta to end with the job")

    # A shim that dies (kill -9) takes its pasta along.
    job_id = pool.submit({"name": "sleeper", "run": "exec sleep 600"})
    pool.wait_state(job_id, "running", timeout=60)
    helper = wait_for(lambda: one_pasta(world), timeout=30, what="the job's pasta")
    shim = parent_of(helper)
    assert open(f"/proc/{shim}/comm").read().strip() == "gpupool-shim"
    os.kill(shim, signal.SIGKILL)
    wait_for(lambda: not os.path.exists(f"/proc/{helper}"), timeout=30, what="pasta to die with its shim")
