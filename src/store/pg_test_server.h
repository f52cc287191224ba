// A private PostgreSQL server for the tests of one binary.
//
// tests/postgres/pg_server.sh does the work (the one implementation, shared
// with tests/integration/pg_server.py): it initdbs a cluster in a new
// temporary directory and starts it on a free port of 127.0.0.1, as an
// unprivileged account when the tests run as root, with trust authentication
// for the user gpupool and settings for speed (fsync off). Nothing here
// assumes a system-wide PostgreSQL; the binaries are found as the script
// says (GPUPOOL_PG_BINDIR overrides).
//
// A server outlives nothing: the destructor stops it and removes its
// directory, and should the test binary die first (a crash, a timeout's
// SIGKILL), a watcher the script leaves behind stops it within a second or
// two and removes the directory.
//
// Test-only support: no libpq, no gtest. A test that needs a server and
// cannot get one fails with the reason (it never skips):
//
//   auto pg = gpupool::testing::SharedPgTestServer();
//   ASSERT_TRUE(pg.ok()) << pg.status().ToString();
//   Connect((*pg)->UrlFor("jobs_test_1"));
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

namespace gpupool::testing {

// A private PostgreSQL server for one test binary (tests/postgres/pg_server.sh).
// Not thread-safe: one thread at a time may Kill, Restart or Stop it (any
// number may connect to it).
class PgTestServer {
 public:
  // Starts a server in a new temporary directory (under $TMPDIR, else /tmp);
  // the script's path comes from the compile definition
  // GPUPOOL_PG_SERVER_SCRIPT (an absolute path). Takes about 1.5 s (initdb).
  static Result<std::unique_ptr<PgTestServer>> Start();
  ~PgTestServer();  // stops it and removes the directory
  PgTestServer(const PgTestServer&) = delete;
  PgTestServer& operator=(const PgTestServer&) = delete;

  // postgresql://gpupool@127.0.0.1:PORT/postgres; the same after Restart.
  const std::string& url() const { return url_; }
  // The same server, another database (which the caller creates):
  // postgresql://gpupool@127.0.0.1:PORT/<database, percent-encoded>.
  std::string UrlFor(const std::string& database) const;
  // The server's directory: its log is dir() + "/log".
  const std::string& dir() const { return dir_; }

  // SIGKILL to the postmaster and all its processes (a crash); returns once
  // they are gone. Connections break; committed data stays (see the script
  // on fsync=off).
  Status Kill();
  // Starts it again (after Kill or Stop) on the same port; returns once it
  // accepts connections, crash recovery done.
  Status Restart();
  // Fast shutdown: connections are ended. No error if it is not running.
  Status Stop();

 private:
  explicit PgTestServer(std::string dir);
  // Runs `pg_server.sh COMMAND dir_` and returns what it printed on stdout.
  Result<std::string> RunScript(std::string_view command) const;

  std::string dir_;
  std::string url_;
  pid_t owner_ = 0;  // the process that started it: a forked child leaves it alone
};

// One server per process, started on the first call and stopped at exit;
// every later call returns it (or the same error: a server that could not
// start is not tried again). Thread-safe. Tests sharing it must use databases
// of their own (UrlFor) and must not Kill, Restart or Stop it; a test of
// crashes starts a PgTestServer of its own.
Result<PgTestServer*> SharedPgTestServer();

}  // namespace gpupool::testing
