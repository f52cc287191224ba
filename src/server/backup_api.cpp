#include "server/backup_api.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "common/ids.h"
#include "common/log.h"
#include "common/units.h"
#include "server/http_errors.h"
#include "store/sqlite_files.h"

namespace gpupool::server {

using nlohmann::json;

namespace fs = std::filesystem;

namespace {

bool IsBackupId(std::string_view s) {
  return s.size() == 24 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

}  // namespace

BackupApi::BackupApi(Auth& auth, const Clock& clock, BackupApiOptions options)
    : auth_(auth), clock_(clock), options_(std::move(options)) {
  // Backups of an earlier run were never handed over: start clean.
  std::error_code ec;
  fs::remove_all(options_.backup_dir, ec);
}

BackupApi::~BackupApi() = default;

std::string BackupApi::PathOf(const std::string& id) const {
  return options_.backup_dir + "/" + id + ".db";
}

void BackupApi::AddRoutes(ApiRoutes& t) {
  t.Add("POST", "/v1/admin/backups", Access::kAuthorizedFirst, Action::kAdminister,
        [this](net::HttpRequest& req, const Principal& who, const PathParams&, Respond respond) {
          Expire(0);
          Create(req, who, respond);
        });
  for (const char* method : {"GET", "DELETE"}) {
    t.Add(
        method, "/v1/admin/backups/{id}", Access::kAuthorizedFirst, Action::kAdminister,
        [this](net::HttpRequest& req, const Principal&, const PathParams& params, Respond respond) {
          Expire(0);
          const std::string& id = params.find("id")->second;
          if (!IsBackupId(id)) {
            return (*respond)(ErrorResponse(
                Status::NotFound("no such endpoint: " + req.method + " " + req.path)));
          }
          if (req.method == "GET") return Read(req, id, respond);
          Remove(id, respond);
        });
  }
}

void BackupApi::Expire(size_t room_for) {
  const int64_t now = clock_.NowMs();
  std::lock_guard lock(mu_);
  for (auto it = made_.begin(); it != made_.end();) {
    if (it->second.created_ms + options_.keep_ms < now) {
      std::remove(PathOf(it->first).c_str());
      it = made_.erase(it);
    } else {
      ++it;
    }
  }
  while (!made_.empty() && made_.size() + room_for > options_.max_kept) {
    auto oldest = made_.begin();
    for (auto it = made_.begin(); it != made_.end(); ++it) {
      if (it->second.created_ms < oldest->second.created_ms) oldest = it;
    }
    std::remove(PathOf(oldest->first).c_str());
    made_.erase(oldest);
  }
}

void BackupApi::Create(const net::HttpRequest& req, const Principal& who,
                       std::shared_ptr<net::Responder> respond) {
  if (options_.db_path.empty()) {
    return (*respond)(ErrorResponse(Status::FailedPrecondition(
        "this pool's state is in PostgreSQL: back it up with PostgreSQL's own tools (pg_dump, or "
        "your provider's backups); see docs/operator-guide.md#postgresql")));
  }
  {
    std::lock_guard lock(mu_);
    if (running_) {
      return (*respond)(ErrorResponse(
          Status::FailedPrecondition("a backup is being made; try again when it is done")));
    }
    running_ = true;
  }
  Expire(1);
  std::error_code ec;
  fs::create_directories(options_.backup_dir, ec);
  ::chmod(options_.backup_dir.c_str(), 0700);
  const std::string id = RandomHex(12);
  const int64_t started = clock_.NowMs();
  std::string actor = who.subject, peer = req.peer;
  worker_.Submit([this, id, started, actor, peer, respond] {
    auto made = BackupSqliteFile(options_.db_path, PathOf(id));
    {
      std::lock_guard lock(mu_);
      running_ = false;
      if (made.ok()) made_[id] = {made->bytes, made->schema_version, started};
    }
    if (!made.ok()) {
      GP_LOG(kError) << "backup failed: " << made.status().ToString();
      auth_.Audit(actor, "backup", "state.db", made.status().message(), peer, false);
      return (*respond)(ErrorResponse(made.status().WithContext("making the backup")));
    }
    ::chmod(PathOf(id).c_str(), 0600);
    GP_LOG(kInfo) << "backup " << id << ": " << FormatBytes(made->bytes) << " in "
                  << clock_.NowMs() - started << " ms";
    auth_.Audit(actor, "backup", "state.db", "backup " + id + ", " + FormatBytes(made->bytes),
                peer);
    (*respond)(JsonResponse(201, {{"id", id},
                                  {"bytes", made->bytes},
                                  {"schema_version", made->schema_version},
                                  {"created_ms", started}}));
  });
}

void BackupApi::Read(const net::HttpRequest& req, const std::string& id,
                     std::shared_ptr<net::Responder> respond) {
  auto offset = QueryInt(req, "offset", 0, 0, INT64_MAX);
  auto length = QueryInt(req, "length", options_.max_chunk_bytes, 1, options_.max_chunk_bytes);
  for (const Status& s : {offset.status(), length.status()}) {
    if (!s.ok()) return (*respond)(ErrorResponse(s));
  }
  int64_t size = 0;
  {
    std::lock_guard lock(mu_);
    auto it = made_.find(id);
    if (it == made_.end()) {
      return (*respond)(ErrorResponse(
          Status::NotFound("backup " + id + " does not exist (backups are kept for an hour)")));
    }
    size = it->second.bytes;
  }
  if (*offset > size) {
    return (*respond)(ErrorResponse(Status::InvalidArgument(
        "query parameter offset: past the backup's end (" + std::to_string(size) + " bytes)")));
  }
  int64_t n = std::min(*length, size - *offset);
  worker_.Submit([this, id, from = *offset, n, size, respond] {
    std::FILE* f = std::fopen(PathOf(id).c_str(), "rb");
    if (f == nullptr) {
      return (*respond)(ErrorResponse(Status::NotFound("backup " + id + " is gone")));
    }
    std::string bytes(static_cast<size_t>(n), '\0');
    bool ok = std::fseek(f, static_cast<long>(from), SEEK_SET) == 0 &&
              std::fread(bytes.data(), 1, bytes.size(), f) == bytes.size();
    std::fclose(f);
    if (!ok) {
      return (*respond)(ErrorResponse(Status::Internal("cannot read backup " + id)));
    }
    net::HttpResponse r;
    r.content_type = "application/octet-stream";
    r.headers["x-backup-size"] = std::to_string(size);
    r.body = std::move(bytes);
    (*respond)(std::move(r));
  });
}

void BackupApi::Remove(const std::string& id, std::shared_ptr<net::Responder> respond) {
  bool found = false;
  {
    std::lock_guard lock(mu_);
    found = made_.erase(id) > 0;
    if (found) std::remove(PathOf(id).c_str());
  }
  if (!found) {
    return (*respond)(ErrorResponse(Status::NotFound("backup " + id + " does not exist")));
  }
  (*respond)(JsonResponse(200, {{"deleted", id}}));
}

}  // namespace gpupool::server
