"""A private PostgreSQL server for a test.

tests/postgres/pg_server.sh does the work (the one implementation, shared
with the C++ tests' src/store/pg_test_server.h): initdb in a directory of the
test's, a server on a free port of 127.0.0.1 with trust authentication for
the user gpupool, run as an unprivileged account (`postgres`, else `nobody`)
when the tests run as root. Nothing here assumes a system-wide PostgreSQL;
GPUPOOL_PG_BINDIR overrides where its binaries are found.

    with PgServer(tmp_path) as pg:
        url = pg.url                      # postgresql://gpupool@127.0.0.1:PORT/postgres
        other = pg.url_for("jobs")        # the same server, another database
        pg.kill()                         # SIGKILL: a crash
        pg.restart()                      # the same port; committed data is there

The server lives in `tmp_dir`/postgres (its log: .../postgres/log). As root,
the account the server runs as must reach that directory; pytest's tmp_path
lies under /tmp/pytest-of-root, which is private (0700), so there the server
lives in a directory of its own under /tmp instead, `tmp_dir`/postgres is a
symbolic link to it, and close() removes it. Should the test process die
without close(), the script's watcher stops the server (and removes such a
directory of its own) within a second or two.
"""
import os
import pathlib
import shutil
import subprocess
import tempfile
import urllib.parse

SCRIPT = pathlib.Path(__file__).resolve().parent.parent / "postgres" / "pg_server.sh"

# Longer than anything the script waits for, so that it says what went wrong.
_SCRIPT_TIMEOUT_S = 180


class PgServerError(RuntimeError):
    """pg_server.sh failed; the message has what it said (the log's tail)."""


def _reachable_by_others(path):
    """Whether every directory from / down to `path` lets any account through."""
    path = pathlib.Path(path).resolve()
    for d in [path, *path.parents]:
        if not os.stat(d).st_mode & 0o001:
            return False
    return True


class PgServer:
    def __init__(self, tmp_dir=None):
        """A server in `tmp_dir`/postgres, or, with no `tmp_dir`, in a new
        temporary directory (which close() removes). start() starts it."""
        self._own_dir = None  # a directory this object made, and removes
        if tmp_dir is None:
            self._own_dir = pathlib.Path(tempfile.mkdtemp(prefix="gpupool-pg-"))
            self.dir = self._own_dir
        else:
            self.dir = pathlib.Path(tmp_dir) / "postgres"
            if os.geteuid() == 0 and not _reachable_by_others(tmp_dir) and not self.dir.exists():
                self._own_dir = pathlib.Path(tempfile.mkdtemp(prefix="gpupool-pg-", dir="/tmp"))
                self.dir.symlink_to(self._own_dir)
        self.url = None

    def _run(self, command):
        env = dict(os.environ)
        env["GPUPOOL_PG_OWNER_PID"] = str(os.getpid())
        env["GPUPOOL_PG_OWNER_REMOVES_DIR"] = "1" if self._own_dir is not None else "0"
        try:
            p = subprocess.run(["bash", str(SCRIPT), command, str(self.dir)],
                               stdin=subprocess.DEVNULL, capture_output=True, text=True,
                               env=env, timeout=_SCRIPT_TIMEOUT_S)
        except subprocess.TimeoutExpired as e:
            raise PgServerError(f"{SCRIPT} {command} {self.dir}: still running after "
                                f"{_SCRIPT_TIMEOUT_S} s; killed; {e.stderr or ''}") from None
        if p.returncode != 0:
            raise PgServerError(f"{SCRIPT} {command} {self.dir} failed "
                                f"(exit status {p.returncode}): {p.stderr.strip() or '(nothing on stderr)'}")
        return p.stdout.strip()

    def start(self):
        """Starts it (initdb the first time) on a free port; returns its URL."""
        url = self._run("start")
        if not url.startswith("postgresql://") or "\n" in url:
            raise PgServerError(f"{SCRIPT} start {self.dir}: expected one URL on stdout, got {url!r}")
        self.url = url
        return url

    def stop(self):
        """Fast shutdown; no error if it is not running."""
        self._run("stop")

    def kill(self):
        """SIGKILL to the postmaster and all its processes (a crash); returns
        once they are gone."""
        self._run("kill")

    def restart(self):
        """Starts it again (after kill or stop) on the same port; returns its
        URL, once it accepts connections."""
        url = self._run("restart")
        if self.url is not None and url != self.url:
            raise PgServerError(f"{SCRIPT} restart {self.dir}: came back as {url}, not {self.url}")
        self.url = url
        return url

    def psql(self, sql, database=None):
        """Runs `sql` as the user gpupool; its output, unaligned, stripped."""
        url = self.url if database is None else self.url_for(database)
        r = subprocess.run(["psql", "-XAtq", "-v", "ON_ERROR_STOP=1", "-d", url, "-c", sql],
                           capture_output=True, text=True, timeout=_SCRIPT_TIMEOUT_S)
        if r.returncode != 0:
            raise PgServerError(f"psql {sql!r}: {r.stderr.strip()}")
        return r.stdout.strip()

    def url_for(self, database):
        """The URL of another database of the same server (which the caller creates)."""
        if self.url is None:
            raise PgServerError("the server was never started")
        return self.url.rsplit("/", 1)[0] + "/" + urllib.parse.quote(database, safe="")

    def log(self):
        """The server's log, for a failure's report."""
        try:
            return (self.dir / "log").read_text(errors="replace")
        except OSError:
            return ""

    def close(self):
        """Stops it and removes the directory, if this object made it."""
        try:
            self.stop()
        finally:
            if self._own_dir is not None:
                shutil.rmtree(self._own_dir, ignore_errors=True)
                if self.dir.is_symlink():
                    self.dir.unlink()

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()
