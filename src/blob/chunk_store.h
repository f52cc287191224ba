// Chunks and where they are kept.
//
// A chunk is a piece of a file as the chunker (blob/chunker.h) cut it, named
// by the SHA-256 of its bytes in lowercase hex (ChunkId). It travels and is
// stored as one zstd frame of those bytes. Whoever reads a chunk verifies it:
// OpenChunk decompresses and checks the hash, so a corrupt or substituted
// chunk is DataLoss, never silently used.
//
// ChunkStore is the storage interface; FsChunkStore keeps chunks as files
// under a directory (the server's data dir, or an agent's local cache). An
// S3-compatible backend would implement the same five calls.
//
// Thread-safety: a FsChunkStore may be used from several threads and
// processes at once (every write is a rename of a complete file).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace gpupool::blob {

using ChunkId = std::string;  // 64 lowercase hex digits

// The largest chunk OpenChunk accepts by default (the chunker's max_size
// may not exceed it).
inline constexpr size_t kMaxChunkBytes = 64 << 20;

ChunkId ComputeChunkId(std::span<const uint8_t> data);
bool IsChunkId(std::string_view s);

// One zstd frame of `data` (level 1..19; 3 is zstd's default).
Result<std::string> CompressChunk(std::span<const uint8_t> data, int level = 3);
// The chunk's bytes from its zstd frame, checked against `id`: InvalidArgument
// for a malformed id, DataLoss when the frame is corrupt, larger than
// `max_bytes`, or its bytes do not hash to `id`.
Result<std::string> OpenChunk(const ChunkId& id, std::string_view compressed,
                              size_t max_bytes = kMaxChunkBytes);

// A chunk as read: its zstd frame and its bytes, which OpenChunk checked
// against the id.
struct VerifiedChunk {
  ChunkId id;
  std::string frame;
  std::string bytes;
};

// Receives chunks one by one.
using ChunkSink = std::function<Status(VerifiedChunk chunk)>;

// A stored chunk as ChunkStore::Inventory sees it.
struct StoredChunk {
  ChunkId id;
  int64_t bytes = 0;        // of its zstd frame on disk
  int64_t modified_ms = 0;  // last written or touched (Unix ms)
};

class ChunkStore {
 public:
  virtual ~ChunkStore() = default;
  // Which of `ids` the store lacks, in the order given (senders upload only
  // those). InvalidArgument for a malformed id.
  virtual Result<std::vector<ChunkId>> Missing(const std::vector<ChunkId>& ids) = 0;
  // Stores a chunk's zstd frame after OpenChunk accepted it (so nothing
  // corrupt is ever stored); idempotent; durable once it returns.
  virtual Status Put(const ChunkId& id, std::string_view compressed) = 0;
  // The chunk's zstd frame, verified: NotFound when absent, DataLoss when the
  // stored copy is corrupt. A corrupt copy is set aside, so the chunk is
  // missing from then on and its next upload (or fetch) replaces it.
  virtual Result<std::string> Get(const ChunkId& id) = 0;
  // Absent chunks are not an error.
  virtual Status Remove(const ChunkId& id) = 0;
  // Every stored chunk (for garbage collection), in no particular order.
  virtual Result<std::vector<ChunkId>> List() = 0;

  // Puts several chunks (id, zstd frame): one round trip for a remote
  // store. The default puts them one by one.
  virtual Status PutMany(const std::vector<std::pair<ChunkId, std::string>>& frames);
  // Hands every chunk of `ids` to `sink`, verified, in the order given
  // (repeats included); stops at the first error, the sink's included. How
  // a tree is restored. The default Gets and opens them one at a time; a
  // remote store fetches in large requests while the sink works (see
  // ChunkReadAhead), a cache reads what it holds and fetches the rest.
  virtual Status ReadChunks(const std::vector<ChunkId>& ids, const ChunkSink& sink);

  // What the server's blob store (server/blob_service.h) needs besides,
  // which a bucket-backed store provides too:
  // Missing, marking the chunks that are stored used now (garbage
  // collection's grace counts from it); the default marks nothing.
  virtual Result<std::vector<ChunkId>> MissingTouchingTheRest(const std::vector<ChunkId>& ids) {
    return Missing(ids);
  }
  // Stores frames the caller has checked with OpenChunk; the default is
  // PutMany (which checks them again).
  virtual Status PutVerified(const std::vector<std::pair<ChunkId, std::string>>& frames) {
    return PutMany(frames);
  }
  // Every stored chunk with its size and age (garbage collection);
  // FailedPrecondition from a store that cannot say.
  virtual Result<std::vector<StoredChunk>> Inventory() {
    return Status::FailedPrecondition("this chunk store cannot list its chunks' ages");
  }
};

// Chunks as files DIR/ab/abcdef... (the first two hex digits fan out).
class FsChunkStore : public ChunkStore {
 public:
  // Creates DIR if needed. `fsync`: flush each chunk and its directory
  // before Put returns (survives power loss, not only a killed process).
  static Result<std::unique_ptr<FsChunkStore>> Open(std::string dir, bool fsync = true);

  Result<std::vector<ChunkId>> Missing(const std::vector<ChunkId>& ids) override;
  Status Put(const ChunkId& id, std::string_view compressed) override;
  Result<std::string> Get(const ChunkId& id) override;
  Status Remove(const ChunkId& id) override;
  Result<std::vector<ChunkId>> List() override;
  // Get, with the chunk's bytes (one decompression for both).
  Result<VerifiedChunk> Read(const ChunkId& id);
  // Verifies every frame, then PutVerified.
  Status PutMany(const std::vector<std::pair<ChunkId, std::string>>& frames) override;
  // Stores frames the caller has already checked with OpenChunk; a chunk
  // already stored is only touched. With fsync, the whole batch is made
  // durable by one syncfs before it returns, instead of a flush per chunk
  // (a 1 GiB upload is tens of thousands of chunks).
  Status PutVerified(const std::vector<std::pair<ChunkId, std::string>>& frames) override;
  // One frame the caller has checked, without waiting for the disk (even
  // with fsync): true when it was stored now, false when it was there
  // already (then it is only touched). For a cache, which loses nothing it
  // cannot fetch again.
  Result<bool> KeepVerified(const ChunkId& id, std::string_view frame);

  // Every stored chunk with its size and age (for garbage collection and
  // for a size-limited cache's eviction, oldest first).
  Result<std::vector<StoredChunk>> Inventory() override;
  // Marks a chunk used now (a cache's LRU order); absent chunks are ignored.
  Status Touch(const ChunkId& id);
  // Missing, and marks the chunks that are stored used now, in one system
  // call per chunk (what the server answers a sender that is about to name
  // these chunks in a manifest).
  Result<std::vector<ChunkId>> MissingTouchingTheRest(const std::vector<ChunkId>& ids) override;

  const std::string& dir() const { return dir_; }
  std::string PathOf(const ChunkId& id) const;

 private:
  FsChunkStore(std::string dir, bool fsync) : dir_(std::move(dir)), fsync_(fsync) {}
  std::string dir_;
  bool fsync_;
};

}  // namespace gpupool::blob
