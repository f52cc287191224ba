#include "model/job.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <string>

namespace gpupool {
namespace {

using ::testing::HasSubstr;

TEST(JobState, NamesRoundTrip) {
  std::set<std::string_view> names;
  for (JobState s : kAllJobStates) {
    std::string_view name = JobStateName(s);
    EXPECT_FALSE(name.empty());
    names.insert(name);
    auto back = ParseJobState(name);
    ASSERT_TRUE(back.ok()) << name;
    EXPECT_EQ(*back, s);
  }
  EXPECT_EQ(names.size(), std::size(kAllJobStates));
  EXPECT_EQ(JobStateName(JobState::kPending), "pending");
  EXPECT_EQ(JobStateName(JobState::kScheduled), "scheduled");
  EXPECT_EQ(JobStateName(JobState::kRunning), "running");
  EXPECT_EQ(JobStateName(JobState::kSucceeded), "succeeded");
  EXPECT_EQ(JobStateName(JobState::kFailed), "failed");
  EXPECT_EQ(JobStateName(JobState::kCancelled), "cancelled");
}

TEST(JobState, ParseErrors) {
  for (const char* bad : {"", "Pending", "PENDING", "done", "pending ", "canceled"}) {
    auto r = ParseJobState(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(r.status().message(),
                HasSubstr("unknown job state \"" + std::string(bad) +
                          "\" (one of: pending, "
                          "scheduled, running, succeeded, failed, cancelled)"));
  }
}

TEST(JobState, Terminal) {
  EXPECT_FALSE(IsTerminal(JobState::kPending));
  EXPECT_FALSE(IsTerminal(JobState::kScheduled));
  EXPECT_FALSE(IsTerminal(JobState::kRunning));
  EXPECT_TRUE(IsTerminal(JobState::kSucceeded));
  EXPECT_TRUE(IsTerminal(JobState::kFailed));
  EXPECT_TRUE(IsTerminal(JobState::kCancelled));
}

TEST(AttemptState, NamesRoundTrip) {
  const AttemptState all[] = {
      AttemptState::kScheduled, AttemptState::kRunning,   AttemptState::kSucceeded,
      AttemptState::kFailed,    AttemptState::kCancelled, AttemptState::kLost,
      AttemptState::kPreempted, AttemptState::kVacated,   AttemptState::kRefused};
  std::set<std::string_view> names;
  for (AttemptState s : all) {
    names.insert(AttemptStateName(s));
    auto back = ParseAttemptState(AttemptStateName(s));
    ASSERT_TRUE(back.ok()) << AttemptStateName(s);
    EXPECT_EQ(*back, s);
  }
  EXPECT_EQ(names.size(), std::size(all));
  EXPECT_EQ(AttemptStateName(AttemptState::kLost), "lost");
  EXPECT_EQ(AttemptStateName(AttemptState::kVacated), "vacated");
  EXPECT_EQ(AttemptStateName(AttemptState::kRefused), "refused");
  auto bad = ParseAttemptState("pending");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("unknown attempt state \"pending\""));
  EXPECT_THAT(bad.status().message(), HasSubstr("lost"));
}

TEST(AttemptState, Live) {
  EXPECT_TRUE(IsLive(AttemptState::kScheduled));
  EXPECT_TRUE(IsLive(AttemptState::kRunning));
  EXPECT_FALSE(IsLive(AttemptState::kSucceeded));
  EXPECT_FALSE(IsLive(AttemptState::kFailed));
  EXPECT_FALSE(IsLive(AttemptState::kCancelled));
  EXPECT_FALSE(IsLive(AttemptState::kLost));
  EXPECT_FALSE(IsLive(AttemptState::kVacated));
  EXPECT_FALSE(IsLive(AttemptState::kRefused));
}

TEST(AttemptId, MakeAndParse) {
  EXPECT_EQ(MakeAttemptId(42, 1), "42.1");
  EXPECT_EQ(MakeAttemptId(1, 12), "1.12");
  auto r = ParseAttemptId("42.3");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->first, 42);
  EXPECT_EQ(r->second, 3);
  for (auto [job, number] :
       {std::pair<int64_t, int32_t>{1, 1}, {42, 7}, {9'223'372'036'854'775'807, 2'147'483'647}}) {
    auto back = ParseAttemptId(MakeAttemptId(job, number));
    ASSERT_TRUE(back.ok()) << MakeAttemptId(job, number);
    EXPECT_EQ(back->first, job);
    EXPECT_EQ(back->second, number);
  }
}

TEST(AttemptId, ParseErrors) {
  for (const char* bad : {"",
                          "42",
                          "42.",
                          ".1",
                          ".",
                          "0.1",
                          "42.0",
                          "42.1x",
                          "x42.1",
                          "42.1.2",
                          "-1.1",
                          "42.-1",
                          "+42.1",
                          "42.+1",
                          " 42.1",
                          "42.1 ",
                          "42..1",
                          "4 2.1",
                          "042.1",
                          "42.01",
                          "9223372036854775808.1",
                          "42.2147483648",
                          "a.b"}) {
    auto r = ParseAttemptId(bad);
    EXPECT_FALSE(r.ok()) << "accepted \"" << bad << "\"";
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
      EXPECT_THAT(r.status().message(),
                  HasSubstr("invalid attempt id \"" + std::string(bad) + "\""));
    }
  }
}

TEST(Job, Defaults) {
  Job job;
  EXPECT_EQ(job.state, JobState::kPending);
  EXPECT_EQ(job.attempts, 0);
  EXPECT_FALSE(job.exit_code.has_value());
  Attempt a;
  EXPECT_EQ(a.state, AttemptState::kScheduled);
  EXPECT_TRUE(IsLive(a.state));
}

TEST(Attempt, LostWorkIsTheRunOfAnAttemptWhoseJobMustRunAgain) {
  Attempt a;
  a.started_ms = 1'000;
  a.finished_ms = 61'000;
  for (AttemptState s : {AttemptState::kLost, AttemptState::kPreempted, AttemptState::kVacated}) {
    a.state = s;
    EXPECT_EQ(LostWorkMs(a), 60'000) << AttemptStateName(s);
  }
  for (AttemptState s : {AttemptState::kSucceeded, AttemptState::kFailed, AttemptState::kCancelled,
                         AttemptState::kRefused, AttemptState::kRunning}) {
    a.state = s;
    EXPECT_EQ(LostWorkMs(a), 0) << AttemptStateName(s);
  }
  a.state = AttemptState::kVacated;
  a.started_ms = 0;  // vacated before it started: nothing lost
  EXPECT_EQ(LostWorkMs(a), 0);
}

TEST(Attempt, LostWorkCountsFromTheLastCheckpoint) {
  Attempt a;
  a.state = AttemptState::kPreempted;
  a.started_ms = 1'000;
  a.finished_ms = 61'000;
  a.last_checkpoint_ms = 50'000;  // the next attempt restores this one
  EXPECT_EQ(LostWorkMs(a), 11'000);
  a.last_checkpoint_ms = 61'000;  // checkpointed on the way out: nothing lost
  EXPECT_EQ(LostWorkMs(a), 0);
  a.last_checkpoint_ms = 70'000;  // after the end (a clock step): nothing lost, never negative
  EXPECT_EQ(LostWorkMs(a), 0);
  a.last_checkpoint_ms = 500;  // before the start (cannot happen; counted from the start)
  EXPECT_EQ(LostWorkMs(a), 60'000);
  a.state = AttemptState::kSucceeded;  // finished: nothing to redo, checkpoint or not
  a.last_checkpoint_ms = 50'000;
  EXPECT_EQ(LostWorkMs(a), 0);
}

}  // namespace
}  // namespace gpupool
