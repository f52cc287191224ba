#include "model/job_state.h"

namespace gpupool {
namespace {

using enum JobState;
using enum JobEvent;

JobAction Close(AttemptState s) { return {JobActionType::kCloseAttempt, s}; }
const JobAction kStart{JobActionType::kStartAttempt};
const JobAction kMarkRunning{JobActionType::kMarkAttemptRunning};
const JobAction kStop{JobActionType::kStopAttempt};

// Effects on the job: its reason, and whether it goes back to the front.
JobEffect Reason(JobReason r) { return {r}; }
JobEffect Requeued(JobReason r, bool front) { return {r, front}; }

std::vector<JobTransitionRule> BuildTable() {
  using R = JobReason;
  const JobEffect clear = Reason(R::kClear);
  std::vector<JobTransitionRule> t = {
      {kPending, kSchedule, kScheduled, {kStart}, clear},
      {kPending, kCancel, kCancelled, {}, Reason(R::kExit)},
      {kScheduled, kStarted, kRunning, {kMarkRunning}, Reason(R::kClearUnlessStopping)},
      // A duplicate "started" report is harmless.
      {kRunning, kStarted, kRunning, {}, Reason(R::kClearUnlessStopping)},
  };
  // Scheduled and running attempts end the same ways: a job can exit before
  // its "started" report arrives.
  for (JobState live : {kScheduled, kRunning}) {
    t.push_back({live, kExitedOk, kSucceeded, {Close(AttemptState::kSucceeded)}, clear});
    t.push_back(
        {live, kExitedError, JobState::kFailed, {Close(AttemptState::kFailed)}, Reason(R::kExit)});
    t.push_back({live,
                 kAttemptFailed,
                 JobState::kFailed,
                 {Close(AttemptState::kFailed)},
                 Reason(R::kExit)});
    // Lost, vacated and refused attempts are no fault of the job's: it goes
    // back to the front of its class.
    t.push_back(
        {live, kLost, kPending, {Close(AttemptState::kLost)}, Requeued(R::kRequeuedLost, true)});
    t.push_back(
        {live, kCancel, kCancelled, {kStop, Close(AttemptState::kCancelled)}, Reason(R::kExit)});
    // Preemption keeps the job where it is until the attempt has left: its
    // GPUs are busy until then. Leaving is not a failure.
    t.push_back({live, kPreempt, live, {kStop}, {R::kBeingPreempted, false, false, true}});
    t.push_back({live,
                 kPreempted,
                 kPending,
                 {Close(AttemptState::kPreempted)},
                 Requeued(R::kRequeuedPreempted, false)});
    // The provider taking its GPU back is no fault of the job's either.
    t.push_back({live,
                 kVacated,
                 kPending,
                 {Close(AttemptState::kVacated)},
                 Requeued(R::kRequeuedVacated, true)});
    // A failure the job may retry (max_restarts): the attempt failed all the same.
    t.push_back({live,
                 kRetry,
                 kPending,
                 {Close(AttemptState::kFailed)},
                 {R::kRequeuedRetry, false, true, false}});
    t.push_back(
        {live, kEnded, kCancelled, {Close(AttemptState::kCancelled)}, Reason(R::kAttemptReason)});
  }
  // Only a start order can be refused: nothing ran.
  t.push_back({kScheduled,
               kRefused,
               kPending,
               {Close(AttemptState::kRefused)},
               Requeued(R::kRequeuedRefused, true)});
  return t;
}

const std::vector<JobTransitionRule>& Table() {
  static const std::vector<JobTransitionRule> table = BuildTable();
  return table;
}

}  // namespace

std::string_view JobEventName(JobEvent e) {
  switch (e) {
    case kSchedule:
      return "schedule";
    case kStarted:
      return "started";
    case kExitedOk:
      return "exited-ok";
    case kExitedError:
      return "exited-error";
    case JobEvent::kAttemptFailed:
      return "failed";
    case kLost:
      return "lost";
    case kCancel:
      return "cancel";
    case kPreempt:
      return "preempt";
    case kPreempted:
      return "preempted";
    case kVacated:
      return "vacated";
    case kRefused:
      return "refused";
    case kRetry:
      return "retry";
    case kEnded:
      return "ended";
  }
  return "unknown";
}

std::span<const JobTransitionRule> JobTransitionTable() { return Table(); }

JobTransition Step(JobState state, JobEvent event) {
  for (const auto& rule : Table()) {
    if (rule.from == state && rule.event == event) {
      return {true, rule.to, rule.actions, rule.effect};
    }
  }
  return {false, state, {}, {}};
}

}  // namespace gpupool
