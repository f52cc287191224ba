#include "model/job_state.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

namespace gpupool {
namespace {

using enum JobState;
using enum JobEvent;

JobAction Close(AttemptState s) { return {JobActionType::kCloseAttempt, s}; }
const JobAction kStart{JobActionType::kStartAttempt};
const JobAction kRun{JobActionType::kMarkAttemptRunning};
const JobAction kStop{JobActionType::kStopAttempt};

struct Expect {
  JobState to;
  std::vector<JobAction> actions;
};

// Every (state, event) pair is listed here; pairs absent from this map must be
// rejected without change. The table in job_state.cpp is checked against it.
const std::map<std::pair<JobState, JobEvent>, Expect> kExpected = {
    {{kPending, kSchedule}, {kScheduled, {kStart}}},
    {{kPending, kCancel}, {kCancelled, {}}},
    {{kScheduled, kStarted}, {kRunning, {kRun}}},
    {{kScheduled, kExitedOk}, {kSucceeded, {Close(AttemptState::kSucceeded)}}},
    {{kScheduled, kExitedError}, {JobState::kFailed, {Close(AttemptState::kFailed)}}},
    {{kScheduled, JobEvent::kAttemptFailed}, {JobState::kFailed, {Close(AttemptState::kFailed)}}},
    {{kScheduled, kLost}, {kPending, {Close(AttemptState::kLost)}}},
    {{kScheduled, kCancel}, {kCancelled, {kStop, Close(AttemptState::kCancelled)}}},
    {{kRunning, kStarted}, {kRunning, {}}},
    {{kRunning, kExitedOk}, {kSucceeded, {Close(AttemptState::kSucceeded)}}},
    {{kRunning, kExitedError}, {JobState::kFailed, {Close(AttemptState::kFailed)}}},
    {{kRunning, JobEvent::kAttemptFailed}, {JobState::kFailed, {Close(AttemptState::kFailed)}}},
    {{kRunning, kLost}, {kPending, {Close(AttemptState::kLost)}}},
    {{kRunning, kCancel}, {kCancelled, {kStop, Close(AttemptState::kCancelled)}}},
    {{kScheduled, kPreempt}, {kScheduled, {kStop}}},
    {{kRunning, kPreempt}, {kRunning, {kStop}}},
    {{kScheduled, kPreempted}, {kPending, {Close(AttemptState::kPreempted)}}},
    {{kRunning, kPreempted}, {kPending, {Close(AttemptState::kPreempted)}}},
    {{kScheduled, kVacated}, {kPending, {Close(AttemptState::kVacated)}}},
    {{kRunning, kVacated}, {kPending, {Close(AttemptState::kVacated)}}},
    {{kScheduled, kRefused}, {kPending, {Close(AttemptState::kRefused)}}},
    {{kScheduled, kRetry}, {kPending, {Close(AttemptState::kFailed)}}},
    {{kRunning, kRetry}, {kPending, {Close(AttemptState::kFailed)}}},
    {{kScheduled, JobEvent::kEnded}, {kCancelled, {Close(AttemptState::kCancelled)}}},
    {{kRunning, JobEvent::kEnded}, {kCancelled, {Close(AttemptState::kCancelled)}}},
};

TEST(JobStateTest, EveryStateEventPair) {
  for (JobState s : kAllJobStates) {
    for (JobEvent e : kAllJobEvents) {
      SCOPED_TRACE(std::string(JobStateName(s)) + " + " + std::string(JobEventName(e)));
      JobTransition t = Step(s, e);
      auto it = kExpected.find({s, e});
      if (it == kExpected.end()) {
        EXPECT_FALSE(t.accepted);
        EXPECT_EQ(t.next, s);
        EXPECT_TRUE(t.actions.empty());
      } else {
        EXPECT_TRUE(t.accepted);
        EXPECT_EQ(t.next, it->second.to);
        EXPECT_EQ(t.actions, it->second.actions);
      }
    }
  }
}

TEST(JobStateTest, TableHasNoDuplicateRules) {
  std::set<std::pair<JobState, JobEvent>> seen;
  for (const auto& rule : JobTransitionTable()) {
    EXPECT_TRUE(seen.insert({rule.from, rule.event}).second)
        << JobStateName(rule.from) << " + " << JobEventName(rule.event);
  }
  EXPECT_EQ(seen.size(), kExpected.size());
}

TEST(JobStateTest, TerminalStatesAcceptNothing) {
  for (JobState s : {kSucceeded, JobState::kFailed, kCancelled}) {
    ASSERT_TRUE(IsTerminal(s));
    for (JobEvent e : kAllJobEvents) EXPECT_FALSE(Step(s, e).accepted);
  }
}

TEST(JobStateTest, RequeueAfterLostCanBeScheduledAgain) {
  JobState s = kPending;
  for (JobEvent e : {kSchedule, kStarted, kLost, kSchedule, kStarted, kExitedOk}) {
    JobTransition t = Step(s, e);
    ASSERT_TRUE(t.accepted) << JobEventName(e);
    s = t.next;
  }
  EXPECT_EQ(s, kSucceeded);
}

TEST(JobStateTest, PreemptionRequeuesWithoutFailing) {
  // Preempting orders a stop but leaves the job running until the attempt
  // has left; then it is pending again and can run as a new attempt.
  JobState s = kPending;
  for (JobEvent e : {kSchedule, kStarted, kPreempt}) s = Step(s, e).next;
  EXPECT_EQ(s, kRunning);
  JobTransition left = Step(s, kPreempted);
  ASSERT_TRUE(left.accepted);
  EXPECT_EQ(left.next, kPending);
  EXPECT_EQ(left.actions, (std::vector<JobAction>{Close(AttemptState::kPreempted)}));
  EXPECT_FALSE(Step(kPending, kPreempt).accepted);
  EXPECT_TRUE(Step(kPending, kSchedule).accepted);
}

TEST(JobStateTest, ProviderVacatingOrRefusingRequeuesWithoutFailing) {
  JobState s = kPending;
  for (JobEvent e : {kSchedule, kStarted}) s = Step(s, e).next;
  JobTransition vacated = Step(s, kVacated);
  ASSERT_TRUE(vacated.accepted);
  EXPECT_EQ(vacated.next, kPending);
  EXPECT_EQ(vacated.actions, (std::vector<JobAction>{Close(AttemptState::kVacated)}));
  // A refusal answers a start order: only a scheduled job gets one.
  EXPECT_FALSE(Step(kRunning, kRefused).accepted);
  JobTransition refused = Step(Step(kPending, kSchedule).next, kRefused);
  ASSERT_TRUE(refused.accepted);
  EXPECT_EQ(refused.next, kPending);
  EXPECT_EQ(refused.actions, (std::vector<JobAction>{Close(AttemptState::kRefused)}));
  EXPECT_TRUE(Step(refused.next, kSchedule).accepted);
  EXPECT_EQ(JobEventName(kVacated), "vacated");
  EXPECT_EQ(JobEventName(kRefused), "refused");
}

TEST(JobStateTest, ExitEventFollowsCode) {
  EXPECT_EQ(ExitEvent(0), kExitedOk);
  EXPECT_EQ(ExitEvent(1), kExitedError);
  EXPECT_EQ(ExitEvent(-9), kExitedError);
}

// The table, not the caller, says what a transition does to the job: who
// goes back to the front of its class, what counts as a restart, when a
// preemption is recorded and what the job's reason says.
TEST(JobStateTest, TheTableCarriesTheEffectsOnTheJob) {
  for (JobState live : {kScheduled, kRunning}) {
    // Displaced through no fault of its own: first in its class again.
    for (JobEvent e : {kLost, kVacated}) {
      EXPECT_TRUE(Step(live, e).effect.requeue_front) << JobEventName(e);
      EXPECT_FALSE(Step(live, e).effect.count_restart) << JobEventName(e);
    }
    // A preempted job waits its turn; a retry uses one of its restarts.
    EXPECT_FALSE(Step(live, kPreempted).effect.requeue_front);
    EXPECT_EQ(Step(live, kPreempted).effect.reason, JobReason::kRequeuedPreempted);
    EXPECT_TRUE(Step(live, kRetry).effect.count_restart);
    EXPECT_FALSE(Step(live, kRetry).effect.requeue_front);
    EXPECT_TRUE(Step(live, kPreempt).effect.mark_preempted);
    EXPECT_EQ(Step(live, kPreempt).effect.reason, JobReason::kBeingPreempted);
    EXPECT_EQ(Step(live, kExitedError).effect.reason, JobReason::kExit);
    EXPECT_EQ(Step(live, kEnded).effect.reason, JobReason::kAttemptReason);
  }
  EXPECT_TRUE(Step(kScheduled, kRefused).effect.requeue_front);
  EXPECT_EQ(Step(kRunning, kStarted).effect.reason, JobReason::kClearUnlessStopping);
  // No other transition counts a restart or marks a preemption.
  for (const auto& rule : JobTransitionTable()) {
    if (rule.event != kRetry) {
      EXPECT_FALSE(rule.effect.count_restart);
    }
    if (rule.event != kPreempt) {
      EXPECT_FALSE(rule.effect.mark_preempted);
    }
  }
}

}  // namespace
}  // namespace gpupool
