"""The server on PostgreSQL (`gpupool server --store postgresql://...`): a
real PostgreSQL 15 that the test starts (pg_server.py), a real server and
agent, jobs end to end; kill -9 of the server loses nothing acknowledged;
bad store URLs are clear errors."""
import subprocess

import pytest

from pg_server import PgServer
from pool import GPUPOOL, wait_for
from test_recovery import TICKS, lines_of, wait_output_grows


@pytest.fixture
def pg(tmp_path):
    with PgServer(tmp_path) as server:
        yield server


def test_a_pool_on_postgres_runs_jobs_and_a_killed_server_loses_nothing(pool, pg):
    pool.start_server(extra=["--store", pg.url])
    pool.start_agent("a", gpus="2xA100:80GiB")
    pool.wait_nodes_ready(1)
    done = pool.submit({"run": "echo finished-before"})
    assert pool.wait_finished(done)["state"] == "succeeded"
    running = pool.submit({"run": TICKS.format(n=40, delay=0.1), "resources": {"gpus": 1}})
    pool.wait_state(running, "running")
    wait_for(lambda: len(pool.logs_text(running)) >= 5, what="some output")
    pending = pool.submit({"run": "true", "resources": {"gpus": 8}})  # can never run here

    pool.kill_server()
    wait_output_grows(pool)  # the job runs on while the server is down
    pool.start_server(extra=["--store", pg.url])

    assert pool.job(done)["state"] == "succeeded"
    assert pool.logs_text(done) == ["finished-before"]
    assert pool.job(pending)["state"] == "pending"
    job = pool.wait_finished(running, timeout=40)
    assert job["state"] == "succeeded", job
    assert len(job["attempt_list"]) == 1  # the same attempt carried on
    assert pool.logs_text(running) == lines_of(40)  # nothing lost, nothing twice
    # The state is in PostgreSQL, not in the data directory.
    assert not (pool.dir / "server" / "state.db").exists()
    out = subprocess.run(["psql", pg.url, "-Atc", "SELECT count(*) FROM jobs"],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == "3"


def run_server(tmp_path, store):
    return subprocess.run([GPUPOOL, "server", "--data-dir", str(tmp_path / "data"), "--listen",
                           "127.0.0.1:0", "--store", store], capture_output=True, text=True,
                          timeout=60)


def test_a_store_url_of_another_kind_is_refused_before_anything_is_written(tmp_path):
    r = run_server(tmp_path, "mysql://root:hunter2@db/pool")
    assert r.returncode == 2, r
    assert "expected a postgres:// or postgresql:// URL" in r.stderr
    assert "hunter2" not in r.stderr  # the password is not echoed
    assert not (tmp_path / "data").exists()


def test_an_unreachable_database_is_a_clear_error(tmp_path):
    r = run_server(tmp_path, "postgresql://gpupool:hunter2@127.0.0.1:1/pool")
    assert r.returncode == 1, r
    assert "cannot connect to PostgreSQL at postgresql://gpupool:***@127.0.0.1:1/pool" in r.stderr
    assert "hunter2" not in r.stderr
    assert not (tmp_path / "data" / "state.db").exists()


def test_admin_migrate_moves_a_sqlite_pool_to_postgres(pool, pg):
    pool.start_server()
    pool.start_agent("a")
    pool.wait_nodes_ready(1)
    done = pool.submit({"run": "echo before the move"})
    assert pool.wait_finished(done)["state"] == "succeeded"
    token = pool.token

    # A running server's database is not moved.
    r = subprocess.run([GPUPOOL, "admin", "migrate", "--from", pool.server_dir, "--to", pg.url],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "stop the server first" in r.stderr, r

    pool.kill_server(sig=15)
    r = subprocess.run([GPUPOOL, "admin", "migrate", "--from", pool.server_dir, "--to", pg.url],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r
    assert "every table checked" in r.stdout

    pool.start_server(extra=["--store", pg.url])
    assert pool.token == token  # the token from before, which the calls below use: the tokens moved
    assert pool.job(done)["state"] == "succeeded"
    assert pool.logs_text(done) == ["before the move"]
    pool.wait_nodes_ready(1)  # the agent carries on with the same server address
    after = pool.submit({"run": "echo after the move"})
    assert pool.wait_finished(after)["state"] == "succeeded"
    assert after == done + 1

    # Into a database that holds a pool already: refused.
    pool.kill_server()
    r = subprocess.run([GPUPOOL, "admin", "migrate", "--from", pool.server_dir, "--to", pg.url],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "holds a pool already" in r.stderr, r
