#include "server/node_liveness.h"

#include <gtest/gtest.h>

namespace gpupool::server {
namespace {

constexpr int64_t kHourMs = 3'600'000;

class NodeLivenessTest : public ::testing::Test {
 protected:
  FakeClock clock_;
  NodeLiveness liveness_{clock_, LivenessOptions{30'000, 40'000}};
};

TEST(LeaseMargin, ATenthOfTheLeaseAtLeastTwoSeconds) {
  EXPECT_EQ(LeaseMarginMs(30'000), 3'000);
  EXPECT_EQ(LeaseMarginMs(5'000), 2'000);
  EXPECT_EQ(LeaseMarginMs(600'000), 60'000);
}

TEST_F(NodeLivenessTest, AConnectedNodeIsNeverLost) {
  liveness_.LeaseRequested("a");
  liveness_.Connected("a");
  clock_.AdvanceMs(10 * kHourMs);
  EXPECT_FALSE(liveness_.LeasesExpired("a"));
  EXPECT_FALSE(liveness_.LostNow("a"));
}

TEST_F(NodeLivenessTest, ASilentNodeIsLostOnlyOnceItsLeasesHaveCertainlyEnded) {
  liveness_.LeaseRequested("a");
  liveness_.Connected("a");
  clock_.AdvanceMs(20'000);  // the agent hangs: no more requests
  liveness_.LeaseRequested("a");
  clock_.AdvanceMs(15'000);  // its connection is closed for silence
  liveness_.Disconnected("a");
  // Offline long enough (40 s) only at +75 s; the lease ends at 20 + 30 + 3.
  clock_.AdvanceMs(39'999);
  EXPECT_TRUE(liveness_.LeasesExpired("a"));
  EXPECT_FALSE(liveness_.LostNow("a"));
  clock_.AdvanceMs(1);
  EXPECT_TRUE(liveness_.LostNow("a"));
}

TEST_F(NodeLivenessTest, ARevokedNodeWaitsForTheLeaseNotTheLostTimer) {
  liveness_.LeaseRequested("a");
  liveness_.Connected("a");
  clock_.AdvanceMs(1'000);
  liveness_.Disconnected("a");  // revoked now
  clock_.AdvanceMs(30'000 + 3'000 - 1'000 - 1);
  EXPECT_FALSE(liveness_.LeasesExpired("a"));
  clock_.AdvanceMs(1);
  EXPECT_TRUE(liveness_.LeasesExpired("a"));
  EXPECT_EQ(liveness_.LeasesExpireAt("a"), clock_.MonoMs());
}

TEST_F(NodeLivenessTest, ANodeUnknownToThisProcessCountsAsHeardAtItsStart) {
  // A restarted server: the node may hold a lease granted just before.
  clock_.AdvanceMs(32'999);
  EXPECT_FALSE(liveness_.LeasesExpired("b"));
  clock_.AdvanceMs(1);
  EXPECT_TRUE(liveness_.LeasesExpired("b"));
  clock_.AdvanceMs(40'000 - 33'000 - 1);
  EXPECT_FALSE(liveness_.LostNow("b"));
  clock_.AdvanceMs(1);
  EXPECT_TRUE(liveness_.LostNow("b"));
}

TEST_F(NodeLivenessTest, WallClockJumpsChangeNothing) {
  liveness_.LeaseRequested("a");
  liveness_.Connected("a");
  liveness_.Disconnected("a");
  clock_.JumpWallMs(6 * kHourMs);
  EXPECT_FALSE(liveness_.LeasesExpired("a"));
  EXPECT_FALSE(liveness_.LostNow("a"));
  clock_.JumpWallMs(-12 * kHourMs);
  clock_.AdvanceMs(39'999);
  EXPECT_FALSE(liveness_.LostNow("a"));
  clock_.AdvanceMs(1);
  EXPECT_TRUE(liveness_.LostNow("a"));
}

TEST(NodeLiveness, NoLeasesMeansOnlyTheLostTimerCounts) {
  FakeClock clock;
  NodeLiveness l(clock, LivenessOptions{0, 40'000});
  l.Connected("a");
  l.Disconnected("a");
  EXPECT_TRUE(l.LeasesExpired("a"));
  clock.AdvanceMs(40'000);
  EXPECT_TRUE(l.LostNow("a"));
}

}  // namespace
}  // namespace gpupool::server
