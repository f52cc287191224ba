#include "store/sqlite_store.h"

#include <sqlite3.h>

#include <filesystem>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <utility>

#include "store/sqlite_files.h"
#include "store/sql_logs.h"
#include "store/sqlite_query.h"
#include "store/sql_tx.h"

namespace gpupool {
// ---------------------------------------------------------------------------

struct SqliteStore::Impl : SqliteConn {
  DbPtr db;
  // Declared after db so statements are finalized before the connection closes.
  StatementCache cache;
  bool in_tx = false;

  Result<Query> Prepare(std::string_view sql) override { return cache.Prepare(db.get(), sql); }

  sqlite3* handle() override { return db.get(); }

  Status Run(std::string_view sql) {
    GP_ASSIGN_OR_RETURN(Query q, Prepare(sql));
    return q.Run();
  }

  // Rolls back if a transaction is still open (SQLite rolls back by itself on
  // some errors, e.g. SQLITE_FULL or an I/O error).
  Status RollbackIfActive() {
    if (sqlite3_get_autocommit(db.get()) != 0) return Status::Ok();
    return Run("ROLLBACK");
  }

  // Multi-statement SQL, unprepared (schema setup only).
  Status ExecScript(const char* sql, std::string_view what) {
    char* err = nullptr;
    int rc = sqlite3_exec(db.get(), sql, nullptr, nullptr, &err);
    if (rc == SQLITE_OK) return Status::Ok();
    std::string msg =
        "sqlite: " + std::string(what) + ": " + (err != nullptr ? err : sqlite3_errstr(rc));
    sqlite3_free(err);
    int primary = rc & 0xff;
    if (primary == SQLITE_BUSY || primary == SQLITE_LOCKED) return Status::Unavailable(msg);
    if (primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB) return Status::DataLoss(msg);
    return Status::Internal(msg);
  }

  Result<std::string> PragmaText(const char* sql) {
    GP_ASSIGN_OR_RETURN(Query q, Prepare(sql));
    GP_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) return Status::Internal(std::string("sqlite: ") + sql + ": no result");
    return q.Text(0);
  }

  // Brings the schema to the last version of `migrations`, all steps in one
  // transaction (see the header's contract).
  Status Migrate(std::span<const SchemaMigration> migrations, const std::string& path,
                 bool backup_first) {
    for (size_t i = 0; i < migrations.size(); ++i) {
      if (migrations[i].version != static_cast<int>(i) + 1) {
        return Status::Internal("schema migrations must be versions 1.." +
                                std::to_string(migrations.size()) + " in order");
      }
    }
    const int target = static_cast<int>(migrations.size());
    GP_ASSIGN_OR_RETURN(std::string v, PragmaText("PRAGMA user_version"));
    const int current = std::stoi(v);
    if (current > target) {
      return Status::FailedPrecondition("database schema version " + std::to_string(current) +
                                        " is newer than this binary supports (" +
                                        std::to_string(target) + "); upgrade gpupool");
    }
    if (current == target) return Status::Ok();
    if (backup_first && current > 0) {
      std::string aside = path + ".schema-v" + std::to_string(current) + ".bak";
      auto copied = BackupSqliteConnection(db.get(), aside);
      if (!copied.ok()) {
        return copied.status().WithContext("copying the database aside to " + aside +
                                           " before migrating it (nothing was migrated)");
      }
    }
    GP_RETURN_IF_ERROR(ExecScript("BEGIN IMMEDIATE", "migrating the schema"));
    Status st;
    for (const SchemaMigration& m : migrations) {
      if (m.version <= current) continue;
      std::string what = "migrating the schema to version " + std::to_string(m.version);
      st = ExecScript(m.sql, what);
      if (st.ok() && m.then != nullptr) st = m.then(*this).WithContext(what);
      if (!st.ok()) break;
    }
    if (st.ok()) {
      st = ExecScript(("PRAGMA user_version = " + std::to_string(target)).c_str(),
                      "migrating the schema");
    }
    if (st.ok()) st = ExecScript("COMMIT", "migrating the schema");
    if (!st.ok()) {
      (void)RollbackIfActive();
      return Status(st.code(), st.message() + " (the database is left at version " +
                                   std::to_string(current) + ", unchanged)");
    }
    return Status::Ok();
  }

  // PRAGMA quick_check; DataLoss listing what it found.
  Status QuickCheck(const std::string& path) {
    GP_ASSIGN_OR_RETURN(Query q, Prepare("PRAGMA quick_check(10)"));
    std::string problems;
    while (true) {
      auto row = q.Step();
      // Damage bad enough stops the check itself (SQLITE_CORRUPT): the same
      // verdict.
      if (!row.ok() && row.status().code() == StatusCode::kDataLoss) {
        return Status::DataLoss(path +
                                " is damaged (PRAGMA quick_check): " + row.status().message());
      }
      if (!row.ok()) return row.status();
      if (!*row) break;
      std::string line = q.Text(0);
      if (line != "ok") problems += "\n  " + line;
    }
    if (problems.empty()) return Status::Ok();
    return Status::DataLoss(path + " is damaged (PRAGMA quick_check):" + problems);
  }
};

// ---------------------------------------------------------------------------

SqliteStore::SqliteStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SqliteStore::~SqliteStore() = default;

Result<std::unique_ptr<SqliteStore>> SqliteStore::Open(const std::string& path,
                                                       const SqliteOptions& options) {
  const bool in_memory = path == ":memory:";
  if (!in_memory) {
    std::filesystem::path parent = std::filesystem::path(path).parent_path();
    if (!parent.empty()) {
      std::error_code ec;
      std::filesystem::create_directories(parent, ec);
      if (ec) {
        return Status::Unavailable("cannot create directory " + parent.string() + ": " +
                                   ec.message());
      }
    }
  }

  auto impl = std::make_unique<Impl>();
  sqlite3* raw = nullptr;
  int rc =
      sqlite3_open_v2(path.c_str(), &raw,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  impl->db.reset(raw);  // closed on every path, even when the open failed
  if (rc != SQLITE_OK) return SqliteError(raw, rc, "open " + path);
  sqlite3_extended_result_codes(raw, 1);
  sqlite3_busy_timeout(raw, options.busy_timeout_ms);

  std::string what = "configuring " + path;
  if (options.check_integrity) GP_RETURN_IF_ERROR(impl->QuickCheck(path));
  if (!in_memory) {
    GP_ASSIGN_OR_RETURN(std::string mode, impl->PragmaText("PRAGMA journal_mode = WAL"));
    if (mode != "wal") {
      return Status::Internal("sqlite: " + path + ": cannot enable WAL mode (journal_mode is " +
                              mode + ")");
    }
  }
  GP_RETURN_IF_ERROR(impl->ExecScript(
      options.fsync_every_commit ? "PRAGMA synchronous = FULL" : "PRAGMA synchronous = NORMAL",
      what));
  GP_RETURN_IF_ERROR(impl->ExecScript("PRAGMA foreign_keys = ON", what));
  GP_RETURN_IF_ERROR(impl->ExecScript("PRAGMA temp_store = MEMORY", what));
  // Truncate the WAL back to 64 MiB after a checkpoint following a burst.
  GP_RETURN_IF_ERROR(impl->ExecScript("PRAGMA journal_size_limit = 67108864", what));
  GP_RETURN_IF_ERROR(impl->Migrate(options.migrations.empty() ? Migrations() : options.migrations,
                                   path, options.backup_before_migrating && !in_memory)
                         .WithContext(path));
  return std::unique_ptr<SqliteStore>(new SqliteStore(std::move(impl)));
}

Status SqliteStore::Transact(const std::function<Status(Tx&)>& fn) {
  if (impl_->in_tx) {
    return Status::FailedPrecondition(
        "Store::Transact called inside another transaction (nested transactions are not "
        "supported)");
  }
  GP_RETURN_IF_ERROR(impl_->Run("BEGIN IMMEDIATE"));
  impl_->in_tx = true;
  SqlTx tx(*impl_);
  Status st;
  try {
    st = fn(tx);
  } catch (...) {
    impl_->in_tx = false;
    (void)impl_->RollbackIfActive();
    throw;
  }
  impl_->in_tx = false;
  if (!st.ok()) {
    Status rb = impl_->RollbackIfActive();
    if (!rb.ok()) {
      return Status::Internal("rollback failed (" + rb.message() + ") after: " + st.ToString());
    }
    return st;
  }
  Status commit = impl_->Run("COMMIT");
  if (!commit.ok()) {
    (void)impl_->RollbackIfActive();
    return commit.WithContext("commit");
  }
  return Status::Ok();
}

}  // namespace gpupool