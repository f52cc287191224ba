// BlobApi: the blob store and checkpoint endpoints of the REST API
// (docs/api.md "Blobs" and "Checkpoints"):
//
//   POST /v1/blobs/missing            POST /v1/blobs/chunks
//   POST /v1/blobs/chunks/fetch       PUT|GET /v1/blobs/manifests/{id}
//   POST|GET|DELETE /v1/jobs/{job}/checkpoints
//   GET /v1/jobs/{job}/checkpoints/{number|latest}
//   DELETE /v1/jobs/{job}/checkpoints/{number}
//   POST /v1/admin/gc                 (blobs, and log retention: options.collect_logs)
//
// Who may call (server/authz.cpp): members and admins every blob endpoint;
// members read the checkpoints of their own jobs only; gc is an admin's.
// Enrolled agents (their node token) upload blobs freely (content-addressed:
// storing grants nothing), read only their own node's blobs
// (agent_blob_scope.h), and post checkpoints only for an attempt placed on
// their node (for a gang, rank 0's, the rank that uploads) that is its
// job's live one (fencing, in Pool::AddCheckpoint). Refusals of an agent
// are written to the audit log. The join token reaches none of these.
//
// Storage quotas (server/storage_quotas.h), when given: uploads of chunks
// and manifests are admitted against the uploader's quota before anything
// is stored; an agent names the attempt it uploads a checkpoint for
// (`?attempt=JOB.N`, an attempt placed on its own node; without it, it may
// store nothing new) and is charged to that job's owner and group.
// Deleting the checkpoints of a finished job is its owner's (or a lab
// member's where the lab shares jobs, or an admin's).
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
#include <optional>
#include <set>
#include <string_view>

#include "blob/chunk_records.h"
#include "common/clock.h"
#include "net/event_loop.h"
#include "net/http_server.h"
#include "server/agent_blob_scope.h"
#include "server/api_module.h"
#include "server/auth.h"
#include "server/blob_service.h"
#include "server/job_logs.h"
#include "server/pool.h"
#include "server/storage_quotas.h"
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

// How agents are held to their own node's blobs. Without a scope agents
// read no blob at all; without `audit` refusals are only logged.
struct BlobApiAgents {
  AgentBlobScope* scope = nullptr;
  Auth* audit = nullptr;
};

class BlobApi : public ApiModule {
 public:
  // `quotas` may be null (no storage quotas).
  BlobApi(net::EventLoop& loop, Pool& pool, BlobService& blobs, const Clock& clock,
          BlobApiOptions options, BlobApiAgents agents = {}, StorageQuotas* quotas = nullptr);

  // The endpoints, each with the action it needs (docs/api.md).
  void AddRoutes(ApiRoutes& routes) override;

  // One garbage collection: the reachable manifests are read on the loop,
  // the walk runs on a worker, `done` is called on the loop.
  void CollectGarbage(std::function<void(Result<GcStats>)> done);
  // What the last collection that succeeded found; none before the first.
  const std::optional<GcStats>& last_gc() const { return last_gc_; }

  // Reads a stored manifest's summary on a worker; `done` runs on the loop.
  void DescribeManifest(const std::string& id, std::function<void(Result<ManifestSummary>)> done);

 private:
  using Request = std::shared_ptr<const net::HttpRequest>;

  void Missing(Request req, Respond respond);
  void PutChunks(Request req, const Principal& who, Respond respond);
  // `readable`: for an agent, the manifests it may read (and their chunks).
  void FetchChunks(Request req, const Principal& who, std::optional<std::set<std::string>> readable,
                   Respond respond);
  void PutManifest(Request req, const Principal& who, std::string id, Respond respond);
  void DeleteCheckpoints(const Principal& who, int64_t job, std::string_view which,
                         Respond respond);
  // Who an upload by `who` is charged to, and what it may add (no quotas:
  // an empty allowance).
  // An agent's refusal (an attempt of another node) is audited.
  Result<UploadAllowance> AllowanceFor(const net::HttpRequest& req, const Principal& who);
  Result<UploadAllowance> AllowanceOf(const net::HttpRequest& req, const Principal& who);
  void GetManifest(std::string id, Respond respond);
  // GET /v1/blobs/manifests/{id}, an agent only for its own node's jobs.
  void ReadManifest(const net::HttpRequest& req, const Principal& who, const std::string& id,
                    Respond respond);
  // For an agent: the manifests it may read; for anyone else nullopt.
  // PermissionDenied (audited) when an agent may read nothing at all.
  Result<std::optional<std::set<std::string>>> AgentReadable(const Principal& who);
  // Refuses an agent's request, on the loop: logs it, writes the audit log.
  void RefuseAgent(const Principal& who, const std::string& peer, const std::string& action,
                   const std::string& target, const Status& why);
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
  BlobApiAgents agents_;
  StorageQuotas* quotas_;
  std::optional<GcStats> last_gc_;  // set on the loop
  // Last member: destroyed (its threads joined) before the rest.
  WorkerPool workers_;
};

}  // namespace gpupool::server
