#include "model/attempt_state.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

namespace gpupool {
namespace {

using enum AttemptEvent;
using S = AttemptState;
using J = JobEvent;

struct Expect {
  S to;
  std::optional<J> job;
};

// Every (state, event) pair that applies; pairs absent here must be rejected
// without change. The table in attempt_state.cpp is checked against it.
std::map<std::pair<S, AttemptEvent>, Expect> Expected() {
  std::map<std::pair<S, AttemptEvent>, Expect> m;
  m[{S::kScheduled, kStarted}] = {S::kRunning, J::kStarted};
  m[{S::kRunning, kStarted}] = {S::kRunning, J::kStarted};
  for (S s : {S::kScheduled, S::kRunning}) {
    m[{s, kExitedClean}] = {s, J::kExitedOk};
    m[{s, kExitedZero}] = {s, J::kExitedOk};
    m[{s, kExitedError}] = {s, J::kExitedError};
    m[{s, kFailed}] = {s, J::kAttemptFailed};
    m[{s, kLost}] = {s, J::kLost};
    m[{s, kVacated}] = {s, J::kVacated};
    m[{s, kRefused}] = {s, J::kRefused};
    m[{s, kPreempt}] = {S::kPreempting, J::kPreempt};
    m[{s, kStopForGood}] = {S::kStoppingForGood, J::kPreempt};
    m[{s, kGangStop}] = {S::kGangStopping, std::nullopt};
  }
  // Preempting: any end but a clean finish, a vacate or a refusal is the
  // preemption; stopping for good: the end of the job.
  for (auto [s, ended] :
       {std::pair{S::kPreempting, J::kPreempted}, std::pair{S::kStoppingForGood, J::kEnded}}) {
    m[{s, kStarted}] = {s, J::kStarted};
    m[{s, kExitedClean}] = {s, J::kExitedOk};
    m[{s, kExitedZero}] = {s, ended};
    m[{s, kExitedError}] = {s, ended};
    m[{s, kFailed}] = {s, ended};
    m[{s, kLost}] = {s, ended};
    m[{s, kVacated}] = {s, J::kVacated};
    m[{s, kRefused}] = {s, J::kRefused};
  }
  // A stopping gang ends as its ranks did.
  S g = S::kGangStopping;
  m[{g, kStarted}] = {g, J::kStarted};
  m[{g, kExitedClean}] = {g, J::kExitedOk};
  m[{g, kExitedZero}] = {g, J::kExitedOk};
  m[{g, kExitedError}] = {g, J::kExitedError};
  m[{g, kFailed}] = {g, J::kAttemptFailed};
  m[{g, kLost}] = {g, J::kLost};
  m[{g, kVacated}] = {g, J::kVacated};
  m[{g, kRefused}] = {g, J::kRefused};
  return m;
}

TEST(AttemptStateTest, EveryPairFollowsTheExpectedTable) {
  const auto expected = Expected();
  for (S s : kAllAttemptStates) {
    for (AttemptEvent e : kAllAttemptEvents) {
      SCOPED_TRACE(std::string(AttemptStateName(s)) + " + " + std::string(AttemptEventName(e)));
      AttemptTransition t = StepAttempt(s, e);
      auto it = expected.find({s, e});
      if (it == expected.end()) {
        EXPECT_FALSE(t.accepted);
        EXPECT_EQ(t.next, s);
        EXPECT_FALSE(t.job_event.has_value());
        continue;
      }
      EXPECT_TRUE(t.accepted);
      EXPECT_EQ(t.next, it->second.to);
      EXPECT_EQ(t.job_event, it->second.job);
    }
  }
  EXPECT_EQ(AttemptTransitionTable().size(), expected.size());
}

TEST(AttemptStateTest, FinalStatesAcceptNothingAndStoppingStatesAreNotStoppedAgain) {
  for (S s : kAllAttemptStates) {
    bool any = false;
    for (AttemptEvent e : kAllAttemptEvents) any = any || StepAttempt(s, e).accepted;
    EXPECT_EQ(any, IsLive(s)) << AttemptStateName(s);
    if (!IsStopping(s)) continue;
    for (AttemptEvent order : {kPreempt, kStopForGood, kGangStop}) {
      EXPECT_FALSE(StepAttempt(s, order).accepted)
          << AttemptStateName(s) << " + " << AttemptEventName(order);
    }
  }
}

// The job events the attempt table names are ones the job's table accepts
// in the job state an attempt in that state has (scheduled, or running once
// started), but for a refusal, which only a start order can get.
TEST(AttemptStateTest, TheJobEventsItNamesApplyToTheJob) {
  for (const AttemptTransitionRule& rule : AttemptTransitionTable()) {
    if (!rule.job_event) continue;
    SCOPED_TRACE(std::string(AttemptStateName(rule.from)) + " + " +
                 std::string(AttemptEventName(rule.event)));
    EXPECT_TRUE(Step(JobState::kScheduled, *rule.job_event).accepted);
    bool only_scheduled = rule.event == kRefused;
    if (rule.from == S::kScheduled && rule.event != kStarted) continue;
    EXPECT_EQ(Step(JobState::kRunning, *rule.job_event).accepted, !only_scheduled);
  }
}

TEST(AttemptStateTest, StatesHaveNamesThatParseBack) {
  std::set<std::string_view> names;
  for (S s : kAllAttemptStates) {
    auto parsed = ParseAttemptState(AttemptStateName(s));
    ASSERT_TRUE(parsed.ok()) << AttemptStateName(s);
    EXPECT_EQ(*parsed, s);
    names.insert(AttemptStateName(s));
  }
  EXPECT_EQ(names.size(), std::size(kAllAttemptStates));
  EXPECT_EQ(AttemptStateName(S::kPreempting), "preempting");
  EXPECT_EQ(AttemptStateName(S::kStoppingForGood), "stopping");
  EXPECT_EQ(AttemptStateName(S::kGangStopping), "gang-stopping");
  EXPECT_FALSE(ParseAttemptState("stopping-for-good").ok());
  for (S s : {S::kPreempting, S::kStoppingForGood, S::kGangStopping}) {
    EXPECT_TRUE(IsLive(s));
    EXPECT_TRUE(IsStopping(s));
  }
  for (S s : {S::kScheduled, S::kRunning}) {
    EXPECT_TRUE(IsLive(s));
    EXPECT_FALSE(IsStopping(s));
  }
}

}  // namespace
}  // namespace gpupool
