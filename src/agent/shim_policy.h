// ShimPolicy: what a task's shim (agent/shim.h) decides while its job runs,
// as a pure state machine. The shim's plumbing (pipes, signals, poll, the
// executor) turns what happens into events, calls Step, and carries out the
// actions it returns; every timer lives here.
//
//   Step(state, event, now) -> actions
//
// It decides: max_runtime; the memory limit the executor does not enforce
// and the disk limit (the work directory plus the job's output); the
// periodic checkpoint signal; a stop asked by the agent, with its grace
// (SIGTERM, SIGKILL at its end), and, before a requeue, the checkpoint
// signal first, then SIGTERM as soon as a newer checkpoint is committed or
// after half the grace; the attempt's lease (agent/lease_watch.h: stop a
// stop window before its deadline, SIGKILL at the deadline); a fenced
// attempt (another attempt has the job); SIGKILL repeated every second
// until the job is gone; and, once it exited, how long the output pipes may
// still be drained.
//
// Measurements are asked for as actions (kMeasureMemory, kMeasureDisk,
// kScanCommits, kReadLease); the plumbing answers each with the matching
// event, in the same turn. Nothing here reads a clock, a file or a process:
// `now` is the caller's monotonic time in milliseconds, which must be
// CLOCK_BOOTTIME (RealClock::MonoMs, BootTimeMs) because the lease's
// deadline is on it. Tests drive it with a FakeClock.
//
// The first reason set is the job's (a later stop does not replace it).
// Not thread-safe: one shim owns its state.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "agent/lease_watch.h"
#include "agent/task_files.h"

namespace gpupool::agent {

// The work directory's size is first counted this long after the start,
// then at most this often (less often when counting is slow: about 1% of
// the time goes to it).
constexpr int64_t kFirstDiskCheckMs = 500;
constexpr int64_t kDiskCheckMs = 2000;
// How often the checkpoint directory is looked at for new commits.
constexpr int64_t kCommitScanMs = 250;
// After the checkpoint asked for before a stop is committed: SIGTERM, then
// SIGKILL this much later.
constexpr int64_t kStopAfterCommitGraceMs = 3000;
// SIGKILL is sent again this often until the job is gone.
constexpr int64_t kKillRepeatMs = 1000;
// After the job exited, how long its pipes are still read (leftover
// processes that hold them are killed at the exit).
constexpr int64_t kDrainAfterExitMs = 2000;
// The longest the plumbing sleeps without a timer due.
constexpr int64_t kIdleWakeMs = 1000;

// Fixed for the job's life; the shim fills it in once the job started.
struct ShimPolicyConfig {
  int64_t kill_grace_ms = 10'000;  // SIGTERM -> SIGKILL of the shim's own stops
  int64_t max_runtime_ms = 0;      // 0: none
  // Watched here only where the executor does not enforce it; 0: not watched.
  int64_t memory_limit_bytes = 0;
  int64_t memory_poll_ms = 100;
  int64_t disk_limit_bytes = 0;  // the work directory plus output.log; 0: none
  // The signal that asks the job to checkpoint ("SIGUSR1" in events); 0:
  // the job declares none.
  int checkpoint_signal = 0;
  std::string checkpoint_signal_name;
  int64_t checkpoint_interval_ms = 0;  // periodic asks; 0: none
  // This shim uploads the job's checkpoints (rank 0 of a gang, or a job of
  // one node): it scans for commits, and a stop before a requeue waits for
  // one. Other ranks get the signals but wait out half the grace.
  bool uploads_checkpoints = false;
  int64_t restored_commit = 0;        // the newest commit in the checkpoint dir at the start
  std::optional<AttemptLease> lease;  // as read at the start; none: the server grants none
};

// What happened. Each is answered by Step with the actions it calls for.
namespace shim_event {
// The plumbing woke (a timer may be due). Sent every turn.
struct Tick {};
// The agent asked for a stop (its SIGTERM, or its death): `reason` for the
// result, `grace_ms` its grace (0: SIGKILL at once), `requeue` whether the
// job goes back to the queue after it (it then checkpoints first).
struct StopAsked {
  std::string reason;
  int64_t grace_ms = 0;
  bool requeue = false;
};
// Answers to the actions of the same names.
struct MemoryMeasured {
  int64_t bytes = 0;
};
struct DiskMeasured {
  int64_t work_bytes = 0;
  int64_t output_bytes = 0;
  int64_t took_ms = 0;  // how long counting took (spaces the next count)
};
struct CommitsScanned {
  int64_t newest = 0;   // the newest commit's number; 0: none
  bool fenced = false;  // the server gave the job to another attempt
};
struct LeaseRead {
  std::optional<AttemptLease> lease;  // none: unreadable (the last one read holds)
};
// A commit may have appeared (inotify): scan now.
struct CommitNoticed {};
// The job's own process was reaped.
struct JobExited {};
// The job's stdout ('o') or stderr ('e') reached its end.
struct StreamClosed {
  char stream = 'o';
};
}  // namespace shim_event

using ShimEvent =
    std::variant<shim_event::Tick, shim_event::StopAsked, shim_event::MemoryMeasured,
                 shim_event::DiskMeasured, shim_event::CommitsScanned, shim_event::LeaseRead,
                 shim_event::CommitNoticed, shim_event::JobExited, shim_event::StreamClosed>;

struct ShimAction {
  enum Kind {
    kSignal,         // send `signal` to every process of the job (Executor::Stop)
    kEvent,          // write `text` to output.log as an event
    kMeasureMemory,  // answer with MemoryMeasured
    kMeasureDisk,    // answer with DiskMeasured
    kScanCommits,    // answer with CommitsScanned
    kOfferCommit,    // upload the commit just scanned (it is new)
    kReadLease,      // answer with LeaseRead
  };
  Kind kind = kEvent;
  int signal = 0;
  std::string text;
  friend bool operator==(const ShimAction&, const ShimAction&) = default;
};

struct ShimState {
  ShimPolicyConfig config;
  LeaseWatch lease{std::nullopt, 0};

  // The job.
  bool exited = false;
  bool out_open = true;
  bool err_open = true;

  // The result so far (the first reason wins).
  std::string reason;
  bool failed = false;
  bool lost = false;  // its lease ended it: requeued, not failed

  // Stopping. 0: not set.
  int64_t kill_at = 0;  // SIGKILL then (and every kKillRepeatMs after)
  int64_t term_at = 0;  // a checkpoint was asked for first: SIGTERM then
  // A stop waits for a commit newer than this (-1: not waiting).
  int64_t stop_after_commit = -1;
  bool requeue = false;     // the job goes back to the queue after its stop
  bool lease_lost = false;  // the lease ended (the job stops, is requeued elsewhere)

  // Timers. 0: not set.
  int64_t deadline = 0;  // max_runtime
  bool deadline_passed = false;
  int64_t next_memory_check = 0;
  int64_t next_disk_check = 0;
  int64_t next_ask = 0;  // the periodic checkpoint signal
  int64_t next_scan = 0;
  int64_t drain_until = 0;  // after the exit

  int64_t newest_commit = 0;  // the newest commit seen (a restored one counts)

  bool stopping() const { return kill_at != 0; }
};

// The state of a job that started at `now`. `reason` and `failed`: a
// result already decided before it ran (the launch failed: the job is being
// killed), else empty.
ShimState StartShimState(ShimPolicyConfig config, int64_t now, std::string reason = "",
                         bool failed = false);

// Applies `event` at `now`; returns what the plumbing must do, in order.
std::vector<ShimAction> Step(ShimState& state, const ShimEvent& event, int64_t now);

// How long the plumbing may sleep before the next Tick (>= 0).
int64_t NextWakeMs(const ShimState& state, int64_t now);

// Whether the plumbing is done watching: the job exited and its pipes are
// closed or the drain time is over.
bool ShimFinished(const ShimState& state, int64_t now);

}  // namespace gpupool::agent
