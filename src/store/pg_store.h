// PgStore: the Store backend on PostgreSQL (15 or newer), for a pool that
// outgrows one server: the same transaction code as SQLite's (SqlTx over a
// SqlConn, store/sql_tx.h), the schema of store/pg_schema.h.
//
// Contract (beyond store/store.h):
// - Open(url) connects with libpq (postgres:// or postgresql:// URLs, or
//   "key=value" strings; the tables live in the connection's search_path,
//   which a URL can set: ?options=-csearch_path%3Dpool). It then brings
//   the schema to the binary's version in one transaction under an
//   advisory lock (two servers starting at once migrate once): an empty
//   schema is created, an older one migrated, a newer one refused with
//   FailedPrecondition naming both versions, and nothing is written then.
//   An unreachable server or a refused login is Unavailable naming the
//   URL (without its password); nothing is retried here.
// - Transact runs BEGIN ... COMMIT (READ COMMITTED: one server writes at a
//   time, the leader; PgOptions::fence_epoch fences the others). Once COMMIT
//   returns the transaction is durable in PostgreSQL (synchronous_commit
//   as the database sets it; the default, on, waits for its WAL flush).
// - Errors: serialization failures, deadlocks, lock timeouts and a lost
//   connection are Unavailable (the connection is re-established at the
//   next Transact, its prepared statements made again); a broken
//   constraint the code does not expect and any other failure are Internal
//   with PostgreSQL's message and SQLSTATE. Undecodable rows, missing jobs
//   and taken node names are reported as SqliteStore reports them.
//
// Threading: like every Store, one thread at a time.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "common/status.h"

struct pg_conn;
typedef struct pg_conn PGconn;  // libpq's
#include "store/store.h"

namespace gpupool {

struct PgOptions {
  // Fencing: when set, every transaction first locks the leader row
  // (gpupool_leader, store/pg_leader.h) FOR SHARE and goes on only if its
  // epoch is the one this returns; otherwise it is FailedPrecondition
  // ("deposed") and changes nothing. A new leader's epoch change waits for
  // the transactions holding the row, so a deposed leader's last write
  // either lands before the change or not at all.
  std::function<int64_t()> fence_epoch;
};

class PgStore : public Store {
 public:
  // The schema version this binary writes (PgSchemaSteps' last).
  static int SchemaVersion();

  static Result<std::unique_ptr<PgStore>> Open(const std::string& url,
                                               const PgOptions& options = {});
  // `url` with any password replaced by "***", for messages.
  static std::string Redacted(const std::string& url);
  // Connects to `url` with bounds on waiting for a database that cannot be
  // reached: 5 s to connect, and a query whose connection stops answering
  // fails after `unanswered_ms` (TCP_USER_TIMEOUT) rather than waiting for
  // TCP to give up (minutes). Settings the URL itself gives win.
  static PGconn* Connect(const std::string& url, int64_t unanswered_ms = 10'000);
  // The same settings, without waiting: PQconnectStartParams, for a caller
  // that drives PQconnectPoll with a deadline of its own.
  static PGconn* StartConnect(const std::string& url, int64_t unanswered_ms);

  ~PgStore() override;
  PgStore(const PgStore&) = delete;
  PgStore& operator=(const PgStore&) = delete;

  Status Transact(const std::function<Status(Tx&)>& fn) override;

  struct Impl;  // the connection and its statements (pg_store.cpp)

 private:
  explicit PgStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpupool
