"""Several servers on one PostgreSQL: one leads, the others stand by
(redirecting to the leader and saying so in /healthz); kill -9 of the
leader: a standby leads within about the lease and has every acknowledged
job; the old leader, started again, stands by."""
import json
import os
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from pg_server import PgServer
from pool import GPUPOOL, wait_for
from tcp_proxy import TcpProxy

LEASE_MS = 3000


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, tmp_path, name, store, tls=False):
        self.dir = tmp_path / name
        self.port = free_port()
        self.tls = tls
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        self.store = store
        self.proc = None

    def start(self):
        log = open(str(self.dir) + ".log", "ab")
        self.proc = subprocess.Popen(
            [GPUPOOL, "server", "--data-dir", str(self.dir), "--listen", f"127.0.0.1:{self.port}",
             "--sessions-listen", "127.0.0.1:0",  # not the port after --listen: may be taken
             "--store", self.store, "--leader-lease-ms", str(LEASE_MS), "--log-level", "debug",
             *([] if self.tls else ["--insecure"])],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def kill(self):
        self.proc.kill()
        self.proc.wait(timeout=20)

    def get(self, path, token=None):
        """(status, body as JSON or text, Location) without following redirects."""
        req = urllib.request.Request(self.url + path)
        if token:
            req.add_header("Authorization", "Bearer " + token)

        class NoRedirect(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *args, **kwargs):
                return None
        handlers = [NoRedirect()]
        if self.tls:
            ca = self.dir / "tls" / "ca.crt"
            if not ca.exists():
                return None, None, None
            handlers.append(urllib.request.HTTPSHandler(
                context=ssl.create_default_context(cafile=str(ca))))
        opener = urllib.request.build_opener(*handlers)
        try:
            with opener.open(req, timeout=10) as r:
                return r.status, json.loads(r.read() or b"null"), None
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(), e.headers.get("Location")
        except OSError:
            return None, None, None

    def role(self):
        status, body, _ = self.get("/healthz")
        if status != 200:
            return None
        return body.get("role")

    def submit(self, token, spec):
        req = urllib.request.Request(self.url + "/v1/jobs", data=json.dumps(spec).encode(),
                                     method="POST", headers={"Authorization": "Bearer " + token,
                                                             "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())["id"]


@pytest.fixture
def pg(tmp_path):
    with PgServer(tmp_path) as server:
        yield server


def test_a_standby_takes_over_from_a_killed_leader_with_every_acknowledged_job(tmp_path, pg):
    a = Server(tmp_path, "a", pg.url).start()
    wait_for(lambda: a.role() == "leader", timeout=30, what="a to lead")
    b = Server(tmp_path, "b", pg.url).start()
    wait_for(lambda: b.role() == "standby", timeout=30, what="b to stand by")
    token = (a.dir / "admin.token").read_text().strip()

    # Each says what it is; the standby sends clients on to the leader.
    status, body, _ = a.get("/healthz")
    assert body["role"] == "leader" and body["epoch"] == 1, body
    status, body, _ = b.get("/healthz")
    assert body["leader"] == a.url, body
    status, _, location = b.get("/v1/jobs", token)
    assert status == 307 and location == a.url + "/v1/jobs", (status, location)

    jobs = [a.submit(token, {"command": ["true"], "name": f"j{i}"}) for i in range(5)]

    a.kill()
    killed = time.monotonic()
    wait_for(lambda: b.role() == "leader", timeout=LEASE_MS / 1000 * 4, what="b to lead")
    took = time.monotonic() - killed
    print(f"failover: b leads {took:.2f} s after a was killed (lease {LEASE_MS / 1000} s)")
    assert took < LEASE_MS / 1000 * 3

    status, listed, _ = b.get("/v1/jobs", token)
    assert status == 200, listed
    assert sorted(j["id"] for j in listed["jobs"]) == sorted(jobs)
    more = b.submit(token, {"command": ["true"], "name": "after"})
    assert more > max(jobs)

    # The old leader, started again, stands by behind the new one.
    a.start()
    wait_for(lambda: a.role() == "standby", timeout=30, what="a to stand by")
    status, body, _ = a.get("/healthz")
    assert body["leader"] == b.url and body["epoch"] == 2, body
    for s in (a, b):
        s.kill()


def test_agents_and_the_cli_given_every_server_follow_the_leader(tmp_path, pg):
    """TLS with the pool's one CA (kept in the database); the agent and the
    CLI are given both servers' URLs; a job runs through the failover."""
    a = Server(tmp_path, "a", pg.url, tls=True).start()
    wait_for(lambda: a.role() == "leader", timeout=30, what="a to lead")
    b = Server(tmp_path, "b", pg.url, tls=True).start()
    wait_for(lambda: b.role() == "standby", timeout=30, what="b to stand by")
    assert (a.dir / "tls" / "ca.crt").read_text() == (b.dir / "tls" / "ca.crt").read_text()
    servers = f"{a.url},{b.url}"
    join = (a.dir / "join.token").read_text().strip()
    token = (a.dir / "admin.token").read_text().strip()
    fingerprint = "sha256:" + join.split(".", 1)[1]
    agent_log = open(tmp_path / "agent.log", "ab")
    agent = subprocess.Popen(
        [GPUPOOL, "agent", "--server", servers, "--join-token", join, "--data-dir",
         str(tmp_path / "agent"), "--name", "n1", "--simulate-gpus", "2xA100:80GiB",
         "--config", str(write(tmp_path / "agent.yaml", "executors: [process]\n")),
         "--log-level", "debug"], stdout=agent_log, stderr=subprocess.STDOUT,
        start_new_session=True)
    env = dict(os.environ, GPUPOOL_SERVER=servers, GPUPOOL_TOKEN=token,
               GPUPOOL_CA_FINGERPRINT=fingerprint, GPUPOOL_CONFIG=str(tmp_path / "none.json"))

    def cli(*args):
        r = subprocess.run([GPUPOOL, *args], env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r
        return r.stdout

    def nodes_ready():
        return [n for n in json.loads(cli("nodes", "-o", "json")) if n["state"] == "ready"]
    try:
        wait_for(nodes_ready, timeout=30, what="the agent to join")
        servers_seen = json.loads(cli("admin", "servers", "-o", "json"))
        assert servers_seen["store"] == "postgresql" and servers_seen["epoch"] == 1, servers_seen
        assert [(x["address"], x["role"]) for x in servers_seen["servers"]] == [
            (a.url, "leader"), (b.url, "standby")], servers_seen
        assert "standby" in cli("admin", "servers")  # the table
        spec = tmp_path / "job.json"
        spec.write_text(json.dumps({"run": "for i in $(seq 1 60); do echo tick $i; sleep 0.1; "
                                           "done", "executor": "process"}))
        job = json.loads(cli("submit", str(spec), "-o", "json"))["id"]
        # An interactive session, and a command in it whose tunnel runs
        # through the leader when it dies.
        session = int(cli("session", "start", "--no-wait", "--executor", "process", "--gpus",
                          "1").strip().splitlines()[-1])
        wait_for(lambda: json.loads(cli("job", str(session), "-o", "json"))["state"] == "running",
                 timeout=30, what="the session to run")
        assert cli("exec", str(session), "--", "echo", "before") == "before\n"
        held = subprocess.Popen([GPUPOOL, "exec", str(session), "--", "sh", "-c",
                                 "echo started; sleep 120"], env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert held.stdout.readline() == "started\n"
        wait_for(lambda: "tick 5" in cli("logs", str(job)), timeout=30, what="some output")
        a.kill()
        killed = time.monotonic()
        wait_for(lambda: b.role() == "leader", timeout=LEASE_MS / 1000 * 4, what="b to lead")
        wait_for(nodes_ready, timeout=30, what="the agent to connect to b")

        def roles():
            return {x["address"]: x["role"]
                    for x in json.loads(cli("admin", "servers", "-o", "json"))["servers"]}
        wait_for(lambda: roles() == {a.url: "unreachable", b.url: "leader"},
                 timeout=LEASE_MS / 1000 * 4, what="admin servers to show the failover")
        # The command whose tunnel ran through a ended, saying so; the
        # session ran on, and a new command reaches it through b.
        assert held.wait(timeout=60) != 0
        said = held.stderr.read()
        print(f"exec through the failover: exit {held.returncode}: {said.strip()}")
        assert said.strip(), "no word of the lost connection"
        assert cli("exec", str(session), "--", "echo", "after") == "after\n"
        print(f"failover: b leads and the agent is back {time.monotonic() - killed:.2f} s after "
              f"a was killed")
        wait_for(lambda: json.loads(cli("job", str(job), "-o", "json"))["state"] == "succeeded",
                 timeout=60, what="the job to finish")
        lines = cli("logs", str(job)).split("\n")
        assert [x for x in lines if x] == [f"tick {i}" for i in range(1, 61)]
        after = json.loads(cli("submit", "--executor", "process", "-o", "json", "--", "echo",
                               "after"))["id"]
        wait_for(lambda: json.loads(cli("job", str(after), "-o", "json"))["state"] == "succeeded",
                 timeout=60, what="a job submitted after the failover to run")
    finally:
        agent.kill()
        agent.wait()
        subprocess.run(["pkill", "-KILL", "-f", "--", f"--data-dir {tmp_path}/agent"], check=False)
        for s in (a, b):
            if s.proc.poll() is None:
                s.kill()


def write(path, text):
    path.write_text(text)
    return path


def test_the_leader_rides_out_a_database_restart_and_stops_when_the_database_stays_away(
        tmp_path, pg):
    a = Server(tmp_path, "a", pg.url).start()
    wait_for(lambda: a.role() == "leader", timeout=30, what="a to lead")
    token = (a.dir / "admin.token").read_text().strip()
    first = a.submit(token, {"command": ["true"], "name": "first"})

    # A restart shorter than the lease: a leads on; a call that met the
    # broken connection may fail, the next ones reach the restarted database.
    pg.kill()
    pg.restart()

    def submitted():
        try:
            return a.submit(token, {"command": ["true"], "name": "second"})
        except urllib.error.HTTPError as e:
            assert e.code == 503, e  # Unavailable: the lost connection, retried
            return None
    second = wait_for(submitted, timeout=30, what="a submission after the restart")
    # (Ids may skip after a crash of the database: PostgreSQL logs its
    # sequences ahead. Never reused, never out of order.)
    assert second > first
    assert a.proc.poll() is None and a.role() == "leader"

    # The database gone for longer than the lease: a cannot renew it and stops,
    # saying why, rather than lead on beside a successor it cannot see.
    pg.kill()
    assert a.proc.wait(timeout=LEASE_MS / 1000 * 4) == 3
    assert "could not renew the lease" in open(str(a.dir) + ".log").read()
    pg.restart()
    a.start()
    wait_for(lambda: a.role() == "leader", timeout=30, what="a to lead again")
    status, listed, _ = a.get("/v1/jobs", token)
    assert sorted(j["id"] for j in listed["jobs"]) == [first, second]
    a.kill()


def test_a_leader_cut_off_from_the_database_stops_and_a_standby_takes_over(tmp_path, pg):
    """A partition between the leader and the database (its connections
    neither close nor answer), while a standby still reaches the database:
    the leader stops on its own before long, the standby leads, and nothing
    the old leader did not acknowledge is there, nor missing if it did."""
    port = int(pg.url.rsplit(":", 1)[1].split("/", 1)[0])
    with TcpProxy("127.0.0.1", port) as proxy:
        a = Server(tmp_path, "a", pg.url.replace(f":{port}/", f":{proxy.port}/")).start()
        wait_for(lambda: a.role() == "leader", timeout=30, what="a to lead")
        b = Server(tmp_path, "b", pg.url).start()
        wait_for(lambda: b.role() == "standby", timeout=30, what="b to stand by")
        token = (a.dir / "admin.token").read_text().strip()
        acknowledged = [a.submit(token, {"command": ["true"], "name": f"j{i}"}) for i in range(3)]

        proxy.cut()
        cut = time.monotonic()
        # A submission during the partition is never acknowledged.
        with pytest.raises(OSError):  # a timeout, or the connection closed as a stops
            a.submit(token, {"command": ["true"], "name": "unacknowledged"})
        assert a.proc.wait(timeout=LEASE_MS / 1000 * 4) == 3
        stopped = time.monotonic() - cut
        assert "could not renew the lease" in open(str(a.dir) + ".log").read()
        wait_for(lambda: b.role() == "leader", timeout=LEASE_MS / 1000 * 4, what="b to lead")
        print(f"partition: a stopped {stopped:.2f} s after the cut, b leads "
              f"{time.monotonic() - cut:.2f} s after it (lease {LEASE_MS / 1000} s)")
        status, listed, _ = b.get("/v1/jobs", token)
        assert status == 200, listed
        assert sorted(j["id"] for j in listed["jobs"]) == sorted(acknowledged)

        # Healed: what the relay held back reaches the database now, and
        # changes nothing (a is gone; its epoch is fenced). a, started
        # again, stands by.
        proxy.heal()
        a.start()
        wait_for(lambda: a.role() == "standby", timeout=30, what="a to stand by")
        status, listed, _ = b.get("/v1/jobs", token)
        assert sorted(j["id"] for j in listed["jobs"]) == sorted(acknowledged)
        servers = b.get("/v1/admin/servers", token)[1]
        # The old a, stopped without a word, is listed until it has been
        # silent an hour; the new a stands by.
        assert sorted(s["role"] for s in servers["servers"]) == [
            "leader", "standby", "unreachable"], servers
        assert servers["epoch"] == 2, servers
        for s in (a, b):
            s.kill()


def test_a_leader_whose_database_connections_are_dropped_reconnects_and_leads_on(tmp_path, pg):
    """The database drops the leader's connections (an administrator's
    pg_terminate_backend, a pooler restarting) while it stays up: the leader
    makes them again and leads on in the same epoch."""
    a = Server(tmp_path, "a", pg.url).start()
    wait_for(lambda: a.role() == "leader", timeout=30, what="a to lead")
    token = (a.dir / "admin.token").read_text().strip()
    first = a.submit(token, {"command": ["true"], "name": "first"})
    dropped_at = float(pg.psql("SELECT extract(epoch FROM now())"))
    dropped = pg.psql("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                      "WHERE usename = 'gpupool' AND pid <> pg_backend_pid()")
    assert int(dropped) >= 2, dropped  # the store's and the election's

    def submitted():
        try:
            return a.submit(token, {"command": ["true"], "name": "second"})
        except urllib.error.HTTPError as e:
            assert e.code == 503, e  # the dropped connection, made again at the next call
            return None
    second = wait_for(submitted, timeout=30, what="a submission after the drop")
    assert second > first
    # The renewals went on past the lease that ran at the drop, in the same epoch.
    wait_for(lambda: float(pg.psql("SELECT extract(epoch FROM expires_at) FROM gpupool_leader"))
             > dropped_at + 2 * LEASE_MS / 1000, timeout=LEASE_MS / 1000 * 4,
             what="the lease renewed after the drop")
    assert pg.psql("SELECT epoch FROM gpupool_leader") == "1"
    status, body, _ = a.get("/healthz")
    assert body["role"] == "leader" and body["epoch"] == 1, body
    assert a.proc.poll() is None
    a.kill()
