#include "store/sqlite_files.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

#include "common/files.h"

namespace gpupool {
namespace {

namespace fs = std::filesystem;

struct Closer {
  void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
};
using Db = std::unique_ptr<sqlite3, Closer>;

bool IsCorruption(int rc) {
  int primary = rc & 0xff;
  return primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB;
}

Status Error(sqlite3* db, int rc, const std::string& what) {
  std::string msg = what + ": " + (db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
  if (IsCorruption(rc)) return Status::DataLoss(msg);
  int primary = rc & 0xff;
  if (primary == SQLITE_BUSY || primary == SQLITE_LOCKED) return Status::Unavailable(msg);
  if (primary == SQLITE_CANTOPEN) return Status::NotFound(msg);
  return Status::Internal(msg);
}

Result<Db> OpenDb(const std::string& path, int flags) {
  sqlite3* raw = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &raw, flags | SQLITE_OPEN_NOMUTEX, nullptr);
  Db db(raw);
  if (rc != SQLITE_OK) return Error(raw, rc, "cannot open " + path);
  sqlite3_extended_result_codes(raw, 1);
  sqlite3_busy_timeout(raw, 5000);
  return db;
}

// quick_check and user_version of an open database.
Result<int32_t> QuickCheck(sqlite3* db, const std::string& path) {
  sqlite3_stmt* raw = nullptr;
  int rc = sqlite3_prepare_v2(db, "PRAGMA quick_check(10)", -1, &raw, nullptr);
  std::unique_ptr<sqlite3_stmt, int (*)(sqlite3_stmt*)> stmt(raw, sqlite3_finalize);
  if (rc != SQLITE_OK) return Error(db, rc, path);
  std::vector<std::string> problems;
  while ((rc = sqlite3_step(raw)) == SQLITE_ROW) {
    const auto* t = reinterpret_cast<const char*>(sqlite3_column_text(raw, 0));
    std::string line = t != nullptr ? t : "";
    if (line != "ok") problems.push_back(line);
  }
  if (rc != SQLITE_DONE) return Error(db, rc, path);
  if (!problems.empty()) {
    std::string msg = path + " is damaged (PRAGMA quick_check):";
    for (const std::string& p : problems) msg += "\n  " + p;
    return Status::DataLoss(msg);
  }
  stmt.reset();
  rc = sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &raw, nullptr);
  stmt.reset(raw);
  if (rc != SQLITE_OK) return Error(db, rc, path);
  if (sqlite3_step(raw) != SQLITE_ROW) return Error(db, sqlite3_errcode(db), path);
  return static_cast<int32_t>(sqlite3_column_int(raw, 0));
}

std::string ParentOf(const std::string& path) {
  std::string parent = fs::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

void RemoveQuietly(const std::string& path) {
  std::error_code ec;
  fs::remove(path, ec);
}

}  // namespace

Result<SqliteFileInfo> CheckSqliteFile(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return Status::NotFound(path + ": no such file");
  // Read-only and without creating a -wal: a backup file is checked as it is.
  GP_ASSIGN_OR_RETURN(Db db, OpenDb(path, SQLITE_OPEN_READONLY));
  SqliteFileInfo info;
  GP_ASSIGN_OR_RETURN(info.schema_version, QuickCheck(db.get(), path));
  info.bytes = static_cast<int64_t>(fs::file_size(path, ec));
  return info;
}

Result<SqliteFileInfo> BackupSqliteConnection(sqlite3* source, const std::string& dest) {
  const std::string tmp = dest + ".tmp";
  RemoveQuietly(tmp);
  {
    GP_ASSIGN_OR_RETURN(Db out, OpenDb(tmp, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE));
    sqlite3_backup* b = sqlite3_backup_init(out.get(), "main", source, "main");
    if (b == nullptr) {
      Status s = Error(out.get(), sqlite3_errcode(out.get()), "backup to " + tmp);
      out.reset();
      RemoveQuietly(tmp);
      return s;
    }
    // All pages in one step: one read transaction on the source, so the
    // copy is one snapshot whatever the writer does meanwhile.
    int rc = sqlite3_backup_step(b, -1);
    sqlite3_backup_finish(b);
    if (rc != SQLITE_DONE) {
      Status s = Error(out.get(), rc, "backup to " + tmp);
      out.reset();
      RemoveQuietly(tmp);
      return s;
    }
    // A self-contained file: no WAL beside it.
    char* err = nullptr;
    rc = sqlite3_exec(out.get(), "PRAGMA journal_mode = DELETE", nullptr, nullptr, &err);
    sqlite3_free(err);
    if (rc != SQLITE_OK) {
      Status s = Error(out.get(), rc, "backup to " + tmp);
      out.reset();
      RemoveQuietly(tmp);
      return s;
    }
  }
  auto info = CheckSqliteFile(tmp);
  Status st = info.ok() ? SyncPath(tmp, false) : info.status();
  if (st.ok() && std::rename(tmp.c_str(), dest.c_str()) != 0) {
    st = Status::Internal("cannot rename " + tmp + " to " + dest + ": " + std::strerror(errno));
  }
  if (!st.ok()) {
    RemoveQuietly(tmp);
    return st;
  }
  GP_RETURN_IF_ERROR(SyncPath(ParentOf(dest), true));
  return info;
}

Result<SqliteFileInfo> BackupSqliteFile(const std::string& source, const std::string& dest) {
  std::error_code ec;
  if (!fs::is_regular_file(source, ec)) return Status::NotFound(source + ": no such file");
  GP_ASSIGN_OR_RETURN(Db in, OpenDb(source, SQLITE_OPEN_READONLY));
  return BackupSqliteConnection(in.get(), dest);
}

Result<bool> SqliteFileInUse(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return false;
    return Status::Internal("cannot open " + path + ": " + std::strerror(errno));
  }
  // SQLite's lock bytes start at 1 GiB: the pending byte, the reserved
  // byte, then the shared range. Any lock there is another connection's.
  struct flock lock {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;
  lock.l_start = 0x40000000;
  lock.l_len = 512;
  int rc = ::fcntl(fd, F_GETLK, &lock);
  int e = errno;
  ::close(fd);
  if (rc != 0)
    return Status::Internal("cannot test the locks of " + path + ": " + std::strerror(e));
  return lock.l_type != F_UNLCK;
}

Result<RestoreResult> RestoreSqliteFile(const std::string& backup, const std::string& db,
                                        int32_t max_version, int64_t now_ms) {
  auto checked = CheckSqliteFile(backup);
  if (!checked.ok()) {
    return Status::FailedPrecondition("the backup cannot be restored: " +
                                      checked.status().message());
  }
  if (checked->schema_version > max_version) {
    return Status::FailedPrecondition(
        backup + " has schema version " + std::to_string(checked->schema_version) +
        ", newer than this gpupool supports (" + std::to_string(max_version) +
        "): restore it with the gpupool that made it");
  }
  GP_ASSIGN_OR_RETURN(bool busy, SqliteFileInUse(db));
  if (busy) {
    return Status::FailedPrecondition(db +
                                      " is open in another process (a running server?): "
                                      "stop it before restoring");
  }
  RestoreResult out;
  std::error_code ec;
  if (fs::exists(db, ec)) {
    out.set_aside = db + ".before-restore-" + std::to_string(now_ms);
    for (const char* suffix : {"", "-wal", "-shm"}) {
      std::string from = db + suffix;
      if (!fs::exists(from, ec)) continue;
      if (std::rename(from.c_str(), (out.set_aside + suffix).c_str()) != 0) {
        return Status::Internal("cannot move " + from + " aside: " + std::strerror(errno));
      }
    }
  }
  auto restored = BackupSqliteFile(backup, db);
  if (!restored.ok()) {
    return restored.status().WithContext("restoring " + backup + " (the old database is in " +
                                         (out.set_aside.empty() ? "no file" : out.set_aside) + ")");
  }
  out.restored = *restored;
  return out;
}

}  // namespace gpupool
