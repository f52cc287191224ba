// BlobService: the server's blob store (docs/api.md "Blobs"): chunks in a
// blob::ChunkStore, manifests in a blob::ObjectStore as "manifests/<id>.json".
// Open(options) keeps both as files under one directory (DATA_DIR/blobs, or
// --blob-dir, which several servers may share over NFS): chunks by
// FsChunkStore under DIR/chunks, manifests by FsObjectStore as
// DIR/manifests/<id>.json. A bucket-backed (S3-compatible) store plugs in
// through the same two interfaces (the other Open).
//
// Guarantees:
// - Nothing corrupt is stored: every chunk is verified (OpenChunk) before it
//   is written, every manifest is checked against its id and decoded.
// - A stored manifest never names a missing chunk: PutManifest writes the
//   file (atomically, fsynced with its directory) only after checking that
//   every chunk it names is stored, and garbage collection, which removes
//   chunks, excludes manifest writes while it runs.
// - A chunk found corrupt when read is set aside (FsChunkStore::Get), so it
//   is missing from then on and its next upload replaces it.
// - Age: asking whether a chunk is missing, uploading it, and PUTting a
//   manifest again refresh the modification time that garbage collection's
//   grace period counts from, so what a client is about to refer to is not
//   collected under it.
//
// The calls are synchronous and may be slow (disk, zstd, SHA-256): the
// server runs them on its WorkerPool, never on the event loop; HasManifest
// (one stat) is the exception. Thread-safe: any method from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

#include "blob/chunk_store.h"
#include "blob/object_store.h"
#include "common/status.h"

namespace gpupool::server {

struct BlobServiceOptions {
  std::string dir;    // DATA_DIR/blobs; created if missing
  bool fsync = true;  // flush chunks and manifests before acknowledging them
};

// What a stored manifest holds (the PUT response, and a checkpoint's size).
struct ManifestSummary {
  std::string id;
  int64_t bytes = 0;     // the files' total size
  int64_t files = 0;     // file entries
  int64_t chunks = 0;    // distinct chunks
  bool created = false;  // PutManifest: stored by this call (false: was there)
};

struct GcStats {
  int64_t manifests_removed = 0;
  int64_t chunks_removed = 0;
  int64_t bytes_freed = 0;  // of the removed chunks and manifests, as stored
  int64_t chunks_kept = 0;
  int64_t bytes_kept = 0;  // of the kept chunks and manifests, as stored
};

class BlobService {
 public:
  static Result<std::unique_ptr<BlobService>> Open(BlobServiceOptions options);
  // Over other stores (their own durability): `chunks` must provide
  // Inventory (garbage collection).
  static std::unique_ptr<BlobService> Open(std::unique_ptr<blob::ChunkStore> chunks,
                                           std::unique_ptr<blob::ObjectStore> manifests);

  // Which of `ids` are not stored, in the order given; refreshes the age of
  // the others. InvalidArgument naming a malformed id.
  Result<std::vector<blob::ChunkId>> Missing(const std::vector<blob::ChunkId>& ids);
  // What a store call is about to add: the logical bytes (decompressed) of
  // the chunks not stored yet, or the text of a new manifest (not called
  // when nothing is new). An error refuses the call before anything is
  // written (storage quotas).
  using Admit = std::function<Status(int64_t new_bytes)>;

  // Stores the chunks of a records body (blob/chunk_records.h) and returns
  // how many records it held. InvalidArgument naming the record for a
  // malformed record or a frame that fails verification; nothing is stored
  // then, nor when `admit` refuses the new chunks' bytes.
  Result<int64_t> PutChunks(std::string_view body, const Admit& admit = {});
  // A records body with the chunks `ids` in order: a prefix of the list
  // that stops before the record that would take it past `max_bytes` (at
  // least one record). NotFound naming the first id that is not stored
  // (checked for the whole list first); DataLoss naming a chunk found
  // corrupt (set aside).
  Result<std::string> FetchChunks(const std::vector<blob::ChunkId>& ids, size_t max_bytes);

  // Checks and stores a manifest; see the guarantees above. InvalidArgument
  // when the text does not hash to `id` or does not decode;
  // FailedPrecondition "N chunks are missing, e.g. <id>".
  // A manifest not stored yet is first offered to `admit` (its text size).
  Result<ManifestSummary> PutManifest(const std::string& id, std::string_view text,
                                      const Admit& admit = {});
  // The manifest's text exactly as stored; NotFound if absent.
  Result<std::string> GetManifest(const std::string& id);
  // Reads and decodes a stored manifest; NotFound if absent.
  Result<ManifestSummary> DescribeManifest(const std::string& id);
  // Whether the manifest is stored (one stat; cheap enough for the loop).
  bool HasManifest(const std::string& id);

  // Removes the manifests that are neither in `reachable` nor younger than
  // `grace_ms` (by their modification time, against `now_ms`), then the
  // chunks no remaining manifest names that are older than the grace too.
  Result<GcStats> CollectGarbage(const std::set<std::string>& reachable, int64_t now_ms,
                                 int64_t grace_ms);

  // The stores (tests and tools of the file layout).
  blob::ChunkStore& chunks() { return *chunks_; }
  blob::ObjectStore& manifests() { return *manifests_; }
  static std::string ManifestKey(const std::string& id);

 private:
  BlobService(std::unique_ptr<blob::ChunkStore> chunks,
              std::unique_ptr<blob::ObjectStore> manifests);
  // Manifest ids stored, with their modification time and size.
  struct StoredManifest {
    std::string id;
    int64_t modified_ms = 0;
    int64_t bytes = 0;
  };
  Result<std::vector<StoredManifest>> ListManifests();
  // Removes unreachable manifests past the grace; returns the chunks the
  // remaining ones name.
  Result<std::set<blob::ChunkId>> SweepManifests(const std::set<std::string>& reachable,
                                                 int64_t cutoff_ms, GcStats& stats);

  std::unique_ptr<blob::ChunkStore> chunks_;
  std::unique_ptr<blob::ObjectStore> manifests_;
  // Shared by manifest writes, exclusive for garbage collection, so a
  // collection never removes a chunk that a manifest being stored has just
  // been checked to hold.
  std::shared_mutex gc_mu_;
};

}  // namespace gpupool::server
