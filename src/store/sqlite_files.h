// Whole-file operations on a SQLite database such as the server's
// DATA_DIR/state.db: an integrity check, consistent copies made while the
// server runs (SQLite's online backup API), and putting a copy back.
//
// Contract:
// - CheckSqliteFile opens the file read-only and runs PRAGMA quick_check
//   (it reads every page: O(size)). Ok with the file's user_version (its
//   schema version); DataLoss listing what SQLite found (at most 10 lines)
//   for a damaged file or one that is not a database; NotFound when there
//   is no file.
// - BackupSqliteFile copies `source` from its own read-only connection in
//   one read transaction, so the copy is one consistent snapshot of
//   committed data while a writer goes on (WAL mode). The copy is written
//   to `dest`.tmp, checked (CheckSqliteFile), flushed to disk and renamed
//   to `dest`: `dest` is never half written. BackupSqliteConnection does
//   the same from a connection the caller holds (no other thread may use
//   it meanwhile).
// - SqliteFileInUse says whether another process holds the file open
//   through SQLite (a server running on it): SQLite connections in WAL mode
//   hold a shared POSIX lock on the file as long as they are open. Locks of
//   the calling process are not seen.
// - RestoreSqliteFile puts `backup` in place of `db` for a stopped server:
//   it refuses (FailedPrecondition) when `db` is in use or `backup` is not
//   a sound database of a schema version at most `max_version`; otherwise it
//   moves `db` and its -wal and -shm files aside to
//   `db`.before-restore-<ms> (kept; the caller says where) and copies
//   `backup` to `db` as above. A stale -wal of the old database is never
//   left beside the restored one.
//
// Threading: blocking file I/O on the caller's thread; no shared state.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

struct sqlite3;

namespace gpupool {

struct SqliteFileInfo {
  int64_t bytes = 0;           // the file's size
  int32_t schema_version = 0;  // PRAGMA user_version
};

Result<SqliteFileInfo> CheckSqliteFile(const std::string& path);
Result<SqliteFileInfo> BackupSqliteFile(const std::string& source, const std::string& dest);
Result<SqliteFileInfo> BackupSqliteConnection(sqlite3* source, const std::string& dest);
Result<bool> SqliteFileInUse(const std::string& path);

struct RestoreResult {
  SqliteFileInfo restored;
  std::string set_aside;  // where the old database went ("" when there was none)
};
Result<RestoreResult> RestoreSqliteFile(const std::string& backup, const std::string& db,
                                        int32_t max_version, int64_t now_ms);

}  // namespace gpupool
