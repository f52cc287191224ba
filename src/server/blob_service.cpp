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
  GP_ASSIGN_OR_RETURN(auto chunks,
                      blob::FsChunkStore::Open(options.dir + "/chunks", options.fsync));
  GP_ASSIGN_OR_RETURN(auto manifests, blob::FsObjectStore::Open(options.dir, options.fsync));
  return Open(std::move(chunks), std::move(manifests));
}

std::unique_ptr<BlobService> BlobService::Open(std::unique_ptr<blob::ChunkStore> chunks,
                                               std::unique_ptr<blob::ObjectStore> manifests) {
  return std::unique_ptr<BlobService>(new BlobService(std::move(chunks), std::move(manifests)));
}

BlobService::BlobService(std::unique_ptr<blob::ChunkStore> chunks,
                         std::unique_ptr<blob::ObjectStore> manifests)
    : chunks_(std::move(chunks)), manifests_(std::move(manifests)) {}

std::string BlobService::ManifestKey(const std::string& id) {
  return "manifests/" + id + std::string(kManifestSuffix);
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

bool BlobService::HasManifest(const std::string& id) {
  if (!IsSha256Hex(id)) return false;
  auto info = manifests_->Stat(ManifestKey(id));
  return info.ok() && info->has_value();
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
    (void)manifests_->Touch(ManifestKey(id));
    return summary;
  }
  if (admit) GP_RETURN_IF_ERROR(admit(static_cast<int64_t>(text.size())));
  GP_RETURN_IF_ERROR(manifests_->Put(ManifestKey(id), text));
  summary.created = true;
  return summary;
}

Result<std::string> BlobService::GetManifest(const std::string& id) {
  GP_RETURN_IF_ERROR(CheckBlobId(id, "manifest"));
  auto text = manifests_->Get(ManifestKey(id));
  if (!text.ok() && text.status().code() == StatusCode::kNotFound) {
    return Status::NotFound("manifest " + id + " is not stored");
  }
  return text;
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
  GP_ASSIGN_OR_RETURN(auto objects, manifests_->List("manifests/"));
  std::vector<StoredManifest> out;
  for (blob::ObjectInfo& o : objects) {
    std::string name = o.key.substr(o.key.rfind('/') + 1);
    if (!name.ends_with(kManifestSuffix)) continue;
    std::string id = name.substr(0, name.size() - kManifestSuffix.size());
    if (!IsSha256Hex(id)) continue;
    out.push_back({std::move(id), o.modified_ms, o.bytes});
  }
  return out;
}

Result<std::set<blob::ChunkId>> BlobService::SweepManifests(const std::set<std::string>& reachable,
                                                            int64_t cutoff_ms, GcStats& stats) {
  GP_ASSIGN_OR_RETURN(auto manifests, ListManifests());
  std::set<blob::ChunkId> used;
  for (const StoredManifest& m : manifests) {
    if (!reachable.count(m.id) && m.modified_ms < cutoff_ms) {
      GP_RETURN_IF_ERROR(manifests_->Remove(ManifestKey(m.id)));
      ++stats.manifests_removed;
      stats.bytes_freed += m.bytes;
      continue;
    }
    stats.bytes_kept += m.bytes;
    // A kept manifest that cannot be read would hide which chunks it
    // needs: stop rather than remove them.
    auto text = manifests_->Get(ManifestKey(m.id));
    if (!text.ok() && text.status().code() == StatusCode::kNotFound) continue;  // removed meanwhile
    GP_RETURN_IF_ERROR(text.status());
    Result<blob::Manifest> decoded = blob::DecodeManifest(*text);
    if (!decoded.ok()) {
      return Status::DataLoss("garbage collection stopped: manifest " + m.id +
                              " does not decode (" + decoded.status().message() + "); remove " +
                              ManifestKey(m.id) + " from the blob store or restore it");
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
