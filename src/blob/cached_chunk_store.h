// A size-limited local cache of chunks in front of a remote store: how an
// agent restores checkpoints and job inputs without downloading again what
// it already holds.
//
// The cache is a FsChunkStore directory; the remote is any ChunkStore (the
// server's blob store through HttpChunkStore, or in tests a FsChunkStore).
//
//   Get         the cached copy when there is one and it verifies (and
//               marks it used, for the LRU order); else the remote's,
//               verified with OpenChunk, and a copy is kept. A corrupt
//               cached copy is dropped and refetched.
//   ReadChunks  (how a tree is restored) the same for many chunks at once:
//               the ones the cache lacks are downloaded on another thread
//               in large batches (through `fetch_many`, e.g.
//               HttpChunkStore::FetchMany, else one Get at a time) while the
//               caller's sink writes the ones before; each is verified once
//               and a copy kept.
//   Missing, Put, PutMany, List, Remove   go to the remote; Put and PutMany
//               also keep a copy (an agent that uploads a checkpoint can
//               restore it without downloading it); Remove drops the cached
//               copy too.
//
// Size limit and eviction: the cache counts the bytes of the frames it
// holds. When a new copy takes it over `limit_bytes`, the least recently used
// chunks (FsChunkStore::Inventory's modified_ms: written or touched) are
// removed until it is at `low_water_percent` of the limit. While ReadChunks
// runs, the chunks it is going to read from the cache are never removed; a
// restore larger than the limit keeps the cache at its limit by evicting the
// copies it made first (a repeat of one of those is fetched again).
//
// A failure to keep a copy (a full disk) does not fail a Get or a Put whose
// data arrived: it is counted and kept in stats().last_cache_error.
//
// Thread-safety: every call takes one mutex, so calls from several threads
// are safe but run one at a time (remote requests included); the design
// point is one user at a time (an agent's restore, or one CLI command). One
// CachedChunkStore per cache directory: the byte count is this object's, so
// another process writing the same directory makes it drift (it is
// recomputed at every eviction).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "blob/chunk_store.h"
#include "common/status.h"

namespace gpupool::blob {

struct CachedChunkStoreOptions {
  std::string dir;                          // the cache's FsChunkStore directory
  int64_t limit_bytes = int64_t{10} << 30;  // of zstd frames on disk
  int low_water_percent = 90;               // eviction goes down to this share of the limit
  bool fsync = false;                       // a lost cached chunk is simply fetched again
  // Keep a copy of what Get and ReadChunks download. Off for checkpoints,
  // which change at every commit: their chunks would rarely be read twice
  // here, and writing a file per chunk is most of a large restore's cost.
  bool keep_fetched = true;
};

// Downloads `ids`, handing each chunk, verified, to the sink in order;
// stops at the sink's first error and returns it. HttpChunkStore::FetchMany
// is one.
using FetchManyFn = std::function<Status(const std::vector<ChunkId>& ids, const ChunkSink& sink)>;

struct CacheStats {
  int64_t hits = 0;            // chunks read from the cache
  int64_t misses = 0;          // chunks thought cached that came from the remote
  int64_t fetched_chunks = 0;  // chunks downloaded
  int64_t fetched_bytes = 0;
  int64_t evicted_chunks = 0;
  int64_t evicted_bytes = 0;
  int64_t corrupt_dropped = 0;  // cached copies that failed verification
  int64_t cached_bytes = 0;     // held now
  int64_t cache_errors = 0;     // copies that could not be kept
  Status last_cache_error;
};

class CachedChunkStore : public ChunkStore {
 public:
  // Opens (creates) the cache directory and counts what it holds. `remote`
  // must outlive the cache. InvalidArgument for a limit below 1 byte or a
  // low water outside 0..100.
  static Result<std::unique_ptr<CachedChunkStore>> Open(CachedChunkStoreOptions options,
                                                        ChunkStore& remote,
                                                        FetchManyFn fetch_many = {});

  Result<std::vector<ChunkId>> Missing(const std::vector<ChunkId>& ids) override;
  Status Put(const ChunkId& id, std::string_view compressed) override;
  Result<std::string> Get(const ChunkId& id) override;
  Status Remove(const ChunkId& id) override;
  Result<std::vector<ChunkId>> List() override;
  Status PutMany(const std::vector<std::pair<ChunkId, std::string>>& frames) override;
  Status ReadChunks(const std::vector<ChunkId>& ids, const ChunkSink& sink) override;

  // Evicts now if the cache is over its limit.
  Status Trim();

  CacheStats stats() const;
  const std::string& dir() const { return options_.dir; }

 private:
  CachedChunkStore(CachedChunkStoreOptions options, std::unique_ptr<FsChunkStore> cache,
                   ChunkStore& remote, FetchManyFn fetch_many, int64_t used);

  // The cached copy, verified, counted in `counts` (a hit; a miss when it
  // is absent or corrupt, and a corrupt copy is removed). Does not touch
  // members but cache_, so it may run beside FetchAndKeep.
  Result<VerifiedChunk> ReadCached(const ChunkId& id, CacheStats& counts);
  // From the remote, verified; not kept.
  Result<VerifiedChunk> FetchOne(const ChunkId& id);
  // Adds what ReadCached counted to stats_ and used_. Requires mu_.
  void Count(const CacheStats& counts);
  // Keeps a copy of a frame; `verified`: the caller has checked it with
  // OpenChunk (else a corrupt frame is not kept, and false is returned). A
  // failure to keep a good one is counted in stats_, not returned. Requires
  // mu_.
  bool Keep(const ChunkId& id, std::string_view frame, bool verified);
  // The chunks of `ids` the cache lacks, fetched and kept, to `sink`.
  // Requires mu_ (the caller's thread holds it while this runs on another).
  Status FetchAndKeep(const std::vector<ChunkId>& ids, const ChunkSink& sink);
  // Removes LRU chunks not pinned until at the low water. Requires mu_.
  Status Evict();

  const CachedChunkStoreOptions options_;
  const std::unique_ptr<FsChunkStore> cache_;
  ChunkStore& remote_;
  const FetchManyFn fetch_many_;

  mutable std::mutex mu_;
  std::unordered_set<ChunkId> pinned_;  // never evicted; guarded by mu_
  int64_t used_ = 0;                    // bytes cached; guarded by mu_
  int64_t evict_above_ = 0;             // evict when used_ passes this; guarded by mu_
  CacheStats stats_;                    // guarded by mu_
};

}  // namespace gpupool::blob
