#include "agent/lease_watch.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace gpupool::agent {
namespace {

using ::testing::HasSubstr;

TEST(LeaseWatch, WithoutALeaseNothingIsEverDue) {
  LeaseWatch w(std::nullopt, 10'000);
  EXPECT_FALSE(w.held());
  EXPECT_FALSE(w.MustStop(INT64_MAX));
  EXPECT_FALSE(w.Expired(INT64_MAX));
}

TEST(LeaseWatch, TheStopStartsAWindowBeforeTheDeadline) {
  // A 30 s lease and a 10 s kill grace: the stop starts 10 s early.
  LeaseWatch w(AttemptLease{100'000, 30'000}, 10'000);
  EXPECT_EQ(w.stop_window_ms(), 10'000);
  EXPECT_FALSE(w.MustStop(89'999));
  EXPECT_TRUE(w.MustStop(90'000));
  EXPECT_FALSE(w.Expired(99'999));
  EXPECT_TRUE(w.Expired(100'000));
  // A short lease: a third of it, so the job gets two thirds of each lease.
  LeaseWatch shorter(AttemptLease{100'000, 3'000}, 10'000);
  EXPECT_EQ(shorter.stop_window_ms(), 1'000);
  EXPECT_TRUE(shorter.MustStop(99'000));
  EXPECT_FALSE(shorter.MustStop(98'999));
}

TEST(LeaseWatch, RenewalsMoveTheDeadlineForwardOnly) {
  LeaseWatch w(AttemptLease{100'000, 30'000}, 10'000);
  w.Update(AttemptLease{130'000, 30'000});
  EXPECT_EQ(w.deadline_ms(), 130'000);
  EXPECT_FALSE(w.MustStop(110'000));
  w.Update(AttemptLease{120'000, 30'000});  // an older file content
  EXPECT_EQ(w.deadline_ms(), 130'000);
}

TEST(LeaseWatch, SaysWhyTheJobStopped) {
  LeaseWatch w(AttemptLease{100'000, 30'000}, 10'000);
  EXPECT_THAT(w.Reason(), HasSubstr("lost contact with the server for 30s"));
  EXPECT_THAT(w.Reason(), HasSubstr("(attempt lease)"));
}

}  // namespace
}  // namespace gpupool::agent
