"""The Debian package (scripts/package.sh) installed in a fresh Debian 12
root (debootstrap, minbase, from Debian's mirror): its dependencies resolve
with apt; the server and an agent run through their units' ExecStart lines
(this machine has no systemd to start them: the test does what the units
say, as the units' users, in the root); a job runs; an upgrade keeps the
pool's data and the edited config; a purge removes the account, the data
and the config. Also the units' `systemd-analyze security` exposure.

Needs root (chroot, mounts) and Debian's package mirror, as setup.sh does."""
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import tempfile

import pytest

from pool import GPUPOOL, wait_for

SOURCE = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.path.dirname(os.path.dirname(os.path.abspath(GPUPOOL)))


def run(*args, check=True, timeout=600, **kw):
    r = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, **kw)
    if check and r.returncode != 0:
        raise AssertionError(f"{args}: exit {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return r


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Root:
    """A Debian 12 root to chroot into, with /proc, /dev and DNS."""

    def __init__(self, path):
        self.path = path
        self.mounts = []

    def make(self):
        run("debootstrap", "--variant=minbase", "bookworm", self.path, "http://deb.debian.org/debian",
            timeout=900)
        for target, args in (("proc", ["-t", "proc", "proc"]), ("dev", ["--bind", "/dev"]),
                             ("dev/pts", ["--bind", "/dev/pts"])):
            run("mount", *args, os.path.join(self.path, target))
            self.mounts.append(os.path.join(self.path, target))
        shutil.copy("/etc/resolv.conf", os.path.join(self.path, "etc/resolv.conf"))
        return self

    def close(self):
        for m in reversed(self.mounts):
            subprocess.run(["umount", "-l", m], check=False)
        self.mounts = []

    def sh(self, script, user=None, check=True, timeout=600):
        """Runs `script` with /bin/sh inside the root (as `user`)."""
        who = ["--userspec", f"{user}:{user}"] if user else []
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LANG": "C.UTF-8",
               "DEBIAN_FRONTEND": "noninteractive"}
        return run("chroot", *who, self.path, "/bin/sh", "-c", script, check=check, timeout=timeout,
                   env=env)

    def popen(self, argv, user=None, env=None, log=None):
        who = ["--userspec", f"{user}:{user}"] if user else []
        full = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root"}
        full.update(env or {})
        return subprocess.Popen(["chroot", *who, self.path, *argv], env=full, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)

    def file(self, path):
        return os.path.join(self.path, path.lstrip("/"))


def exec_start(root, unit, env_file):
    """The unit's ExecStart as an argv, its $VARIABLE expanded from the
    unit's EnvironmentFile as systemd does (whitespace-split)."""
    text = open(root.file(f"/lib/systemd/system/{unit}")).read()
    line = re.search(r"^ExecStart=(.*)$", text, re.M).group(1)
    values = {}
    for raw in open(root.file(env_file)).read().splitlines():
        if raw.strip() and not raw.lstrip().startswith("#"):
            key, _, value = raw.partition("=")
            values[key.strip()] = shlex.split(value)[0] if value.strip() else ""
    argv = []
    for word in line.split():
        if word.startswith("$"):
            argv += values.get(word[1:], "").split()
        else:
            argv.append(word)
    return argv


@pytest.fixture
def root():
    if os.geteuid() != 0:
        pytest.fail("the package test needs root (chroot), as the agent's tests do")
    d = tempfile.mkdtemp(prefix="gpupool-debroot-", dir="/var/tmp")
    os.chmod(d, 0o755)  # the root's "/": every account goes through it
    r = Root(d)
    try:
        yield r.make()
    finally:
        r.close()
        subprocess.run(["pkill", "-KILL", "-f", d], check=False)
        shutil.rmtree(d, ignore_errors=True)


def package(out, version=None):
    # NO_BUILD: other tests run this build's binary meanwhile; ninja must not relink it.
    env = dict(os.environ, BUILD=BUILD, NO_BUILD="1", **({"VERSION": version} if version else {}))
    r = run(os.path.join(SOURCE, "scripts", "package.sh"), out, env=env, timeout=1800)
    return r.stdout.strip().splitlines()[-1]


def test_the_package_installs_runs_a_pool_upgrades_and_purges(root, tmp_path):
    deb = package(str(tmp_path / "v1"))
    shutil.copy(deb, root.file("/tmp/gpupool.deb"))
    root.sh("apt-get update -qq && apt-get install -y -qq /tmp/gpupool.deb", timeout=900)
    assert root.sh("gpupool --version").stdout.strip().endswith("0.1.0")
    assert root.sh("getent passwd gpupool").stdout.startswith("gpupool:")
    assert os.path.exists(root.file("/usr/lib/gpupool/lib/libgpushare.so"))
    assert os.path.exists(root.file("/usr/share/man/man1/gpupool.1.gz"))
    assert os.path.exists(root.file("/usr/share/bash-completion/completions/gpupool"))

    # The server, as gpupool-server.service runs it: its user, its
    # StateDirectory, its EnvironmentFile (the operator's settings).
    port = free_port()
    with open(root.file("/etc/default/gpupool-server"), "w") as f:
        f.write(f'GPUPOOL_SERVER_ARGS="--listen 127.0.0.1:{port} --sessions-listen 127.0.0.1:0"\n')
    root.sh("install -d -o gpupool -g gpupool -m 0750 /var/lib/gpupool")
    server_argv = exec_start(root, "gpupool-server.service", "/etc/default/gpupool-server")
    assert server_argv[:4] == ["/usr/bin/gpupool", "server", "--data-dir", "/var/lib/gpupool"]
    logs = open(tmp_path / "server.log", "ab")
    server = root.popen(server_argv, user="gpupool", log=logs)
    wait_for(lambda: os.path.exists(root.file("/var/lib/gpupool/server.url")), timeout=60,
             what="the packaged server to start")
    url = open(root.file("/var/lib/gpupool/server.url")).read().strip()
    token = open(root.file("/var/lib/gpupool/admin.token")).read().strip()

    # An agent, as gpupool-agent.service runs it (root, its env and config
    # files; `gpupool agent join` writes them on a provider's machine).
    os.makedirs(root.file("/etc/gpupool"), exist_ok=True)
    shutil.copy(root.file("/var/lib/gpupool/join.token"), root.file("/etc/gpupool/join.token"))
    with open(root.file("/etc/gpupool/agent.env"), "w") as f:
        f.write(f'GPUPOOL_AGENT_ARGS="--server {url} --join-token-file /etc/gpupool/join.token '
                '--name pkg-node --simulate-gpus 1xA100:80GiB"\n')
    with open(root.file("/etc/gpupool/agent.yaml"), "w") as f:
        f.write("executors: [process]\n")
    root.sh("install -d -m 0700 /var/lib/gpupool-agent")  # its StateDirectory
    agent_argv = exec_start(root, "gpupool-agent.service", "/etc/gpupool/agent.env")
    agent = root.popen(agent_argv, log=open(tmp_path / "agent.log", "ab"))
    cli = f"GPUPOOL_SERVER={url} GPUPOOL_TOKEN={token} GPUPOOL_CONFIG=/nonexistent gpupool --insecure"

    def nodes():
        r = root.sh(f"{cli} nodes -o json", check=False)
        return r.returncode == 0 and [n for n in json.loads(r.stdout) if n["state"] == "ready"]
    try:
        wait_for(nodes, timeout=60, what="the packaged agent to join")
        job = json.loads(root.sh(f"{cli} submit -o json -- echo from-the-package").stdout)["id"]
        wait_for(lambda: json.loads(root.sh(f"{cli} job {job} -o json").stdout)["state"]
                 == "succeeded", timeout=60, what="the job to run")
        assert "from-the-package" in root.sh(f"{cli} logs {job}").stdout
    finally:
        for p in (agent, server):
            p.terminate()
            p.wait(timeout=30)

    # An upgrade: the pool's data and the operator's config are kept.
    deb2 = package(str(tmp_path / "v2"), version="0.1.1")
    shutil.copy(deb2, root.file("/tmp/gpupool.deb"))
    root.sh("apt-get install -y -qq /tmp/gpupool.deb", timeout=900)
    assert root.sh("dpkg-query -W -f '${Version}' gpupool").stdout == "0.1.1"
    assert f"127.0.0.1:{port}" in open(root.file("/etc/default/gpupool-server")).read()
    server = root.popen(server_argv, user="gpupool", log=logs)
    try:
        wait_for(lambda: root.sh(f"{cli} job {job} -o json", check=False).returncode == 0,
                 timeout=60, what="the upgraded server to answer")
        assert json.loads(root.sh(f"{cli} job {job} -o json").stdout)["state"] == "succeeded"
    finally:
        server.terminate()
        server.wait(timeout=30)

    # Purge: the account, the data and the config go.
    root.sh("apt-get purge -y -qq gpupool", timeout=600)
    for gone in ("/var/lib/gpupool", "/etc/gpupool", "/etc/default/gpupool-server",
                 "/usr/bin/gpupool", "/usr/lib/gpupool"):
        assert not os.path.exists(root.file(gone)), gone
    assert root.sh("getent passwd gpupool", check=False).returncode != 0


@pytest.mark.parametrize("unit,most", [("gpupool-server.service", 2.0),
                                       ("gpupool-agent.service", 6.5)])
def test_the_units_exposure_stays_where_the_docs_say(unit, most):
    """systemd-analyze's exposure (0 best, 10 worst) of the units as
    shipped; docs/operator-guide.md records and explains them."""
    r = run("systemd-analyze", "security", "--offline=true", "--no-pager",
            os.path.join(SOURCE, "packaging", unit))
    level = float(re.search(r"Overall exposure level for \S+: ([0-9.]+)", r.stdout).group(1))
    print(f"{unit}: exposure {level}")
    assert level <= most, r.stdout
