// BackupApi: consistent copies of the server's database while it runs
// (docs/api.md#backups, `gpupool admin backup FILE`):
//
//   POST   /v1/admin/backups             make one now: {"id", "bytes",
//                                        "schema_version", "created_ms"}
//   GET    /v1/admin/backups/{id}?offset=N&length=M
//                                        its bytes from N (at most M, at most
//                                        8 MiB per request), as
//                                        application/octet-stream
//   DELETE /v1/admin/backups/{id}        remove it from the server
//
// Admins only; each backup is audited. The copy is made with SQLite's
// online backup API from a connection of its own on a worker thread
// (store/sqlite_files.h): one consistent snapshot of everything committed,
// while the event loop goes on serving and writing. It is kept in
// DATA_DIR/backups/ (0700) until the client deletes it, or until the first
// backup request `keep_ms` after it was made, and never across a restart
// (the directory is emptied at start); one backup is made at a time (a
// second request while one runs is FailedPrecondition) and at most
// `max_kept` are kept (the oldest goes). Downloading in ranges keeps the
// server's memory bounded whatever the database's size, and lets the
// client resume.
//
// Threading: Serves/Handle on the event loop; the copy and the reads on
// the module's own worker; the bookkeeping under mu_.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "common/clock.h"
#include "server/api_module.h"
#include "server/auth.h"
#include "server/worker_pool.h"

namespace gpupool::server {

struct BackupApiOptions {
  std::string db_path;     // DATA_DIR/state.db; empty: the state is not in SQLite (PostgreSQL)
  std::string backup_dir;  // DATA_DIR/backups
  int64_t keep_ms = 3'600'000;
  size_t max_kept = 2;
  int64_t max_chunk_bytes = 8 << 20;
};

class BackupApi : public ApiModule {
 public:
  BackupApi(Auth& auth, const Clock& clock, BackupApiOptions options);
  ~BackupApi() override;

  void AddRoutes(ApiRoutes& routes) override;

 private:
  struct Made {
    int64_t bytes = 0;
    int32_t schema_version = 0;
    int64_t created_ms = 0;
  };
  void Create(const net::HttpRequest& req, const Principal& who,
              std::shared_ptr<net::Responder> respond);
  void Read(const net::HttpRequest& req, const std::string& id,
            std::shared_ptr<net::Responder> respond);
  void Remove(const std::string& id, std::shared_ptr<net::Responder> respond);
  // Drops backups past keep_ms, and the oldest beyond max_kept - 1 (to make
  // room for one more). Takes mu_.
  void Expire(size_t room_for);
  std::string PathOf(const std::string& id) const;

  Auth& auth_;
  const Clock& clock_;
  BackupApiOptions options_;
  std::mutex mu_;
  std::map<std::string, Made> made_;  // id -> backup (guarded by mu_)
  bool running_ = false;              // guarded by mu_
  // Last member: joined before the rest is destroyed.
  WorkerPool worker_{1};
};

}  // namespace gpupool::server
