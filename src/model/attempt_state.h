// The attempt lifecycle as data: a transition table and a pure StepAttempt.
//
//   scheduled --started--> running
//   scheduled|running --preempt-------> preempting     (stopped to make room for a job)
//   scheduled|running --stop-for-good--> stopping      (the server ends its job, after a
//   checkpoint) scheduled|running --gang-stop-----> gang-stopping  (a rank ended badly; the others
//   are stopped) any live state --exited/failed/lost/vacated/refused--> (closed by the job's
//   transition)
//
// An attempt in one of the stopping states is still live (it holds its
// GPUs until it has left) and is not stopped again: orders to a stopping
// attempt are rejected. Each row also names the job event (model/
// job_state.h) that the attempt's event means for its job: the same report
// means different things in different attempt states. A preempting
// attempt that ends, however it ends unless it finished cleanly before the
// stop reached it, was preempted (the job is requeued); a stopping one has
// ended its job (cancelled); a vacated or refused one is that, whatever
// it was doing. An attempt's final state is set by the job's transition
// (JobActionType::kCloseAttempt says which), so an end row keeps `to` as
// `from`. The timestamps of a stop (Attempt::preempt_ms, gang_stop_ms) and
// what it was for (preempt_for_job, gang_stop_rank) are data the caller
// records; whether the attempt is stopping is its state alone.
#pragma once

#include <optional>
#include <span>
#include <string_view>

#include "model/job.h"
#include "model/job_state.h"

namespace gpupool {

enum class AttemptEvent {
  kStarted,      // its process runs (for a gang: every rank's)
  kExitedClean,  // it exited with code 0, no signal and no reason: it finished
  kExitedZero,   // it exited with code 0 but was stopped (a signal, or the shim's reason)
  kExitedError,  // it exited with a non-zero code
  kFailed,       // it failed without a normal exit (spawn error, a limit)
  kLost,         // its node or agent lost it
  kVacated,      // its provider took the GPU back and it was stopped
  kRefused,      // the agent refused the start order: nothing ran
  kPreempt,      // the scheduler orders it stopped to make room for another job
  kStopForGood,  // the server orders it stopped to end its job (an idle session)
  kGangStop,     // one of its ranks ended badly: the others are ordered to stop
};
inline constexpr AttemptEvent kAllAttemptEvents[] = {
    AttemptEvent::kStarted,     AttemptEvent::kExitedClean, AttemptEvent::kExitedZero,
    AttemptEvent::kExitedError, AttemptEvent::kFailed,      AttemptEvent::kLost,
    AttemptEvent::kVacated,     AttemptEvent::kRefused,     AttemptEvent::kPreempt,
    AttemptEvent::kStopForGood, AttemptEvent::kGangStop};
std::string_view AttemptEventName(AttemptEvent e);

// One row: in state `from`, `event` leads to `to` and means `job_event` for
// the attempt's job (none: the job is not told).
struct AttemptTransitionRule {
  AttemptState from;
  AttemptEvent event;
  AttemptState to;
  std::optional<JobEvent> job_event;
};

struct AttemptTransition {
  bool accepted = false;  // false: the event does not apply in this state; nothing changes
  AttemptState next = AttemptState::kScheduled;
  std::optional<JobEvent> job_event;
};

// The whole table, for documentation and tests.
std::span<const AttemptTransitionRule> AttemptTransitionTable();

AttemptTransition StepAttempt(AttemptState state, AttemptEvent event);

}  // namespace gpupool
