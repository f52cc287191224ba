// The arbiter's rules, on a simulated clock: a fluid model of a GPU where
// each task either wants the GPU at an instant or not, stamps its activity
// while it wants (as libgpushare does while it launches or waits), and runs
// when its grant lets it; tasks that may run at once share the instant
// equally, as the hardware's time slicing would.
#include "share/arbiter.h"

#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace gpupool::share {

void PrintTo(const Grant& g, std::ostream* os) {
  static const char* const kNames[] = {"FREE", "RUN", "WAIT"};
  *os << kNames[static_cast<int>(g.state)];
  if (g.state == GrantState::kRun) *os << " until " << g.until_ns;
}

namespace {

using ::testing::ElementsAre;

constexpr int64_t kMs = 1'000'000;
constexpr int64_t kStart = 1'000'000 * kMs;  // the monotonic clock is far from 0

Arbiter MakeArbiter(ArbiterOptions options = {}) {
  auto a = Arbiter::Create(options);
  EXPECT_TRUE(a.ok()) << a.status().ToString();
  return std::move(a).value();
}

Grant FreeGrant() { return {GrantState::kFree, 0}; }
Grant WaitGrant() { return {GrantState::kWait, 0}; }
Grant RunGrant(int64_t until) { return {GrantState::kRun, until}; }

struct SimTask {
  TaskDemand demand;
  std::function<bool(int64_t)> wants = [](int64_t) { return true; };
  // What its want file says: `wants` unless set (a task that lies).
  std::function<bool(int64_t)> claims;
  double gpu_ns = 0;
  bool ever_free = false;
};

// Runs the tasks from `from` for `duration`, ticking every `tick` and at
// each next_change_ns, in steps of 100 µs. Returns the time now.
class Sim {
 public:
  explicit Sim(std::vector<SimTask> tasks, ArbiterOptions options = {})
      : arbiter_(MakeArbiter(options)), tasks_(std::move(tasks)) {}

  void Run(int64_t duration, int64_t tick = 5 * kMs) {
    const int64_t step = kMs / 10;
    const int64_t end = now_ + duration;
    for (; now_ < end; now_ += step) {
      for (SimTask& t : tasks_) {
        if (t.claims ? t.claims(now_) : t.wants(now_)) t.demand.last_active_ns = now_;
      }
      if (now_ >= next_tick_) {
        std::vector<TaskDemand> demands;
        for (const SimTask& t : tasks_) demands.push_back(t.demand);
        Decision d = arbiter_.Tick(demands, now_);
        grants_ = d.grants;
        next_tick_ = std::min(now_ + tick, d.next_change_ns);
      }
      int running = 0;
      std::vector<bool> runs(tasks_.size());
      for (size_t i = 0; i < tasks_.size(); ++i) {
        const Grant& g = grants_[i];
        bool allowed =
            g.state == GrantState::kFree || (g.state == GrantState::kRun && now_ < g.until_ns);
        runs[i] = allowed && tasks_[i].wants(now_);
        running += runs[i] ? 1 : 0;
        if (g.state == GrantState::kFree) tasks_[i].ever_free = true;
      }
      for (size_t i = 0; i < tasks_.size(); ++i) {
        if (runs[i]) tasks_[i].gpu_ns += static_cast<double>(step) / running;
      }
    }
  }

  // The fraction of `duration` task `i` had the GPU since the last Reset.
  double Fraction(size_t i, int64_t duration) const {
    return tasks_[i].gpu_ns / static_cast<double>(duration);
  }
  void ResetCounts() {
    for (SimTask& t : tasks_) t.gpu_ns = 0, t.ever_free = false;
  }
  const SimTask& task(size_t i) const { return tasks_[i]; }
  SimTask& task(size_t i) { return tasks_[i]; }
  const std::vector<Grant>& grants() const { return grants_; }
  int64_t now() const { return now_; }

 private:
  Arbiter arbiter_;
  std::vector<SimTask> tasks_;
  std::vector<Grant> grants_;
  int64_t now_ = kStart;
  int64_t next_tick_ = kStart;
};

SimTask Task(std::string id, uint32_t share, bool strict = false) {
  SimTask t;
  t.demand.id = std::move(id);
  t.demand.share_milli = share;
  t.demand.strict = strict;
  return t;
}

TEST(Arbiter, OptionsAreChecked) {
  EXPECT_FALSE(Arbiter::Create({.period_ns = 0}).ok());
  EXPECT_FALSE(Arbiter::Create({.active_window_ns = -1}).ok());
  EXPECT_FALSE(Arbiter::Create({.period_ns = 10 * kMs, .min_slice_ns = 10 * kMs}).ok());
  EXPECT_TRUE(Arbiter::Create({}).ok());
}

TEST(Arbiter, BusySharesSplitTheGpuByShare) {
  Sim sim({Task("a", 250), Task("b", 750)});
  sim.Run(1000 * kMs);  // settle
  sim.ResetCounts();
  sim.Run(10'000 * kMs);
  double a = sim.Fraction(0, 10'000 * kMs), b = sim.Fraction(1, 10'000 * kMs);
  EXPECT_NEAR(b / a, 3.0, 0.03);
  EXPECT_NEAR(a + b, 1.0, 0.001);
  EXPECT_FALSE(sim.task(0).ever_free || sim.task(1).ever_free);
}

TEST(Arbiter, SharesThatDoNotFillTheGpuSplitItInProportion) {
  for (auto [sa, sb] : {std::pair{250u, 250u}, std::pair{100u, 300u}, std::pair{600u, 600u}}) {
    Sim sim({Task("a", sa), Task("b", sb)});
    sim.Run(10'000 * kMs);
    double a = sim.Fraction(0, 10'000 * kMs), b = sim.Fraction(1, 10'000 * kMs);
    EXPECT_NEAR(b / a, static_cast<double>(sb) / sa, 0.03) << sa << ":" << sb;
    EXPECT_NEAR(a + b, 1.0, 0.001);
  }
}

TEST(Arbiter, ThreeTasksTakeTurnsByShare) {
  Sim sim({Task("c", 500), Task("a", 200), Task("b", 300)});
  sim.Run(10'000 * kMs);
  EXPECT_NEAR(sim.Fraction(1, 10'000 * kMs), 0.2, 0.01);
  EXPECT_NEAR(sim.Fraction(2, 10'000 * kMs), 0.3, 0.01);
  EXPECT_NEAR(sim.Fraction(0, 10'000 * kMs), 0.5, 0.01);
}

TEST(Arbiter, AWorkConservingShareAloneHasTheWholeGpu) {
  Sim sim({Task("a", 250), Task("b", 750)});
  sim.task(1).wants = [](int64_t) { return false; };
  sim.Run(2000 * kMs);
  EXPECT_NEAR(sim.Fraction(0, 2000 * kMs), 1.0, 0.001);
  EXPECT_EQ(sim.grants()[0], FreeGrant());
  EXPECT_EQ(sim.grants()[1], WaitGrant());  // seen at the next tick when it wakes
}

TEST(Arbiter, WithNobodyActiveEveryoneRunsFreely) {
  Arbiter arbiter = MakeArbiter();
  std::vector<TaskDemand> tasks = {{"a", 500, false, 0}, {"b", 500, false, kStart - 50 * kMs}};
  Decision d = arbiter.Tick(tasks, kStart);
  EXPECT_THAT(d.grants, ElementsAre(FreeGrant(), FreeGrant()));
}

TEST(Arbiter, AStrictShareAloneGetsItsShareAndNeverRunsFreely) {
  Sim sim({Task("s", 250, /*strict=*/true), Task("idle", 750)});
  sim.task(1).wants = [](int64_t) { return false; };
  sim.Run(10'000 * kMs);
  EXPECT_NEAR(sim.Fraction(0, 10'000 * kMs), 0.25, 0.01);
  EXPECT_FALSE(sim.task(0).ever_free);
}

TEST(Arbiter, AStrictShareAndABusyNeighbourGetTheirShares) {
  Sim sim({Task("s", 250, /*strict=*/true), Task("w", 250)});
  sim.Run(10'000 * kMs);
  EXPECT_NEAR(sim.Fraction(0, 10'000 * kMs), 0.25, 0.01);
  EXPECT_NEAR(sim.Fraction(1, 10'000 * kMs), 0.75, 0.01);  // the strict one's rest
}

TEST(Arbiter, TheIdleGapOfAStrictRoundIsTheOthersToUse) {
  Arbiter arbiter = MakeArbiter();
  std::vector<TaskDemand> tasks = {{"s", 250, true, kStart}, {"w", 750, false, 0}};
  Decision d = arbiter.Tick(tasks, kStart);
  EXPECT_THAT(d.grants, ElementsAre(RunGrant(kStart + 25 * kMs), WaitGrant()));
  EXPECT_EQ(d.next_change_ns, kStart + 20 * kMs + 1);  // s's window, unless it stamps again
  int64_t now = kStart + 25 * kMs;
  tasks[0].last_active_ns = now;
  d = arbiter.Tick(tasks, now);
  // The gap: the strict task waits for the round's end; the other may run
  // (it is idle, but waking needs no tick).
  EXPECT_THAT(d.grants, ElementsAre(WaitGrant(), RunGrant(kStart + 100 * kMs)));
  EXPECT_EQ(d.next_change_ns, now + 20 * kMs + 1);
  // w wakes in the gap: a turn, but only to the round's end.
  now = kStart + 60 * kMs;
  tasks[0].last_active_ns = tasks[1].last_active_ns = now;
  d = arbiter.Tick(tasks, now);
  EXPECT_THAT(d.grants, ElementsAre(WaitGrant(), RunGrant(kStart + 100 * kMs)));
  now = kStart + 100 * kMs;
  tasks[0].last_active_ns = tasks[1].last_active_ns = now;
  d = arbiter.Tick(tasks, now);
  EXPECT_THAT(d.grants, ElementsAre(RunGrant(now + 25 * kMs), WaitGrant()));
  EXPECT_EQ(d.next_change_ns, now + 20 * kMs + 1);
  // Alone, with no window to lapse: the gap's end is the next change.
  now = kStart + 125 * kMs;
  tasks[0].last_active_ns = std::numeric_limits<int64_t>::max();
  tasks[1].last_active_ns = 0;
  d = arbiter.Tick(tasks, now);
  EXPECT_THAT(d.grants, ElementsAre(WaitGrant(), RunGrant(kStart + 200 * kMs)));
  EXPECT_EQ(d.next_change_ns, kStart + 200 * kMs);
}

TEST(Arbiter, ANeighbourThatWakesGetsTheGpuAtTheNextTick) {
  Arbiter arbiter = MakeArbiter();
  std::vector<TaskDemand> tasks = {{"a", 500, false, kStart}, {"b", 500, false, 0}};
  EXPECT_THAT(arbiter.Tick(tasks, kStart).grants, ElementsAre(FreeGrant(), WaitGrant()));
  // b launches (or waits): one tick later a waits and b runs first.
  tasks[0].last_active_ns = tasks[1].last_active_ns = kStart + 4 * kMs;
  Decision d = arbiter.Tick(tasks, kStart + 5 * kMs);
  EXPECT_THAT(d.grants, ElementsAre(WaitGrant(), RunGrant(kStart + 55 * kMs)));
  // The same whoever of the two has the smaller id.
  Arbiter other = MakeArbiter();
  std::vector<TaskDemand> swapped = {{"b", 500, false, kStart}, {"a", 500, false, 0}};
  (void)other.Tick(swapped, kStart);
  swapped[0].last_active_ns = swapped[1].last_active_ns = kStart + 4 * kMs;
  EXPECT_THAT(other.Tick(swapped, kStart + 5 * kMs).grants,
              ElementsAre(WaitGrant(), RunGrant(kStart + 55 * kMs)));
}

TEST(Arbiter, AHolderThatStopsLosesItsSlice) {
  // a stops 10 ms into its 50 ms slice; b gets the GPU once a's window
  // (20 ms) lapses, not at the slice's end.
  Sim sim({Task("a", 500), Task("b", 500)});
  sim.Run(300 * kMs);
  for (int i = 0; i < 100 && sim.grants()[0].state != GrantState::kRun; ++i) sim.Run(kMs);
  ASSERT_EQ(sim.grants()[0].state, GrantState::kRun);
  int64_t stop = sim.now() + 10 * kMs;
  sim.task(0).wants = [stop](int64_t now) { return now < stop; };
  sim.Run(10 * kMs + 20 * kMs + 6 * kMs);
  // b alone is active: it runs freely.
  EXPECT_EQ(sim.grants()[1], FreeGrant());
  EXPECT_EQ(sim.grants()[0], WaitGrant());
}

TEST(Arbiter, TasksJoinAndLeave) {
  Arbiter arbiter = MakeArbiter();
  int64_t now = kStart;
  std::vector<TaskDemand> tasks = {{"a", 300, false, now}, {"b", 300, false, now}};
  Decision d = arbiter.Tick(tasks, now);
  EXPECT_THAT(d.grants, ElementsAre(RunGrant(now + 50 * kMs), WaitGrant()));
  // c joins during a's turn: it is next after b... after a, in id order.
  now += 10 * kMs;
  tasks.push_back({"c", 300, false, now});
  for (auto& t : tasks) t.last_active_ns = now;
  d = arbiter.Tick(tasks, now);
  EXPECT_THAT(d.grants, ElementsAre(RunGrant(kStart + 50 * kMs), WaitGrant(), WaitGrant()));
  now = kStart + 50 * kMs;
  for (auto& t : tasks) t.last_active_ns = now;
  d = arbiter.Tick(tasks, now);
  // Three active tasks: b's slice is a third of the period.
  EXPECT_THAT(d.grants, ElementsAre(WaitGrant(), RunGrant(now + 33'333'333), WaitGrant()));
  // b leaves (its task ended): c at once.
  now += 5 * kMs;
  tasks.erase(tasks.begin() + 1);
  for (auto& t : tasks) t.last_active_ns = now;
  d = arbiter.Tick(tasks, now);
  EXPECT_THAT(d.grants, ElementsAre(WaitGrant(), RunGrant(now + 50 * kMs)));
  // Then a, the round having ended.
  now += 50 * kMs;
  for (auto& t : tasks) t.last_active_ns = now;
  d = arbiter.Tick(tasks, now);
  EXPECT_THAT(d.grants, ElementsAre(RunGrant(now + 50 * kMs), WaitGrant()));
}

TEST(Arbiter, TheAnswerDoesNotDependOnTheOrderOfTasks) {
  std::vector<TaskDemand> tasks = {
      {"a", 200, false, kStart}, {"b", 300, true, kStart}, {"c", 500, false, kStart}};
  std::vector<TaskDemand> reversed(tasks.rbegin(), tasks.rend());
  Arbiter one = MakeArbiter(), two = MakeArbiter();
  for (int64_t now = kStart; now < kStart + 1000 * kMs; now += 5 * kMs) {
    for (auto* v : {&tasks, &reversed}) {
      for (auto& t : *v) t.last_active_ns = now;
    }
    Decision d1 = one.Tick(tasks, now), d2 = two.Tick(reversed, now);
    std::vector<Grant> back(d2.grants.rbegin(), d2.grants.rend());
    ASSERT_EQ(d1.grants, back) << (now - kStart) / kMs << " ms";
    ASSERT_EQ(d1.next_change_ns, d2.next_change_ns);
  }
}

TEST(Arbiter, SharesPastOneGpuAreScaledDownStrictOnesToo) {
  Sim sim({Task("a", 800, /*strict=*/true), Task("b", 800)});
  sim.Run(10'000 * kMs);
  EXPECT_NEAR(sim.Fraction(0, 10'000 * kMs), 0.5, 0.01);
  EXPECT_NEAR(sim.Fraction(1, 10'000 * kMs), 0.5, 0.01);
}

TEST(Arbiter, ClaimingToBeBusyTakesNoNeighboursShare) {
  // The liar stamps its want file and launches nothing: its slices go idle,
  // which costs the honest task the GPU it would have had alone, not its
  // own share.
  Sim sim({Task("honest", 750), Task("liar", 250)});
  sim.task(1).wants = [](int64_t) { return false; };
  sim.task(1).claims = [](int64_t) { return true; };
  sim.Run(10'000 * kMs);
  EXPECT_NEAR(sim.Fraction(0, 10'000 * kMs), 0.75, 0.01);
}

TEST(Arbiter, HidingActivityOnlyHoldsTheTaskItselfBack) {
  // The hider launches without stamping its want file: while its neighbour
  // is busy it is told to wait (a library that obeys gets nothing), and
  // when the neighbour is idle it runs freely.
  Sim sim({Task("honest", 250), Task("hider", 750)});
  int64_t until = kStart + 5000 * kMs;
  sim.task(0).wants = [until](int64_t now) { return now < until; };
  sim.task(1).claims = [](int64_t) { return false; };
  sim.Run(5000 * kMs);
  EXPECT_NEAR(sim.Fraction(0, 5000 * kMs), 1.0, 0.001);
  EXPECT_EQ(sim.task(1).gpu_ns, 0);
  sim.ResetCounts();
  sim.Run(1000 * kMs);
  EXPECT_NEAR(sim.Fraction(1, 1000 * kMs), 0.98, 0.02);
}

TEST(Arbiter, NextChangeIsWhenAnActiveTaskLapses) {
  Arbiter arbiter = MakeArbiter();
  std::vector<TaskDemand> tasks = {{"a", 500, false, kStart - 5 * kMs}};
  Decision d = arbiter.Tick(tasks, kStart);
  EXPECT_THAT(d.grants, ElementsAre(FreeGrant()));
  EXPECT_EQ(d.next_change_ns, kStart + 15 * kMs + 1);
  tasks[0].last_active_ns = 0;
  EXPECT_EQ(arbiter.Tick(tasks, kStart + 16 * kMs).next_change_ns,
            std::numeric_limits<int64_t>::max());
}

}  // namespace
}  // namespace gpupool::share
