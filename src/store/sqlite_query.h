// Internal to the SQLite store (store/sqlite_store.cpp, sqlite_tx_*.cpp and the units it
// delegates to, such as store/sqlite_logs.h): RAII for SQLite's C API, one
// use of a cached prepared statement (Query), and the connection those
// units prepare statements on (SqliteConn). Not for use outside store/.
//
// Threading: as SqliteStore, one thread at a time.
#pragma once

#include <sqlite3.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "common/status.h"

namespace gpupool {

// RAII for the C API.

struct DbCloser {
  void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
};
using DbPtr = std::unique_ptr<sqlite3, DbCloser>;

struct StmtFinalizer {
  void operator()(sqlite3_stmt* s) const { sqlite3_finalize(s); }
};
using StmtPtr = std::unique_ptr<sqlite3_stmt, StmtFinalizer>;

inline Status SqliteError(sqlite3* db, int rc, std::string_view what) {
  std::string msg = "sqlite: " + std::string(what) + ": " +
                    (db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
  int primary = rc & 0xff;
  if (primary == SQLITE_BUSY || primary == SQLITE_LOCKED) return Status::Unavailable(msg);
  if (primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB) return Status::DataLoss(msg);
  return Status::Internal(msg);
}

// One use of a cached prepared statement: binds, steps, reads columns, and
// resets the statement when it goes out of scope so the cache can reuse it.
class Query {
 public:
  Query(sqlite3* db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {}
  ~Query() {
    if (stmt_ == nullptr) return;
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }
  Query(Query&& o) noexcept
      : db_(o.db_), stmt_(std::exchange(o.stmt_, nullptr)), bind_rc_(o.bind_rc_) {}
  Query(const Query&) = delete;
  Query& operator=(const Query&) = delete;
  Query& operator=(Query&&) = delete;

  Query& Bind(int i, int64_t v) { return Check(sqlite3_bind_int64(stmt_, i, v)); }
  Query& Bind(int i, std::string_view v) {
    // A null data pointer would bind SQL NULL; an empty view must bind ''.
    const char* data = v.data() != nullptr ? v.data() : "";
    return Check(sqlite3_bind_text(stmt_, i, data, static_cast<int>(v.size()), SQLITE_TRANSIENT));
  }
  Query& Bind(int i, const std::optional<int32_t>& v) {
    return v ? Bind(i, static_cast<int64_t>(*v)) : BindNull(i);
  }
  Query& BindNull(int i) { return Check(sqlite3_bind_null(stmt_, i)); }
  // A REAL; NaN (a value not known) is stored as NULL.
  Query& BindReal(int i, double v) {
    return Check(std::isnan(v) ? sqlite3_bind_null(stmt_, i) : sqlite3_bind_double(stmt_, i, v));
  }
  Query& BindBlob(int i, std::string_view v) {
    // A zero-length blob, not NULL, for an empty view.
    const char* data = v.data() != nullptr ? v.data() : "";
    return Check(sqlite3_bind_blob64(stmt_, i, data, v.size(), SQLITE_TRANSIENT));
  }

  // true: a row is available; false: done.
  Result<bool> Step() {
    if (bind_rc_ != SQLITE_OK) return SqliteError(db_, bind_rc_, "bind");
    int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    return SqliteError(db_, rc, sqlite3_sql(stmt_));
  }
  // Runs a statement that returns no rows.
  Status Run() {
    auto r = Step();
    return r.ok() ? Status::Ok() : r.status();
  }
  int extended_error() const { return sqlite3_extended_errcode(db_); }

  int64_t Int(int col) const { return sqlite3_column_int64(stmt_, col); }
  bool IsNull(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }
  // A REAL column; NaN for NULL.
  double Real(int col) const {
    return IsNull(col) ? std::numeric_limits<double>::quiet_NaN()
                       : sqlite3_column_double(stmt_, col);
  }
  std::optional<int32_t> OptInt32(int col) const {
    if (IsNull(col)) return std::nullopt;
    return static_cast<int32_t>(sqlite3_column_int64(stmt_, col));
  }
  std::string Text(int col) const {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, col));
    int n = sqlite3_column_bytes(stmt_, col);
    return p != nullptr ? std::string(p, static_cast<size_t>(n)) : std::string();
  }
  std::string Blob(int col) const {
    const auto* p = static_cast<const char*>(sqlite3_column_blob(stmt_, col));
    int n = sqlite3_column_bytes(stmt_, col);
    return p != nullptr ? std::string(p, static_cast<size_t>(n)) : std::string();
  }

 private:
  Query& Check(int rc) {
    if (rc != SQLITE_OK && bind_rc_ == SQLITE_OK) bind_rc_ = rc;
    return *this;
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
      it = cache_.emplace(std::string(sql), StmtPtr(raw)).first;
    }
    return Query(db, it->second.get());
  }
  void Clear() { cache_.clear(); }

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, StmtPtr, Hash, std::equal_to<>> cache_;
};

// The store's connection with its statement cache.
class SqliteConn {
 public:
  virtual ~SqliteConn() = default;
  // A statement for `sql`, prepared once per connection.
  virtual Result<Query> Prepare(std::string_view sql) = 0;
  virtual sqlite3* handle() = 0;
};

inline bool IsForeignKeyError(int extended) { return extended == SQLITE_CONSTRAINT_FOREIGNKEY; }

}  // namespace gpupool
