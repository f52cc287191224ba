// LeaseWatch: what an attempt's lease asks of its shim, and when.
//
// The agent keeps every task's lease in TASK_DIR/lease (task_files.h),
// renewing it whenever the server answers a renewal request; the server
// starts the job elsewhere only once the lease, counted from its own last
// receipt of a request, has certainly ended (server/node_liveness.h). So
// the job must be gone by the deadline, whatever the agent does: the shim
// starts stopping it a stop window before (checkpoint signal first where the
// job checkpoints, then SIGTERM) and sends SIGKILL at the deadline itself.
// A job not started yet has nothing to stop: it may start as long as the
// lease is out of its stop window, and a task that finds it in there (the
// agent started it while a renewal was late) waits for a renewal until the
// deadline; only an expired lease means it must not start.
//
// Pure: times are the caller's, on CLOCK_BOOTTIME (BootTimeMs). A task
// without a lease file (the server grants none) is never stopped by this.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include "agent/task_files.h"

namespace gpupool::agent {

class LeaseWatch {
 public:
  // `kill_grace_ms`: the shim's usual SIGTERM-to-SIGKILL grace; the stop
  // window is that, but at most a third of the lease.
  LeaseWatch(std::optional<AttemptLease> lease, int64_t kill_grace_ms)
      : lease_(lease), kill_grace_ms_(kill_grace_ms) {}

  bool held() const { return lease_.has_value(); }
  const std::optional<AttemptLease>& lease() const { return lease_; }
  // A fresh read of the lease file. Deadlines only move forward.
  void Update(const AttemptLease& l) {
    if (!lease_ || l.deadline_ms > lease_->deadline_ms) lease_ = l;
  }
  int64_t deadline_ms() const { return lease_ ? lease_->deadline_ms : 0; }
  int64_t stop_window_ms() const {
    return lease_ ? std::max<int64_t>(0, std::min(kill_grace_ms_, lease_->lease_ms / 3)) : 0;
  }
  // The stop must begin now (the job may not live past the deadline).
  bool MustStop(int64_t now_ms) const {
    return lease_ && now_ms >= lease_->deadline_ms - stop_window_ms();
  }
  bool Expired(int64_t now_ms) const { return lease_ && now_ms >= lease_->deadline_ms; }
  // The job's result reason when its lease ended it.
  std::string Reason() const;

 private:
  std::optional<AttemptLease> lease_;
  int64_t kill_grace_ms_;
};

}  // namespace gpupool::agent
