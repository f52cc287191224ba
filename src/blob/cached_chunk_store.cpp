#include "blob/cached_chunk_store.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <tuple>

namespace gpupool::blob {

namespace {

// Each id once, in first-seen order.
std::vector<ChunkId> Unique(const std::vector<ChunkId>& ids) {
  std::unordered_set<ChunkId> seen;
  std::vector<ChunkId> out;
  for (const ChunkId& id : ids) {
    if (seen.insert(id).second) out.push_back(id);
  }
  return out;
}

}  // namespace

Result<std::unique_ptr<CachedChunkStore>> CachedChunkStore::Open(CachedChunkStoreOptions options,
                                                                 ChunkStore& remote,
                                                                 FetchManyFn fetch_many) {
  if (options.limit_bytes < 1)
    return Status::InvalidArgument("cache limit must be at least 1 byte");
  if (options.low_water_percent < 0 || options.low_water_percent > 100) {
    return Status::InvalidArgument("cache low water must be from 0 to 100 percent");
  }
  GP_ASSIGN_OR_RETURN(std::unique_ptr<FsChunkStore> cache,
                      FsChunkStore::Open(options.dir, options.fsync));
  GP_ASSIGN_OR_RETURN(std::vector<StoredChunk> held, cache->Inventory());
  int64_t used = 0;
  for (const StoredChunk& c : held) used += c.bytes;
  auto store = std::unique_ptr<CachedChunkStore>(new CachedChunkStore(
      std::move(options), std::move(cache), remote, std::move(fetch_many), used));
  GP_RETURN_IF_ERROR(store->Trim());
  return store;
}

CachedChunkStore::CachedChunkStore(CachedChunkStoreOptions options,
                                   std::unique_ptr<FsChunkStore> cache, ChunkStore& remote,
                                   FetchManyFn fetch_many, int64_t used)
    : options_(std::move(options)),
      cache_(std::move(cache)),
      remote_(remote),
      fetch_many_(std::move(fetch_many)),
      used_(used),
      evict_above_(options_.limit_bytes) {}

Result<std::vector<ChunkId>> CachedChunkStore::Missing(const std::vector<ChunkId>& ids) {
  std::lock_guard lock(mu_);
  return remote_.Missing(ids);
}

Status CachedChunkStore::Put(const ChunkId& id, std::string_view compressed) {
  std::lock_guard lock(mu_);
  GP_RETURN_IF_ERROR(remote_.Put(id, compressed));
  (void)Keep(id, std::string(compressed));
  return Status::Ok();
}

Status CachedChunkStore::PutMany(const std::vector<std::pair<ChunkId, std::string>>& frames) {
  std::lock_guard lock(mu_);
  GP_RETURN_IF_ERROR(remote_.PutMany(frames));
  for (const auto& [id, frame] : frames) (void)Keep(id, frame);
  return Status::Ok();
}

Result<std::string> CachedChunkStore::GetLocal(const ChunkId& id) {
  auto frame = cache_->Get(id);
  if (frame.ok()) {
    ++stats_.hits;
    // A failed touch only makes the chunk look older than it is.
    (void)cache_->Touch(id);
    return frame;
  }
  if (frame.status().code() == StatusCode::kDataLoss) {
    // FsChunkStore set the bad copy aside as PATH.corrupt: drop it for good.
    std::string aside = cache_->PathOf(id) + ".corrupt";
    struct stat st;
    if (::stat(aside.c_str(), &st) == 0) used_ -= static_cast<int64_t>(st.st_size);
    ::unlink(aside.c_str());
    ++stats_.corrupt_dropped;
  }
  return frame.status();
}

Result<std::string> CachedChunkStore::Get(const ChunkId& id) {
  std::lock_guard lock(mu_);
  auto local = GetLocal(id);
  if (local.ok()) return local;
  if (local.status().code() != StatusCode::kNotFound &&
      local.status().code() != StatusCode::kDataLoss) {
    return local.status();  // a malformed id
  }
  ++stats_.misses;
  GP_ASSIGN_OR_RETURN(std::string frame, remote_.Get(id));
  // Verified once: by the cache's Put, or here when it was not kept.
  if (!Keep(id, frame).verified) GP_RETURN_IF_ERROR(OpenChunk(id, frame).status());
  ++stats_.fetched_chunks;
  stats_.fetched_bytes += static_cast<int64_t>(frame.size());
  return frame;
}

Status CachedChunkStore::Remove(const ChunkId& id) {
  std::lock_guard lock(mu_);
  if (!IsChunkId(id)) return cache_->Remove(id);  // InvalidArgument
  struct stat st;
  if (::stat(cache_->PathOf(id).c_str(), &st) == 0) {
    GP_RETURN_IF_ERROR(cache_->Remove(id));
    used_ -= static_cast<int64_t>(st.st_size);
  }
  return remote_.Remove(id);
}

Result<std::vector<ChunkId>> CachedChunkStore::List() {
  std::lock_guard lock(mu_);
  return remote_.List();
}

CachedChunkStore::Kept CachedChunkStore::Keep(const ChunkId& id, const std::string& frame) {
  auto record_error = [this](const Status& s) {
    ++stats_.cache_errors;
    stats_.last_cache_error = s;
  };
  Kept kept;
  auto absent = cache_->Missing({id});
  if (!absent.ok()) {
    record_error(absent.status());
    return kept;
  }
  if (absent->empty()) {  // cached meanwhile
    (void)cache_->Touch(id);
    return kept;
  }
  if (Status s = cache_->Put(id, frame); !s.ok()) {
    if (s.code() != StatusCode::kDataLoss) record_error(s);
    return kept;
  }
  kept.verified = true;  // FsChunkStore::Put opens every frame before storing it
  used_ += static_cast<int64_t>(frame.size());
  if (used_ <= evict_above_) return kept;
  if (Status s = Evict(); !s.ok()) record_error(s);
  kept.full = used_ > options_.limit_bytes;
  return kept;
}

Status CachedChunkStore::Evict() {
  GP_ASSIGN_OR_RETURN(std::vector<StoredChunk> held, cache_->Inventory());
  // Least recently used first; the id breaks ties so the order is stable.
  std::sort(held.begin(), held.end(), [](const StoredChunk& a, const StoredChunk& b) {
    return std::tie(a.modified_ms, a.id) < std::tie(b.modified_ms, b.id);
  });
  int64_t used = 0;
  for (const StoredChunk& c : held) used += c.bytes;
  const int64_t target = options_.limit_bytes / 100 * options_.low_water_percent +
                         options_.limit_bytes % 100 * options_.low_water_percent / 100;
  Status status;
  for (const StoredChunk& c : held) {
    if (used <= target) break;
    if (pinned_.count(c.id)) continue;
    if (Status s = cache_->Remove(c.id); !s.ok()) {
      status = s;
      continue;
    }
    used -= c.bytes;
    ++stats_.evicted_chunks;
    stats_.evicted_bytes += c.bytes;
  }
  used_ = used;
  // Pins may keep it above the low water: try again only after another
  // tenth of the limit arrived, not at every new chunk.
  evict_above_ = std::max(options_.limit_bytes, used_ + options_.limit_bytes / 10);
  return status;
}

Status CachedChunkStore::Prefetch(const std::vector<ChunkId>& ids) {
  std::lock_guard lock(mu_);
  std::vector<ChunkId> wanted = Unique(ids);
  pinned_ = std::unordered_set<ChunkId>(wanted.begin(), wanted.end());
  evict_above_ = options_.limit_bytes;
  GP_ASSIGN_OR_RETURN(std::vector<ChunkId> absent, cache_->Missing(wanted));
  // The ones already here are about to be used: newest in the LRU order.
  std::unordered_set<ChunkId> absent_set(absent.begin(), absent.end());
  for (const ChunkId& id : wanted) {
    if (!absent_set.count(id)) (void)cache_->Touch(id);
  }
  bool full = false;
  const Status kFull = Status::ResourceExhausted("the cache is full of pinned chunks");
  ChunkSink keep = [&](const ChunkId& id, std::string frame) {
    Kept kept = Keep(id, frame);
    if (!kept.verified) GP_RETURN_IF_ERROR(OpenChunk(id, frame).status());
    ++stats_.fetched_chunks;
    stats_.fetched_bytes += static_cast<int64_t>(frame.size());
    full = kept.full;
    return full ? kFull : Status::Ok();
  };
  if (absent.empty()) return Status::Ok();
  if (fetch_many_) {
    Status s = fetch_many_(absent, keep);
    return full ? Status::Ok() : s;
  }
  for (const ChunkId& id : absent) {
    GP_ASSIGN_OR_RETURN(std::string frame, remote_.Get(id));
    Status s = keep(id, std::move(frame));
    if (full) return Status::Ok();
    GP_RETURN_IF_ERROR(s);
  }
  return Status::Ok();
}

Status CachedChunkStore::ReleasePins() {
  std::lock_guard lock(mu_);
  pinned_.clear();
  evict_above_ = options_.limit_bytes;
  return used_ > options_.limit_bytes ? Evict() : Status::Ok();
}

Status CachedChunkStore::Trim() {
  std::lock_guard lock(mu_);
  return used_ > options_.limit_bytes ? Evict() : Status::Ok();
}

CacheStats CachedChunkStore::stats() const {
  std::lock_guard lock(mu_);
  CacheStats s = stats_;
  s.cached_bytes = used_;
  return s;
}

}  // namespace gpupool::blob
