"""The server's database: a consistent backup taken while the server runs
and restored later (the server then serves the same jobs), and a damaged
database that the server refuses to run on, saying how to restore it.
Real server and agent on loopback; the damage is done to a real state.db
the server wrote."""
import os
import signal
import sqlite3
import subprocess
import threading

from pool import GPUPOOL, wait_for


def jobs_by_id(pool):
    status, body = pool.api("GET", "/v1/jobs?after=0&limit=10000")
    assert status == 200, body
    return {j["id"]: j for j in body["jobs"]}


def comparable(job):
    """What a restore must bring back exactly (the queue position is the
    scheduler's, recomputed after any restart)."""
    return {k: v for k, v in job.items()
            if k not in ("position", "explanation", "unsatisfiable", "reserved_start_ms", "wait",
                         "reason", "updated_ms")}


def stop_server(pool):
    pool.server.send_signal(signal.SIGTERM)
    assert pool.server.wait(timeout=60) == 0


def test_a_backup_taken_while_jobs_are_submitted_restores_to_the_same_jobs(pool, tmp_path):
    pool.start_server()
    pool.start_agent("a")
    pool.wait_nodes_ready(1)
    done = pool.submit({"run": "for i in $(seq 1 500); do echo line $i; done"})
    pool.wait_finished(done)
    waiting = pool.submit({"run": "true", "resources": {"gpus": 8}})  # never fits: pending
    lines = pool.logs_text(done)
    assert len(lines) == 500

    # Jobs keep arriving while the backup is made: it holds a consistent
    # prefix of them, never a half-written one.
    stop = threading.Event()
    submitted = []

    def submit_forever():
        while not stop.is_set():
            status, job = pool.api("POST", "/v1/jobs", {"run": "true", "resources": {"gpus": 8}})
            if status == 201:
                submitted.append(job["id"])

    writer = threading.Thread(target=submit_forever)
    writer.start()
    try:
        wait_for(lambda: len(submitted) >= 5, what="submissions under way")
        backup = tmp_path / "backup.db"
        r = pool.cli("admin", "backup", str(backup), check=True)
        assert f"to {backup}" in r.stdout, r.stdout
        wait_for(lambda: len(submitted) >= 20, what="submissions after the backup")
    finally:
        stop.set()
        writer.join()
    at_backup = sqlite3.connect(str(backup))
    backed_up = {row[0] for row in at_backup.execute("SELECT id FROM jobs")}
    at_backup.close()
    assert {done, waiting} <= backed_up
    assert set(submitted) - backed_up, "the backup should predate the last submissions"
    # A prefix: every job up to the newest in the backup, none after.
    assert backed_up == set(range(1, max(backed_up) + 1))
    # Nothing of the backup stays on the server.
    assert not os.listdir(os.path.join(pool.server_dir, "backups"))

    before = {i: comparable(j) for i, j in jobs_by_id(pool).items() if i in backed_up}

    # Restoring needs the server stopped.
    r = pool.cli("admin", "restore", "--data-dir", pool.server_dir, str(backup))
    assert r.returncode != 0 and "stop it before restoring" in r.stderr, r.stderr
    stop_server(pool)
    r = pool.cli("admin", "restore", "--data-dir", pool.server_dir, str(backup), check=True)
    assert "the old database is in" in r.stdout, r.stdout

    pool.start_server()
    after = {i: comparable(j) for i, j in jobs_by_id(pool).items()}
    assert after == before
    assert pool.logs_text(done) == lines
    # The restored server goes on as usual: new jobs, and the agent is back.
    pool.wait_nodes_ready(1)
    new = pool.submit({"run": "echo again"})
    assert pool.wait_finished(new)["state"] == "succeeded"
    assert new == max(backed_up) + 1


def test_an_offline_backup_of_the_data_dir(pool, tmp_path):
    pool.start_server()
    job = pool.submit({"run": "true", "resources": {"gpus": 8}})
    stop_server(pool)
    backup = tmp_path / "offline.db"
    r = pool.cli("admin", "backup", "--data-dir", pool.server_dir, str(backup), check=True)
    assert "schema version" in r.stdout, r.stdout
    rows = sqlite3.connect(str(backup)).execute("SELECT id FROM jobs").fetchall()
    assert rows == [(job,)]


def root_page(db_path, table):
    db = sqlite3.connect(db_path)
    try:
        (page,) = db.execute("SELECT rootpage FROM sqlite_master WHERE name = ?",
                             (table,)).fetchone()
        (size,) = db.execute("PRAGMA page_size").fetchone()
        return page, size
    finally:
        db.close()


def test_a_damaged_database_is_refused_with_how_to_restore_it(pool, tmp_path):
    pool.start_server()
    pool.start_agent("a")
    pool.wait_nodes_ready(1)
    job = pool.submit({"run": "for i in $(seq 1 3000); do echo line $i; done"})
    pool.wait_finished(job, timeout=60)
    backup = tmp_path / "good.db"
    pool.cli("admin", "backup", str(backup), check=True)
    pool.kill_agent("a", signal.SIGTERM)
    stop_server(pool)
    db_path = os.path.join(pool.server_dir, "state.db")
    assert not os.path.exists(db_path + "-wal") or os.path.getsize(db_path + "-wal") == 0

    # A page of the job logs goes bad (a disk error, a bad copy).
    page, size = root_page(db_path, "log_chunks")
    with open(db_path, "r+b") as f:
        f.seek((page - 1) * size)
        f.write(b"\xa5" * size)

    os.remove(os.path.join(pool.server_dir, "server.url"))
    log_name = "server-damaged"
    with open(tmp_path / f"{log_name}.log", "wb") as log:
        p = subprocess.run([GPUPOOL, "server", "--data-dir", pool.server_dir, "--listen",
                            "127.0.0.1:0"], stdout=log, stderr=subprocess.STDOUT, timeout=120)
    out = (tmp_path / f"{log_name}.log").read_text()
    assert p.returncode != 0, out
    assert "is damaged (PRAGMA quick_check)" in out, out
    assert f"gpupool admin restore --data-dir {pool.server_dir} BACKUP.db" in out, out
    assert not os.path.exists(os.path.join(pool.server_dir, "server.url"))

    r = pool.cli("admin", "restore", "--data-dir", pool.server_dir, str(backup), check=True)
    assert ".before-restore-" in r.stdout
    pool.start_server()
    assert pool.job(job)["state"] == "succeeded"
    assert len(pool.logs_text(job)) == 3000
