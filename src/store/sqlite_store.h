// SqliteStore: the embedded Store backend, one SQLite database file.
//
// Contract (beyond store/store.h):
// - Open() creates the file and its parent directory if missing, switches the
//   database to WAL mode, enables foreign keys, sets the busy timeout (5 s by default) and
//   migrates the schema to the last version of its migrations (PRAGMA
//   user_version; kSchemaVersion with the built-in ones). A database
//   written by a newer binary (higher user_version) is refused with
//   FailedPrecondition rather than misread.
// - Migrations run all together in one transaction with the user_version
//   change: one that fails leaves the database exactly as it was (data,
//   schema and user_version) and Open fails naming the version. Before
//   migrating a database that holds a schema already (user_version > 0),
//   Open copies it aside with the backup API to "<path>.schema-v<N>.bak"
//   (N: its version before), so even a migration that succeeds but
//   misconverts data can be undone; if that copy cannot be made, nothing is
//   migrated.
// - With SqliteOptions::check_integrity, Open first runs PRAGMA quick_check
//   and refuses a damaged database with DataLoss listing what SQLite found.
//   A file that is not a database, or corruption met at any time, is
//   DataLoss too (SQLITE_CORRUPT, SQLITE_NOTADB).
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
#include <span>
#include <string>

#include "common/status.h"
#include "store/store.h"

namespace gpupool {

class SqlConn;  // store/sql_query.h

// One step of the schema: the SQL that moves a database from version-1 to
// version. Released migrations are never edited; a new one is appended.
struct SchemaMigration {
  int version;
  const char* sql;
  // Runs after `sql`, in the same transaction, where SQL alone cannot migrate.
  Status (*then)(SqlConn&) = nullptr;
};

struct SqliteOptions {
  // synchronous=FULL instead of NORMAL: survive power loss, at the cost of an
  // fsync per commit.
  bool fsync_every_commit = false;
  // How long a transaction waits for the write lock held by another
  // connection before failing with Unavailable.
  int busy_timeout_ms = 5000;
  // PRAGMA quick_check before anything else (O(database size): the server
  // does it once at start). A damaged database is DataLoss.
  bool check_integrity = false;
  // The schema's migrations, versions 1..N in order; empty = the built-in
  // ones (SqliteStore::Migrations()). Tests pass a prefix of those to build
  // an old database, or add a failing step.
  std::span<const SchemaMigration> migrations;
  // Copy a database aside before migrating it (see the contract above).
  bool backup_before_migrating = true;
};

class SqliteStore : public Store {
 public:
  // The schema version this binary writes; see the migrations in the .cpp.
  static constexpr int kSchemaVersion = 12;
  // The built-in migrations, versions 1..kSchemaVersion.
  static std::span<const SchemaMigration> Migrations();

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
