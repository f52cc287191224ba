#include "model/job_state.h"

namespace gpupool {
namespace {

using enum JobState;
using enum JobEvent;

JobAction Close(AttemptState s) { return {JobActionType::kCloseAttempt, s}; }
const JobAction kStart{JobActionType::kStartAttempt};
const JobAction kMarkRunning{JobActionType::kMarkAttemptRunning};
const JobAction kStop{JobActionType::kStopAttempt};

std::vector<JobTransitionRule> BuildTable() {
  std::vector<JobTransitionRule> t = {
      {kPending, kSchedule, kScheduled, {kStart}},
      {kPending, kCancel, kCancelled, {}},
      {kScheduled, kStarted, kRunning, {kMarkRunning}},
      // A duplicate "started" report is harmless.
      {kRunning, kStarted, kRunning, {}},
  };
  // Scheduled and running attempts end the same ways: a job can exit before
  // its "started" report arrives.
  for (JobState live : {kScheduled, kRunning}) {
    t.push_back({live, kExitedOk, kSucceeded, {Close(AttemptState::kSucceeded)}});
    t.push_back({live, kExitedError, JobState::kFailed, {Close(AttemptState::kFailed)}});
    t.push_back({live, kAttemptFailed, JobState::kFailed, {Close(AttemptState::kFailed)}});
    t.push_back({live, kLost, kPending, {Close(AttemptState::kLost)}});
    t.push_back({live, kCancel, kCancelled, {kStop, Close(AttemptState::kCancelled)}});
    // Preemption keeps the job where it is until the attempt has left: its
    // GPUs are busy until then. Leaving is not a failure.
    t.push_back({live, kPreempt, live, {kStop}});
    t.push_back({live, kPreempted, kPending, {Close(AttemptState::kPreempted)}});
    // The provider taking its GPU back is no fault of the job's either.
    t.push_back({live, kVacated, kPending, {Close(AttemptState::kVacated)}});
    // A failure the job may retry (max_restarts): the attempt failed all the same.
    t.push_back({live, kRetry, kPending, {Close(AttemptState::kFailed)}});
    t.push_back({live, kEnded, kCancelled, {Close(AttemptState::kCancelled)}});
  }
  // Only a start order can be refused: nothing ran.
  t.push_back({kScheduled, kRefused, kPending, {Close(AttemptState::kRefused)}});
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
    if (rule.from == state && rule.event == event) return {true, rule.to, rule.actions};
  }
  return {false, state, {}};
}

}  // namespace gpupool
