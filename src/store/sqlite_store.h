// SqliteStore: the embedded Store backend, one SQLite database file.
//
// Contract (beyond store/store.h):
// - Open() creates the file and its parent directory if missing, switches the
//   database to WAL mode, enables foreign keys, sets the busy timeout (5 s by default) and
//   migrates the schema to kSchemaVersion (PRAGMA user_version). A database
//   written by a newer binary (higher user_version) is refused with
//   FailedPrecondition rather than misread.
// - Transact runs BEGIN IMMEDIATE ... COMMIT (ROLLBACK on error or exception),
//   so the write lock is taken up front and a transaction never fails half way
//   on a lock upgrade. Calling Transact from inside a callback is a programmer
//   error and returns FailedPrecondition without touching the outer
//   transaction.
// - Durability: with the default synchronous=NORMAL in WAL mode, a committed
//   transaction survives a crash of the process (SIGKILL, abort), which is the
//   store's requirement. A power loss or kernel crash may lose the last
//   transactions committed before it (never corrupts the database); set
//   SqliteOptions::fsync_every_commit to fsync the WAL on every commit
//   (synchronous=FULL) when that matters more than commit latency.
// - Errors: SQLITE_BUSY/LOCKED -> Unavailable; other SQLite failures ->
//   Internal with sqlite3_errmsg. A row that cannot be decoded (bad JSON, an
//   unknown enum name) -> Internal naming the table and the row's key. A node
//   name held by another id -> AlreadyExists. An attempt, log line or
//   checkpoint naming a job that does not exist -> NotFound.
//
// Threading: like every Store, one thread at a time (the connection is opened
// without SQLite's own mutex). The object owns the connection and a cache of
// prepared statements keyed by SQL text; it is not copyable.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "store/store.h"

namespace gpupool {

struct SqliteOptions {
  // synchronous=FULL instead of NORMAL: survive power loss, at the cost of an
  // fsync per commit.
  bool fsync_every_commit = false;
  // How long a transaction waits for the write lock held by another
  // connection before failing with Unavailable.
  int busy_timeout_ms = 5000;
};

class SqliteStore : public Store {
 public:
  // The schema version this binary writes; see the migrations in the .cpp.
  static constexpr int kSchemaVersion = 7;

  // `path` is the database file, e.g. "<data-dir>/state.db"; ":memory:" opens
  // a private in-memory database (no WAL, nothing survives; for tests).
  static Result<std::unique_ptr<SqliteStore>> Open(const std::string& path,
                                                   const SqliteOptions& options = {});

  ~SqliteStore() override;
  SqliteStore(const SqliteStore&) = delete;
  SqliteStore& operator=(const SqliteStore&) = delete;

  Status Transact(const std::function<Status(Tx&)>& fn) override;

  struct Impl;  // the connection and the statement cache (sqlite_store.cpp)

 private:
  explicit SqliteStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpupool
