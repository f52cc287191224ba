"""Chaos: providers come and go at random while checkpointing jobs run, and
every job still completes exactly once with the result of an uninterrupted
run.

Four agents with two GPUs each run 24 counter jobs (examples/checkpointing/
counter.py). Until the jobs are done or the chaos time runs out, a random
agent is hit every few seconds by one of: a graceful reclaim, a
`reclaim --now`, `kill -9` (restarted a little later, sometimes after the
server has declared it lost), or a restart. Then every agent is healthy
again and the jobs must finish.

Knobs (environment): GPUPOOL_CHAOS_SECONDS (default 90), GPUPOOL_CHAOS_SEED,
GPUPOOL_CHAOS_JOBS (default 24), GPUPOOL_CHAOS_REPORT (a file for the JSON
report). The report (printed, and in the file) gives the interruption count,
the migration success rate and the work lost per interruption;
bench/run_chaos.sh runs it longer for docs/performance.md."""
import json
import os
import random
import re
import signal
import time

from pool import wait_for
from test_migration import RESULT, reference, submit_counter
from test_provider import agent_cmd, start_with

AGENTS = ["a", "b", "c", "d"]
STEPS = 150  # 0.1 s each: 15 s of work per job


def start_agent(pool, tmp_path, name):
    start_with(pool, tmp_path, name, gpus="2xA100:80GiB")


def chaos_step(pool, tmp_path, rng, down, log):
    """One random blow to one random healthy agent; `down` maps agents that
    are out to when they come back and how."""
    healthy = [a for a in AGENTS if a not in down]
    if not healthy:
        return
    name = rng.choice(healthy)
    action = rng.choice(["reclaim", "reclaim-now", "kill-9", "restart"])
    log.append((round(time.time(), 1), name, action))
    if action in ("reclaim", "reclaim-now"):
        args = ["reclaim"] + (["--now"] if action == "reclaim-now" else [])
        agent_cmd(pool, name, *args, timeout=60)
        down[name] = (time.time() + rng.uniform(1, 5), "resume")
    elif action == "kill-9":
        pool.kill_agent(name, signal.SIGKILL)
        # Sometimes back within the server's lease (3 s here), sometimes not.
        down[name] = (time.time() + rng.uniform(1, 7), "start")
    else:
        pool.kill_agent(name, signal.SIGTERM)  # --on-exit keep: its jobs run on
        start_agent(pool, tmp_path, name)


def bring_back(pool, tmp_path, down, now=None):
    for name, (when, how) in list(down.items()):
        if now is not None and when > now:
            continue
        if how == "resume":
            agent_cmd(pool, name, "resume", timeout=60)
        else:
            start_agent(pool, tmp_path, name)
        del down[name]


def test_every_job_completes_exactly_once_through_chaos(pool, tmp_path):
    seconds = float(os.environ.get("GPUPOOL_CHAOS_SECONDS", "90"))
    seed = int(os.environ.get("GPUPOOL_CHAOS_SEED", str(int(time.time()))))
    jobs = int(os.environ.get("GPUPOOL_CHAOS_JOBS", "24"))
    rng = random.Random(seed)
    print(f"chaos seed {seed}")
    pool.start_server(extra=["--node-lost-after-ms", "3000"])
    for name in AGENTS:
        start_agent(pool, tmp_path, name)
    ids = [submit_counter(pool, STEPS, every=10, grace="10s") for _ in range(jobs)]
    expected = reference(STEPS)

    down, log = {}, []
    deadline = time.time() + seconds
    while time.time() < deadline:
        if all(pool.job(j)["state"] == "succeeded" for j in ids):
            break
        bring_back(pool, tmp_path, down, now=time.time())
        chaos_step(pool, tmp_path, rng, down, log)
        time.sleep(rng.uniform(1.5, 4))
    bring_back(pool, tmp_path, down)

    finished = {j: pool.wait_finished(j, timeout=300) for j in ids}
    report = summarize(pool, finished, expected, log, seed)
    print(json.dumps(report, indent=1))
    if os.environ.get("GPUPOOL_CHAOS_REPORT"):
        with open(os.environ["GPUPOOL_CHAOS_REPORT"], "w") as f:
            json.dump(report, f, indent=1)
    assert report["jobs_correct"] == jobs, report
    assert report["interruptions"] > 0, "the chaos never hit a job"


def summarize(pool, finished, expected, log, seed):
    interruptions, lost_work, migrated, correct, problems = 0, [], 0, 0, []
    for job_id, job in finished.items():
        attempts = job["attempt_list"]
        broken = [a for a in attempts if a["state"] in ("vacated", "lost", "preempted")]
        interruptions += len(broken)
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
    lost_work.sort()
    return {
        "seed": seed,
        "jobs": len(finished),
        "jobs_correct": correct,
        "interruptions": interruptions,
        "chaos_actions": len(log),
        "actions": {k: sum(1 for _, _, a in log if a == k)
                    for k in ("reclaim", "reclaim-now", "kill-9", "restart")},
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
