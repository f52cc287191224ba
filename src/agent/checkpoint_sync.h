// The provider's side of the checkpoint contract (docs/checkpoints.md).
//
// A job commits a checkpoint by renaming a finished staging directory to
// GPUPOOL_CHECKPOINT_DIR/ckpt-<N>; the newest commit is the one with the
// highest N, and nothing else in the directory is ever read. The shim
// (agent/shim.h) looks for new commits about once a second and hands them to
// a CheckpointUploader, which sends them to the server's blob store on its
// own thread while the job runs: only chunks the server lacks travel, so
// each upload costs about what changed since the last one.
//
// What is uploaded is the checkpoint directory as a restored attempt will
// see it: a tree holding just `ckpt-<N>`. A restored job therefore finds its
// own numbering and continues it.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "blob/tree.h"
#include "common/status.h"

namespace gpupool::agent {

// A committed checkpoint: DIR/ckpt-<number>.
struct Commit {
  int64_t number = 0;
  std::string name;  // "ckpt-<number>"
  friend bool operator==(const Commit&, const Commit&) = default;
};

// "ckpt-12" -> 12; nullopt for anything else (staging dirs, "ckpt-012",
// "ckpt-", numbers past int64).
std::optional<int64_t> ParseCommitName(std::string_view name);

// The committed checkpoint with the highest number directly under
// `checkpoint_dir` (directories only), if any.
std::optional<Commit> NewestCommit(const std::string& checkpoint_dir);

// What one finished upload achieved.
struct UploadResult {
  int64_t checkpoint = 0;  // the server's number for it (1, 2, ... per job)
  std::string manifest;    // its manifest id
  blob::TreeStats stats;
};

// Sends one commit to the server: (checkpoint dir, commit) -> result.
// Errors: Unavailable / DeadlineExceeded / Internal are retried; Aborted
// means the server refused this attempt (it is no longer the job's live
// attempt): nothing of it will be accepted again.
using UploadFn = std::function<Result<UploadResult>(const std::string& dir, const Commit& c)>;

// Uploads a task's commits, newest first wins: an offer made while another
// upload runs replaces any older offer still waiting. Transient failures are
// retried with backoff until a newer commit is offered. Thread-safe.
class CheckpointUploader {
 public:
  struct Outcome {
    Commit commit;
    Result<UploadResult> result = Status::Internal("not run");
    int64_t took_ms = 0;
  };

  CheckpointUploader(std::string checkpoint_dir, UploadFn upload, int64_t max_backoff_ms = 5000);
  ~CheckpointUploader();  // stops retrying, waits for a running upload to end
  CheckpointUploader(const CheckpointUploader&) = delete;
  CheckpointUploader& operator=(const CheckpointUploader&) = delete;

  // Queues `c` unless it is not newer than what was offered before.
  void Offer(const Commit& c);
  // Uploads that ended (successfully or not for good) since the last call.
  std::vector<Outcome> TakeOutcomes();
  // An offer waits or is being uploaded (retries included).
  bool busy() const;
  // The newest commit uploaded so far (0: none).
  int64_t uploaded() const;
  // The server refused this attempt's uploads: do not offer more.
  bool fenced() const;
  // Blocks until not busy or `timeout_ms` passed; true when not busy.
  bool WaitIdle(int64_t timeout_ms);

 private:
  void Run();

  const std::string dir_;
  const UploadFn upload_;
  const int64_t max_backoff_ms_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::optional<Commit> waiting_;
  bool running_ = false;  // an upload (or its retry wait) is in progress
  bool stop_ = false;
  bool fenced_ = false;
  int64_t offered_ = 0;
  int64_t uploaded_ = 0;
  std::deque<Outcome> outcomes_;
  std::thread thread_;
};

}  // namespace gpupool::agent
