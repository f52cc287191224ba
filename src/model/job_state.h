// The job lifecycle as data: a transition table and a pure Step function.
//
//   pending --schedule--> scheduled --started--> running --exited 0--> succeeded
//                              |                    |  --exited n / failed--> failed
//                              +---- lost ----------+--> pending (attempt closed as lost: requeue)
//                              +---- preempted -----+--> pending (attempt closed as preempted)
//                              +---- vacated -------+--> pending (attempt closed as vacated)
//                              +-- refused --> pending (attempt closed as refused)
//                              +---- retry ---------+--> pending (attempt closed as failed; a
//                                                        restart of max_restarts)
//   pending|scheduled|running --cancel--> cancelled
//   scheduled|running --preempt--> (same state; the attempt is ordered to stop)
//
// Step never performs effects; it returns the actions the caller must carry
// out (create the attempt and order its start, close the attempt with a
// state, tell the agent to stop) and the effect on the job (its reason,
// requeued at the front of its class, a restart counted, preempted now). Terminal states accept no
// event. Events about an attempt that is not the job's live one are filtered by the caller
// (fencing) before Step is reached.
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include "model/job.h"

namespace gpupool {

enum class JobEvent {
  kSchedule,       // the scheduler placed the job: a new attempt is created
  kStarted,        // the agent reports the attempt's process is running
  kExitedOk,       // the process exited with code 0
  kExitedError,    // the process exited with a non-zero code or a signal
  kAttemptFailed,  // the attempt failed without a normal exit (spawn error, max_runtime)
  kLost,           // the node or agent lost the attempt: requeue the job
  kCancel,         // the user cancelled the job
  kPreempt,        // the scheduler preempts the attempt: order it to stop (checkpoint)
  kPreempted,      // a preempted attempt ended, however it exited: requeue the job
  // The provider took the GPU back and the attempt was stopped: requeue the
  // job (not a failure).
  kVacated,
  // The agent refused the start order (the provider's policy): nothing ran;
  // requeue the job (not a failure).
  kRefused,
  // The attempt failed (as kExitedError or kAttemptFailed) and the job has
  // restarts left (JobSpec::max_restarts): requeue it.
  kRetry,
  // An attempt the server stopped to end its job (an idle session, after
  // its checkpoint; it was stopped with kPreempt) has left: the job is
  // cancelled.
  kEnded,
};
inline constexpr JobEvent kAllJobEvents[] = {
    JobEvent::kSchedule,      JobEvent::kStarted, JobEvent::kExitedOk, JobEvent::kExitedError,
    JobEvent::kAttemptFailed, JobEvent::kLost,    JobEvent::kCancel,   JobEvent::kPreempt,
    JobEvent::kPreempted,     JobEvent::kVacated, JobEvent::kRefused,  JobEvent::kRetry,
    JobEvent::kEnded};
std::string_view JobEventName(JobEvent e);

enum class JobActionType {
  kStartAttempt,        // create the attempt and queue a start order to its node
  kMarkAttemptRunning,  // record that the attempt runs
  kCloseAttempt,        // record the attempt's final state (close_as)
  kStopAttempt,         // queue a stop order to the attempt's node
};

struct JobAction {
  JobActionType type;
  AttemptState close_as = AttemptState::kFailed;  // for kCloseAttempt
  friend bool operator==(const JobAction&, const JobAction&) = default;
};

// What a transition says about the job's `reason` (the text users read),
// which the server renders from the job, its attempt and the report.
enum class JobReason {
  kClear,                // none
  kClearUnlessStopping,  // none, unless its attempt is being stopped (a late "started")
  kExit,                 // how the attempt ended (the report's reason, signal or code)
  kAttemptReason,        // the attempt's own reason (the server ended it)
  kBeingPreempted,       // "being preempted ..."
  kRequeuedPreempted,    // "requeued: attempt X was preempted ..."
  kRequeuedVacated,      // "vacated: ...; requeued"
  kRequeuedRetry,        // "requeued: attempt X failed (...); restart N of M"
  kRequeuedRefused,      // "requeued: attempt X was refused (...)"
  kRequeuedLost,         // "requeued: attempt X was lost (...)"
};

// What a transition does to the job itself, besides its state.
struct JobEffect {
  JobReason reason = JobReason::kClear;
  bool requeue_front = false;   // first in its class: displaced through no fault of its own
  bool count_restart = false;   // one of max_restarts used
  bool mark_preempted = false;  // last_preempted_ms = now
  friend bool operator==(const JobEffect&, const JobEffect&) = default;
};

struct JobTransition {
  bool accepted = false;  // false: the event does not apply in this state; nothing changes
  JobState next = JobState::kPending;
  std::vector<JobAction> actions;
  JobEffect effect;
};

// One row of the table: in state `from`, event `event` leads to `to` with
// `actions`, in order, and `effect` on the job.
struct JobTransitionRule {
  JobState from;
  JobEvent event;
  JobState to;
  std::vector<JobAction> actions;
  JobEffect effect = {};
};

// The whole table, for documentation and tests.
std::span<const JobTransitionRule> JobTransitionTable();

JobTransition Step(JobState state, JobEvent event);

// kExitedOk for 0, kExitedError otherwise.
inline JobEvent ExitEvent(int exit_code) {
  return exit_code == 0 ? JobEvent::kExitedOk : JobEvent::kExitedError;
}

}  // namespace gpupool
