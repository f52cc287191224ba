"""Money end to end, on a real pool: prices per GPU class, every attempt
charged in the ledger for exactly the time it held its GPUs, lending credits
to the machine's lab, grants and balances, `gpupool usage` and `gpupool
ledger` as tables, JSON and CSV; bad prices and grants refused with nothing
stored; and a server killed with SIGKILL while a job accrues, twice, after
which every millisecond of the job's holding is charged exactly once.

The ledger period is 2 s here (--ledger-period; 1 h by default), so that a
running job crosses several periods in a few seconds."""
import csv
import datetime
import html.parser
import io
import json
import subprocess

from pool import GPUPOOL, wait_for

MONEY = ["--ledger-period", "2s", "--accrual-interval", "1s"]
PERIOD_MS = 2000
HOSTILE_NOTE = "<script>alert(1)</script> & co"
# A price's cost over a holding, exactly as the server computes it
# (accounting/prices.h): price x GPU milli x ms, in 128-bit integers, over
# one denominator, rounded down once.
DENOMINATOR = 1000 * 1024 * 3_600_000


def exact_cost(price_micros, gpu_milli, ms):
    return price_micros * gpu_milli * ms * 1024 // DENOMINATOR


def credits(micros):
    """As the CLI prints amounts: at least two decimals, more when not zero."""
    whole, frac = divmod(micros, 1_000_000)
    return f"{whole}." + f"{frac:06d}".rstrip("0").ljust(2, "0")


def add_member(pool, name, lab=None):
    """A member (in `lab` if given) and a token of hers."""
    r = subprocess.run([GPUPOOL, "admin", "user", "add", name], stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, env=pool.cli_env(), timeout=60)
    assert r.returncode == 0, r.stderr
    if lab:
        status, body = pool.api("POST", f"/v1/groups/{lab}/members", {"add": [name]})
        assert status == 200, body
    return pool.cli("token", "create", "--user", name, "--name", name, check=True).stdout.strip()


def cli_as(pool, token, *args):
    return subprocess.run([GPUPOOL, *args], capture_output=True, text=True, timeout=120,
                          env=pool.cli_env(token))


def ledger(pool, account):
    status, body = pool.api("GET", f"/v1/ledger?account={account}&limit=10000")
    assert status == 200, body
    return body["entries"]


def charges_of(pool, account, attempt):
    return sorted((e for e in ledger(pool, account)
                   if e["kind"] == "charge" and e["attempt"] == attempt),
                  key=lambda e: e["from_ms"])


def assert_charged_once(charges, attempt, price_micros):
    """The charges cover the attempt's holding without a gap or an overlap,
    none crosses a ledger period, and they add up to its exact cost."""
    assert charges, f"no charges for attempt {attempt['id']}"
    assert len({c["id"] for c in charges}) == len(charges)
    assert charges[0]["from_ms"] == attempt["created_ms"], (charges[0], attempt)
    assert charges[-1]["at_ms"] == attempt["finished_ms"], (charges[-1], attempt)
    for a, b in zip(charges, charges[1:]):
        assert a["at_ms"] == b["from_ms"], (a, b)
    for c in charges:
        assert c["from_ms"] // PERIOD_MS == (c["at_ms"] - 1) // PERIOD_MS, c
    held_ms = attempt["finished_ms"] - attempt["created_ms"]
    assert sum(c["amount_micros"] for c in charges) == exact_cost(price_micros, 1000, held_ms)


def test_jobs_pay_for_their_gpu_time_and_the_machines_lab_earns(pool):
    pool.start_server(extra=MONEY)
    for lab in ("vision", "physics"):
        status, body = pool.api("POST", "/v1/groups", {"name": lab})
        assert status == 201, body
    alice = add_member(pool, "alice", "vision")
    bob = add_member(pool, "bob")
    # Physics' machine, enrolled with the operator's join token.
    pool.start_agent("phys-1", extra=["--owner-group", "physics"])
    pool.wait_nodes_ready(1)

    # 36 credits per A100-hour: 10,000 micro-credits a second.
    r = pool.cli("admin", "price", "set", "A100", "36")
    assert r.returncode == 0 and "A100: 36.00 credits" in r.stdout, r.stdout + r.stderr
    # A cheaper class: in fair share an A100-hour now counts 4 T4-hours.
    r = pool.cli("admin", "price", "set", "T4", "9")
    assert r.returncode == 0, r.stdout + r.stderr
    r = pool.cli("admin", "credit", "add", "vision", "100", "--note", "fall allocation")
    assert r.returncode == 0 and "balance is 100.00" in r.stdout, r.stdout + r.stderr
    # A note is the admin's text, shown in statements as text, never markup.
    r = pool.cli("admin", "credit", "add", "vision", "0.5", "--note", HOSTILE_NOTE)
    assert r.returncode == 0, r.stderr

    # What a job would cost, without submitting it.
    r = cli_as(pool, alice, "submit", "--dry-run", "--gpus", "2", "--max-runtime", "30m",
               "--group", "vision", "--", "true")
    assert r.returncode == 0, r.stderr
    assert "not submitted" in r.stdout and "72.00 credits per hour" in r.stdout, r.stdout
    assert "at most 36.00 in its max_runtime of 30m" in r.stdout, r.stdout
    assert pool.api("GET", "/v1/jobs")[1]["jobs"] == []
    r = cli_as(pool, alice, "-o", "json", "submit", "--dry-run", "--gpus", "0.25", "--", "true")
    assert json.loads(r.stdout)["per_hour_max_micros"] == 9_000_000, r.stdout

    # Bad input: a clear error naming the field, and nothing stored.
    before = (pool.api("GET", "/v1/prices")[1], ledger(pool, "group:vision"))
    for args, field in ((["price", "set", "A100", "-1"], "price"),
                        (["price", "set", "A100", "2.5x"], "price"),
                        (["price", "set", "A 100", "2"], "class"),
                        (["price", "set", "A100", "2000000"], "price"),
                        (["credit", "add", "nosuchlab", "5"], "account"),
                        (["credit", "add", "user:nobody", "5"], "account"),
                        (["credit", "add", "vision", "0"], "amount"),
                        (["credit", "add", "pool", "5"], "account")):
        r = pool.cli("admin", *args)
        assert r.returncode != 0 and f"{field}:" in r.stderr, (args, r.stderr)
    assert (pool.api("GET", "/v1/prices")[1], ledger(pool, "group:vision")) == before
    # Members neither set prices nor grant themselves credits.
    r = cli_as(pool, alice, "admin", "credit", "add", "vision", "1000")
    assert r.returncode != 0, r.stdout

    # Alice's job for vision on physics' machine; Bob's in a group that is
    # not a lab (open to anyone): that is no account, Bob pays.
    jobs = {}
    for who, token, group in (("alice", alice, "vision"), ("bob", bob, "open-queue")):
        args = ["submit", "--gpus", "1", "--name", f"{who}-job"]
        if group:
            args += ["--group", group]
        r = cli_as(pool, token, *args, "--", "sleep", "3")
        assert r.returncode == 0, r.stderr
        jobs[who] = int(r.stdout)
        assert f"job {jobs[who]} costs 36.00 credits per hour" in r.stderr, r.stderr
    for job_id in jobs.values():
        pool.wait_state(job_id, "succeeded", timeout=120)

    price = 36_000_000
    attempt = {w: pool.job(j)["attempt_list"][0] for w, j in jobs.items()}
    # Fair share charged each lab 4 GPU-ms a millisecond of its A100 (the
    # price weight, 36 over the cheapest class's 9), decayed a little since.
    groups = {g["name"]: g for g in pool.api("GET", "/v1/groups")[1]["groups"]}
    for who, group in (("alice", "vision"), ("bob", "open-queue")):
        held_ms = attempt[who]["finished_ms"] - attempt[who]["created_ms"]
        ratio = groups[group]["usage_gpu_milli_ms"] / (1000 * held_ms)
        assert 3.99 < ratio <= 4.0, (group, ratio, groups[group])
    alice_charges = charges_of(pool, "group:vision", attempt["alice"]["id"])
    assert_charged_once(alice_charges, attempt["alice"], price)
    bob_charges = charges_of(pool, "user:bob", attempt["bob"]["id"])
    assert_charged_once(bob_charges, attempt["bob"], price)
    spent = {w: sum(c["amount_micros"] for c in cs)
             for w, cs in (("alice", alice_charges), ("bob", bob_charges))}
    assert spent["alice"] >= 30_000  # 0.01 credits a second, for at least the 3 s it slept
    # Physics earned 80% of each charge, vision paid from its grant.
    lending = [e for e in ledger(pool, "group:physics") if e["kind"] == "lending"]
    assert sorted(e["amount_micros"] for e in lending) == sorted(
        c["amount_micros"] * 8 // 10 for c in alice_charges + bob_charges if c["amount_micros"])
    status, accounts = pool.api("GET", "/v1/accounts")
    money = {a["account"]: a for a in accounts["accounts"]}
    assert money["group:vision"]["balance_micros"] == 100_500_000 - spent["alice"]
    assert money["user:bob"]["balance_micros"] == -spent["bob"]
    assert money["group:physics"]["balance_micros"] == sum(e["amount_micros"] for e in lending)
    assert sum(a["posted_micros"] for a in accounts["accounts"]) == 0  # the books balance
    # The dashboard's plot: each day's flows into an account, by kind.
    for account, balance in (("group:physics", money["group:physics"]["balance_micros"]),
                             ("group:vision", money["group:vision"]["balance_micros"])):
        status, history = pool.api("GET", "/v1/accounts/" + account + "/history?since=2d")
        assert status == 200, history
        days = history["days"]
        assert len(days) in (3, 4)  # two days back to today, whole UTC days
        assert all(b["from_ms"] - a["from_ms"] == 86_400_000 for a, b in zip(days, days[1:]))
        assert sum(d["charges_micros"] + d["lending_micros"] + d["grants_micros"]
                   for d in days) == balance
    physics_days = pool.api("GET", "/v1/accounts/group:physics/history")[1]["days"]
    assert len(physics_days) == 30
    assert sum(d["lending_micros"] for d in physics_days) == sum(
        e["amount_micros"] for e in lending)
    assert pool.api("GET", "/v1/accounts/group:vision/history?since=soon")[0] == 400

    # A token without jobs:read reads no money, even its own user's.
    metrics_only = pool.cli("token", "create", "--user", "alice", "--name", "scrape",
                            "--scopes", "metrics", check=True).stdout.strip()
    for path in ("/v1/accounts", "/v1/accounts/user:alice", "/v1/usage",
                 "/v1/ledger?account=user:alice", "/v1/statement?account=user:alice&month=2026-11"):
        status, body = pool.api("GET", path, token=metrics_only)
        assert status == 403, (path, status, body)

    # Alice sees her own and her lab's accounts, not physics' or Bob's.
    r = cli_as(pool, alice, "-o", "json", "balance")
    assert r.returncode == 0, r.stderr
    assert {a["account"] for a in json.loads(r.stdout)["accounts"]} == {"user:alice", "group:vision"}
    assert cli_as(pool, alice, "ledger", "--group", "physics").returncode != 0
    assert cli_as(pool, alice, "usage", "--user", "bob").returncode != 0
    r = cli_as(pool, alice, "ledger", "--group", "vision")
    assert r.returncode == 0 and "fall allocation" in r.stdout and "charge" in r.stdout, r.stdout

    # Usage: by user as JSON rows, by model as CSV.
    r = pool.cli("-o", "json", "usage", "--by", "user")
    assert r.returncode == 0, r.stderr
    rows = {row["key"]: row for row in json.loads(r.stdout)["rows"]}
    assert rows["alice"]["cost_micros"] == spent["alice"]
    held_h = (attempt["alice"]["finished_ms"] - attempt["alice"]["created_ms"]) / 3_600_000
    assert abs(rows["alice"]["gpu_hours"] - held_h) < 1e-9
    assert rows["bob"]["cost"] == spent["bob"] / 1e6
    r = pool.cli("-o", "csv", "usage", "--by", "model", "--since", "1d")
    assert r.returncode == 0, r.stderr
    table = list(csv.reader(io.StringIO(r.stdout)))
    assert table[0] == ["MODEL", "GPU_HOURS", "CPU_HOURS", "COST"], table
    assert [row[0] for row in table[1:]] == ["A100"], table
    r = cli_as(pool, alice, "usage")  # her own only
    assert r.returncode == 0 and "alice" in r.stdout and "bob" not in r.stdout, r.stdout

    # sacct's view: each job with its GPU-hours and cost.
    r = cli_as(pool, alice, "jobs", "--accounting")
    assert r.returncode == 0, r.stderr
    line = next(l for l in r.stdout.splitlines() if l.startswith(str(jobs["alice"]) + " "))
    assert f"{spent['alice'] / 1e6:.2f}" in line.split(), (line, spent)

    # The month's statement: as a table, CSV, and printable HTML.
    month = datetime.datetime.fromtimestamp(attempt["alice"]["created_ms"] / 1000,
                                            datetime.timezone.utc).strftime("%Y-%m")
    r = cli_as(pool, alice, "invoice", "--group", "vision", "--month", month)
    assert r.returncode == 0, r.stderr
    assert f"Statement of group:vision for {month}" in r.stdout, r.stdout
    assert f"charged {credits(spent['alice'])} for" in r.stdout, r.stdout
    assert "granted 100.50" in r.stdout, r.stdout
    r = cli_as(pool, alice, "-o", "csv", "invoice", "--group", "vision", "--month", month)
    rows = list(csv.reader(io.StringIO(r.stdout)))
    assert rows[0] == ["JOB", "USER", "CLASS", "GPU_HOURS", "COST"], rows
    assert rows[1][:3] == [str(jobs["alice"]), "alice", "A100"], rows
    r = pool.cli("invoice", "--group", "physics", "--month", month, "--html")
    assert r.returncode == 0, r.stderr
    texts = []

    class Page(html.parser.HTMLParser):
        def handle_starttag(self, tag, attrs):
            assert tag != "script", "a note became markup"

        def handle_data(self, data):
            texts.append(data)
    Page().feed(r.stdout)
    earned = sum(e["amount_micros"] for e in lending)
    assert any("earned by lending" in t for t in texts), texts
    r = pool.cli("invoice", "--group", "vision", "--month", month, "--html")
    Page().feed(r.stdout)
    assert "grant: " + HOSTILE_NOTE in "".join(texts), texts
    assert earned > 0
    for bad in ("2026-13", "2026-1", "last month", ""):
        r = cli_as(pool, alice, "invoice", "--group", "vision", "--month", bad)
        assert r.returncode != 0 and "month" in r.stderr, (bad, r.stderr)

    # Every price change and grant is in the audit log.
    status, audit = pool.api("GET", "/v1/audit?limit=200")
    actions = [e["action"] for e in audit["entries"]]
    assert "price.set" in actions and "credit.add" in actions, actions


def test_a_killed_server_charges_every_millisecond_once(pool):
    pool.start_server(extra=MONEY)
    pool.start_agent("lab-a")
    pool.wait_nodes_ready(1)
    assert pool.cli("admin", "price", "set", "A100", "7.2").returncode == 0
    job_id = pool.submit({"name": "long", "run": "sleep 600", "resources": {"gpus": 1}})
    pool.wait_state(job_id, "running", timeout=60)
    attempt_id = pool.job(job_id)["attempt_list"][0]["id"]
    user_account = "user:admin"

    def posted():
        return len(charges_of(pool, user_account, attempt_id))

    # Killed twice while the job accrues, each time after more was posted.
    for _ in range(2):
        seen = posted()
        wait_for(lambda: posted() >= seen + 2, timeout=30, what="two more periods posted")
        pool.kill_server()
        pool.start_server(extra=MONEY)
    seen = posted()
    wait_for(lambda: posted() >= seen + 1, timeout=30, what="a period posted after the restart")
    status, body = pool.api("GET", "/v1/accounts/" + user_account)
    assert status == 200 and body["accruing_micros"] >= 0, body
    assert pool.cli("cancel", str(job_id)).returncode == 0
    pool.wait_state(job_id, "cancelled", timeout=60)
    attempt = pool.job(job_id)["attempt_list"][0]
    assert_charged_once(charges_of(pool, user_account, attempt_id), attempt, 7_200_000)
    status, body = pool.api("GET", "/v1/accounts/" + user_account)
    assert body["accruing_micros"] == 0 and body["posted_micros"] < 0, body


# A job that checkpoints when it is told to stop (its checkpoint signal,
# then SIGTERM): the shell's trap says so and exits 0.
CHECKPOINTING = ("trap 'echo checkpointing; exit 0' USR1 TERM; echo attempt=$GPUPOOL_ATTEMPT_ID; "
                 "while true; do sleep 0.2; done")


def submit_spec(pool, token, spec):
    """Submits `spec` as the token's user (from a file, as users do)."""
    path = pool.dir / f"{spec['name']}.json"
    path.write_text(json.dumps(spec))
    r = cli_as(pool, token, "submit", "-q", str(path))
    assert r.returncode == 0, r.stderr
    return int(r.stdout)


def vision_pool(pool):
    """A pool at 1 credit per A100-second, the lab vision with alice in it."""
    pool.start_server(extra=MONEY)
    status, body = pool.api("POST", "/v1/groups", {"name": "vision"})
    assert status == 201, body
    alice = add_member(pool, "alice", "vision")
    pool.start_agent("lab-a")
    pool.wait_nodes_ready(1)
    assert pool.cli("admin", "price", "set", "A100", "3600").returncode == 0
    return alice


def test_a_stop_budget_checkpoints_the_job_and_money_brings_it_back(pool):
    alice = vision_pool(pool)
    assert pool.cli("admin", "credit", "add", "vision", "3").returncode == 0
    # Bad budgets: refused, naming the field; nothing stored.
    for args, field in ((["nosuchlab", "5"], "account"), (["vision", "5x"], "monthly"),
                        (["vision", "-5"], "monthly"), (["pool", "5"], "account")):
        r = pool.cli("admin", "budget", "set", *args)
        assert r.returncode != 0 and f"{field}:" in r.stderr, (args, r.stderr)
    assert "budget" not in pool.api("GET", "/v1/accounts/group:vision")[1]
    r = pool.cli("admin", "budget", "set", "vision", "0", "--action", "stop")
    assert r.returncode == 0 and "up to its balance, then stop" in r.stdout, r.stdout + r.stderr

    job = submit_spec(pool, alice, {"name": "train", "run": CHECKPOINTING, "group": "vision",
                                    "resources": {"gpus": 1}, "checkpoint": {"grace": "5s"}})
    pool.wait_state(job, "running", timeout=60)
    # Three credits last about three seconds: then it is stopped, having
    # checkpointed, and waits for money.
    held = wait_for(lambda: (lambda j: j if j["state"] == "pending" and j["attempts"] == 1 and
                             "held: group vision has no credits left" in j["reason"] else None)(
        pool.job(job)), timeout=60, what="the job stopped and held by the budget")
    first = held["attempt_list"][0]
    assert first["state"] == "preempted" and "stopped: group vision" in first["reason"], first
    assert "checkpointing" in pool.logs_text(job)
    # The alert is an event in the job's log: once, though ticks went on.
    alerts = [t for t in pool.logs_text(job) if t.startswith("budget: ")]
    assert len(alerts) == 1, alerts
    assert alerts[0].startswith("budget: group vision has no credits left (balance "), alerts
    r = cli_as(pool, alice, "balance")
    assert "AT ITS LIMIT" in r.stdout, r.stdout
    # Every millisecond it held the GPU is charged, though the money ran out.
    assert_charged_once(charges_of(pool, "group:vision", first["id"]), first, 3_600_000_000)

    # Money comes back: it runs again, a new attempt.
    assert pool.cli("admin", "credit", "add", "vision", "1000").returncode == 0
    wait_for(lambda: pool.job(job)["attempts"] == 2 and pool.job(job)["state"] == "running",
             timeout=60, what="the job running again")
    assert pool.cli("cancel", str(job)).returncode == 0
    pool.wait_state(job, "cancelled", timeout=60)
    status, audit = pool.api("GET", "/v1/audit?limit=200")
    assert "budget.set" in [e["action"] for e in audit["entries"]]


def test_a_job_is_stopped_at_its_spending_limit(pool):
    alice = vision_pool(pool)
    # No budget: vision may run into debt, but this job may spend 2 credits.
    for bad in ("0", "-1", "\"x\"", "[]"):
        status, body = pool.api("POST", "/v1/jobs", json.loads(
            '{"name": "x", "run": "true", "max_cost": %s}' % bad))
        assert status == 400 and "max_cost" in body["error"]["message"], (bad, body)
    job = submit_spec(pool, alice, {"name": "capped", "run": CHECKPOINTING, "group": "vision",
                                    "max_cost": 2, "resources": {"gpus": 1},
                                    "checkpoint": {"grace": "5s"}})
    done = pool.wait_state(job, "cancelled", timeout=60)
    assert "its spending limit of 2.00 credits was reached" in done["reason"], done
    assert done["spec"]["max_cost"] == "2.00"
    assert "checkpointing" in pool.logs_text(job)
    attempt = done["attempt_list"][0]
    charges = charges_of(pool, "group:vision", attempt["id"])
    assert_charged_once(charges, attempt, 3_600_000_000)
    assert sum(c["amount_micros"] for c in charges) >= 2_000_000


def test_an_agent_cannot_send_lending_credits_to_a_lab_its_provider_is_not_in(pool):
    """An agent names its owner group itself. Mallory, a provider outside
    physics, enrolls a machine claiming physics; Carol, in physics, one
    claiming it too. Only Carol's earns physics anything."""
    pool.start_server(extra=MONEY)
    for lab in ("physics", "vision"):
        assert pool.api("POST", "/v1/groups", {"name": lab})[0] == 201
    tokens = {}
    for name in ("mallory", "carol"):
        status, body = pool.api("POST", "/v1/users", {"name": name, "role": "provider"})
        assert status == 201, body
        status, body = pool.api("POST", "/v1/tokens", {"user": name, "name": "t"})
        assert status == 201, body
        tokens[name] = body["token"]
    assert pool.api("POST", "/v1/groups/physics/members", {"add": ["carol"]})[0] == 200
    alice = add_member(pool, "alice", "vision")
    assert pool.cli("admin", "price", "set", "A100", "36").returncode == 0
    pool.start_agent("mallorys", enroll_as=tokens["mallory"], extra=["--owner-group", "physics"])
    pool.wait_nodes_ready(1)
    job = submit_spec(pool, alice, {"name": "on-mallorys", "run": "sleep 2", "group": "vision",
                                    "resources": {"gpus": 1}})
    done = pool.wait_state(job, "succeeded", timeout=60)
    attempt = done["attempt_list"][0]
    assert attempt["node"] == "mallorys", attempt
    assert_charged_once(charges_of(pool, "group:vision", attempt["id"]), attempt, 36_000_000)
    assert [e for e in ledger(pool, "group:physics") if e["kind"] == "lending"] == []
    # Carol's machine, vouched for by her membership, earns physics its share.
    pool.kill_agent("mallorys")
    pool.start_agent("carols", enroll_as=tokens["carol"], extra=["--owner-group", "physics"])
    wait_for(lambda: any(n["name"] == "carols" and n["state"] == "ready" for n in pool.nodes()),
             what="carol's machine ready")
    job = submit_spec(pool, alice, {"name": "on-carols", "run": "sleep 2", "group": "vision",
                                    "resources": {"gpus": 1}})
    done = pool.wait_state(job, "succeeded", timeout=60)
    charges = charges_of(pool, "group:vision", done["attempt_list"][0]["id"])
    lending = [e for e in ledger(pool, "group:physics") if e["kind"] == "lending"]
    assert sorted(e["amount_micros"] for e in lending) == sorted(
        c["amount_micros"] * 8 // 10 for c in charges if c["amount_micros"])
    assert lending


def test_stored_checkpoints_are_charged_by_the_gib_month(pool):
    """A lab pays for its jobs' checkpoints per GiB-month, once per ledger
    period, at the bytes they hold when the period is over."""
    alice = vision_pool(pool)
    # A million credits per GiB-month, so that a MiB costs something in 2 s.
    r = pool.cli("admin", "price", "set", "--resource", "storage", "1000000")
    assert r.returncode == 0, r.stdout + r.stderr
    script = ('ck=$GPUPOOL_CHECKPOINT_DIR; mkdir -p "$ck/.staging"; '
              'head -c 1048576 /dev/urandom > "$ck/.staging/state.bin"; '
              'mv "$ck/.staging" "$ck/ckpt-1"; sleep 60')
    job = submit_spec(pool, alice, {"name": "saver", "run": script, "group": "vision",
                                    "resources": {"gpus": 0}, "checkpoint": {}})

    def stored():
        c = pool.api("GET", f"/v1/jobs/{job}/checkpoints")[1].get("checkpoints", [])
        return c[0]["bytes"] if c else None
    size = wait_for(stored, timeout=60, what="the checkpoint uploaded")
    assert size >= 1048576

    priced = next(v["from_ms"] for v in pool.api("GET", "/v1/prices")[1]["prices"]
                  if v["resource"] == "storage")
    saved = pool.api("GET", f"/v1/jobs/{job}/checkpoints")[1]["checkpoints"][0]["created_ms"]

    def storage_charges():
        # Whole periods at that price since the checkpoint was stored (the
        # one it was stored in is charged at the bytes counted at its end).
        got = [e for e in ledger(pool, "group:vision") if e["attempt"] == "storage:group:vision"
               and e["from_ms"] >= max(priced, saved)]
        return got if len(got) >= 2 else None
    charges = wait_for(storage_charges, timeout=60, what="two periods of storage charged")
    # Each is one whole period at the stored bytes: price x bytes x period
    # over a GiB-month, rounded down; no period twice.
    month_ms = 30 * 24 * 3_600_000
    for c in charges:
        assert c["at_ms"] - c["from_ms"] == PERIOD_MS, c
        assert c["class"] == "storage" and c["job_id"] == 0 and c["credit"] == "pool", c
        assert c["amount_micros"] == 10**12 * size * PERIOD_MS // (2**30 * month_ms), (c, size)
    froms = [c["from_ms"] for c in charges]
    assert len(set(froms)) == len(froms)
    # Reports show storage as its own class.
    r = pool.cli("-o", "json", "usage", "--by", "model")
    assert "storage" in [row["key"] for row in json.loads(r.stdout)["rows"]], r.stdout
    assert pool.cli("cancel", str(job)).returncode == 0


def test_what_a_lab_lent_counts_against_its_fair_share_usage(pool):
    """--lending-fair-share 1: each GPU-millisecond others used on a lab's
    machine takes one off the lab's own fair-share usage (no decay here, so
    the sums are exact)."""
    config = pool.dir / "scheduler.yaml"
    config.write_text("half_life: 0\n")
    pool.start_server(extra=MONEY + ["--lending-fair-share", "1",
                                     "--scheduler-config", str(config)])
    for lab in ("vision", "physics"):
        assert pool.api("POST", "/v1/groups", {"name": lab})[0] == 201
    alice = add_member(pool, "alice", "vision")
    carol = add_member(pool, "carol", "physics")
    pool.start_agent("phys-1", extra=["--owner-group", "physics"])
    pool.wait_nodes_ready(1)
    assert pool.cli("admin", "price", "set", "A100", "36").returncode == 0
    # Physics' own job, then vision's on physics' machine.
    jobs = {}
    for who, token, group, seconds in (("carol", carol, "physics", 4), ("alice", alice, "vision", 2)):
        r = cli_as(pool, token, "submit", "--gpus", "1", "--group", group, "--", "sleep", str(seconds))
        assert r.returncode == 0, r.stderr
        jobs[who] = int(r.stdout)
        pool.wait_state(jobs[who], "succeeded", timeout=120)
    held = {w: (lambda a: a["finished_ms"] - a["created_ms"])(pool.job(j)["attempt_list"][0])
            for w, j in jobs.items()}
    lent = [e for e in ledger(pool, "group:physics") if e["kind"] == "lending"]
    assert lent, "physics earned lending credits"
    # What vision paid, back in GPU-ms at the A100's (the cheapest) price.
    paid = sum(e["amount_micros"] for e in lent) * 10 // 8
    lent_milli_ms = paid * 1000 * 3_600_000 // 36_000_000

    want = 1000 * held["carol"] - lent_milli_ms

    def physics_usage():
        groups = {g["name"]: g for g in pool.api("GET", "/v1/groups")[1]["groups"]}
        return groups["physics"]["usage_gpu_milli_ms"]
    # The next accrual tick counts the last lending credit.
    wait_for(lambda: abs(physics_usage() - want) <= 1000, timeout=30,
             what=lambda: f"physics' usage {physics_usage()} to be its own less what it lent, "
                          f"{want} ({held}, lent {lent_milli_ms})")
    assert abs(lent_milli_ms - 1000 * held["alice"]) <= 2000, (lent_milli_ms, held)
    # Vision's usage is its own, whole.
    groups = {g["name"]: g for g in pool.api("GET", "/v1/groups")[1]["groups"]}
    assert groups["vision"]["usage_gpu_milli_ms"] == 1000 * held["alice"], groups["vision"]
    # A bad factor is refused at start.
    r = subprocess.run([GPUPOOL, "server", "--lending-fair-share", "lots"], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode != 0 and "--lending-fair-share" in r.stderr, r.stderr
