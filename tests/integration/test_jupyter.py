"""Jupyter sessions end to end: Debian's real jupyter-notebook runs inside a
session's sandbox on a provider that accepts no inbound connection, and the
browser's way in is the server's proxy (/v1/sessions/{id}/proxy/) on the
sessions' own address (--sessions-listen), signed in with a one-time link;
a kernel runs code over the proxied WebSocket."""
import http.client
import json
import socket
import subprocess
import ssl
import time
import urllib.parse
import uuid

import websocket

from pool import wait_for

# Jupyter is a required part of the suite (scripts/setup.sh installs it):
# without it these tests fail rather than skip.


def start_pool(pool):
    pool.start_server()
    pool.start_agent("gpu1", gpus="1xA100:80GiB")
    pool.wait_nodes_ready(1)


def start_jupyter(pool, *extra):
    r = pool.cli("session", "start", "--jupyter", "--gpus", "1", *extra, timeout=120)
    assert r.returncode == 0, r.stderr
    job_id = int(r.stderr.split("session ", 1)[1].split()[0])
    assert f"gpupool session open {job_id}" in r.stdout, r.stdout
    return job_id


def request(pool, method, path, headers=None, body=None, base=None):
    """One HTTP request to the sessions' address (or `base`), without following redirects."""
    u = urllib.parse.urlsplit(base or pool.sessions_url)
    conn = http.client.HTTPSConnection(u.hostname, u.port, context=pool.ssl, timeout=30)
    conn.request(method, path, body=body, headers=headers or {})
    r = conn.getresponse()
    data = r.read()
    conn.close()
    return r.status, dict((k.lower(), v) for k, v in r.getheaders()), data


def sign_in(pool, job_id):
    """The browser's way: a one-time link from `gpupool session open`, then its cookie."""
    r = pool.cli("session", "open", str(job_id))
    assert r.returncode == 0, r.stderr
    link = r.stdout.strip()
    assert link.startswith(pool.sessions_url + f"/v1/sessions/{job_id}/login?code="), link
    assert pool.sessions_url != pool.url
    path = link[len(pool.sessions_url):]
    status, headers, _ = request(pool, "GET", path)
    assert status == 302, status
    assert headers["location"] == f"/v1/sessions/{job_id}/proxy/"
    cookie = headers["set-cookie"].split(";", 1)[0]
    assert cookie.startswith("gpupool_session=")
    assert "HttpOnly" in headers["set-cookie"]
    # The link works once.
    status, _, body = request(pool, "GET", path)
    assert status == 401, body
    return cookie


def jupyter_ready(pool, job_id, cookie):
    status, _, body = request(pool, "GET", f"/v1/sessions/{job_id}/proxy/api/status",
                              {"Cookie": cookie})
    return body if status == 200 else None


def test_a_kernel_runs_code_through_the_proxy(pool):
    start_pool(pool)
    t0 = time.time()
    job_id = start_jupyter(pool)
    cookie = sign_in(pool, job_id)
    status_body = wait_for(lambda: jupyter_ready(pool, job_id, cookie), timeout=60,
                           interval=0.2, what="Jupyter to answer through the proxy")
    print(f"session start until Jupyter answers: {time.time() - t0:.2f}s")
    assert "started" in json.loads(status_body)

    # The notebook page itself, under the proxy's prefix.
    status, _, body = request(pool, "GET", f"/v1/sessions/{job_id}/proxy/tree", {"Cookie": cookie})
    assert status == 200 and b"Jupyter" in body

    # A kernel, and 1+1 over the proxied WebSocket.
    status, _, body = request(pool, "POST", f"/v1/sessions/{job_id}/proxy/api/kernels",
                              {"Cookie": cookie, "Content-Type": "application/json"}, b"{}")
    assert status == 201, body
    kernel = json.loads(body)["id"]
    host = pool.sessions_url.split("://", 1)[1]
    ws = websocket.create_connection(
        f"wss://{host}/v1/sessions/{job_id}/proxy/api/kernels/{kernel}/channels",
        header=[f"Cookie: {cookie}"], origin=pool.sessions_url,
        sslopt={"cert_reqs": ssl.CERT_REQUIRED, "ca_certs": pool.ca_file(), "check_hostname": False},
        timeout=60)
    msg_id = uuid.uuid4().hex
    ws.send(json.dumps({
        "header": {"msg_id": msg_id, "username": "test", "session": uuid.uuid4().hex,
                   "msg_type": "execute_request", "version": "5.3"},
        "parent_header": {}, "metadata": {}, "channel": "shell",
        "content": {"code": "1+1", "silent": False, "store_history": False,
                    "user_expressions": {}, "allow_stdin": False},
    }))
    result = None
    deadline = time.time() + 60
    while result is None and time.time() < deadline:
        m = json.loads(ws.recv())
        if m.get("parent_header", {}).get("msg_id") == msg_id and m["msg_type"] == "execute_result":
            result = m["content"]["data"]["text/plain"]
    ws.close()
    assert result == "2"


def test_the_proxy_refuses_callers_without_the_sessions_cookie(pool):
    start_pool(pool)
    job_id = start_jupyter(pool)
    # The owner's own token works for scripts; and `session start` returned
    # only once Jupyter answered, so it does at the first try.
    status, _, body = request(pool, "GET", f"/v1/sessions/{job_id}/proxy/api/status",
                              {"Authorization": "Bearer " + pool.token})
    assert status == 200, body
    # The proxy is on the sessions' address only: the API's says where it is,
    # and the sessions' serves none of the API.
    status, _, body = request(pool, "GET", f"/v1/sessions/{job_id}/proxy/api/status",
                              {"Authorization": "Bearer " + pool.token}, base=pool.url)
    assert status == 404 and pool.sessions_url.encode() in body, (status, body)
    status, _, body = request(pool, "GET", "/v1/jobs", {"Authorization": "Bearer " + pool.token})
    assert status == 404 and b"serves interactive sessions only" in body, (status, body)
    # No credentials: told how to sign in.
    status, _, body = request(pool, "GET", f"/v1/sessions/{job_id}/proxy/api/status")
    assert status == 401, body
    assert f"gpupool session open {job_id}" in body.decode()
    # A made-up cookie is no better.
    status, _, body = request(pool, "GET", f"/v1/sessions/{job_id}/proxy/api/status",
                              {"Cookie": "gpupool_session=0123456789abcdef"})
    assert status == 401, body
    # Another user's token is refused; the job stays hidden from them.
    assert pool.cli("admin", "user", "add", "mallory").returncode == 0
    r = pool.cli("token", "create", "--user", "mallory", "--name", "t")
    assert r.returncode == 0, r.stderr
    other = r.stdout.strip()
    status, _, body = request(pool, "GET", f"/v1/sessions/{job_id}/proxy/api/status",
                              {"Authorization": "Bearer " + other})
    assert status == 404, body
    status, body = pool.api("POST", f"/v1/sessions/{job_id}/link", {}, token=other)
    assert status == 404, body


def free_ports(n):
    """A port P with P .. P + n - 1 free (bound to find them, then let go)."""
    for _ in range(50):
        socks = [socket.socket() for _ in range(n)]
        try:
            socks[0].bind(("127.0.0.1", 0))
            port = socks[0].getsockname()[1]
            for i, s in enumerate(socks[1:], 1):
                s.bind(("127.0.0.1", port + i))
            return port
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise AssertionError(f"no {n} free ports in a row")


def test_the_sessions_address_by_default_and_bad_ones(pool, tmp_path):
    """Without --sessions-listen the sessions are served on the server's port
    + 1; a bad address or URL stops the server with what was wrong."""
    from pool import GPUPOOL
    port = free_ports(2)  # the server's, and the next for its sessions
    pool.port = port
    pool.start_server(extra=["--sessions-listen", ""])
    assert pool.url.endswith(f":{port}")
    assert pool.sessions_url == f"https://127.0.0.1:{port + 1}", pool.sessions_url
    for flags, said in ((["--sessions-listen", "nowhere"], "--sessions-listen"),
                        (["--sessions-url", "ftp://x"], "--sessions-url must start with https://"),
                        (["--listen", "127.0.0.1:65535"], "no next port for interactive sessions")):
        listen = [] if "--listen" in flags else ["--listen", "127.0.0.1:0"]
        args = [GPUPOOL, "server", "--data-dir", str(tmp_path / "other"), *listen, *flags]
        r = subprocess.run(args, capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and said in r.stderr, (flags, r.returncode, r.stderr)


def test_a_host_name_per_session(pool):
    """--sessions-url with {id}: each session's link names a host of its own
    (here N.sessions.test, reached at 127.0.0.1 by its Host header, as a
    browser reaches it through wildcard DNS), and a session is served only
    on its own host."""
    port = free_ports(1)
    pool.sessions_port = port
    pool.start_server(extra=["--sessions-url", f"https://{{id}}.sessions.test:{port}",
                             "--tls-san", "*.sessions.test"])
    pool.start_agent("gpu1", gpus="1xA100:80GiB")
    pool.wait_nodes_ready(1)
    job_id = start_jupyter(pool)
    own = f"{job_id}.sessions.test:{port}"
    r = pool.cli("session", "open", str(job_id))
    assert r.returncode == 0, r.stderr
    link = r.stdout.strip()
    assert link.startswith(f"https://{own}/v1/sessions/{job_id}/login?code="), link
    path = link[len(f"https://{own}"):]
    # Another session's host, or the listener's plain address, is refused.
    status, _, body = request(pool, "GET", path, {"Host": f"{job_id + 1}.sessions.test:{port}"})
    assert status == 404 and own.encode() in body, (status, body)
    status, _, body = request(pool, "GET", path)
    assert status == 404, (status, body)
    status, headers, _ = request(pool, "GET", path, {"Host": own})
    assert status == 302 and headers["location"] == f"/v1/sessions/{job_id}/proxy/", status
    cookie = headers["set-cookie"].split(";", 1)[0]
    # (`session start` could not reach N.sessions.test from here to wait for
    # Jupyter, and said so: the test waits.)
    body = wait_for(lambda: (lambda r: r[2] if r[0] == 200 else None)(
        request(pool, "GET", f"/v1/sessions/{job_id}/proxy/api/status", {"Host": own, "Cookie": cookie})),
        timeout=60, interval=0.2, what="Jupyter on the session's own host")
    assert b"started" in body, body
