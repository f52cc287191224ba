"""An owner takes a machine back from anywhere: pause, resume and reclaim
through the server (POST /v1/nodes/{name}/pause|resume|reclaim, the
dashboard's My machines), enforced by the node's agent as it enforces the
local `gpupool agent` commands. Only the provider who enrolled the node and
admins may; the server cannot lift a hold the owner made at the machine."""
import pytest

from pool import wait_for
from test_provider import agent_cmd, node, polite_job, running_on


def make_user(pool, name, role):
    status, body = pool.api("POST", "/v1/users", {"name": name, "role": role})
    assert status == 201, body
    status, body = pool.api("POST", "/v1/tokens", {"user": name, "name": "t"})
    assert status == 201, body
    return body["token"]


def events(pool, name, kind=None):
    status, body = pool.api("GET", f"/v1/nodes/{name}/events")
    assert status == 200, body
    return [e for e in body["events"] if kind is None or e["kind"] == kind]


def event_saying(pool, name, kind, text):
    return wait_for(lambda: next((e for e in events(pool, name, kind) if text in e["reason"]),
                                 None), what=f"a {kind} event saying {text!r}")


@pytest.fixture
def owned(pool):
    """A server, and node `a` enrolled by the provider carol (her own token
    as the agent's join token, as a provider enrolls her machine)."""
    pool.start_server()
    carol = make_user(pool, "carol", "provider")
    pool.start_agent("a", enroll_as=carol)
    wait_for(lambda: any(n["name"] == "a" and n["state"] == "ready" for n in pool.nodes()),
             what="node a ready")
    status, body = pool.api("GET", "/v1/agents")
    assert status == 200 and [(a["node"], a["owner"]) for a in body["agents"]] == [("a", "carol")]
    return carol


def test_the_owner_pauses_resumes_and_reclaims_through_the_server(pool, owned):
    carol = owned
    job_id = pool.submit(polite_job("long", 2, first_secs=3600))
    running_on(pool, job_id, "a")

    status, body = pool.api("POST", "/v1/nodes/a/pause", token=carol)
    assert status == 202 and body["sent"] and body["command"] == "pause", body
    wait_for(lambda: node(pool, "a")["status"] == "paused", what="a paused")
    event_saying(pool, "a", "pause", "paused by carol through the server")
    assert pool.job(job_id)["state"] == "running"  # a pause lets running work go on

    assert pool.api("POST", "/v1/nodes/a/resume", token=carol)[0] == 202
    # Lending again (busy: the job holds its only GPU).
    wait_for(lambda: node(pool, "a")["status"] == "busy", what="a lending again")
    event_saying(pool, "a", "resume", "resumed by carol through the server")

    # Reclaim at once: the job is stopped and requeued (no other node: it waits).
    status, body = pool.api("POST", "/v1/nodes/a/reclaim", {"now": True}, token=carol)
    assert status == 202 and body["now"] is True, body
    job = wait_for(lambda: (lambda j: j if j["attempt_list"][0]["state"] == "vacated" else None)(
        pool.job(job_id)), what="the attempt vacated")
    assert "reclaimed by the owner" in job["attempt_list"][0]["reason"], job
    assert job["state"] == "pending", job
    event_saying(pool, "a", "reclaim", "reclaim at once of every GPU asked by carol")
    assert node(pool, "a")["status"] == "reclaimed"

    # A resume lends it again and the job comes back (its later attempts are short).
    assert pool.api("POST", "/v1/nodes/a/resume", token=carol)[0] == 202
    assert pool.wait_finished(job_id, timeout=60)["state"] == "succeeded"

    # The admin's CLI says the same, by GPU index.
    r = pool.cli("admin", "node", "reclaim", "a", "--gpu", "0")
    assert r.returncode == 0 and "reclaim sent to node a's agent" in r.stdout, r.stderr
    wait_for(lambda: node(pool, "a")["status"] == "reclaimed", what="a reclaimed by the admin")
    event_saying(pool, "a", "reclaim", "reclaim of 1 GPUs asked by admin")

    # A GPU the machine does not have: the agent refuses and says why.
    assert pool.api("POST", "/v1/nodes/a/reclaim", {"gpus": ["7"]}, token=carol)[0] == 202
    refused = event_saying(pool, "a", "refused", "reclaim by carol through the server refused")
    assert "no GPU \"7\" on this machine" in refused["reason"], refused

    # Every command is in the audit log, with who asked.
    status, body = pool.api("GET", "/v1/audit?limit=1000")
    done = [(e["actor"], e["action"], e["target"]) for e in body["entries"] if e["ok"]]
    for action in ("node.pause", "node.resume", "node.reclaim"):
        assert ("carol", action, "a") in done, done
    assert ("admin", "node.reclaim", "a") in done, done


def test_the_server_cannot_lift_a_hold_made_at_the_machine(pool, owned):
    carol = owned
    r = agent_cmd(pool, "a", "pause")
    assert r.returncode == 0, r.stderr
    wait_for(lambda: node(pool, "a")["status"] == "paused", what="paused at the machine")
    # The owner's pause at the keyboard outranks the server, admins included.
    for token in (carol, "admin"):
        assert pool.api("POST", "/v1/nodes/a/resume", token=token)[0] == 202
    refused = event_saying(pool, "a", "refused", "resume by carol through the server refused")
    assert "only `gpupool agent resume` there" in refused["reason"], refused
    event_saying(pool, "a", "refused", "resume by admin through the server refused")
    assert node(pool, "a")["status"] == "paused"
    job_id = pool.submit(polite_job("waits", 1))
    assert pool.wait_considered(job_id)["state"] == "pending"
    # A remote pause on top changes nothing; the local resume ends both.
    assert pool.api("POST", "/v1/nodes/a/pause", token=carol)[0] == 202
    event_saying(pool, "a", "pause", "paused by carol through the server")
    assert agent_cmd(pool, "a", "resume").returncode == 0
    assert pool.wait_finished(job_id)["state"] == "succeeded"


def test_only_the_nodes_provider_and_admins_may_command_it(pool, owned):
    dave = make_user(pool, "dave", "provider")
    erin = make_user(pool, "erin", "member")
    for token, who in ((dave, "another provider"), (erin, "a member")):
        for command in ("pause", "resume", "reclaim"):
            status, body = pool.api("POST", f"/v1/nodes/a/{command}", token=token)
            assert status == 403, (who, command, body)
    assert node(pool, "a")["status"] == "available"
    assert not events(pool, "a", "pause") and not events(pool, "a", "reclaim")
    # A malformed reclaim is refused by the server, with the field named.
    status, body = pool.api("POST", "/v1/nodes/a/reclaim", {"gpus": "0"}, token=owned)
    assert status == 400 and "gpus" in body["error"]["message"], body
    status, body = pool.api("POST", "/v1/nodes/a/reclaim", {"gpus": [], "later": 1}, token=owned)
    assert status == 400 and "later" in body["error"]["message"], body
    # A node nobody has: the admin hears so.
    assert pool.api("POST", "/v1/nodes/nowhere/pause")[0] == 404
    # An agent that is not connected cannot be commanded: the owner hears so
    # at once, and nothing waits to surprise the machine when it comes back.
    pool.kill_agent("a")
    wait_for(lambda: node(pool, "a")["state"] != "ready", what="a offline")
    status, body = pool.api("POST", "/v1/nodes/a/pause", token=owned)
    assert status == 503 and "not connected" in body["error"]["message"], body
