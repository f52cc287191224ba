#include "model/attempt_state.h"

#include <vector>

namespace gpupool {
namespace {

using enum AttemptEvent;
using S = AttemptState;

std::vector<AttemptTransitionRule> BuildTable() {
  std::vector<AttemptTransitionRule> t = {
      {S::kScheduled, kStarted, S::kRunning, JobEvent::kStarted},
      // A duplicate "started" report is harmless.
      {S::kRunning, kStarted, S::kRunning, JobEvent::kStarted},
  };
  for (S live : {S::kScheduled, S::kRunning}) {
    t.push_back({live, kExitedClean, live, JobEvent::kExitedOk});
    t.push_back({live, kExitedZero, live, JobEvent::kExitedOk});
    t.push_back({live, kExitedError, live, JobEvent::kExitedError});
    t.push_back({live, kFailed, live, JobEvent::kAttemptFailed});
    t.push_back({live, kLost, live, JobEvent::kLost});
    t.push_back({live, kVacated, live, JobEvent::kVacated});
    // The job's table accepts a refusal only while it is scheduled.
    t.push_back({live, kRefused, live, JobEvent::kRefused});
    t.push_back({live, kPreempt, S::kPreempting, JobEvent::kPreempt});
    // Stopped like a preemption (its checkpoint is taken), but its job ends.
    t.push_back({live, kStopForGood, S::kStoppingForGood, JobEvent::kPreempt});
    // The job runs on until every rank has ended (the gang closes then).
    t.push_back({live, kGangStop, S::kGangStopping, std::nullopt});
  }
  // Leaving: a late "started" still tells the job (it may not have heard
  // one), and the end is what the stop was for unless the attempt finished
  // first, or its provider took it back (vacated, refused) before.
  struct Leaving {
    S state;
    JobEvent ended;  // what any other end means
  };
  for (Leaving l : {Leaving{S::kPreempting, JobEvent::kPreempted},
                    Leaving{S::kStoppingForGood, JobEvent::kEnded},
                    Leaving{S::kGangStopping, JobEvent::kExitedError}}) {
    t.push_back({l.state, kStarted, l.state, JobEvent::kStarted});
    t.push_back({l.state, kExitedClean, l.state, JobEvent::kExitedOk});
    t.push_back({l.state, kVacated, l.state, JobEvent::kVacated});
    t.push_back({l.state, kRefused, l.state, JobEvent::kRefused});
    if (l.state == S::kGangStopping) {
      // A gang closes with the job event its ranks' ends name (the cause
      // rank's): the stop itself changes nothing about how it ended.
      t.push_back({l.state, kExitedZero, l.state, JobEvent::kExitedOk});
      t.push_back({l.state, kExitedError, l.state, JobEvent::kExitedError});
      t.push_back({l.state, kFailed, l.state, JobEvent::kAttemptFailed});
      t.push_back({l.state, kLost, l.state, JobEvent::kLost});
      continue;
    }
    for (AttemptEvent e : {kExitedZero, kExitedError, kFailed, kLost}) {
      t.push_back({l.state, e, l.state, l.ended});
    }
  }
  return t;
}

const std::vector<AttemptTransitionRule>& Table() {
  static const std::vector<AttemptTransitionRule> table = BuildTable();
  return table;
}

}  // namespace

std::string_view AttemptEventName(AttemptEvent e) {
  switch (e) {
    case kStarted:
      return "started";
    case kExitedClean:
      return "exited-clean";
    case kExitedZero:
      return "exited-zero";
    case kExitedError:
      return "exited-error";
    case kFailed:
      return "failed";
    case kLost:
      return "lost";
    case kVacated:
      return "vacated";
    case kRefused:
      return "refused";
    case kPreempt:
      return "preempt";
    case kStopForGood:
      return "stop-for-good";
    case kGangStop:
      return "gang-stop";
  }
  return "unknown";
}

std::span<const AttemptTransitionRule> AttemptTransitionTable() { return Table(); }

AttemptTransition StepAttempt(AttemptState state, AttemptEvent event) {
  for (const auto& rule : Table()) {
    if (rule.from == state && rule.event == event) return {true, rule.to, rule.job_event};
  }
  return {false, state, std::nullopt};
}

}  // namespace gpupool
