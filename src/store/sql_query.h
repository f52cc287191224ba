// The SQL stores' common ground: a connection that prepares statements
// (SqlConn), one use of a prepared statement (Query), and what a backend
// implements for it (SqlStatement). The transaction code (store/sql_tx.h,
// sql_logs.h, sql_rows.h) is written once against these and runs on SQLite
// (store/sqlite_store.h) and PostgreSQL (store/pg_store.h).
//
// SQL is written in the dialect both understand: parameters numbered ?1,
// ?2, ... (a PostgreSQL connection rewrites them to $1, $2, ...), upserts as
// INSERT ... ON CONFLICT (...) DO UPDATE, new ids by RETURNING id, the
// reserved column name "user" quoted. Where the two differ (JSON fields,
// dates), the helpers at the end give each its own.
//
// Not for use outside store/. Threading: as the store, one thread at a time.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "common/status.h"

namespace gpupool {

enum class SqlDialect { kSqlite, kPostgres };

// Which constraint the last failed Step broke, where the code tells them
// apart (a missing job: NotFound; a node name taken: AlreadyExists).
enum class SqlConstraint { kNone, kForeignKey, kUnique, kOther };

// A backend's prepared statement. Columns and parameters count as in SQL:
// parameters from 1, columns from 0.
class SqlStatement {
 public:
  virtual ~SqlStatement() = default;
  virtual void BindInt(int i, int64_t v) = 0;
  virtual void BindText(int i, std::string_view v) = 0;
  virtual void BindNull(int i) = 0;
  virtual void BindDouble(int i, double v) = 0;
  virtual void BindBlob(int i, std::string_view v) = 0;
  // true: a row is available; false: done.
  virtual Result<bool> Step() = 0;
  // Clears the bindings and results: ready for the next use.
  virtual void Reset() = 0;
  virtual bool IsNull(int col) const = 0;
  virtual int64_t Int(int col) const = 0;
  virtual double Double(int col) const = 0;
  virtual std::string Text(int col) const = 0;
  virtual std::string Blob(int col) const = 0;
  virtual SqlConstraint violated() const = 0;
};

// One use of a cached prepared statement: binds, steps, reads columns, and
// resets the statement when it goes out of scope so the cache can reuse it.
class Query {
 public:
  explicit Query(SqlStatement* stmt) : stmt_(stmt) {}
  ~Query() {
    if (stmt_ != nullptr) stmt_->Reset();
  }
  Query(Query&& o) noexcept : stmt_(std::exchange(o.stmt_, nullptr)) {}
  Query(const Query&) = delete;
  Query& operator=(const Query&) = delete;
  Query& operator=(Query&&) = delete;

  Query& Bind(int i, int64_t v) {
    stmt_->BindInt(i, v);
    return *this;
  }
  // An empty view binds '' (never NULL).
  Query& Bind(int i, std::string_view v) {
    stmt_->BindText(i, v);
    return *this;
  }
  Query& Bind(int i, const std::optional<int32_t>& v) {
    return v ? Bind(i, static_cast<int64_t>(*v)) : BindNull(i);
  }
  Query& BindNull(int i) {
    stmt_->BindNull(i);
    return *this;
  }
  // A REAL; NaN (a value not known) is stored as NULL.
  Query& BindReal(int i, double v) {
    if (std::isnan(v)) return BindNull(i);
    stmt_->BindDouble(i, v);
    return *this;
  }
  // A zero-length blob, not NULL, for an empty view.
  Query& BindBlob(int i, std::string_view v) {
    stmt_->BindBlob(i, v);
    return *this;
  }

  Result<bool> Step() { return stmt_->Step(); }
  // Runs a statement that returns no rows.
  Status Run() {
    auto r = Step();
    return r.ok() ? Status::Ok() : r.status();
  }
  SqlConstraint violated() const { return stmt_->violated(); }

  int64_t Int(int col) const { return stmt_->Int(col); }
  bool IsNull(int col) const { return stmt_->IsNull(col); }
  // A REAL column; NaN for NULL.
  double Real(int col) const { return IsNull(col) ? std::nan("") : stmt_->Double(col); }
  std::optional<int32_t> OptInt32(int col) const {
    if (IsNull(col)) return std::nullopt;
    return static_cast<int32_t>(Int(col));
  }
  std::string Text(int col) const { return stmt_->Text(col); }
  std::string Blob(int col) const { return stmt_->Blob(col); }

 private:
  SqlStatement* stmt_;
};

// The store's connection with its statement cache.
class SqlConn {
 public:
  virtual ~SqlConn() = default;
  // A statement for `sql`, prepared once per connection.
  virtual Result<Query> Prepare(std::string_view sql) = 0;
  // Rows inserted, updated or deleted by the last statement that ran.
  virtual int64_t Changes() = 0;
  virtual SqlDialect dialect() const = 0;
};

// Dialect fragments.
// The text of a top-level string field of a JSON text column (NULL when absent).
std::string SqlJsonText(SqlDialect d, std::string_view column, std::string_view field);
// The UTC day ("2026-11-26") or month ("2026-11") of a time in ms since the epoch.
std::string SqlUtcDay(SqlDialect d, std::string_view ms);
std::string SqlUtcMonth(SqlDialect d, std::string_view ms);

}  // namespace gpupool
