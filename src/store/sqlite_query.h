// Internal to the SQLite store (store/sqlite_store.cpp, sqlite_schema.cpp,
// sqlite_files.cpp): RAII for SQLite's C API, its SqlStatement
// (store/sql_query.h), the cache of prepared statements, and the
// connection (SqliteConn: a SqlConn that also hands out its sqlite3*, for
// what only SQLite has: migrations, backups, PRAGMAs). Not for use outside
// store/.
//
// Threading: as SqliteStore, one thread at a time.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/status.h"
#include "store/sql_query.h"

namespace gpupool {

// RAII for the C API.

struct DbCloser {
  void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
};
using DbPtr = std::unique_ptr<sqlite3, DbCloser>;

inline Status SqliteError(sqlite3* db, int rc, std::string_view what) {
  std::string msg = "sqlite: " + std::string(what) + ": " +
                    (db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
  int primary = rc & 0xff;
  if (primary == SQLITE_BUSY || primary == SQLITE_LOCKED) return Status::Unavailable(msg);
  if (primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB) return Status::DataLoss(msg);
  return Status::Internal(msg);
}

// A prepared sqlite3_stmt.
class SqliteStatement final : public SqlStatement {
 public:
  SqliteStatement(sqlite3* db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {}
  ~SqliteStatement() override { sqlite3_finalize(stmt_); }
  SqliteStatement(const SqliteStatement&) = delete;
  SqliteStatement& operator=(const SqliteStatement&) = delete;

  void BindInt(int i, int64_t v) override { Check(sqlite3_bind_int64(stmt_, i, v)); }
  void BindText(int i, std::string_view v) override {
    // A null data pointer would bind SQL NULL; an empty view must bind ''.
    const char* data = v.data() != nullptr ? v.data() : "";
    Check(sqlite3_bind_text(stmt_, i, data, static_cast<int>(v.size()), SQLITE_TRANSIENT));
  }
  void BindNull(int i) override { Check(sqlite3_bind_null(stmt_, i)); }
  void BindDouble(int i, double v) override { Check(sqlite3_bind_double(stmt_, i, v)); }
  void BindBlob(int i, std::string_view v) override {
    const char* data = v.data() != nullptr ? v.data() : "";
    Check(sqlite3_bind_blob64(stmt_, i, data, v.size(), SQLITE_TRANSIENT));
  }
  Result<bool> Step() override {
    if (bind_rc_ != SQLITE_OK) return SqliteError(db_, bind_rc_, "bind");
    int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    return SqliteError(db_, rc, sqlite3_sql(stmt_));
  }
  void Reset() override {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
    bind_rc_ = SQLITE_OK;
  }
  bool IsNull(int col) const override { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }
  int64_t Int(int col) const override { return sqlite3_column_int64(stmt_, col); }
  double Double(int col) const override { return sqlite3_column_double(stmt_, col); }
  std::string Text(int col) const override {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, col));
    int n = sqlite3_column_bytes(stmt_, col);
    return p != nullptr ? std::string(p, static_cast<size_t>(n)) : std::string();
  }
  std::string Blob(int col) const override {
    const auto* p = static_cast<const char*>(sqlite3_column_blob(stmt_, col));
    int n = sqlite3_column_bytes(stmt_, col);
    return p != nullptr ? std::string(p, static_cast<size_t>(n)) : std::string();
  }
  SqlConstraint violated() const override {
    switch (sqlite3_extended_errcode(db_)) {
      case SQLITE_CONSTRAINT_FOREIGNKEY:
        return SqlConstraint::kForeignKey;
      case SQLITE_CONSTRAINT_UNIQUE:
      case SQLITE_CONSTRAINT_PRIMARYKEY:
        return SqlConstraint::kUnique;
      default:
        return (sqlite3_extended_errcode(db_) & 0xff) == SQLITE_CONSTRAINT ? SqlConstraint::kOther
                                                                           : SqlConstraint::kNone;
    }
  }

 private:
  void Check(int rc) {
    if (rc != SQLITE_OK && bind_rc_ == SQLITE_OK) bind_rc_ = rc;
  }
  sqlite3* db_;
  sqlite3_stmt* stmt_;
  int bind_rc_ = SQLITE_OK;
};

// Statements prepared once per connection, found by their SQL text without
// allocating. Declare it after the connection's DbPtr, so that statements
// are finalized before the connection closes.
class StatementCache {
 public:
  Result<Query> Prepare(sqlite3* db, std::string_view sql) {
    auto it = cache_.find(sql);
    if (it == cache_.end()) {
      sqlite3_stmt* raw = nullptr;
      int rc = sqlite3_prepare_v3(db, sql.data(), static_cast<int>(sql.size()),
                                  SQLITE_PREPARE_PERSISTENT, &raw, nullptr);
      if (rc != SQLITE_OK) {
        sqlite3_finalize(raw);
        return SqliteError(db, rc, "prepare " + std::string(sql));
      }
      it = cache_.emplace(std::string(sql), std::make_unique<SqliteStatement>(db, raw)).first;
    }
    return Query(it->second.get());
  }
  void Clear() { cache_.clear(); }

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, std::unique_ptr<SqliteStatement>, Hash, std::equal_to<>> cache_;
};

// The SQLite store's connection.
class SqliteConn : public SqlConn {
 public:
  virtual sqlite3* handle() = 0;
  int64_t Changes() override { return sqlite3_changes64(handle()); }
  SqlDialect dialect() const override { return SqlDialect::kSqlite; }
};

}  // namespace gpupool
