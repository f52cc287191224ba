// AgentBlobScope: which blobs an enrolled agent may read.
//
// An agent reads the blob store (GET /v1/blobs/manifests/{id}, POST
// /v1/blobs/chunks/fetch) only for its own node's work:
//   - the inputs (spec.inputs) of every job whose live attempt runs on its
//     node (for a gang: any rank of it);
//   - those jobs' stored checkpoints: the one a start order restores, and
//     the ones the attempt itself uploaded;
//   - the checkpoints the server ordered the node to stage ahead of a start
//     (`stage` orders), granted as the order is sent and for `stage_ttl_ms`
//     (the agent keeps a staged tree that long). Grants are kept in memory:
//     after a server restart an order sent again is granted again, one
//     acknowledged before the restart is not (staging is a hint; the restore
//     then fetches what it lacks).
// and of chunks, those its readable manifests list. Everything else, the
// blobs of other nodes' jobs above all, is refused (PermissionDenied); the
// caller audits the refusal.
//
// Uploads are not scoped: chunks and manifests are content-addressed, so
// storing them grants nothing; a checkpoint becomes the job's only through
// POST /v1/jobs/{id}/checkpoints, which only the attempt's node may call.
//
// Threading: Readable() and GrantStage() on the event loop (Readable reads
// the store); CheckChunks() on any thread (a worker): its cache of the
// manifests' chunk lists has its own mutex. The cache holds at most
// `cache_chunk_ids` ids (16 bytes each) of recently used manifests; a
// manifest over that is read again for each check.
#pragma once

#include <array>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "server/blob_service.h"
#include "store/store.h"

namespace gpupool::server {

struct AgentBlobScopeOptions {
  int64_t stage_ttl_ms = 30 * 60'000;
  size_t cache_chunk_ids = size_t{4} << 20;  // 64 MiB of ids
};

class AgentBlobScope {
 public:
  // `clock` must be monotonic enough for grant expiry (a jump only shortens
  // or lengthens a grant).
  AgentBlobScope(Store& store, BlobService& blobs, const Clock& clock,
                 AgentBlobScopeOptions options = {});

  // The manifests node `node_name` may read now.
  Result<std::set<std::string>> Readable(const std::string& node_name);
  // The server sends node `node_name` an order to stage `manifest`.
  void GrantStage(const std::string& node_name, const std::string& manifest);

  // OK when each of `chunk_ids` is a chunk of one of `manifests`;
  // PermissionDenied naming the first that is not (a manifest that cannot
  // be read counts as empty).
  Status CheckChunks(const std::set<std::string>& manifests,
                     const std::vector<std::string>& chunk_ids);

 private:
  using Key = std::array<uint8_t, 16>;  // the first 128 bits of a chunk id
  using ChunkList = std::vector<Key>;   // sorted
  static bool KeyOf(const std::string& hex_id, Key* out);
  std::shared_ptr<const ChunkList> ChunksOf(const std::string& manifest);

  Store& store_;
  BlobService& blobs_;
  const Clock& clock_;
  AgentBlobScopeOptions options_;
  // node name -> manifest -> until when (loop thread only).
  std::map<std::string, std::map<std::string, int64_t>> staged_;

  std::mutex mu_;               // guards the cache below
  std::list<std::string> lru_;  // most recently used first
  struct Cached {
    std::shared_ptr<const ChunkList> chunks;
    std::list<std::string>::iterator pos;
  };
  std::map<std::string, Cached> cache_;
  size_t cached_ids_ = 0;
};

}  // namespace gpupool::server
