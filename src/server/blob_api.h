// BlobApi: the blob store and checkpoint endpoints of the REST API
// (docs/api.md "Blobs" and "Checkpoints"):
//
//   POST /v1/blobs/missing            POST /v1/blobs/chunks
//   POST /v1/blobs/chunks/fetch       PUT|GET /v1/blobs/manifests/{id}
//   POST|GET /v1/jobs/{job}/checkpoints
//   GET /v1/jobs/{job}/checkpoints/{number|latest}
//   POST /v1/admin/gc                 (blobs, and log retention: options.collect_logs)
//
// Who may call: members and admins everything but the noted exceptions, and
// the agent join token ("agent-join") exactly these endpoints but gc.
// Posting a checkpoint takes the join token or an admin; gc an admin;
// members read the checkpoints of their own jobs only.
//
// Threading: Handle() and CollectGarbage() are called on the event loop.
// Slow work (BlobService) runs on the BlobApi's own WorkerPool, which
// answers through the Responder from its thread; whatever needs the Pool
// is posted back to the loop. Destroy the BlobApi on the loop thread before
// the loop: its destructor waits for the running tasks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>

#include "blob/chunk_records.h"
#include "common/clock.h"
#include "net/event_loop.h"
#include "net/http_server.h"
#include "server/auth.h"
#include "server/blob_service.h"
#include "server/job_logs.h"
#include "server/pool.h"
#include "server/worker_pool.h"

namespace gpupool::server {

struct BlobApiOptions {
  int worker_threads = 2;
  // Garbage collection leaves unreachable blobs younger than this alone
  // (--blob-gc-grace), so an upload about to be submitted survives it.
  int64_t gc_grace_ms = 3'600'000;
  size_t max_fetch_bytes = blob::kMaxChunkRecordsBytes;  // per fetch response
  size_t max_ids = 100'000;                              // per missing/fetch request
  // POST /v1/admin/gc also applies log retention through this (the
  // server's LogGc, server/job_logs.h); unset: blobs only.
  std::function<void(std::function<void(Result<LogGcStats>)>)> collect_logs;
};

class BlobApi {
 public:
  using Respond = std::shared_ptr<net::Responder>;

  BlobApi(net::EventLoop& loop, Pool& pool, BlobService& blobs, const Clock& clock,
          BlobApiOptions options);

  // Whether `path` is one of the endpoints above (any method).
  static bool Serves(std::string_view path);
  void Handle(net::HttpRequest req, const Principal& who, Respond respond);

  // One garbage collection: the reachable manifests are read on the loop,
  // the walk runs on a worker, `done` is called on the loop.
  void CollectGarbage(std::function<void(Result<GcStats>)> done);

 private:
  using Request = std::shared_ptr<const net::HttpRequest>;

  void Missing(Request req, Respond respond);
  void PutChunks(Request req, Respond respond);
  void FetchChunks(Request req, Respond respond);
  void PutManifest(Request req, std::string id, Respond respond);
  void GetManifest(std::string id, Respond respond);
  void PostCheckpoint(Request req, const Principal& who, int64_t job, Respond respond);
  void ListCheckpoints(const Principal& who, int64_t job, Respond respond);
  void GetCheckpoint(const Principal& who, int64_t job, std::string_view which, Respond respond);
  void AdminGc(const Principal& who, Respond respond);
  // NotFound unless `who` may read job `job`'s checkpoints.
  Status CheckJobVisible(const Principal& who, int64_t job);

  net::EventLoop& loop_;
  Pool& pool_;
  BlobService& blobs_;
  const Clock& clock_;
  BlobApiOptions options_;
  // Last member: destroyed (its threads joined) before the rest.
  WorkerPool workers_;
};

}  // namespace gpupool::server
