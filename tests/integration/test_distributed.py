"""Multi-node (gang) jobs with PyTorch DDP, end to end (issue 8).

A 2-node torch job runs examples/distributed/train_ddp.py, a deterministic
DDP training (gloo, CPU), one rank per agent. Each agent runs on a "machine"
of its own (a network namespace with its own address, machines.py), as on a
campus: the ranks run in the sandbox's private network and reach each other
through the ports their agents forward (the gang port blocks). Its final
parameters must match a reference run of the same script as two plain
processes outside the pool (ddp_reference.py): when nothing interrupts it,
and when the agent of one of its ranks is killed with kill -9 mid-run, so
the whole gang is requeued and resumes from its checkpoint.

Then the placement guarantees, with a shell job that leaves a marker file
per rank (the `process` executor, so it can write to this test's directory):
a gang that cannot be placed whole starts no rank at all, and a 3-node gang
waits while only 2 nodes are free and starts when the third frees.

The training jobs run in the default executor (the sandbox) with the example
directory uploaded as their work directory, as a user would submit them.
"""
import os
import re
import signal

import pytest

from ddp_reference import (EXAMPLE_DIR, PYTHON, TRAIN_DDP, assert_same_params, output_of, parse_final,
                           reference, start_ranks)
from machines import Machines
from pool import wait_for

NODE_LOST_MS = 6000
# The training every DDP test runs; the reference is computed once for it.
# --sleep only slows a run down (the result does not depend on timing), so
# the reference runs without it.
TRAIN = ["--steps", "150", "--checkpoint-every", "10", "--timeout", "30"]


def ddp_spec(args, nodes=2, **extra):
    spec = {"name": "ddp", "workdir": EXAMPLE_DIR,
            "run": f"exec {PYTHON} train_ddp.py " + " ".join(args),
            "resources": {"nodes": nodes, "gpus": 1, "cpus": 1},
            "distributed": "torch",
            "checkpoint": {"interval": "10s", "grace": "10s"}}
    spec.update(extra)
    return spec


@pytest.fixture(scope="module")
def want():
    return reference(TRAIN)


@pytest.fixture
def machines(pool):
    m = Machines()
    yield m
    pool.stop()  # before the namespaces go: the agents run in them
    m.close()


# The gang ports of the agents' default config (exec_config.h).
GANG_PORTS = range(61000, 62000)


# Agents on this machine, each running tasks as uids of its own range (not
# the default 190000-190999 that other tests' agents use), so that no agent
# ever takes another's task processes for its own.
UID_BASE = {"a": 197000, "b": 197100, "c": 197200, "d": 197300}


def start_agents(pool, machines, names):
    """Starts agents with the sandbox (default) and process executors, each
    on a machine of its own; waits until every agent of the pool is ready."""
    for name in names:
        path = pool.dir / f"agent-{name}.yaml"
        lo = UID_BASE[name]
        path.write_text(f"executors: [sandbox, process]\nsandbox: {{uids: {lo}-{lo + 99}}}\n")
        ns, _ = machines.add(name)
        pool.start_agent(name, extra=["--config", str(path)], netns=ns)
    pool.wait_nodes_ready(len(pool.agents), timeout=30)


def ranks_of(attempt):
    return attempt.get("ranks") or []


def rank_nodes(pool, attempt):
    names = pool.node_names()
    return [names[r["node_id"]] for r in sorted(ranks_of(attempt), key=lambda r: r["rank"])]


def describe(pool, job_id):
    """The job and the tail of every log, for assertion messages."""
    text = [f"job: {pool.job(job_id)}"]
    records = pool.log_records(job_id)
    text.append("--- the job's last 40 lines\n" + "\n".join(
        f"[rank {l.get('rank')}] {l['text']}" for l in records[-40:]))
    for path in sorted(pool.dir.glob("*.log")):
        lines = path.read_text(errors="replace").splitlines()
        text.append(f"--- {path.name} (last 40 lines)\n" + "\n".join(lines[-40:]))
    return "\n".join(text)


def wait_done(pool, job_id, timeout):
    try:
        return pool.wait_finished(job_id, timeout=timeout)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{describe(pool, job_id)}") from None


def checkpoints(pool, job_id):
    status, body = pool.api("GET", f"/v1/jobs/{job_id}/checkpoints")
    assert status == 200, body
    return body["checkpoints"]


# ---- training ------------------------------------------------------------------

def test_two_agent_ddp_training_matches_the_reference_and_logs_per_rank(pool, machines, want):
    pool.start_server(host=machines.gateway)
    start_agents(pool, machines, ["a", "b"])
    job_id = pool.submit_cli(ddp_spec(TRAIN))
    job = wait_done(pool, job_id, timeout=90)
    assert job["state"] == "succeeded", describe(pool, job_id)

    [attempt] = job["attempt_list"]
    ranks = ranks_of(attempt)
    assert [r["rank"] for r in ranks] == [0, 1], attempt
    assert sorted(rank_nodes(pool, attempt)) == ["a", "b"], attempt  # distinct nodes
    assert all(r["state"] == "succeeded" and r["exit_code"] == 0 for r in ranks), ranks
    # Rank 0's machine and the first port of its block.
    addr, port = (attempt["master"] or ":").rsplit(":", 1)
    assert addr == machines.addresses[rank_nodes(pool, attempt)[0]], attempt
    assert int(port) in GANG_PORTS and (int(port) - GANG_PORTS.start) % 50 == 0, attempt

    # Rank 0's result is the reference's.
    rank0 = [l["text"] for l in pool.log_records(job_id, rank=0)]
    assert_same_params(parse_final(rank0), want)
    assert checkpoints(pool, job_id), "no checkpoint was uploaded"

    # Every rank got the rendezvous the attempt records.
    rank1 = [l["text"] for l in pool.log_records(job_id, rank=1)]
    assert f"train_ddp: rank 0 of 2, master {attempt['master']}," in "\n".join(rank0)
    assert f"train_ddp: rank 1 of 2, master {attempt['master']}," in "\n".join(rank1)

    # The CLI: merged with prefixes, or one rank without them.
    merged = pool.cli("logs", str(job_id), check=True).stdout.splitlines()
    assert any(l.startswith("[rank 0] train_ddp: rank 0 of 2") for l in merged), merged[:10]
    assert any(l.startswith("[rank 1] train_ddp: rank 1 of 2") for l in merged), merged[:10]
    assert all(re.match(r"\[rank [01]\] ", l) for l in merged), [l for l in merged if not l.startswith("[rank")]
    assert sum(1 for l in merged if "GPUPOOL_DDP_FINAL" in l) == 1
    # (The CLI prints the job's stdout on its stdout; stderr and the agent's
    # events on its stderr.)
    only1 = pool.cli("logs", str(job_id), "--rank", "1", check=True).stdout.splitlines()
    rank1_stdout = [l["text"] for l in pool.log_records(job_id, rank=1) if l["stream"] == "stdout"]
    assert only1 == rank1_stdout, (only1[:5], rank1_stdout[:5])
    assert only1 and not any(l.startswith("[rank") for l in only1), only1[:5]
    assert any(l.startswith("train_ddp: rank 1 of 2") for l in only1)
    assert not any("rank 0 of 2" in l or "GPUPOOL_DDP_FINAL" in l for l in only1)


def test_a_checkpoint_signal_during_the_teardown_does_not_end_a_finished_run(tmp_path):
    """The pool sends the checkpoint signal on a timer, whatever the job is
    doing, so it may come while a finished rank tears torch down and exits.
    Python puts back the default action of the signals it handled as it
    exits (SIGUSR1's ends the process): the script must ignore the signal
    once it has trained, or a run that printed its result fails (rank 0
    "killed by signal SIGUSR1" after GPUPOOL_DDP_FINAL). Outside the pool:
    two plain ranks, signalled without pause from their result on."""
    procs = start_ranks(["--steps", "20", "--checkpoint-every", "10"], str(tmp_path))
    try:
        wait_for(lambda: any("GPUPOOL_DDP_FINAL" in l for l in output_of(str(tmp_path), 0))
                 or any(p.poll() is not None for p in procs), timeout=120, what="rank 0's result")
        while any(p.poll() is None for p in procs):
            for p in procs:
                try:
                    os.kill(p.pid, signal.SIGUSR1)
                except ProcessLookupError:
                    pass
        codes = [p.wait() for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert codes == [0, 0], (codes, output_of(str(tmp_path), 0)[-20:])
    parse_final(output_of(str(tmp_path), 0))


def test_a_job_that_runs_torchrun_itself_rendezvouses_with_the_pools_variables(pool, machines, want):
    """The other way to use a gang: the job starts torchrun on each node with
    GPUPOOL_NNODES, GPUPOOL_NODE_RANK and GPUPOOL_MASTER (one worker per node
    here), and torchrun sets up its workers' rendezvous."""
    pool.start_server(host=machines.gateway)
    start_agents(pool, machines, ["a", "b"])
    # Debian's torchrun needs its output redirected and teed back (see
    # ddp_reference.run_torchrun); workers' lines come out as "[default0]:...".
    run = ('exec torchrun --nnodes "$GPUPOOL_NNODES" --node_rank "$GPUPOOL_NODE_RANK" '
           '--nproc_per_node 1 --rdzv_endpoint "$GPUPOOL_MASTER" '
           '--redirects 1 --tee 1 --log_dir "$TMPDIR/torchrun" '
           f"train_ddp.py {' '.join(TRAIN)}")
    spec = ddp_spec(TRAIN)
    spec["run"] = run
    # torchrun itself has no handler for the checkpoint signal (SIGUSR1
    # would end it): ask for a checkpoint only before a stop, not on a timer
    # that a slow start on a busy machine can reach.
    spec["checkpoint"] = {"grace": "10s"}
    job_id = pool.submit_cli(spec)
    job = wait_done(pool, job_id, timeout=120)
    assert job["state"] == "succeeded", describe(pool, job_id)
    rank0 = [l["text"] for l in pool.log_records(job_id, rank=0)]
    worker = [l.split(":", 1)[1] for l in rank0 if l.startswith("[default0]:")]
    assert_same_params(parse_final(worker), want)
    rank1 = "\n".join(l["text"] for l in pool.log_records(job_id, rank=1))
    assert "train_ddp: rank 1 of 2" in rank1, rank1[-2000:]


@pytest.mark.parametrize("victim", [1, 0], ids=["worker-agent-killed", "master-agent-killed"])
def test_a_gang_whose_agent_is_killed_resumes_elsewhere_with_the_reference_result(pool, machines, want,
                                                                                   victim):
    pool.start_server(extra=["--node-lost-after-ms", str(NODE_LOST_MS), "--attempt-lease", "3s"],
                      host=machines.gateway)
    start_agents(pool, machines, ["a", "b", "c"])
    job_id = pool.submit_cli(ddp_spec(TRAIN + ["--sleep", "0.05"]))
    job = pool.wait_state(job_id, "running", timeout=30)
    first = job["attempt_list"][0]
    placed = rank_nodes(pool, first)
    assert len(set(placed)) == 2, first
    # A checkpoint of this attempt is uploaded, and the run is far from over.
    wait_for(lambda: checkpoints(pool, job_id), timeout=30, what="a checkpoint")
    assert pool.job(job_id)["state"] == "running", describe(pool, job_id)

    killed = placed[victim]
    pool.kill_agent(killed)  # kill -9: no goodbye; its rank stops itself (attempt lease)
    job = wait_done(pool, job_id, timeout=90)
    assert job["state"] == "succeeded", describe(pool, job_id)

    attempts = job["attempt_list"]
    assert len(attempts) == 2, attempts
    assert attempts[0]["state"] != "succeeded", attempts[0]
    last = attempts[-1]
    survivors = sorted({"a", "b", "c"} - {killed})
    assert sorted(rank_nodes(pool, last)) == survivors, last
    assert all(r["state"] == "succeeded" for r in ranks_of(last)), last

    # Both ranks of the new attempt resumed from the checkpoint, not from scratch.
    records = pool.log_records(job_id)
    resumed = [l for l in records if l["attempt_id"] == last["id"] and "resumed from step" in l["text"]]
    assert sorted(l["rank"] for l in resumed) == [0, 1], [l["text"] for l in records if l["attempt_id"] == last["id"]][:20]
    step = int(re.search(r"resumed from step (\d+)", resumed[0]["text"]).group(1))
    assert 0 < step < 150, resumed
    assert all(f"resumed from step {step} " in l["text"] for l in resumed), resumed
    restored = [l for l in records if l["attempt_id"] == last["id"] and re.match(r"train_ddp: rank \d of 2, .*, restored$", l["text"])]
    assert sorted(l["rank"] for l in restored) == [0, 1], "GPUPOOL_RESTORED=1 missing on a rank"

    # The final parameters are the uninterrupted run's.
    final = [l["text"] for l in records if l["attempt_id"] == last["id"] and l["rank"] == 0]
    assert_same_params(parse_final(final), want)
    assert sum(1 for l in records if "GPUPOOL_DDP_FINAL" in l["text"]) == 1  # the first never finished


# ---- placement -------------------------------------------------------------------

def marker_job(markers, nodes, hold="0"):
    """A torch gang of shell ranks: each leaves markers/ran-<job>-<rank> and
    prints its rendezvous variables, then sleeps `hold` seconds."""
    run = ('touch "$MARKERS/ran-$GPUPOOL_JOB_ID-$RANK"; '
           'echo "env RANK=$RANK NODE_RANK=$NODE_RANK GROUP_RANK=$GROUP_RANK WORLD_SIZE=$WORLD_SIZE '
           'LOCAL_RANK=$LOCAL_RANK LOCAL_WORLD_SIZE=$LOCAL_WORLD_SIZE MASTER=$MASTER_ADDR:$MASTER_PORT '
           'GPUPOOL=$GPUPOOL_NNODES/$GPUPOOL_NODE_RANK/$GPUPOOL_MASTER"; '
           f"sleep {hold}")
    return {"name": f"gang-{nodes}", "run": run, "executor": "process", "env": {"MARKERS": str(markers)},
            "resources": {"nodes": nodes, "gpus": 1}}


def ran(markers, job_id):
    return sorted(p.name for p in markers.glob(f"ran-{job_id}-*"))


def test_a_gang_that_cannot_be_placed_whole_never_starts_any_rank(pool, machines, tmp_path):
    markers = tmp_path / "markers"
    markers.mkdir()
    pool.start_server(host=machines.gateway)
    start_agents(pool, machines, ["a", "b"])
    job_id = pool.submit(marker_job(markers, nodes=3))
    job = pool.wait_considered(job_id)
    assert job["state"] == "pending", job
    assert job["reason"], job
    assert job["attempt_list"] == [], job
    assert ran(markers, job_id) == []
    # The control: with a third node the same job runs, every rank once.
    start_agents(pool, machines, ["c"])
    job = wait_done(pool, job_id, timeout=30)
    assert job["state"] == "succeeded", describe(pool, job_id)
    assert ran(markers, job_id) == [f"ran-{job_id}-{r}" for r in range(3)]
    assert len(job["attempt_list"]) == 1


def test_a_three_node_gang_waits_for_a_busy_node_and_starts_when_it_frees(pool, machines, tmp_path):
    markers = tmp_path / "markers"
    markers.mkdir()
    pool.start_server(host=machines.gateway)
    start_agents(pool, machines, ["a", "b", "c"])
    blocker = pool.submit({"run": "sleep 300", "executor": "process", "resources": {"gpus": 1}})
    pool.wait_state(blocker, "running")
    gang = pool.submit(marker_job(markers, nodes=3, hold="1"))
    job = pool.wait_considered(gang)
    assert job["state"] == "pending" and job["attempt_list"] == [], job
    assert job["reason"], job
    assert ran(markers, gang) == []

    status, body = pool.api("POST", f"/v1/jobs/{blocker}/cancel")
    assert status in (200, 202), body
    job = pool.wait_state(gang, ["running", "succeeded"], timeout=60)
    job = wait_done(pool, gang, timeout=30)
    assert job["state"] == "succeeded", describe(pool, gang)
    assert ran(markers, gang) == [f"ran-{gang}-{r}" for r in range(3)]
    [attempt] = job["attempt_list"]
    assert sorted(rank_nodes(pool, attempt)) == ["a", "b", "c"], attempt

    # Every rank got torchrun's variables, with the attempt's master.
    master = attempt["master"]
    for r in range(3):
        lines = [l["text"] for l in pool.log_records(gang, rank=r) if l["text"].startswith("env ")]
        assert lines == [f"env RANK={r} NODE_RANK={r} GROUP_RANK={r} WORLD_SIZE=3 LOCAL_RANK=0 "
                         f"LOCAL_WORLD_SIZE=1 MASTER={master} GPUPOOL=3/{r}/{master}"], lines


def test_the_example_spec_is_a_valid_two_node_torch_job(pool):
    """examples/distributed/ddp-job.yaml parses as what its comments say."""
    pool.start_server()
    spec_path = os.path.join(EXAMPLE_DIR, "ddp-job.yaml")
    r = pool.cli("submit", "--quiet", spec_path, check=True)
    job = pool.job(int(r.stdout.strip().splitlines()[-1]))
    spec = job["spec"]
    assert spec["resources"]["nodes"] == 2, spec
    assert spec.get("distributed", "torch") == "torch", spec
    assert "checkpoint" in spec and spec["run"].startswith("exec python3 train_ddp.py"), spec
    assert os.path.exists(TRAIN_DDP)


def test_a_quiet_gang_keeps_its_lease(pool, machines, tmp_path):
    """Ranks whose agents stay connected are never stopped by the attempt
    lease, however quiet the server is: here the lease is 3 s and the
    heartbeat the default (5 s)."""
    markers = tmp_path / "markers"
    markers.mkdir()
    pool.start_server(extra=["--node-lost-after-ms", str(NODE_LOST_MS), "--attempt-lease", "3s"],
                      host=machines.gateway)
    start_agents(pool, machines, ["a", "b"])
    job_id = pool.submit(marker_job(markers, nodes=2, hold="8"))
    job = wait_done(pool, job_id, timeout=40)
    assert job["state"] == "succeeded", describe(pool, job_id)
    assert len(job["attempt_list"]) == 1, job["attempt_list"]
