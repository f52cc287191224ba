"""Chaos: providers, agents and the server come and go at random while
checkpointing jobs are submitted, run and finish, and every job still
completes exactly once, with the result of an uninterrupted run, and no two
attempts of a job ever run at the same time.

Four agents with two GPUs each run counter jobs (examples/checkpointing/
counter.py); half are submitted at the start, the rest by a background
thread while the chaos goes on (through server restarts: only submissions
the server acknowledged count). Until the jobs are done or the chaos time
runs out, every few seconds one of these happens:

- to a random healthy agent: a graceful reclaim, a `reclaim --now`,
  `kill -9` (restarted a little later, sometimes after the server has
  declared it lost), a restart (SIGTERM; its jobs run on), or a cut
  (SIGSTOP for longer than the attempt lease, then SIGCONT: a hung agent or
  a silent network cut, whose jobs must stop themselves);
- the server is killed with SIGKILL and restarted;
- everything is killed with SIGKILL and restarted.

Then everything is healthy again and the jobs must finish. Every job
records each step it executes with its attempt id and the machine's uptime
(counter.py --record, in the `process` executor so that the record reaches
this test's directory): the steps of two attempts of a job must never
interleave in time. At the end no process of any job may be left.

Knobs (environment): GPUPOOL_CHAOS_SECONDS (default 90), GPUPOOL_CHAOS_SEED,
GPUPOOL_CHAOS_JOBS (default 24), GPUPOOL_CHAOS_REPORT (a file for the JSON
report). The report (printed, and in the file) gives the interruptions and
actions of each kind, whether exactly-once held and the work lost per
interruption; bench/run_chaos.sh runs it longer for docs/performance.md."""
import collections
import json
import os
import random
import signal
import subprocess
import threading
import time
import urllib.error

from pool import TIME_SCALE, wait_for
from test_migration import EXAMPLE_DIR, RESULT, reference
from test_provider import agent_cmd, start_with

AGENTS = ["a", "b", "c", "d"]
STEPS = 150  # 0.1 s each: 15 s of work per job
LEASE_S = 4
# The harness polls every job each round and submits from a thread of its
# own, all with one token: a long run (bench/run_chaos.sh, 180 jobs) would
# pass the default per-token rate limit.
SERVER = ["--node-lost-after-ms", "3000", "--attempt-lease", f"{LEASE_S}s",
          "--rate-limit", "2000/s,10000"]
AGENT_ACTIONS = ["reclaim", "reclaim-now", "kill-9", "restart", "cut"]
ALL_ACTIONS = AGENT_ACTIONS + ["server-kill", "everything"]


def start_agent(pool, tmp_path, name):
    start_with(pool, tmp_path, name, config="executors: [sandbox, process]\n",
               gpus="2xA100:80GiB")


def counter_spec(records, inputs):
    """The counter in the process executor, recording its steps; `inputs`
    is the manifest of its uploaded directory (the first submission's)."""
    spec = {"name": "counter", "resources": {"gpus": 1}, "executor": "process",
            "checkpoint": {"grace": "10s"},
            "run": f"exec python3 counter.py --steps {STEPS} --sleep 0.1 --checkpoint-every 10 "
                   f"--record {records}/job-$GPUPOOL_JOB_ID.log"}
    if inputs:
        spec["inputs"] = inputs
    else:
        spec["workdir"] = EXAMPLE_DIR
    return spec


def submit_first(pool, records):
    """The first job through the CLI, which uploads the counter's directory."""
    path = pool.dir / "counter-first.json"
    path.write_text(json.dumps(counter_spec(records, None)))
    r = pool.cli("submit", "--quiet", str(path), check=True)
    job_id = int(r.stdout.strip().splitlines()[-1])
    return job_id, pool.job(job_id)["spec"]["inputs"]


def api_or_none(pool, method, path, body=None):
    """The API's answer, or None while the server is down (being restarted)."""
    try:
        return pool.api(method, path, body)
    except (urllib.error.URLError, ConnectionError, OSError):
        return None


class Submitter(threading.Thread):
    """Submits `count` jobs, one every 0.5-2 s, retrying while the server is
    down; keeps the ids the server acknowledged."""

    def __init__(self, pool, spec, count, rng):
        super().__init__(daemon=True)
        self.pool, self.spec, self.count, self.rng = pool, spec, count, rng
        self.ids, self.stop = [], False

    def run(self):
        while len(self.ids) < self.count and not self.stop:
            time.sleep(self.rng.uniform(0.5, 2))
            answer = api_or_none(self.pool, "POST", "/v1/jobs", self.spec)
            if answer and answer[0] == 201:
                self.ids.append(answer[1]["id"])


class Chaos:
    def __init__(self, pool, tmp_path, rng):
        self.pool, self.tmp_path, self.rng = pool, tmp_path, rng
        self.down = {}  # agent -> (when it comes back, how)
        self.log = []

    def restart_server(self):
        self.pool.kill_server(signal.SIGKILL)
        time.sleep(self.rng.uniform(0.2, 2))
        self.pool.start_server(extra=SERVER)

    def step(self):
        action = self.rng.choice(ALL_ACTIONS if self.rng.random() < 0.25 else AGENT_ACTIONS)
        healthy = [a for a in AGENTS if a not in self.down]
        if action in AGENT_ACTIONS and not healthy:
            return
        name = self.rng.choice(healthy) if action in AGENT_ACTIONS else "-"
        self.log.append((round(time.time(), 1), name, action))
        pool = self.pool
        if action in ("reclaim", "reclaim-now"):
            args = ["reclaim"] + (["--now"] if action == "reclaim-now" else [])
            agent_cmd(pool, name, *args, timeout=60)
            self.down[name] = (time.time() + self.rng.uniform(1, 5), "resume")
        elif action == "kill-9":
            pool.kill_agent(name, signal.SIGKILL)
            # Sometimes back within the lease, sometimes after the node is lost.
            self.down[name] = (time.time() + self.rng.uniform(1, 7) * TIME_SCALE, "start")
        elif action == "restart":
            pool.kill_agent(name, signal.SIGTERM)  # --on-exit keep: its jobs run on
            start_agent(pool, self.tmp_path, name)
        elif action == "cut":
            pool.agents[name].send_signal(signal.SIGSTOP)
            self.down[name] = (time.time() + (LEASE_S + self.rng.uniform(1, 4)) * TIME_SCALE, "cont")
        elif action == "server-kill":
            self.restart_server()
        else:  # everything
            self.bring_back()
            for agent in list(pool.agents):
                pool.kill_agent(agent, signal.SIGKILL)
            self.restart_server()
            for agent in AGENTS:
                start_agent(pool, self.tmp_path, agent)

    def bring_back(self, now=None):
        for name, (when, how) in list(self.down.items()):
            if now is not None and when > now:
                continue
            if how == "resume":
                agent_cmd(self.pool, name, "resume", timeout=60)
            elif how == "cont":
                self.pool.agents[name].send_signal(signal.SIGCONT)
            else:
                start_agent(self.pool, self.tmp_path, name)
            del self.down[name]


def test_every_job_completes_exactly_once_through_chaos(pool, tmp_path):
    seconds = float(os.environ.get("GPUPOOL_CHAOS_SECONDS", "90"))
    seed = int(os.environ.get("GPUPOOL_CHAOS_SEED", str(int(time.time()))))
    jobs = int(os.environ.get("GPUPOOL_CHAOS_JOBS", "24"))
    print(f"chaos seed {seed}", flush=True)
    rng = random.Random(seed)
    records = tmp_path / "records"
    records.mkdir()
    pool.start_server(extra=SERVER)
    for name in AGENTS:
        start_agent(pool, tmp_path, name)
    first, inputs = submit_first(pool, records)
    spec = counter_spec(records, inputs)
    ids = [first] + [pool.submit(spec) for _ in range(jobs // 2 - 1)]
    submitter = Submitter(pool, spec, jobs - len(ids), random.Random(seed + 1))
    submitter.start()
    expected = reference(STEPS)

    chaos = Chaos(pool, tmp_path, rng)
    deadline = time.time() + seconds
    try:
        while time.time() < deadline:
            states = [api_or_none(pool, "GET", f"/v1/jobs/{j}") for j in ids + submitter.ids]
            if (not submitter.is_alive() and
                    all(s and s[1]["state"] == "succeeded" for s in states)):
                break
            chaos.bring_back(now=time.time())
            chaos.step()
            time.sleep(rng.uniform(1.5, 4))
    finally:
        chaos.bring_back()
    submitter.join(timeout=120)
    assert not submitter.is_alive(), "the submitter never got its jobs in"
    ids += submitter.ids

    finished = {j: pool.wait_finished(j, timeout=300) for j in ids}
    report = summarize(pool, finished, expected, chaos.log, seed, records)
    print(json.dumps(report, indent=1))
    if os.environ.get("GPUPOOL_CHAOS_REPORT"):
        with open(os.environ["GPUPOOL_CHAOS_REPORT"], "w") as f:
            json.dump(report, f, indent=1)
    assert report["jobs_correct"] == len(ids), report
    assert report["overlaps"] == [], report
    assert report["interruptions"] > 0, "the chaos never hit a job"
    # No process of any job outlives it.
    wait_for(lambda: subprocess.run(["pgrep", "-f", "--", f"--record {records}/"],
                                    capture_output=True).returncode != 0,
             timeout=30, what="every job's processes to be gone")


def overlaps_of(path):
    """Pairs of attempts of one job whose recorded steps interleave in time."""
    spans = {}
    if not path.exists():
        return []
    for line in path.read_text().splitlines():
        attempt, _, uptime = line.split()
        t = float(uptime)
        lo, hi = spans.get(attempt, (t, t))
        spans[attempt] = (min(lo, t), max(hi, t))
    ordered = sorted(spans.items(), key=lambda kv: kv[1][0])
    bad = []
    for (a, (_, a_end)), (b, (b_start, _)) in zip(ordered, ordered[1:]):
        if b_start <= a_end:
            bad.append({"job": path.stem, "attempts": [a, b], "first_of_second": b_start,
                        "last_of_first": a_end})
    return bad


def summarize(pool, finished, expected, log, seed, records):
    interruptions, lost_work, migrated, correct, problems = 0, [], 0, 0, []
    kinds, overlaps = collections.Counter(), []
    for job_id, job in finished.items():
        attempts = job["attempt_list"]
        broken = [a for a in attempts if a["state"] in ("vacated", "lost", "preempted")]
        interruptions += len(broken)
        kinds.update(a["state"] for a in broken)
        lost_work += [a.get("lost_work_ms", 0) for a in broken]
        succeeded = [a for a in attempts if a["state"] == "succeeded"]
        lines = [l for l in pool_log_lines(pool, job_id) if l["text"].startswith("RESULT")]
        final = [l for l in lines if succeeded and l["attempt_id"] == succeeded[0]["id"]]
        ok = (job["state"] == "succeeded" and len(succeeded) == 1 and len(final) == 1 and
              tuple(RESULT.match(final[0]["text"]).group(1, 2)) == expected)
        if ok:
            correct += 1
            migrated += bool(broken)
        else:
            problems.append({"job": job_id, "state": job["state"], "reason": job.get("reason"),
                             "attempts": [(a["id"], a["state"]) for a in attempts],
                             "results": [l["text"] for l in lines]})
        overlaps += overlaps_of(records / f"job-{job_id}.log")
    lost_work.sort()
    return {
        "seed": seed,
        "jobs": len(finished),
        "jobs_correct": correct,
        "exactly_once": correct == len(finished) and not overlaps,
        "overlaps": overlaps,
        "interruptions": interruptions,
        "interruptions_by_kind": dict(kinds),
        "chaos_actions": len(log),
        "actions": {k: sum(1 for _, _, a in log if a == k) for k in ALL_ACTIONS},
        "jobs_interrupted_and_correct": migrated,
        "success_rate": correct / len(finished),
        "lost_work_ms_per_interruption": {
            "median": lost_work[len(lost_work) // 2] if lost_work else 0,
            "mean": round(sum(lost_work) / len(lost_work)) if lost_work else 0,
            "max": lost_work[-1] if lost_work else 0,
        },
        "problems": problems,
    }


def pool_log_lines(pool, job_id):
    lines, cursor = [], 0
    while True:
        status, page = pool.api("GET", f"/v1/jobs/{job_id}/logs?after={cursor}&limit=1000")
        assert status == 200, page
        lines += page["lines"]
        if not page["lines"]:
            return lines
        cursor = page["next_cursor"]
