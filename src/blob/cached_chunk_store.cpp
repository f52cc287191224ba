#include "blob/cached_chunk_store.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include <tuple>
#include "blob/read_ahead.h"

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
  (void)Keep(id, compressed, /*verified=*/false);
  return Status::Ok();
}

Status CachedChunkStore::PutMany(const std::vector<std::pair<ChunkId, std::string>>& frames) {
  std::lock_guard lock(mu_);
  GP_RETURN_IF_ERROR(remote_.PutMany(frames));
  for (const auto& [id, frame] : frames) (void)Keep(id, frame, /*verified=*/false);
  return Status::Ok();
}

Result<VerifiedChunk> CachedChunkStore::ReadCached(const ChunkId& id, CacheStats& counts) {
  auto c = cache_->Read(id);
  if (c.ok()) {
    ++counts.hits;
    return c;
  }
  if (c.status().code() == StatusCode::kDataLoss) {
    // FsChunkStore set the bad copy aside as PATH.corrupt: drop it for good.
    ++counts.corrupt_dropped;
    std::string aside = cache_->PathOf(id) + ".corrupt";
    struct stat st;
    if (::stat(aside.c_str(), &st) == 0) counts.cached_bytes -= static_cast<int64_t>(st.st_size);
    ::unlink(aside.c_str());
  }
  if (c.status().code() == StatusCode::kNotFound || c.status().code() == StatusCode::kDataLoss) {
    ++counts.misses;
  }
  return c.status();
}

Result<VerifiedChunk> CachedChunkStore::FetchOne(const ChunkId& id) {
  GP_ASSIGN_OR_RETURN(std::string frame, remote_.Get(id));
  GP_ASSIGN_OR_RETURN(std::string bytes, OpenChunk(id, frame));
  return VerifiedChunk{id, std::move(frame), std::move(bytes)};
}

void CachedChunkStore::Count(const CacheStats& counts) {
  stats_.hits += counts.hits;
  stats_.misses += counts.misses;
  stats_.corrupt_dropped += counts.corrupt_dropped;
  used_ += counts.cached_bytes;
}

Result<std::string> CachedChunkStore::Get(const ChunkId& id) {
  std::lock_guard lock(mu_);
  CacheStats counts;
  auto c = ReadCached(id, counts);
  Count(counts);
  if (c.ok()) {
    // A failed touch only makes the chunk look older than it is.
    (void)cache_->Touch(id);
    return std::move(c->frame);
  }
  if (counts.misses == 0) return c.status();  // a malformed id, an unreadable copy
  GP_ASSIGN_OR_RETURN(VerifiedChunk fetched, FetchOne(id));
  if (options_.keep_fetched) (void)Keep(id, fetched.frame, /*verified=*/true);
  ++stats_.fetched_chunks;
  stats_.fetched_bytes += static_cast<int64_t>(fetched.frame.size());
  return std::move(fetched.frame);
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

bool CachedChunkStore::Keep(const ChunkId& id, std::string_view frame, bool verified) {
  if (!verified && !OpenChunk(id, frame).ok()) return false;
  auto stored = cache_->KeepVerified(id, frame);
  if (!stored.ok()) {
    ++stats_.cache_errors;
    stats_.last_cache_error = stored.status();
    return true;
  }
  if (!*stored) return true;  // cached meanwhile (now touched)
  used_ += static_cast<int64_t>(frame.size());
  if (used_ > evict_above_) {
    if (Status s = Evict(); !s.ok()) {
      ++stats_.cache_errors;
      stats_.last_cache_error = s;
    }
  }
  return true;
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

Status CachedChunkStore::FetchAndKeep(const std::vector<ChunkId>& ids, const ChunkSink& sink) {
  ChunkSink keep = [&](VerifiedChunk c) {
    if (options_.keep_fetched) (void)Keep(c.id, c.frame, /*verified=*/true);
    ++stats_.fetched_chunks;
    stats_.fetched_bytes += static_cast<int64_t>(c.frame.size());
    return sink(std::move(c));
  };
  if (ids.empty()) return Status::Ok();
  if (fetch_many_) return fetch_many_(ids, keep);
  for (const ChunkId& id : ids) {
    GP_ASSIGN_OR_RETURN(VerifiedChunk c, FetchOne(id));
    GP_RETURN_IF_ERROR(keep(std::move(c)));
  }
  return Status::Ok();
}

Status CachedChunkStore::ReadChunks(const std::vector<ChunkId>& ids, const ChunkSink& sink) {
  std::lock_guard lock(mu_);
  std::vector<ChunkId> wanted = Unique(ids);
  GP_ASSIGN_OR_RETURN(std::vector<ChunkId> absent, cache_->Missing(wanted));
  std::unordered_set<ChunkId> to_fetch(absent.begin(), absent.end());
  // The ones held now are read below, after some fetching: they stay (and
  // are the newest in the LRU order) until this read ends.
  pinned_.clear();
  for (const ChunkId& id : wanted) {
    if (to_fetch.count(id)) continue;
    pinned_.insert(id);
    (void)cache_->Touch(id);
  }
  CacheStats read;  // this thread's counts, added to stats_ at the end
  Status status;
  {
    // Until `ahead` is gone, its thread alone touches stats_ and used_.
    ChunkReadAhead ahead([&](const ChunkSink& push) { return FetchAndKeep(absent, push); });
    auto next = [&](const ChunkId& id) -> Result<VerifiedChunk> {
      if (to_fetch.erase(id) != 0) {  // its first time, and the cache lacked it
        GP_ASSIGN_OR_RETURN(VerifiedChunk c, ahead.Next());
        if (c.id != id) return Status::Internal("read ahead: chunks out of order");
        return c;
      }
      const int64_t misses = read.misses;
      auto c = ReadCached(id, read);
      // Evicted meanwhile (a repeat of a fetched chunk), or corrupt: from
      // the remote, not kept (the fetching thread owns the cache now).
      if (!c.ok() && read.misses > misses) return FetchOne(id);
      return c;
    };
    for (const ChunkId& id : ids) {
      auto c = next(id);
      status = c.ok() ? sink(std::move(*c)) : c.status();
      if (!status.ok()) break;
    }
  }
  pinned_.clear();
  Count(read);
  return status;
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
