#include "server/blob_service.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <utility>

#include "blob/chunk_records.h"
#include "blob/manifest.h"
#include "common/files.h"
#include "common/ids.h"

namespace gpupool::server {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kManifestSuffix = ".json";

Status CheckBlobId(const std::string& id, std::string_view what) {
  if (IsSha256Hex(id)) return Status::Ok();
  std::string shown = id.size() > 80 ? id.substr(0, 80) + "..." : id;
  return Status::InvalidArgument(std::string(what) + " id \"" + shown +
                                 "\" is not 64 lowercase hex digits");
}

std::string Short(const std::string& id) { return id.substr(0, 12); }

int64_t ModifiedMs(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1'000'000;
}

// Flushes a directory's entries (a rename in it) to disk.
Status SyncDir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status::Internal("cannot open " + dir + ": " + std::strerror(errno));
  int rc = ::fsync(fd);
  int e = errno;
  ::close(fd);
  if (rc != 0) return Status::Internal("cannot sync " + dir + ": " + std::strerror(e));
  return Status::Ok();
}

// Marks a file used now (garbage collection's grace counts from it).
void TouchFile(const std::string& path) { ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0); }

ManifestSummary Summarize(const std::string& id, const blob::Manifest& m) {
  ManifestSummary s;
  s.id = id;
  s.bytes = m.TotalBytes();
  for (const blob::ManifestEntry& e : m.entries) {
    if (e.type == blob::EntryType::kFile) ++s.files;
  }
  s.chunks = static_cast<int64_t>(m.ChunkIds().size());
  return s;
}

Status MissingChunksError(const std::vector<blob::ChunkId>& missing) {
  return Status::FailedPrecondition(std::to_string(missing.size()) + " chunk" +
                                    (missing.size() == 1 ? " is" : "s are") + " missing, e.g. " +
                                    missing.front());
}

}  // namespace

Result<std::unique_ptr<BlobService>> BlobService::Open(BlobServiceOptions options) {
  std::error_code ec;
  fs::create_directories(options.dir + "/manifests", ec);
  if (ec) return Status::Internal("cannot create " + options.dir + "/manifests: " + ec.message());
  GP_ASSIGN_OR_RETURN(auto chunks,
                      blob::FsChunkStore::Open(options.dir + "/chunks", options.fsync));
  return std::unique_ptr<BlobService>(new BlobService(std::move(options), std::move(chunks)));
}

BlobService::BlobService(BlobServiceOptions options, std::unique_ptr<blob::FsChunkStore> chunks)
    : dir_(std::move(options.dir)),
      manifest_dir_(dir_ + "/manifests"),
      fsync_(options.fsync),
      chunks_(std::move(chunks)) {}

std::string BlobService::ManifestPath(const std::string& id) const {
  return manifest_dir_ + "/" + id + std::string(kManifestSuffix);
}

// ------------------------------------------------------------------- chunks

Result<std::vector<blob::ChunkId>> BlobService::Missing(const std::vector<blob::ChunkId>& ids) {
  for (const blob::ChunkId& id : ids) GP_RETURN_IF_ERROR(CheckBlobId(id, "chunk"));
  // The sender is about to name the others in a manifest: keep them young.
  return chunks_->MissingTouchingTheRest(ids);
}

Result<int64_t> BlobService::PutChunks(std::string_view body, const Admit& admit) {
  GP_ASSIGN_OR_RETURN(auto records, blob::DecodeChunkRecords(body));
  std::map<blob::ChunkId, int64_t> sizes;
  for (size_t i = 0; i < records.size(); ++i) {
    const auto& [id, frame] = records[i];
    // A frame that fails verification is the sender's fault (400).
    auto bytes = blob::OpenChunk(id, frame);
    if (!bytes.ok()) {
      return Status::InvalidArgument(bytes.status().message())
          .WithContext(blob::ChunkRecordName(i, id));
    }
    sizes[id] = static_cast<int64_t>(bytes->size());
  }
  if (admit) {
    std::vector<blob::ChunkId> ids;
    for (const auto& [id, size] : sizes) ids.push_back(id);
    GP_ASSIGN_OR_RETURN(auto missing, chunks_->Missing(ids));
    int64_t new_bytes = 0;
    for (const blob::ChunkId& id : missing) new_bytes += sizes[id];
    if (new_bytes > 0) GP_RETURN_IF_ERROR(admit(new_bytes));
  }
  // A disk failure is ours, and keeps its code.
  GP_RETURN_IF_ERROR(chunks_->PutVerified(records));
  return static_cast<int64_t>(records.size());
}

Result<std::string> BlobService::FetchChunks(const std::vector<blob::ChunkId>& ids,
                                             size_t max_bytes) {
  for (const blob::ChunkId& id : ids) GP_RETURN_IF_ERROR(CheckBlobId(id, "chunk"));
  std::string body;
  for (const blob::ChunkId& id : ids) {
    Result<std::string> frame = chunks_->Get(id);
    if (!frame.ok()) {
      if (frame.status().code() == StatusCode::kNotFound) {
        return Status::NotFound("chunk " + id + " is not stored");
      }
      if (frame.status().code() == StatusCode::kDataLoss) {
        return Status::DataLoss("chunk " + id + " is corrupt on the server (set aside: upload it " +
                                "again): " + frame.status().message());
      }
      return frame.status();
    }
    if (!body.empty() && body.size() + blob::ChunkRecordBytes(frame->size()) > max_bytes) break;
    blob::AppendChunkRecord(body, id, *frame);
  }
  return body;
}

// ---------------------------------------------------------------- manifests

bool BlobService::HasManifest(const std::string& id) const {
  if (!IsSha256Hex(id)) return false;
  return ::access(ManifestPath(id).c_str(), F_OK) == 0;
}

Result<ManifestSummary> BlobService::PutManifest(const std::string& id, std::string_view text,
                                                 const Admit& admit) {
  GP_RETURN_IF_ERROR(CheckBlobId(id, "manifest"));
  if (std::string actual = blob::ManifestId(text); actual != id) {
    return Status::InvalidArgument("the manifest's text hashes to " + actual + ", not " + id);
  }
  GP_ASSIGN_OR_RETURN(blob::Manifest m, blob::DecodeManifest(text));
  ManifestSummary summary = Summarize(id, m);
  // Collection waits until the file is written; the check and the write
  // then see the same chunks.
  std::shared_lock gc_lock(gc_mu_);
  GP_ASSIGN_OR_RETURN(auto missing, chunks_->Missing(m.ChunkIds()));
  if (!missing.empty()) return MissingChunksError(missing);
  if (HasManifest(id)) {
    TouchFile(ManifestPath(id));
    return summary;
  }
  if (admit) GP_RETURN_IF_ERROR(admit(static_cast<int64_t>(text.size())));
  GP_RETURN_IF_ERROR(WriteManifest(id, text));
  summary.created = true;
  return summary;
}

Status BlobService::WriteManifest(const std::string& id, std::string_view text) {
  std::lock_guard lock(write_mu_);
  WriteOptions opts;
  opts.fsync = fsync_;
  GP_RETURN_IF_ERROR(WriteFileAtomic(ManifestPath(id), std::string(text), opts));
  return fsync_ ? SyncDir(manifest_dir_) : Status::Ok();
}

Result<std::string> BlobService::GetManifest(const std::string& id) {
  GP_RETURN_IF_ERROR(CheckBlobId(id, "manifest"));
  if (!HasManifest(id)) return Status::NotFound("manifest " + id + " is not stored");
  return ReadFile(ManifestPath(id));
}

Result<ManifestSummary> BlobService::DescribeManifest(const std::string& id) {
  GP_ASSIGN_OR_RETURN(std::string text, GetManifest(id));
  Result<blob::Manifest> m = blob::DecodeManifest(text);
  if (!m.ok()) {
    return Status::DataLoss("stored manifest " + Short(id) +
                            " does not decode: " + m.status().message());
  }
  return Summarize(id, *m);
}

// ----------------------------------------------------- garbage collection

Result<std::vector<BlobService::StoredManifest>> BlobService::ListManifests() {
  std::vector<StoredManifest> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(manifest_dir_, ec)) {
    std::string name = entry.path().filename().string();
    if (!name.ends_with(kManifestSuffix)) continue;
    std::string id = name.substr(0, name.size() - kManifestSuffix.size());
    if (!IsSha256Hex(id)) continue;
    struct stat st;
    if (::stat(entry.path().c_str(), &st) != 0) continue;  // removed meanwhile
    out.push_back({std::move(id), ModifiedMs(st), static_cast<int64_t>(st.st_size)});
  }
  if (ec) return Status::Internal("cannot list " + manifest_dir_ + ": " + ec.message());
  return out;
}

Result<std::set<blob::ChunkId>> BlobService::SweepManifests(const std::set<std::string>& reachable,
                                                            int64_t cutoff_ms, GcStats& stats) {
  GP_ASSIGN_OR_RETURN(auto manifests, ListManifests());
  std::set<blob::ChunkId> used;
  for (const StoredManifest& m : manifests) {
    if (!reachable.count(m.id) && m.modified_ms < cutoff_ms) {
      if (::unlink(ManifestPath(m.id).c_str()) != 0 && errno != ENOENT) {
        return Status::Internal("cannot remove manifest " + m.id + ": " + std::strerror(errno));
      }
      ++stats.manifests_removed;
      stats.bytes_freed += m.bytes;
      continue;
    }
    stats.bytes_kept += m.bytes;
    // A kept manifest that cannot be read would hide which chunks it
    // needs: stop rather than remove them.
    GP_ASSIGN_OR_RETURN(std::string text, ReadFile(ManifestPath(m.id)));
    Result<blob::Manifest> decoded = blob::DecodeManifest(text);
    if (!decoded.ok()) {
      return Status::DataLoss("garbage collection stopped: manifest " + m.id +
                              " does not decode (" + decoded.status().message() + "); remove " +
                              ManifestPath(m.id) + " or restore it");
    }
    for (blob::ChunkId& id : decoded->ChunkIds()) used.insert(std::move(id));
  }
  return used;
}

Result<GcStats> BlobService::CollectGarbage(const std::set<std::string>& reachable, int64_t now_ms,
                                            int64_t grace_ms) {
  std::unique_lock gc_lock(gc_mu_);
  GcStats stats;
  const int64_t cutoff_ms = now_ms - grace_ms;
  GP_ASSIGN_OR_RETURN(auto used, SweepManifests(reachable, cutoff_ms, stats));
  GP_ASSIGN_OR_RETURN(auto stored, chunks_->Inventory());
  for (const blob::StoredChunk& c : stored) {
    if (used.count(c.id) || c.modified_ms >= cutoff_ms) {
      ++stats.chunks_kept;
      stats.bytes_kept += c.bytes;
      continue;
    }
    GP_RETURN_IF_ERROR(chunks_->Remove(c.id));
    ++stats.chunks_removed;
    stats.bytes_freed += c.bytes;
  }
  return stats;
}

}  // namespace gpupool::server
