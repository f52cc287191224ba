"""Security end to end: TLS with a pinned CA, agent enrollment and mutual
TLS, revocation, users and password login, rate limits, slow clients, and
secrets kept out of the logs. Real server and agents over TLS on loopback."""
import json
import os
import socket
import ssl
import stat
import subprocess
import urllib.error
import urllib.request

from pool import GPUPOOL, wait_for


def start(pool, extra=(), agents=("a",)):
    pool.start_server(extra=extra)
    for name in agents:
        pool.start_agent(name)
    pool.wait_nodes_ready(len(agents))


def http_upgrade(pool, token, cert=None):
    """A raw WebSocket upgrade to the agent channel over TLS: the status line."""
    ctx = ssl.create_default_context(cafile=pool.ca_file())
    if cert:
        ctx.load_cert_chain(*cert)
    with socket.create_connection(("127.0.0.1", pool.port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
            s.sendall((f"GET /v1/agent/connect HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                       f"Authorization: Bearer {token}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                       f"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
            return data.decode(errors="replace")


def test_the_server_speaks_tls_by_default_and_the_agent_pins_its_ca(pool):
    start(pool)
    assert pool.url.startswith("https://")
    # Plain HTTP on the TLS port gets no API answer.
    with socket.create_connection(("127.0.0.1", pool.port), timeout=10) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        s.settimeout(10)
        try:
            reply = s.recv(4096)
        except (ConnectionResetError, socket.timeout):
            reply = b""
    assert b'"status"' not in reply
    creds = os.path.join(pool.agent_dir("a"), "credentials")
    assert stat.S_IMODE(os.stat(creds).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(os.path.join(creds, "client.key")).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.join(creds, "node.json")).st_mode) == 0o600
    # The job runs over wss with mutual TLS.
    job = pool.submit({"run": "echo over-tls", "resources": {"gpus": 1}})
    assert pool.wait_finished(job)["state"] == "succeeded"


def test_an_agent_with_a_wrong_ca_fingerprint_refuses_to_connect(pool):
    pool.start_server()
    secret = pool.join_token().split(".")[0]
    wrong = secret + "." + "ab" * 32
    p = pool._spawn(["agent", "--server", pool.url, "--join-token", wrong, "--data-dir",
                     pool.agent_dir("evil"), "--name", "evil", "--simulate-gpus", "1xA100:80GiB"],
                    "agent-evil")
    assert p.wait(timeout=60) == 1  # at once: a retry would not help
    log = (pool.dir / "agent-evil.log").read_text()
    assert "does not contain the pinned CA" in log, log[-2000:]
    assert not os.path.exists(os.path.join(pool.agent_dir("evil"), "credentials", "node.json"))
    status, body = pool.api("GET", "/v1/agents")
    assert [a["node"] for a in body["agents"]] == []


def test_the_agent_channel_requires_the_nodes_client_certificate(pool):
    start(pool)
    creds = os.path.join(pool.agent_dir("a"), "credentials")
    node_token = json.load(open(os.path.join(creds, "node.json")))["token"]
    no_cert = http_upgrade(pool, node_token)
    assert no_cert.startswith("HTTP/1.1 401"), no_cert
    assert "client certificate" in no_cert
    with_cert = http_upgrade(pool, node_token, (os.path.join(creds, "client.crt"),
                                                os.path.join(creds, "client.key")))
    assert with_cert.startswith("HTTP/1.1 101"), with_cert
    # The join token only enrolls.
    assert http_upgrade(pool, pool.join_token()).startswith("HTTP/1.1 403")


def test_a_revoked_agent_is_refused_at_once_and_its_jobs_requeued(pool):
    # Its job moves once the lease the revoked agent may still hold has
    # ended (its shim stops the job by then).
    start(pool, extra=["--attempt-lease", "3s"], agents=("a", "b"))
    job = pool.submit({"run": "sleep 600",
                       "resources": {"gpus": 1}})
    running = pool.wait_state(job, "running")
    node_name = [n["name"] for n in pool.nodes() if n["id"] == running["attempt_list"][-1]["node_id"]][0]
    r = pool.cli("admin", "node", "revoke", node_name)
    assert r.returncode == 0, r.stderr
    assert "revoked" in r.stdout
    # The job leaves the revoked node and runs on the other one.
    other = "b" if node_name == "a" else "a"
    def moved():
        j = pool.job(job)
        last = j["attempt_list"][-1]
        return j if j["state"] == "running" and len(j["attempt_list"]) == 2 else None
    j = wait_for(moved, timeout=60, what="the job requeued on the other node")
    assert j["attempt_list"][0]["reason"].startswith(f"node {node_name} was revoked")
    assert [n["state"] for n in pool.nodes() if n["name"] == node_name] == ["lost"]
    # The revoked agent keeps being refused.
    log_path = pool.dir / f"agent-{node_name}.log"
    wait_for(lambda: "invalid or expired token" in log_path.read_text(), timeout=30,
             what="the revoked agent refused")
    assert [n for n in pool.nodes() if n["name"] == node_name][0]["connected"] is False
    audit = pool.cli("-o", "json", "admin", "audit", check=True)
    actions = [(e["action"], e["target"]) for e in json.loads(audit.stdout)["entries"]]
    assert ("agent.revoke", node_name) in actions and ("agent.enroll", other) in actions


def test_users_password_login_and_the_cli_config(pool, tmp_path):
    start(pool)
    add = subprocess.run([GPUPOOL, "admin", "user", "add", "alice", "--password-stdin"],
                         input="correct horse battery\n", capture_output=True, text=True,
                         env=pool.cli_env(), timeout=60)
    assert add.returncode == 0, add.stderr
    config = tmp_path / "cfg" / "config.json"
    env = dict(os.environ, GPUPOOL_CONFIG=str(config))
    for k in ("GPUPOOL_SERVER", "GPUPOOL_TOKEN", "GPUPOOL_CA_FINGERPRINT"):
        env.pop(k, None)
    bad = subprocess.run([GPUPOOL, "login", "--server", pool.url, "--ca-fingerprint",
                          pool.ca_fingerprint, "--user", "alice", "--password-stdin"],
                         input="wrong password\n", capture_output=True, text=True, env=env, timeout=60)
    assert bad.returncode != 0 and "wrong user name or password" in bad.stderr
    assert not config.exists()
    ok = subprocess.run([GPUPOOL, "login", "--server", pool.url, "--ca-fingerprint",
                         pool.ca_fingerprint, "--user", "alice", "--password-stdin"],
                        input="correct horse battery\n", capture_output=True, text=True, env=env,
                        timeout=60)
    assert ok.returncode == 0, ok.stderr
    assert "as alice (member)" in ok.stdout
    assert stat.S_IMODE(os.stat(config).st_mode) == 0o600
    saved = json.load(open(config))
    assert saved["server"] == pool.url and saved["ca_fingerprint"] == pool.ca_fingerprint
    assert saved["token"].startswith("gpt_")
    # Everything else now works from the config alone.
    who = subprocess.run([GPUPOOL, "whoami"], capture_output=True, text=True, env=env, timeout=60)
    assert who.returncode == 0 and who.stdout.startswith("alice (member)"), who.stderr
    # Alice sees her jobs, not the admin's.
    admins = pool.submit({"run": "true"})
    mine = subprocess.run([GPUPOOL, "submit", "--wait", "--", "true"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert mine.returncode == 0, mine.stderr
    listed = subprocess.run([GPUPOOL, "-o", "json", "jobs"], capture_output=True, text=True,
                            env=env, timeout=60)
    owners = {j["owner"] for j in json.loads(listed.stdout)}
    assert owners == {"alice"}
    hidden = subprocess.run([GPUPOOL, "job", str(admins)], capture_output=True, text=True, env=env,
                            timeout=60)
    assert hidden.returncode != 0 and "does not exist" in hidden.stderr
    # A pin of another CA is refused.
    env["GPUPOOL_CA_FINGERPRINT"] = "sha256:" + "00" * 32
    pinned = subprocess.run([GPUPOOL, "whoami"], capture_output=True, text=True, env=env, timeout=60)
    assert pinned.returncode != 0 and "pinned CA" in pinned.stderr


def test_a_token_flood_is_limited_while_others_are_served(pool):
    start(pool, extra=("--rate-limit", "2/s,10"), agents=())
    add = subprocess.run([GPUPOOL, "admin", "user", "add", "bob"], capture_output=True, text=True,
                         env=pool.cli_env(), stdin=subprocess.DEVNULL, timeout=60)
    assert add.returncode == 0, add.stderr
    bob = pool.cli("token", "create", "--user", "bob", "--name", "bob", check=True).stdout.strip()
    answers = [pool.api("GET", "/v1/queue") for _ in range(40)]
    codes = [status for status, _ in answers]
    assert codes.count(429) >= 20, codes
    assert codes.count(200) >= 5, codes
    refused = [body for status, body in answers if status == 429][-1]
    assert "rate limit" in refused["error"]["message"]
    assert pool.api("GET", "/v1/queue", token=bob)[0] == 200  # bob is served meanwhile


def test_slow_clients_do_not_stall_others(pool):
    start(pool)
    slow = []
    for _ in range(50):
        s = socket.create_connection(("127.0.0.1", pool.port), timeout=10)
        s.sendall(b"\x16\x03\x01")  # the first bytes of a TLS hello, then nothing
        slow.append(s)
    try:
        # Each answered within pool.api's deadline, while the 50 sit silent
        # and hold their connections.
        for _ in range(20):
            assert pool.api("GET", "/v1/nodes")[0] == 200
    finally:
        for s in slow:
            s.close()


def test_secrets_stay_out_of_the_logs(pool):
    start(pool)
    job = pool.submit({"run": "true"})
    pool.wait_finished(job)
    node_token = json.load(open(os.path.join(pool.agent_dir("a"), "credentials", "node.json")))["token"]
    secrets = [pool.token, pool.join_token().split(".")[0], node_token]
    for log in pool.dir.glob("*.log"):
        text = log.read_text(errors="replace")
        if log.name == "server.log":
            # Shown once on purpose, on the server's first start.
            assert "Created the admin user's token" in text
            text = text.replace(pool.token, "", 1)
        for secret in secrets:
            assert secret[4:] not in text, f"{log.name} holds a secret"


def test_the_admin_commands_manage_users_groups_tokens_and_nodes(pool):
    start(pool)
    def cli(*args, stdin=subprocess.DEVNULL):
        r = subprocess.run([GPUPOOL, *args], capture_output=True, text=True, env=pool.cli_env(),
                           stdin=stdin, timeout=60)
        assert r.returncode == 0, (args, r.stderr)
        return r.stdout
    cli("admin", "user", "add", "carol", "--role", "provider")
    cli("admin", "user", "add", "dave")
    users = cli("admin", "user", "list")
    assert "carol" in users and "provider" in users and "dave" in users
    cli("admin", "group", "add", "vision", "--shared-jobs")
    members = cli("admin", "group", "members", "vision", "--add", "carol", "--add", "dave")
    assert "carol dave" in members and "share their jobs" in members
    token = cli("token", "create", "--user", "dave", "--name", "ci", "--scopes", "jobs:read",
                "--expires", "1h").strip()
    listed = json.loads(cli("-o", "json", "token", "list", "--user", "dave"))["tokens"]
    assert [(t["name"], t["scopes"], t["revoked"]) for t in listed] == [("ci", "jobs:read", False)]
    assert pool.api("GET", "/v1/jobs", token=token)[0] == 200
    assert pool.api("POST", "/v1/jobs", {"run": "true"}, token=token)[0] == 403  # scope
    cli("token", "revoke", listed[0]["id"])
    assert pool.api("GET", "/v1/jobs", token=token)[0] == 401
    nodes = cli("admin", "node", "list")
    assert "a" in nodes and "active" in nodes
    cli("admin", "node", "revoke", "a")
    assert "revoked" in cli("admin", "node", "list")
    cli("admin", "node", "allow", "a")
    old_join = pool.join_token()
    new_join = cli("admin", "join-token", "--rotate").strip()
    assert new_join != old_join and new_join == pool.join_token()
    assert pool.api("POST", "/v1/agent/enroll", {"node": "x"}, token=old_join)[0] == 401
    cli("admin", "user", "disable", "dave")
    assert "disabled" in cli("admin", "user", "list")
    audit = cli("admin", "audit", "--limit", "100")
    for action in ("user.add", "group.add", "group.members", "token.create", "token.revoke",
                   "agent.revoke", "agent.allow", "join-token.rotate", "user.disable"):
        assert action in audit, action


def test_insecure_says_so_loudly(pool):
    pool.start_server(extra=("--insecure",))
    assert pool.url.startswith("http://")
    log = (pool.dir / "server.log").read_text()
    assert "WARNING: --insecure: serving plain HTTP" in log
    pool.start_agent("a")
    pool.wait_nodes_ready(1)


def test_the_dashboard_files_are_public_and_confined_to_the_web_dir(pool, tmp_path):
    web = tmp_path / "web"
    web.mkdir()
    (web / "index.html").write_text("<title>gpupool</title>")
    (tmp_path / "outside.txt").write_text("not for the web")
    os.symlink(tmp_path / "outside.txt", web / "escape.txt")
    pool.start_server(extra=["--web-dir", str(web)])

    def get(path):
        req = urllib.request.Request(pool.url + path, method="GET")
        try:
            with urllib.request.urlopen(req, timeout=30, context=pool.ssl) as r:
                return r.status, r.headers, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.headers, e.read().decode()

    status, headers, body = get("/ui")
    assert status == 200 and body == "<title>gpupool</title>"
    assert headers["Content-Type"].startswith("text/html")
    assert headers["X-Content-Type-Options"] == "nosniff"
    # No token needed for the files, but still for the API.
    assert get("/v1/jobs")[0] == 401
    for path in ("/ui/escape.txt", "/ui/../outside.txt", "/ui/%2e%2e/outside.txt"):
        status, _, body = get(path)
        assert status in (404, 400), (path, status)
        assert "not for the web" not in body
    # A directory that is not there stops the server with a clear error.
    r = subprocess.run([GPUPOOL, "server", "--data-dir", str(tmp_path / "other"), "--web-dir",
                        str(tmp_path / "missing"), "--listen", "127.0.0.1:0"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "--web-dir" in r.stderr and "missing" in r.stderr
