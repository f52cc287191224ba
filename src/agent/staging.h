// Checkpoints restored ahead of their start order, so that a migrating job
// starts on its new node after moving only what changed since.
//
// When a provider reclaims a GPU (or the scheduler preempts a job), the
// server tells the node it would place the job on next to stage the job's
// newest checkpoint (proto::StageCheckpoint). That node's Stager restores it
// into the staging area while the old node is still checkpointing and
// uploading; the start order's restore then takes the staged tree as its
// base (blob::RestoreBase) and reads only the chunks of the final
// checkpoint that the staged one lacks.
//
// Layout, under DATA_DIR/staged (0700, the agent's alone):
//   job-<ID>/tree/          the checkpoint directory as a restore makes it
//   job-<ID>/manifest.json  its manifest (EncodeManifest), written last: a
//                           tree without it is incomplete and never used
//   job-<ID>.new/           a staging in progress (replaces job-<ID>)
//   job-<ID>.lock           flock'ed by whoever changes or takes job-<ID>:
//                           the Stager while it stages, a task's shim while
//                           it takes the tree over
//   job-<ID>.pending        an order the Stager accepted and has not finished:
//                           a shim waits for it to go (the order may not have
//                           reached the Stager's thread yet)
// A newer order for a job stages over its previous tree the same way, so a
// node can follow a job's checkpoints with one delta each.
//
// A staged tree nobody took is removed after kStagedMaxAgeMs (the Stager
// prunes every 10 minutes).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

#include "agent/blob_transfer.h"
#include "blob/chunk_store.h"
#include "blob/manifest.h"
#include "blob/tree.h"
#include "common/status.h"
#include "proto/messages.h"

namespace gpupool::agent {

inline constexpr int64_t kStagedMaxAgeMs = 30 * 60 * 1000;

std::string StagingDirIn(const std::string& data_dir);

// Restores `manifest` as job `job_id`'s staged tree over the one staged
// before (if any), unless that one is the same. Blocks while a shim takes
// the job's tree. `done`, when not empty, is a file removed (under the
// job's lock) when the staging ends, successful or not.
Status StageTree(const std::string& staging_dir, int64_t job_id, const blob::Manifest& manifest,
                 blob::ChunkStore& store, blob::RestoreStats* stats = nullptr,
                 const std::string& done = "");

// Moves job `job_id`'s staged tree to `into` (which must not exist, on the
// same filesystem) for a restore to use as its base: waits up to `wait_ms`
// for a staging in progress (or pending) to end. NotFound when there is none (or it is
// still incomplete after the wait).
Result<blob::RestoreBase> TakeStaged(const std::string& staging_dir, int64_t job_id,
                                     const std::string& into, int64_t wait_ms);

// Removes staged trees (and leftovers of interrupted stagings) older than
// `max_age_ms`, skipping any being staged or taken now. Returns how many.
int PruneStaged(const std::string& staging_dir, int64_t max_age_ms);

// Stages orders on a thread of its own, one at a time, newest order per job
// (an order that arrives while an older one for the same job waits
// replaces it). Failures are logged: staging is a hint.
class Stager {
 public:
  Stager(std::string staging_dir, BlobAccess access);
  ~Stager();  // abandons waiting orders, stops the one in progress at its next chunk
  Stager(const Stager&) = delete;
  Stager& operator=(const Stager&) = delete;

  void Stage(const proto::StageCheckpoint& order);

 private:
  void Run();

  const std::string staging_dir_;
  const BlobAccess access_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<proto::StageCheckpoint> queue_;  // guarded by mu_
  bool stopping_ = false;                     // guarded by mu_
  std::atomic<bool> stop_reading_{false};     // ends a staging in progress
  std::thread thread_;
};

}  // namespace gpupool::agent
