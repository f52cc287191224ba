// net/reconnect.h: which server an agent tries next, and when.
#include "net/reconnect.h"

#include <gtest/gtest.h>

#include <random>

namespace gpupool::net {
namespace {

TEST(ReconnectTest, TriesEveryServerSoonThenBacksOffPerRound) {
  std::mt19937_64 rng(7);
  Reconnect r(3, 100, 10'000, 2'000);
  EXPECT_EQ(r.server(), 0u);
  // The other two servers soon, then the first back-off (100 + up to half).
  int64_t a = r.Failed("connection refused", rng);
  EXPECT_EQ(r.server(), 1u);
  EXPECT_GE(a, Reconnect::kSoonMinMs);
  EXPECT_LE(a, Reconnect::kSoonMaxMs);
  (void)r.Failed("connection refused", rng);
  EXPECT_EQ(r.server(), 2u);
  int64_t round1 = r.Failed("connection refused", rng);
  EXPECT_EQ(r.server(), 0u);
  EXPECT_GE(round1, 100);
  EXPECT_LE(round1, 150);
  // Doubling per round, to the ceiling.
  int64_t last = 0;
  for (int round = 0; round < 10; ++round) {
    (void)r.Failed("x", rng);
    (void)r.Failed("x", rng);
    last = r.Failed("x", rng);
  }
  EXPECT_GE(last, 10'000);
  EXPECT_LE(last, 15'000);
}

TEST(ReconnectTest, ARoundThatMetAStandbyBacksOffAtMostItsCeilingAndAWelcomeStartsOver) {
  std::mt19937_64 rng(7);
  Reconnect r(2, 100, 10'000, 2'000);
  for (int round = 0; round < 10; ++round) {
    (void)r.Failed("x", rng);
    (void)r.Failed("x", rng);
  }
  // A standby answered in this round (307 to the leader, or 503).
  (void)r.Failed("websocket upgrade refused by URL: HTTP 307 Temporary Redirect", rng);
  int64_t after_standby = r.Failed("connection refused", rng);
  EXPECT_LE(after_standby, 3'000);  // 2 s and its jitter
  r.Connected();
  (void)r.Failed("closed", rng);
  EXPECT_LE(r.Failed("closed", rng), 150);  // from the first back-off again
  // One server: every failure is a round.
  Reconnect one(1, 100, 10'000, 2'000);
  EXPECT_GE(one.Failed("x", rng), 100);
  EXPECT_EQ(one.server(), 0u);
}

}  // namespace
}  // namespace gpupool::net
