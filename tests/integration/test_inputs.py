"""Job inputs and checkpoints through the CLI: `gpupool submit` with a workdir
(.gpupoolignore, incremental upload), `gpupool checkpoints`, `gpupool
checkpoint download` and `gpupool admin gc`, against a real server and agent."""
import json
import os
import random
import re
import subprocess

from pool import GPUPOOL, wait_for

SUMMARY = re.compile(r"uploaded (\S+ \S+) of (\S+ \S+) \((\d+) new chunks? of (\d+)\) in [\d.]+ s")


def start(pool):
    pool.start_server()
    pool.start_agent("a")
    pool.wait_nodes_ready(1)


def cli(pool, *args, cwd=None, timeout=120):
    """pool.cli, in another working directory."""
    env = pool.cli_env()
    return subprocess.run([GPUPOOL, *args], capture_output=True, text=True, timeout=timeout,
                          env=env, cwd=cwd)


def write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data)


def summary(stderr):
    m = SUMMARY.search(stderr)
    assert m, f"no upload summary in: {stderr!r}"
    return {"uploaded": m.group(1), "total": m.group(2), "new": int(m.group(3)),
            "chunks": int(m.group(4))}


def submitted_id(r):
    assert r.returncode == 0, r.stderr
    return int(r.stdout.strip().splitlines()[-1])


def test_submit_uploads_the_workdir_without_ignored_files(pool, tmp_path):
    start(pool)
    project = tmp_path / "project"
    write(project / ".gpupoolignore", "# not needed by the job\n*.ckpt\nlogs/\n!keep.ckpt\n/out\n")
    write(project / "train.sh", "echo training\n")
    write(project / "data" / "input.txt", "hello from the workdir\n")
    write(project / "model.ckpt", "big weights")
    write(project / "keep.ckpt", "small weights")
    write(project / "logs" / "old.log", "old")
    write(project / "out", "anchored at the top")
    write(project / "data" / "out", "kept: not at the top")
    # The spec's workdir is relative to the spec file, not to the CLI's cwd.
    write(tmp_path / "specs" / "job.yaml",
          "name: inputs\nworkdir: ../project\n"
          "run: 'sh train.sh; cat data/input.txt; find . -path ./.checkpoints -prune -o -print | sort'\n")
    r = cli(pool, "submit", "--wait", str(tmp_path / "specs" / "job.yaml"), cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    s = summary(r.stderr)
    assert s["new"] == s["chunks"] > 0  # a fresh pool lacks every chunk
    job_id = int(r.stderr.split("submitted job ")[1].split()[0])
    job = pool.job(job_id)
    assert job["spec"]["workdir"] == str(project)
    assert re.fullmatch(r"[0-9a-f]{64}", job["spec"]["inputs"])
    lines = pool.logs_text(job_id)
    assert "training" in lines and "hello from the workdir" in lines
    listed = {l for l in lines if l.startswith(".")}
    assert {"./train.sh", "./data/input.txt", "./keep.ckpt", "./data/out",
            "./.gpupoolignore"} <= listed
    assert not {"./model.ckpt", "./logs", "./logs/old.log", "./out"} & listed

    # `workdir: .` in a spec inside the directory, named relative to the cwd.
    write(project / "job.yaml", "workdir: .\nrun: cat data/input.txt\n")
    r = cli(pool, "submit", "--wait", "--quiet", "project/job.yaml", cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    job_id = int(r.stderr.split("submitted job ")[1].split()[0])
    assert pool.job(job_id)["spec"]["workdir"] == str(project)
    assert pool.logs_text(job_id)[-1] == "hello from the workdir"


def test_resubmit_uploads_only_the_changed_chunks(pool, tmp_path):
    start(pool)
    project = tmp_path / "project"
    rng = random.Random(7)
    write(project / "weights.bin", rng.randbytes(3 << 20))
    write(project / "config.txt", "lr = 0.1\n")
    args = ("submit", "--workdir", str(project), "--", "sh", "-c", "cat config.txt")

    first = pool.cli(*args)
    job1 = submitted_id(first)
    s1 = summary(first.stderr)
    assert s1["new"] == s1["chunks"] > 10

    write(project / "config.txt", "lr = 0.05\n")
    second = pool.cli(*args)
    job2 = submitted_id(second)
    s2 = summary(second.stderr)
    assert s2["chunks"] == s1["chunks"]
    assert s2["new"] == 1, second.stderr  # only config.txt's one chunk travels
    assert s2["uploaded"].endswith(" B"), second.stderr

    third = pool.cli("submit", "--quiet", *args[1:])
    submitted_id(third)
    assert third.stderr == ""
    again = pool.cli(*args)
    assert summary(again.stderr)["new"] == 0

    for job_id in (job1, job2):
        job = pool.wait_finished(job_id)
        assert job["state"] == "succeeded", (job, pool.logs_text(job_id), pool.agent_log_tails())
    assert pool.logs_text(job1)[-1] == "lr = 0.1"
    assert pool.logs_text(job2)[-1] == "lr = 0.05"


def test_submit_refuses_what_the_pool_would_refuse(pool, tmp_path):
    pool.start_server()
    r = pool.cli("submit", "--workdir", str(tmp_path / "nope"), "--", "true")
    assert r.returncode == 2
    assert "is not a directory" in r.stderr

    outside = tmp_path / "outside"
    write(outside / "a.txt", "a")
    os.symlink("/etc/passwd", outside / "pw")
    r = pool.cli("submit", "--workdir", str(outside), "--", "true")
    assert r.returncode == 2 and "pw (a link to /etc/passwd)" in r.stderr, r.stderr
    write(outside / ".gpupoolignore", "pw\n")
    submitted_id(pool.cli("submit", "--workdir", str(outside), "--", "true"))

    reserved = tmp_path / "reserved"
    write(reserved / ".checkpoints" / "ckpt-1" / "x", "x")
    r = pool.cli("submit", "--workdir", str(reserved), "--", "true")
    assert r.returncode == 2 and ".checkpoints is reserved" in r.stderr, r.stderr
    status, body = pool.api("GET", "/v1/jobs")
    assert status == 200 and len(body["jobs"]) == 1  # only the good one was submitted


def upload_tree(pool, tree):
    """Stores `tree` in the blob store (through a submitted job's inputs) and
    returns its manifest id."""
    job_id = submitted_id(pool.cli("submit", "--quiet", "--workdir", str(tree), "--", "true"))
    return pool.job(job_id)["spec"]["inputs"]


def test_checkpoints_list_and_download(pool, tmp_path):
    start(pool)
    tree = tmp_path / "ckpt-tree"
    write(tree / "ckpt-1" / "model.pt", bytes(range(256)) * 1000)
    write(tree / "ckpt-1" / "step.txt", "step 100\n")
    manifest = upload_tree(pool, tree)

    job_id = pool.submit({"run": "sleep 60", "checkpoint": {}})
    job = pool.wait_state(job_id, "running")
    attempt = job["attempt_list"][-1]["id"]
    status, ckpt = pool.api("POST", f"/v1/jobs/{job_id}/checkpoints",
                            {"attempt": attempt, "manifest": manifest})
    assert status == 201, ckpt
    assert ckpt["number"] == 1

    r = pool.cli("checkpoints", str(job_id), check=True)
    header, row = r.stdout.splitlines()[:2]
    assert header.split() == ["NUMBER", "CREATED", "ATTEMPT", "FILES", "SIZE", "MANIFEST"]
    assert row.split()[0] == "1" and attempt in row and manifest[:12] in row
    listed = json.loads(pool.cli("checkpoints", str(job_id), "--json", check=True).stdout)
    assert [c["number"] for c in listed] == [1] and listed[0]["manifest"] == manifest

    # The default directory, in the current one.
    r = cli(pool, "checkpoint", "download", str(job_id), cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    out = tmp_path / f"job-{job_id}-checkpoint-1"
    assert (out / "ckpt-1" / "model.pt").read_bytes() == bytes(range(256)) * 1000
    assert (out / "ckpt-1" / "step.txt").read_text() == "step 100\n"
    assert str(out.name) in r.stdout

    # A non-empty directory is refused and left alone.
    r = cli(pool, "checkpoint", "download", str(job_id), "--id", "1", "--to", str(out))
    assert r.returncode != 0 and "not empty" in r.stderr
    to = tmp_path / "elsewhere"
    pool.cli("checkpoint", "download", str(job_id), "--id", "1", "--to", str(to), check=True)
    assert (to / "ckpt-1" / "step.txt").read_text() == "step 100\n"

    r = pool.cli("checkpoint", "download", str(job_id), "--id", "7", "--to", str(tmp_path / "x"))
    assert r.returncode != 0 and not (tmp_path / "x").exists()
    pool.cli("cancel", str(job_id), check=True)


def test_checkpoint_uploaded_by_the_agent_downloads(pool, tmp_path):
    start(pool)
    script = ('ck=$GPUPOOL_CHECKPOINT_DIR; mkdir -p "$ck/.staging"; '
              'echo "epoch 3" > "$ck/.staging/state.txt"; mv "$ck/.staging" "$ck/ckpt-3"; '
              'sleep 30')
    job_id = pool.submit({"run": script, "checkpoint": {}})
    pool.wait_state(job_id, "running")

    def listed():
        r = pool.cli("checkpoints", str(job_id), "-o", "json")
        return json.loads(r.stdout) if r.returncode == 0 and r.stdout.strip() != "[]" else None
    ckpts = wait_for(listed, timeout=30, interval=0.5, what="the agent's checkpoint upload")
    assert ckpts[0]["files"] == 1
    out = tmp_path / "restored"
    pool.cli("checkpoint", "download", str(job_id), "--to", str(out), check=True)
    assert (out / "ckpt-3" / "state.txt").read_text() == "epoch 3\n"
    pool.cli("cancel", str(job_id), check=True)


def test_admin_gc_prints_what_it_removed(pool):
    pool.start_server()
    r = pool.cli("admin", "gc", check=True)
    assert re.fullmatch(r"removed \d+ manifests and \d+ chunks \(.+ freed\); \d+ chunks kept\n"
                        r"removed the logs of \d+ jobs \(.*\); the logs of \d+ jobs kept \(.+\)\n",
                        r.stdout), r.stdout
    counts = json.loads(pool.cli("admin", "gc", "-o", "json", check=True).stdout)
    assert {"manifests_removed", "chunks_removed", "bytes_freed", "chunks_kept", "logs"} <= set(counts)
