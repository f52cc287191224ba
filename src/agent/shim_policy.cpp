#include "agent/shim_policy.h"

#include <signal.h>

#include <algorithm>
#include <utility>

#include "common/units.h"
#include "exec/limits.h"

namespace gpupool::agent {
namespace {

using Actions = std::vector<ShimAction>;

void Signal(Actions& out, int sig) { out.push_back({ShimAction::kSignal, sig, ""}); }
void Event(Actions& out, std::string text) {
  out.push_back({ShimAction::kEvent, 0, std::move(text)});
}
void Ask(Actions& out, ShimAction::Kind kind) { out.push_back({kind, 0, ""}); }

// Begins stopping the job. `grace_ms` <= 0: SIGKILL at once (a limit the job
// is already past, a reclaim --now). Otherwise SIGTERM and SIGKILL after the
// grace; a job that goes back to the queue and checkpoints gets its
// checkpoint signal first and SIGTERM after half the grace, or as soon as
// it commits. Once stopping, only a stop without grace changes anything.
void StopJob(ShimState& s, Actions& out, const std::string& reason, bool failed, int64_t grace_ms,
             int64_t now) {
  if (s.exited) return;
  if (s.stopping() && grace_ms > 0) return;
  if (s.reason.empty()) {
    s.reason = reason;
    s.failed = failed;
  }
  if (grace_ms <= 0) {
    Signal(out, SIGKILL);
    s.term_at = 0;
    s.kill_at = now + kKillRepeatMs;
    return;
  }
  const int checkpoint = s.config.checkpoint_signal;
  const int first = checkpoint != 0 && s.requeue ? checkpoint : SIGTERM;
  Signal(out, first);
  if (first != SIGTERM) {
    Event(out, "asked for a checkpoint before stopping (" + s.config.checkpoint_signal_name + ")");
    s.term_at = now + grace_ms / 2;
    s.stop_after_commit = s.newest_commit;
  }
  s.kill_at = now + grace_ms;
}

void OnTick(ShimState& s, Actions& out, int64_t now) {
  const ShimPolicyConfig& c = s.config;
  if (s.deadline && now >= s.deadline && !s.exited && !s.deadline_passed) {
    s.deadline_passed = true;
    StopJob(s, out, "exceeded max_runtime of " + FormatDurationMs(c.max_runtime_ms), true,
            c.kill_grace_ms, now);
  }
  if (s.next_memory_check && !s.exited && now >= s.next_memory_check) {
    s.next_memory_check = now + std::max<int64_t>(c.memory_poll_ms, 1);
    Ask(out, ShimAction::kMeasureMemory);
  }
  if (s.next_disk_check && !s.exited && now >= s.next_disk_check) {
    s.next_disk_check = now + kDiskCheckMs;
    Ask(out, ShimAction::kMeasureDisk);
  }
  if (s.next_ask && now >= s.next_ask && !s.exited && !s.stopping()) {
    Signal(out, c.checkpoint_signal);
    s.next_ask = now + c.checkpoint_interval_ms;
  }
  // Commits are still scanned while the pipes drain (the final upload
  // starts from what was seen).
  if (c.uploads_checkpoints && now >= s.next_scan) {
    s.next_scan = now + kCommitScanMs;
    Ask(out, ShimAction::kScanCommits);
  }
  // In the stop window: read the lease file again (a renewal moves the
  // deadline); LeaseRead decides.
  if (s.lease.held() && !s.exited && !s.lease_lost && s.lease.MustStop(now)) {
    Ask(out, ShimAction::kReadLease);
  }
  if (s.term_at && now >= s.term_at && !s.exited) {
    Signal(out, SIGTERM);
    s.term_at = 0;
  }
  if (s.kill_at && now >= s.kill_at && !s.exited) {
    Signal(out, SIGKILL);
    s.kill_at = now + kKillRepeatMs;
  }
}

void OnMemory(ShimState& s, Actions& out, int64_t used, int64_t now) {
  const int64_t limit = s.config.memory_limit_bytes;
  if (s.exited || limit <= 0 || used <= limit) return;
  std::string why = exec::MemoryLimitReason(limit);
  Event(out, why + " (it used " + FormatBytes(used) + ")");
  StopJob(s, out, why, true, 0, now);
}

void OnDisk(ShimState& s, Actions& out, const shim_event::DiskMeasured& d, int64_t now) {
  // Counting a large tree costs; keep it to about 1% of the time.
  const int64_t took = std::max<int64_t>(d.took_ms, 0);
  s.next_disk_check = std::max(s.next_disk_check, now - took + 100 * took);
  const int64_t limit = s.config.disk_limit_bytes;
  if (s.exited || limit <= 0 || d.work_bytes + d.output_bytes <= limit) return;
  std::string why = exec::DiskLimitReason(limit);
  Event(out, why + ": " + FormatBytes(d.work_bytes) + " in it, " + FormatBytes(d.output_bytes) +
                 " of output");
  StopJob(s, out, why, true, s.config.kill_grace_ms, now);
}

void OnCommits(ShimState& s, Actions& out, const shim_event::CommitsScanned& c, int64_t now) {
  if (c.newest > s.newest_commit) {
    s.newest_commit = c.newest;
    Ask(out, ShimAction::kOfferCommit);
  }
  if (s.stop_after_commit >= 0 && s.newest_commit > s.stop_after_commit && !s.exited) {
    // The checkpoint asked for before the stop is committed: go now.
    Event(out,
          "checkpoint ckpt-" + std::to_string(s.newest_commit) + " committed: stopping the job");
    s.stop_after_commit = -1;
    Signal(out, SIGTERM);
    s.term_at = 0;
    s.kill_at = std::min(s.kill_at, now + kStopAfterCommitGraceMs);
  }
  if (c.fenced && !s.exited) {
    StopJob(s, out, "stale attempt: the server gave the job to another attempt", false, 0, now);
  }
}

// The server starts the job elsewhere once the lease has ended: be gone by
// then, checkpointing first where the job checkpoints.
void OnLease(ShimState& s, Actions& out, const shim_event::LeaseRead& l, int64_t now) {
  if (l.lease) s.lease.Update(*l.lease);
  if (s.exited || s.lease_lost || !s.lease.MustStop(now)) return;
  s.lease_lost = true;
  s.requeue = true;
  Event(out, s.lease.Reason());
  const int64_t left = std::max<int64_t>(s.lease.deadline_ms() - now, 0);
  if (!s.stopping()) {
    StopJob(s, out, s.lease.Reason(), false, left, now);
    s.lost = true;
  } else {
    s.kill_at = std::min(s.kill_at, now + left);
  }
}

}  // namespace

ShimState StartShimState(ShimPolicyConfig config, int64_t now, std::string reason, bool failed) {
  ShimState s;
  s.lease = LeaseWatch(config.lease, config.kill_grace_ms);
  s.reason = std::move(reason);
  s.failed = failed;
  if (config.max_runtime_ms > 0) s.deadline = now + config.max_runtime_ms;
  if (config.memory_limit_bytes > 0) s.next_memory_check = now;
  if (config.disk_limit_bytes > 0) s.next_disk_check = now + kFirstDiskCheckMs;
  if (config.checkpoint_signal != 0 && config.checkpoint_interval_ms > 0) {
    s.next_ask = now + config.checkpoint_interval_ms;
  }
  s.next_scan = now;
  s.newest_commit = config.restored_commit;
  s.config = std::move(config);
  return s;
}

std::vector<ShimAction> Step(ShimState& s, const ShimEvent& event, int64_t now) {
  namespace ev = shim_event;
  Actions out;
  if (std::holds_alternative<ev::Tick>(event)) {
    OnTick(s, out, now);
  } else if (const auto* stop = std::get_if<ev::StopAsked>(&event)) {
    s.requeue = s.requeue || stop->requeue;
    StopJob(s, out, stop->reason, false, stop->grace_ms, now);
  } else if (const auto* m = std::get_if<ev::MemoryMeasured>(&event)) {
    OnMemory(s, out, m->bytes, now);
  } else if (const auto* d = std::get_if<ev::DiskMeasured>(&event)) {
    OnDisk(s, out, *d, now);
  } else if (const auto* c = std::get_if<ev::CommitsScanned>(&event)) {
    OnCommits(s, out, *c, now);
  } else if (const auto* l = std::get_if<ev::LeaseRead>(&event)) {
    OnLease(s, out, *l, now);
  } else if (std::holds_alternative<ev::CommitNoticed>(event)) {
    s.next_scan = now;
  } else if (std::holds_alternative<ev::JobExited>(event)) {
    if (!s.exited) {
      s.exited = true;
      // Leftover processes of the job would hold the pipes open forever.
      Signal(out, SIGKILL);
      s.drain_until = now + kDrainAfterExitMs;
    }
  } else if (const auto* closed = std::get_if<ev::StreamClosed>(&event)) {
    (closed->stream == 'e' ? s.err_open : s.out_open) = false;
  }
  return out;
}

int64_t NextWakeMs(const ShimState& s, int64_t now) {
  int64_t wake = s.config.uploads_checkpoints ? kCommitScanMs : kIdleWakeMs;
  auto until = [&](int64_t at) {
    if (at != 0) wake = std::min(wake, std::max<int64_t>(at - now, 0));
  };
  if (s.config.uploads_checkpoints) until(s.next_scan);
  if (s.exited) {
    until(s.drain_until);
    return wake;
  }
  // A periodic ask waits while the job stops; max_runtime fires once.
  if (!s.stopping()) until(s.next_ask);
  if (!s.deadline_passed) until(s.deadline);
  until(s.kill_at);
  until(s.term_at);
  until(s.next_memory_check);
  until(s.next_disk_check);
  if (s.lease.held() && !s.lease_lost) {
    // Wake when the stop must begin, not up to a second later.
    until(std::max<int64_t>(s.lease.deadline_ms() - s.lease.stop_window_ms(), 1));
  }
  return wake;
}

bool ShimFinished(const ShimState& s, int64_t now) {
  if (!s.exited) return false;
  if (!s.out_open && !s.err_open) return true;
  return s.drain_until != 0 && now >= s.drain_until;
}

}  // namespace gpupool::agent
