#include "common/clock.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace gpupool {
namespace {

TEST(FakeClock, StartsAtGivenTime) {
  EXPECT_EQ(FakeClock().NowMs(), 1'700'000'000'000);
  EXPECT_EQ(FakeClock(5).NowMs(), 5);
}

TEST(FakeClock, AdvanceAndSet) {
  FakeClock clock(1000);
  const Clock& c = clock;  // used through the interface
  clock.AdvanceMs(250);
  EXPECT_EQ(c.NowMs(), 1250);
  clock.AdvanceMs(0);
  EXPECT_EQ(c.NowMs(), 1250);
  clock.SetMs(42);
  EXPECT_EQ(c.NowMs(), 42);
  clock.AdvanceMs(-2);
  EXPECT_EQ(c.NowMs(), 40);
}

TEST(FakeClock, TimePassingMovesBothClocksAJumpOnlyTheWall) {
  FakeClock clock(5'000);
  const int64_t mono = clock.MonoMs();
  clock.AdvanceMs(100);
  EXPECT_EQ(clock.MonoMs(), mono + 100);
  clock.SetMs(10'000);  // time passes up to 10 s
  EXPECT_EQ(clock.MonoMs(), mono + 5'000);
  clock.JumpWallMs(-3'600'000);  // an operator steps the clock back an hour
  EXPECT_EQ(clock.NowMs(), 10'000 - 3'600'000);
  EXPECT_EQ(clock.MonoMs(), mono + 5'000);
}

TEST(SteadyWallClock, FollowsTheMonotonicClockNotJumps) {
  FakeClock system(1'000'000);
  SteadyWallClock steady(system);
  EXPECT_EQ(steady.NowMs(), 1'000'000);
  system.AdvanceMs(2'000);
  EXPECT_EQ(steady.NowMs(), 1'002'000);
  EXPECT_EQ(steady.SystemClockSkewMs(), 0);
  system.JumpWallMs(6 * 3'600'000);
  EXPECT_EQ(steady.NowMs(), 1'002'000);  // a duration measured across it is unchanged
  EXPECT_EQ(steady.SystemClockSkewMs(), 6 * 3'600'000);
  system.JumpWallMs(-12 * 3'600'000);
  system.AdvanceMs(500);
  EXPECT_EQ(steady.NowMs(), 1'002'500);
  EXPECT_EQ(steady.SystemClockSkewMs(), -6 * 3'600'000);
  EXPECT_EQ(steady.MonoMs(), system.MonoMs());
}

TEST(FakeClock, ConcurrentAdvances) {
  FakeClock clock(0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10'000; ++i) clock.AdvanceMs(1);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(clock.NowMs(), 40'000);
}

TEST(RealClock, IsNearNowAndMonotonicEnough) {
  RealClock clock;
  int64_t a = clock.NowMs();
  int64_t b = clock.NowMs();
  EXPECT_GT(a, 1'600'000'000'000);  // after 2020
  EXPECT_LT(a, 4'102'444'800'000);  // before 2100
  EXPECT_GE(b, a - 1000);
}

TEST(RealClock, MonotonicNeverGoesBack) {
  RealClock clock;
  int64_t last = clock.MonoMs();
  for (int i = 0; i < 1000; ++i) {
    int64_t now = clock.MonoMs();
    EXPECT_GE(now, last);
    last = now;
  }
}

TEST(FormatTimestampMs, Examples) {
  EXPECT_EQ(FormatTimestampMs(1'700'000'000'123), "2023-11-14T22:13:20.123Z");
  EXPECT_EQ(FormatTimestampMs(0), "1970-01-01T00:00:00.000Z");
  EXPECT_EQ(FormatTimestampMs(1), "1970-01-01T00:00:00.001Z");
  EXPECT_EQ(FormatTimestampMs(999), "1970-01-01T00:00:00.999Z");
  EXPECT_EQ(FormatTimestampMs(1000), "1970-01-01T00:00:01.000Z");
  EXPECT_EQ(FormatTimestampMs(951'782'400'000), "2000-02-29T00:00:00.000Z");  // leap day
  EXPECT_EQ(FormatTimestampMs(253'402'300'799'999), "9999-12-31T23:59:59.999Z");
}

TEST(FormatTimestampMs, BeforeEpoch) {
  EXPECT_EQ(FormatTimestampMs(-1), "1969-12-31T23:59:59.999Z");
  EXPECT_EQ(FormatTimestampMs(-1000), "1969-12-31T23:59:59.000Z");
  EXPECT_EQ(FormatTimestampMs(-1001), "1969-12-31T23:59:58.999Z");
}

}  // namespace
}  // namespace gpupool
