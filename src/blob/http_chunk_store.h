// A ChunkStore on the other end of HTTP: the server's blob store, through
// the blob endpoints of docs/api.md (POST /v1/blobs/missing, /v1/blobs/chunks,
// /v1/blobs/chunks/fetch; PUT and GET /v1/blobs/manifests/{id}).
//
// What it guarantees:
//   - Missing asks in batches of at most 100000 ids (the server's limit).
//   - PutMany sends the frames as framed records (blob/chunk_records.h), at
//     most kMaxChunkRecordsBytes (8 MiB) per request, so one call may be
//     several requests; Put is PutMany of one.
//   - Get, FetchMany and ReadChunks verify every frame they receive with OpenChunk (and
//     that the server sent the chunks asked for, in order) before handing it
//     on: a corrupt or substituted chunk is DataLoss, never passed along.
//   - GetManifest verifies ManifestId of the text it receives.
//   - Remove and List are not part of the API (garbage collection is the
//     server's). Status has no Unimplemented code, so they return
//     FailedPrecondition with a message saying the HTTP blob API lacks them.
// Errors keep the server's code and message (its JSON error body); no
// response at all is Unavailable or DeadlineExceeded, as net::Fetch says.
//
// This is the networked half of the blob store, in its own library
// (gpupool_blob_http), so that gpupool_blob stays free of networking.
//
// Thread-safety: calls share no mutable state but the bytes-sent counter
// (atomic) and the progress callback, which runs on the calling thread; one
// store may be used from several threads if the callback is thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "blob/chunk_records.h"
#include "blob/chunk_store.h"
#include "blob/manifest.h"
#include "common/status.h"
#include "net/tls.h"

namespace gpupool::blob {

struct HttpChunkStoreOptions {
  std::string server;            // base URL, "http://127.0.0.1:8470"
  std::string token;             // bearer token: a user's, or the agent's node token
  net::TlsClientConfig tls;      // for an https:// server
  int64_t timeout_ms = 120'000;  // per request
  // Frames per upload request, at most (the contract's 8 MiB).
  size_t max_upload_bytes = kMaxChunkRecordsBytes;
  // Ids per missing or fetch request, at most (the contract's 100000).
  size_t max_ids_per_request = 100'000;
  // Called after each upload request with the frame bytes sent so far by
  // this store (all calls together); on the calling thread.
  std::function<void(int64_t bytes_sent)> on_upload;
  // An agent uploading a checkpoint names its attempt ("57.1"): the server
  // charges the upload to that job's storage quota (?attempt= on chunk and
  // manifest uploads). Empty for users, who are charged themselves.
  std::string for_attempt;
};

// What the server says of a manifest it stored.
struct StoredManifest {
  ChunkId id;
  int64_t bytes = 0;  // of the tree's files
  int64_t files = 0;
  int64_t chunks = 0;
  bool created = false;  // false: it was already stored
};

class HttpChunkStore : public ChunkStore {
 public:
  explicit HttpChunkStore(HttpChunkStoreOptions options);

  Result<std::vector<ChunkId>> Missing(const std::vector<ChunkId>& ids) override;
  Status Put(const ChunkId& id, std::string_view compressed) override;
  // NotFound when the server lacks it; DataLoss when the server's copy (or
  // what arrived) is corrupt.
  Result<std::string> Get(const ChunkId& id) override;
  // FailedPrecondition: the HTTP API has no chunk removal (the server
  // collects garbage itself).
  Status Remove(const ChunkId& id) override;
  // FailedPrecondition: the HTTP API does not list chunks.
  Result<std::vector<ChunkId>> List() override;
  Status PutMany(const std::vector<std::pair<ChunkId, std::string>>& frames) override;
  // FetchMany on two threads of its own (ChunkReadAhead), taking turns at
  // windows of 256 ids, so that the next responses arrive (two requests in
  // flight) and are verified while the sink works.
  Status ReadChunks(const std::vector<ChunkId>& ids, const ChunkSink& sink) override;

  // Fetches `ids` in as few requests as the server allows (it answers at
  // most about 8 MiB per request; the rest is asked again) and hands each
  // chunk, verified, to `sink`, in the order of `ids`. Memory: one response.
  // Stops at the first error, the sink's included.
  Status FetchMany(const std::vector<ChunkId>& ids, const ChunkSink& sink);

  // Stores an encoded manifest (EncodeManifest) under its ManifestId. Every
  // chunk it names must be stored first (else FailedPrecondition).
  Result<StoredManifest> PutManifest(const std::string& encoded);
  // The manifest `id`, its text verified against the id and decoded.
  Result<Manifest> GetManifest(const ChunkId& id);

  // Frame bytes uploaded by this store so far.
  int64_t bytes_sent() const { return bytes_sent_.load(); }

 private:
  struct Answer {
    int status = 200;
    std::string content_type;
    std::string body;
  };
  // "?attempt=..." for uploads when options_.for_attempt is set; "" else.
  std::string UploadQuery() const;
  // One request; a non-2xx answer becomes the server's error.
  Result<Answer> Call(const std::string& method, const std::string& target, std::string body,
                      const std::string& content_type);
  Status UploadBody(std::string body, size_t frame_bytes);
  // Fetches a prefix (at least one) of `ids` and hands it to `sink`; returns
  // how many were received.
  Result<size_t> FetchSome(const std::vector<ChunkId>& ids, size_t begin, size_t end,
                           const ChunkSink& sink);

  const HttpChunkStoreOptions options_;
  std::atomic<int64_t> bytes_sent_{0};
};

}  // namespace gpupool::blob
