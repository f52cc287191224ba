// How a task's shim reaches the server's blob store (docs/api.md, "Blob
// store"): it fills a new task's work directory with the job's inputs and
// its restored checkpoint before the job starts, and uploads the job's
// checkpoints (agent/checkpoint_sync.h) while it runs.
//
// Everything here blocks; the shim calls it before the job starts or from
// its uploader thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "agent/checkpoint_sync.h"
#include "blob/http_chunk_store.h"
#include "common/safe_fs.h"
#include "common/status.h"
#include "net/tls.h"
#include "proto/messages.h"

namespace gpupool::agent {

struct BlobAccess {
  std::string server_url;    // "https://gpupool.example.edu:8470"
  std::string token;         // the agent's credential (its node token)
  net::TlsClientConfig tls;  // pinned pool CA and the node's client certificate
  // The agent's chunk cache: restores and input fetches download only the
  // chunks it lacks; least recently used chunks go once it passes the limit.
  std::string cache_dir;
  int64_t cache_bytes = int64_t{10} << 30;
  // Where the agent stages checkpoints ahead of their start order
  // (agent/staging.h); a restore takes its job's staged tree as its base.
  // Empty: none.
  std::string staging_dir;
};

// The server's blob store as `access` reaches it.
blob::HttpChunkStoreOptions RemoteStoreOptions(const BlobAccess& access);

// Fills `work_dir` (empty) before the job starts: the job's inputs
// (spec.inputs), then the checkpoint to restore (restore_manifest) into its
// checkpoint directory. Nothing is written through a symlink (inputs may
// hold symlinks, and may not hold the checkpoint directory's name:
// FailedPrecondition). Files become `uid`'s when uid >= 0. `event` gets a
// line for the job's log about each step. Unavailable when the server
// cannot be reached for a while; DataLoss when what arrived is corrupt.
Status MaterializeWorkDir(const proto::StartTask& task, const std::string& work_dir, int uid,
                          const BlobAccess& access,
                          const std::function<void(const std::string&)>& event);

// Where and as whom the shim reads a task's checkpoint directory, which the
// job can change while it is read (blob/tree.h).
struct TaskTree {
  // A directory above the checkpoint directory that the job cannot change
  // (the task's directory): the path below it is resolved with no symlink
  // followed. Empty: none (tests).
  std::string beneath;
  // The task's account: a root agent reads with its permissions only.
  FsIdentity read_as;
};

// Uploads commits of attempt `attempt_id` of job `job_id` through the blob
// API and registers each as the job's newest checkpoint. A refusal because
// the attempt is no longer the job's live one is Aborted.
UploadFn HttpUploadFn(const BlobAccess& access, int64_t job_id, const std::string& attempt_id,
                      const TaskTree& tree);

}  // namespace gpupool::agent
