// Test helpers of the SQLite store's own tests (sqlite_store_test.cpp,
// sql_logs_test.cpp, sqlite_migration_test.cpp): a temporary directory
// for a database, a raw connection to look behind the store's back (or to
// write an old version's rows), and opening a store that must open.
#pragma once

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "store/sqlite_store.h"

namespace gpupool::sqlite_testing {

// A temporary directory removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = ::testing::TempDir() + "gpupool-sqlite-XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) std::abort();
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string db() const { return path_ + "/state.db"; }

 private:
  std::string path_;
};

// A raw connection; every failure is a test failure naming the SQL.
class RawDb {
 public:
  explicit RawDb(const std::string& path) {
    if (sqlite3_open(path.c_str(), &db_) != SQLITE_OK) ADD_FAILURE() << sqlite3_errmsg(db_);
    sqlite3_busy_timeout(db_, 5000);
  }
  ~RawDb() { sqlite3_close(db_); }
  RawDb(const RawDb&) = delete;
  RawDb& operator=(const RawDb&) = delete;

  void Exec(const std::string& sql) {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
      ADD_FAILURE() << (err ? err : "?") << " in:\n" << sql.substr(0, 400);
    }
    sqlite3_free(err);
  }
  // The first column of the first row ("" without one).
  std::string Scalar(const std::string& sql) {
    auto rows = Rows(sql);
    return rows.empty() || rows[0].empty() ? "" : rows[0][0];
  }
  // Every row as text; SQL NULL as "NULL".
  std::vector<std::vector<std::string>> Rows(const std::string& sql) {
    std::vector<std::vector<std::string>> out;
    sqlite3_stmt* s = nullptr;
    if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &s, nullptr) != SQLITE_OK) {
      ADD_FAILURE() << sql << ": " << sqlite3_errmsg(db_);
      return out;
    }
    while (sqlite3_step(s) == SQLITE_ROW) {
      std::vector<std::string> row;
      for (int i = 0; i < sqlite3_column_count(s); ++i) {
        const unsigned char* t = sqlite3_column_text(s, i);
        row.push_back(t ? reinterpret_cast<const char*>(t) : "NULL");
      }
      out.push_back(std::move(row));
    }
    sqlite3_finalize(s);
    return out;
  }
  sqlite3* get() { return db_; }

 private:
  sqlite3* db_ = nullptr;
};

inline std::unique_ptr<SqliteStore> MustOpen(const std::string& path,
                                             const SqliteOptions& options = {}) {
  auto s = SqliteStore::Open(path, options);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(s).value() : nullptr;
}

}  // namespace gpupool::sqlite_testing
