// The shim's policy (agent/shim_policy.h) driven by a fake clock: every
// timer path, with the plumbing replaced by a harness that answers the
// policy's measurements from a scripted world and sleeps as long as
// NextWakeMs says, as the shim's poll loop does.
#include "agent/shim_policy.h"

#include <signal.h>

#include <deque>
#include <string>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/clock.h"
#include "exec/limits.h"

namespace gpupool::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;

constexpr int64_t kGrace = 10'000;
constexpr int64_t kMiB = int64_t{1} << 20;

// What the plumbing would find when the policy asks.
struct World {
  int64_t memory_bytes = 0;
  int64_t work_bytes = 0;
  int64_t output_bytes = 0;
  int64_t disk_count_ms = 0;  // how long counting the work directory takes
  int64_t newest_commit = 0;
  bool fenced = false;
  std::optional<AttemptLease> lease_file;
};

class Harness {
 public:
  void Start(ShimPolicyConfig c, std::string reason = "", bool failed = false) {
    start_ = clock.MonoMs();
    s = StartShimState(std::move(c), start_, std::move(reason), failed);
  }
  // Milliseconds since the start.
  int64_t T() const { return clock.MonoMs() - start_; }
  int64_t Now() const { return clock.MonoMs(); }

  // Feeds one event and answers the measurements it asks for, as the
  // shim's Drive does. Returns the signals sent.
  std::vector<int> Send(const ShimEvent& event) {
    std::vector<int> sent;
    std::deque<ShimEvent> pending{event};
    while (!pending.empty()) {
      ShimEvent e = pending.front();
      pending.pop_front();
      for (const ShimAction& a : Step(s, e, Now())) {
        switch (a.kind) {
          case ShimAction::kSignal:
            sent.push_back(a.signal);
            signals.emplace_back(T(), a.signal);
            break;
          case ShimAction::kEvent:
            events.push_back(a.text);
            break;
          case ShimAction::kMeasureMemory:
            ++memory_checks;
            pending.push_back(shim_event::MemoryMeasured{world.memory_bytes});
            break;
          case ShimAction::kMeasureDisk:
            disk_checks.push_back(T());
            clock.AdvanceMs(world.disk_count_ms);  // counting takes time
            pending.push_back(shim_event::DiskMeasured{world.work_bytes, world.output_bytes,
                                                       world.disk_count_ms});
            break;
          case ShimAction::kScanCommits:
            ++scans;
            pending.push_back(shim_event::CommitsScanned{world.newest_commit, world.fenced});
            break;
          case ShimAction::kOfferCommit:
            offered.push_back(s.newest_commit);
            break;
          case ShimAction::kReadLease:
            ++lease_reads;
            pending.push_back(shim_event::LeaseRead{world.lease_file});
            break;
        }
      }
    }
    return sent;
  }
  std::vector<int> Tick() { return Send(shim_event::Tick{}); }

  // The poll loop for `ms`: a Tick each turn, then a sleep of NextWakeMs
  // (at least 1 ms: a poll with timeout 0 still takes time). Returns the
  // number of turns, so a loop that would spin shows.
  int RunFor(int64_t ms) {
    const int64_t end = Now() + ms;
    int turns = 0;
    while (Now() < end && turns < 100'000) {
      Tick();
      ++turns;
      if (ShimFinished(s, Now())) break;
      int64_t wake = NextWakeMs(s, Now());
      EXPECT_GE(wake, 0);
      clock.AdvanceMs(std::max<int64_t>(std::min(wake, end - Now()), 1));
    }
    return turns;
  }
  // Runs until the first signal after now; returns its time (or -1).
  int64_t RunUntilSignal(int64_t limit_ms = 120'000) {
    const size_t before = signals.size();
    const int64_t end = Now() + limit_ms;
    while (Now() < end && signals.size() == before) RunFor(std::min<int64_t>(100, end - Now()));
    return signals.size() > before ? signals[before].first : -1;
  }

  FakeClock clock;
  ShimState s;
  World world;
  std::vector<std::pair<int64_t, int>> signals;  // (T, signal)
  std::vector<std::string> events;
  std::vector<int64_t> disk_checks;  // T of each
  std::vector<int64_t> offered;
  int memory_checks = 0;
  int scans = 0;
  int lease_reads = 0;

 private:
  int64_t start_ = 0;
};

ShimPolicyConfig Plain() {
  ShimPolicyConfig c;
  c.kill_grace_ms = kGrace;
  return c;
}

ShimPolicyConfig Checkpointing(bool uploads = true) {
  ShimPolicyConfig c = Plain();
  c.checkpoint_signal = SIGUSR1;
  c.checkpoint_signal_name = "SIGUSR1";
  c.uploads_checkpoints = uploads;
  return c;
}

// ---- a job left alone ----

TEST(ShimPolicy, AJobWithoutLimitsIsLeftAloneAndTheLoopSleeps) {
  Harness h;
  h.Start(Plain());
  EXPECT_EQ(h.RunFor(3'600'000), 3600);  // one wake a second, for an hour
  EXPECT_THAT(h.signals, IsEmpty());
  EXPECT_THAT(h.events, IsEmpty());
  EXPECT_EQ(h.memory_checks + h.scans + h.lease_reads, 0);
  EXPECT_THAT(h.disk_checks, IsEmpty());
  EXPECT_FALSE(ShimFinished(h.s, h.Now()));
  EXPECT_TRUE(h.s.reason.empty());
}

// ---- max_runtime ----

TEST(ShimPolicy, MaxRuntimeStopsWithTheGraceThenKillsEverySecond) {
  Harness h;
  ShimPolicyConfig c = Plain();
  c.max_runtime_ms = 60'000;
  h.Start(c);
  EXPECT_EQ(h.RunUntilSignal(), 60'000);  // woken for it, not up to a second late
  EXPECT_EQ(h.signals.back().second, SIGTERM);
  EXPECT_EQ(h.s.reason, "exceeded max_runtime of 1m");
  EXPECT_TRUE(h.s.failed);
  // The grace passes without a busy loop (it fires once), then SIGKILL,
  // repeated every second until the job is gone.
  int turns = h.RunFor(12'500);
  EXPECT_LT(turns, 40);
  EXPECT_THAT(h.signals, ElementsAre(Pair(60'000, SIGTERM), Pair(70'000, SIGKILL),
                                     Pair(71'000, SIGKILL), Pair(72'000, SIGKILL)));
}

TEST(ShimPolicy, NoTimerFiresAfterTheJobExited) {
  Harness h;
  ShimPolicyConfig c = Plain();
  c.max_runtime_ms = 1'000;
  c.memory_limit_bytes = kMiB;
  c.disk_limit_bytes = kMiB;
  h.Start(c);
  h.world.memory_bytes = 100 * kMiB;  // would be over, were it measured
  h.world.work_bytes = 100 * kMiB;
  h.memory_checks = 0;
  EXPECT_THAT(h.Send(shim_event::MemoryMeasured{0}), IsEmpty());
  EXPECT_THAT(h.Send(shim_event::JobExited{}), ElementsAre(SIGKILL));  // leftovers
  h.signals.clear();
  h.memory_checks = 0;
  h.RunFor(1'500);
  EXPECT_THAT(h.signals, IsEmpty());
  EXPECT_EQ(h.memory_checks, 0);
  EXPECT_THAT(h.disk_checks, IsEmpty());
  EXPECT_TRUE(h.s.reason.empty());
}

// ---- the agent's stop ----

TEST(ShimPolicy, AStopIsSigtermThenSigkillAfterItsGrace) {
  Harness h;
  h.Start(Plain());
  h.RunFor(5'000);
  EXPECT_THAT(h.Send(shim_event::StopAsked{"stopped: cancelled", 3'000, false}),
              ElementsAre(SIGTERM));
  EXPECT_EQ(h.s.reason, "stopped: cancelled");
  EXPECT_FALSE(h.s.failed);
  EXPECT_EQ(h.RunUntilSignal(), 8'000);
  EXPECT_EQ(h.signals.back().second, SIGKILL);
}

TEST(ShimPolicy, AStopWithoutGraceKillsAtOnceAndOverridesAGracefulOne) {
  Harness h;
  h.Start(Plain());
  EXPECT_THAT(h.Send(shim_event::StopAsked{"stopped: preempted", kGrace, false}),
              ElementsAre(SIGTERM));
  // A second graceful stop changes nothing (not even the reason).
  EXPECT_THAT(h.Send(shim_event::StopAsked{"stopped: other", kGrace, false}), IsEmpty());
  h.RunFor(1'000);
  // A reclaim --now: SIGKILL now, and again every second.
  EXPECT_THAT(h.Send(shim_event::StopAsked{"stopped: reclaimed", 0, false}), ElementsAre(SIGKILL));
  EXPECT_EQ(h.s.reason, "stopped: preempted");  // the first reason is the job's
  EXPECT_EQ(h.RunUntilSignal(), 2'000);
  EXPECT_EQ(h.signals.back().second, SIGKILL);
}

TEST(ShimPolicy, ALaunchFailureKeepsItsReason) {
  Harness h;
  ShimPolicyConfig c = Plain();
  c.max_runtime_ms = 1'000;
  h.Start(c, "cannot start: exec: no such file", true);
  h.Send(shim_event::StopAsked{"stopped: cancelled", kGrace, false});
  h.RunFor(2'000);
  EXPECT_EQ(h.s.reason, "cannot start: exec: no such file");
  EXPECT_TRUE(h.s.failed);
}

TEST(ShimPolicy, AStopAfterTheExitDoesNothing) {
  Harness h;
  h.Start(Plain());
  h.Send(shim_event::JobExited{});
  EXPECT_THAT(h.Send(shim_event::StopAsked{"stopped: cancelled", 0, false}), IsEmpty());
  EXPECT_TRUE(h.s.reason.empty());
}

// ---- checkpoint, then stop ----

TEST(ShimPolicy, ARequeuedCheckpointingJobIsAskedToCheckpointFirst) {
  Harness h;
  h.Start(Checkpointing());
  h.world.newest_commit = 3;  // restored and already seen
  h.RunFor(1'000);
  EXPECT_THAT(h.offered, ElementsAre(3));
  EXPECT_THAT(h.Send(shim_event::StopAsked{"stopped: preempted", kGrace, true}),
              ElementsAre(SIGUSR1));
  EXPECT_THAT(h.events, ElementsAre("asked for a checkpoint before stopping (SIGUSR1)"));
  // No commit: SIGTERM at half the grace, SIGKILL at its end.
  EXPECT_EQ(h.RunUntilSignal(), 6'000);
  EXPECT_EQ(h.signals.back().second, SIGTERM);
  EXPECT_EQ(h.RunUntilSignal(), 11'000);
  EXPECT_EQ(h.signals.back().second, SIGKILL);
}

TEST(ShimPolicy, ACommitEndsTheCheckpointWaitEarly) {
  Harness h;
  h.Start(Checkpointing());
  h.world.newest_commit = 3;
  h.RunFor(1'000);
  h.Send(shim_event::StopAsked{"stopped: preempted", kGrace, true});
  h.RunFor(1'000);
  EXPECT_EQ(h.signals.size(), 1u);  // only the checkpoint signal so far
  h.world.newest_commit = 4;        // the job commits
  h.Send(shim_event::CommitNoticed{});
  EXPECT_EQ(NextWakeMs(h.s, h.Now()), 0);  // scanned at once
  EXPECT_THAT(h.Tick(), ElementsAre(SIGTERM));
  EXPECT_THAT(h.events.back(), "checkpoint ckpt-4 committed: stopping the job");
  EXPECT_THAT(h.offered, ElementsAre(3, 4));
  // SIGKILL 3 s later, not at the end of the grace; no SIGTERM at half of it.
  EXPECT_EQ(h.RunUntilSignal(), 5'000);
  EXPECT_EQ(h.signals.back().second, SIGKILL);
}

TEST(ShimPolicy, AnOldCommitDoesNotEndTheWait) {
  Harness h;
  h.Start(Checkpointing());
  h.world.newest_commit = 3;
  h.RunFor(1'000);
  h.Send(shim_event::StopAsked{"stopped: preempted", kGrace, true});
  h.RunFor(4'000);  // scans keep finding ckpt-3
  EXPECT_EQ(h.signals.size(), 1u);
  EXPECT_EQ(h.RunUntilSignal(), 6'000);  // half the grace
  EXPECT_EQ(h.signals.back().second, SIGTERM);
}

TEST(ShimPolicy, ARankThatDoesNotUploadWaitsHalfTheGrace) {
  Harness h;
  h.Start(Checkpointing(/*uploads=*/false));
  EXPECT_THAT(h.Send(shim_event::StopAsked{"stopped: preempted", kGrace, true}),
              ElementsAre(SIGUSR1));
  h.world.newest_commit = 9;  // never looked at
  EXPECT_EQ(h.RunUntilSignal(), 5'000);
  EXPECT_EQ(h.signals.back().second, SIGTERM);
  EXPECT_EQ(h.scans, 0);
}

TEST(ShimPolicy, AStopThatIsNotARequeueIsSigtermEvenForACheckpointingJob) {
  Harness h;
  h.Start(Checkpointing());
  EXPECT_THAT(h.Send(shim_event::StopAsked{"stopped: cancelled", kGrace, false}),
              ElementsAre(SIGTERM));
}

TEST(ShimPolicy, ARequeueOfAJobWithoutACheckpointSignalIsSigterm) {
  Harness h;
  h.Start(Plain());
  EXPECT_THAT(h.Send(shim_event::StopAsked{"stopped: preempted", kGrace, true}),
              ElementsAre(SIGTERM));
}

TEST(ShimPolicy, PeriodicCheckpointAsksPauseWhileTheJobStops) {
  Harness h;
  ShimPolicyConfig c = Checkpointing();
  c.checkpoint_interval_ms = 30'000;
  h.Start(c);
  h.RunFor(65'000);
  EXPECT_THAT(h.signals, ElementsAre(Pair(30'000, SIGUSR1), Pair(60'000, SIGUSR1)));
  h.Send(shim_event::StopAsked{"stopped: cancelled", 40'000, false});
  // Past the next ask (90 s) while stopping: no ask, and no busy loop.
  int turns = h.RunFor(35'000);
  EXPECT_LT(turns, 35'000 / kCommitScanMs + 10);
  EXPECT_THAT(h.signals,
              ElementsAre(Pair(30'000, SIGUSR1), Pair(60'000, SIGUSR1), Pair(65'000, SIGTERM)));
}

// ---- limits ----

TEST(ShimPolicy, MemoryOverTheLimitIsKilledAtOnce) {
  Harness h;
  ShimPolicyConfig c = Plain();
  c.memory_limit_bytes = 100 * kMiB;
  c.memory_poll_ms = 100;
  h.Start(c);
  h.world.memory_bytes = 100 * kMiB;  // at the limit is allowed
  h.RunFor(1'000);
  EXPECT_EQ(h.memory_checks, 10);  // at the start, then every 100 ms
  EXPECT_THAT(h.signals, IsEmpty());
  h.world.memory_bytes = 100 * kMiB + 1;
  EXPECT_EQ(h.RunUntilSignal(), 1'000);
  EXPECT_EQ(h.signals.back().second, SIGKILL);
  EXPECT_EQ(h.s.reason, exec::MemoryLimitReason(100 * kMiB));
  EXPECT_TRUE(h.s.failed);
  EXPECT_THAT(h.events.at(0), HasSubstr("(it used "));
}

TEST(ShimPolicy, DiskCountsWorkAndOutputAndIsSpacedByItsCost) {
  Harness h;
  ShimPolicyConfig c = Plain();
  c.disk_limit_bytes = 10 * kMiB;
  h.Start(c);
  h.world.work_bytes = 6 * kMiB;
  h.world.output_bytes = 4 * kMiB;  // together at the limit: allowed
  h.RunFor(5'000);
  EXPECT_THAT(h.disk_checks, ElementsAre(500, 2'500, 4'500));
  // Counting takes 50 ms: the next count waits 100 times that.
  h.world.disk_count_ms = 50;
  h.disk_checks.clear();
  h.RunFor(12'000);
  EXPECT_THAT(h.disk_checks, ElementsAre(6'500, 11'500, 16'500));
  EXPECT_THAT(h.signals, IsEmpty());
  // One byte of output more: stopped with the grace.
  h.world.disk_count_ms = 0;
  h.world.output_bytes += 1;
  EXPECT_EQ(h.RunUntilSignal(), 21'500);
  EXPECT_EQ(h.signals.back().second, SIGTERM);
  EXPECT_EQ(h.s.reason, exec::DiskLimitReason(10 * kMiB));
  EXPECT_TRUE(h.s.failed);
  EXPECT_THAT(h.events.back(), HasSubstr("of output"));
  EXPECT_EQ(h.RunUntilSignal(), 31'500);
  EXPECT_EQ(h.signals.back().second, SIGKILL);
}

// ---- the attempt's lease ----

TEST(ShimPolicy, ARenewedLeaseKeepsTheJobRunning) {
  Harness h;
  ShimPolicyConfig c = Plain();
  // 30 s lease, 10 s grace: the stop window is the last 10 s.
  c.lease = AttemptLease{h.Now() + 30'000, 30'000};
  h.Start(c);
  h.world.lease_file = AttemptLease{h.Now() + 30'000, 30'000};
  h.RunFor(19'000);
  EXPECT_EQ(h.lease_reads, 0);  // not read before the window
  // The agent renewed meanwhile: read once the window begins, then wait
  // for the next window.
  h.world.lease_file = AttemptLease{h.Now() + 40'000, 30'000};
  h.RunFor(2'000);
  EXPECT_EQ(h.lease_reads, 1);
  EXPECT_THAT(h.signals, IsEmpty());
  EXPECT_EQ(h.s.lease.deadline_ms(), h.Now() - 2'000 + 40'000);
}

TEST(ShimPolicy, ALostLeaseStopsInTimeAndKillsAtTheDeadline) {
  Harness h;
  ShimPolicyConfig c = Plain();
  c.lease = AttemptLease{h.Now() + 30'000, 30'000};
  h.Start(c);
  h.world.lease_file = c.lease;           // never renewed
  EXPECT_EQ(h.RunUntilSignal(), 20'000);  // the window's start, on time
  EXPECT_EQ(h.signals.back().second, SIGTERM);
  EXPECT_TRUE(h.s.lease_lost);
  EXPECT_TRUE(h.s.lost);
  EXPECT_FALSE(h.s.failed);
  EXPECT_THAT(h.s.reason, HasSubstr("attempt lease"));
  EXPECT_THAT(h.events.at(0), HasSubstr("lost contact with the server"));
  EXPECT_EQ(h.RunUntilSignal(), 30'000);  // SIGKILL at the deadline itself
  EXPECT_EQ(h.signals.back().second, SIGKILL);
  EXPECT_EQ(h.lease_reads, 1);
}

TEST(ShimPolicy, AnUnreadableLeaseFileKeepsTheLastDeadline) {
  Harness h;
  ShimPolicyConfig c = Plain();
  c.lease = AttemptLease{h.Now() + 30'000, 30'000};
  h.Start(c);
  h.world.lease_file = std::nullopt;
  EXPECT_EQ(h.RunUntilSignal(), 20'000);
  EXPECT_TRUE(h.s.lease_lost);
}

TEST(ShimPolicy, ALostLeaseCheckpointsAJobThatCheckpoints) {
  Harness h;
  ShimPolicyConfig c = Checkpointing();
  c.lease = AttemptLease{h.Now() + 30'000, 30'000};
  h.Start(c);
  h.world.lease_file = c.lease;
  EXPECT_EQ(h.RunUntilSignal(), 20'000);
  EXPECT_EQ(h.signals.back().second, SIGUSR1);  // a requeue: checkpoint first
  EXPECT_EQ(h.RunUntilSignal(), 25'000);        // half of the 10 s left
  EXPECT_EQ(h.signals.back().second, SIGTERM);
}

TEST(ShimPolicy, ALostLeaseShortensAStopAlreadyUnderWay) {
  Harness h;
  ShimPolicyConfig c = Plain();
  c.kill_grace_ms = 60'000;  // the stop window is a third of the lease: 10 s
  c.lease = AttemptLease{h.Now() + 30'000, 30'000};
  h.Start(c);
  h.world.lease_file = c.lease;
  h.RunFor(1'000);
  h.Send(shim_event::StopAsked{"stopped: cancelled", 60'000, false});  // SIGKILL at 61 s
  EXPECT_EQ(h.RunUntilSignal(), 30'000);  // ... moved to the lease's deadline
  EXPECT_EQ(h.signals.back().second, SIGKILL);
  EXPECT_EQ(h.s.reason, "stopped: cancelled");
  EXPECT_FALSE(h.s.lost);  // the stop was the agent's
}

// ---- a fenced attempt ----

TEST(ShimPolicy, AFencedAttemptIsKilledAtOnce) {
  Harness h;
  h.Start(Checkpointing());
  h.RunFor(1'000);
  h.world.fenced = true;
  EXPECT_EQ(h.RunUntilSignal(), 1'000);
  EXPECT_EQ(h.signals.back().second, SIGKILL);
  EXPECT_EQ(h.s.reason, "stale attempt: the server gave the job to another attempt");
  EXPECT_FALSE(h.s.failed);
}

// ---- the exit and the drain ----

TEST(ShimPolicy, AfterTheExitThePipesAreDrainedForAtMostTwoSeconds) {
  Harness h;
  h.Start(Plain());
  h.RunFor(1'000);
  EXPECT_THAT(h.Send(shim_event::JobExited{}), ElementsAre(SIGKILL));
  EXPECT_THAT(h.Send(shim_event::JobExited{}), IsEmpty());  // once
  h.Send(shim_event::StreamClosed{'o'});
  EXPECT_FALSE(ShimFinished(h.s, h.Now()));
  EXPECT_EQ(NextWakeMs(h.s, h.Now()), kIdleWakeMs);
  h.clock.AdvanceMs(1'999);
  EXPECT_FALSE(ShimFinished(h.s, h.Now()));
  EXPECT_EQ(NextWakeMs(h.s, h.Now()), 1);
  h.clock.AdvanceMs(1);
  EXPECT_TRUE(ShimFinished(h.s, h.Now()));  // stderr is held open by someone
}

TEST(ShimPolicy, ClosedPipesEndTheWatchAtOnce) {
  Harness h;
  h.Start(Plain());
  h.Send(shim_event::StreamClosed{'o'});
  h.Send(shim_event::StreamClosed{'e'});
  EXPECT_FALSE(ShimFinished(h.s, h.Now()));  // the job still runs
  h.Send(shim_event::JobExited{});
  EXPECT_TRUE(ShimFinished(h.s, h.Now()));
}

TEST(ShimPolicy, CommitsAreStillScannedWhileThePipesDrain) {
  Harness h;
  h.Start(Checkpointing());
  h.Send(shim_event::JobExited{});
  h.world.newest_commit = 7;
  h.RunFor(1'000);
  EXPECT_THAT(h.offered, ElementsAre(7));
}

}  // namespace
}  // namespace gpupool::agent
