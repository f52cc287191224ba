#include "sched/fairshare.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "sched/wait_reason.h"

namespace gpupool::sched {
namespace {

constexpr int64_t kHour = 3'600'000;
constexpr int64_t kDay = 24 * kHour;
constexpr uint64_t kOne = uint64_t{1} << 62;

// ---------------------------------------------------------------------------
// Priority classes.

TEST(PriorityClassTest, NamesRoundTrip) {
  for (PriorityClass p :
       {PriorityClass::kInteractive, PriorityClass::kNormal, PriorityClass::kOpportunistic}) {
    auto parsed = ParsePriorityClass(PriorityClassName(p));
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    EXPECT_EQ(*parsed, p);
  }
  EXPECT_EQ(PriorityClassName(PriorityClass::kInteractive), "interactive");
}

TEST(PriorityClassTest, UnknownNameIsAClearError) {
  auto parsed = ParsePriorityClass("urgent");
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(parsed.status().message().find("\"urgent\""), std::string::npos);
  EXPECT_NE(parsed.status().message().find("interactive, normal, opportunistic"),
            std::string::npos);
  EXPECT_FALSE(ParsePriorityClass("Normal").ok());
  EXPECT_FALSE(ParsePriorityClass("").ok());
}

// ---------------------------------------------------------------------------
// Decay.

TEST(DecayTest, FactorAtWholeAndHalfHalfLives) {
  EXPECT_EQ(DecayFactorQ62(0, kHour), kOne);
  EXPECT_EQ(DecayFactorQ62(kHour, kHour), kOne / 2);
  EXPECT_EQ(DecayFactorQ62(3 * kHour, kHour), kOne / 8);
  const double half = static_cast<double>(DecayFactorQ62(kHour / 2, kHour)) / kOne;
  EXPECT_NEAR(half, std::sqrt(0.5), 1e-15);
  const double third = static_cast<double>(DecayFactorQ62(kHour / 3, kHour)) / kOne;
  EXPECT_NEAR(third, std::exp2(-1.0 / 3), 1e-12);  // kHour / 3 is exact
  EXPECT_EQ(DecayFactorQ62(100 * kHour, kHour), 0u);
}

TEST(DecayTest, AfterOneHalfLifeUsageHalves) {
  DecayedUsage u{1'000'000'000, 5 * kDay};
  DecayedUsage d = Decay(u, 5 * kDay + kDay, kDay);
  EXPECT_EQ(d.milli_ms, 500'000'000);
  EXPECT_EQ(d.as_of_ms, 6 * kDay);
  EXPECT_EQ(Decay(u, 7 * kDay, kDay).milli_ms, 250'000'000);
}

TEST(DecayTest, StepwiseDecayMatchesOneStep) {
  DecayedUsage u{123'456'789'012, 0};
  DecayedUsage stepwise = u;
  for (int i = 1; i <= 24; ++i) stepwise = Decay(stepwise, i * kHour, kDay);
  DecayedUsage once = Decay(u, kDay, kDay);
  EXPECT_EQ(once.milli_ms, 123'456'789'012 / 2);
  EXPECT_NEAR(static_cast<double>(stepwise.milli_ms), static_cast<double>(once.milli_ms), 24.0);
}

TEST(DecayTest, NoDecayWithoutHalfLifeAndNoTimeTravel) {
  DecayedUsage u{1000, 10};
  EXPECT_EQ(Decay(u, 10 + kDay, 0), (DecayedUsage{1000, 10 + kDay}));
  EXPECT_EQ(Decay(u, 10 + kDay, -5), (DecayedUsage{1000, 10 + kDay}));
  EXPECT_EQ(Decay(u, 5, kHour), u);  // earlier time: unchanged
}

// ---------------------------------------------------------------------------
// Charging.

TEST(ChargeTest, WithoutDecayChargesMilliTimesMs) {
  DecayedUsage u = Charge({}, 2000, 0, 1000, 0);
  EXPECT_EQ(u, (DecayedUsage{2'000'000, 1000}));
}

TEST(ChargeTest, IntegratesDecayOverTheInterval) {
  // One GPU for one half-life: 1000 * h / ln2 * (1 - 1/2) = 1000 * h / (2 ln 2).
  const int64_t h = kDay;
  DecayedUsage u = Charge({}, 1000, 0, h, h);
  const double expected = 1000.0 * static_cast<double>(h) / (2.0 * std::log(2.0));
  EXPECT_NEAR(static_cast<double>(u.milli_ms), expected, 1.0);  // rounded down
  EXPECT_EQ(u.as_of_ms, h);
  // Less than the undecayed amount, more than a lump decayed from the start.
  EXPECT_LT(u.milli_ms, 1000 * h);
  EXPECT_GT(u.milli_ms, 1000 * h / 2);
}

TEST(ChargeTest, ShortIntervalsChargeAlmostTheFlatAmount) {
  DecayedUsage u = Charge({}, 500, 0, 1000, 30 * kDay);
  EXPECT_NEAR(static_cast<double>(u.milli_ms), 500'000.0, 1.0);
  EXPECT_LE(u.milli_ms, 500'000);
}

TEST(ChargeTest, SlicingDoesNotMatter) {
  const int64_t h = 6 * kHour;
  DecayedUsage whole = Charge({}, 3000, 0, kDay, h);
  DecayedUsage sliced{};
  for (int64_t t = 0; t < kDay; t += kHour) sliced = Charge(sliced, 3000, t, t + kHour, h);
  EXPECT_EQ(sliced.as_of_ms, whole.as_of_ms);
  EXPECT_NEAR(static_cast<double>(sliced.milli_ms), static_cast<double>(whole.milli_ms), 48.0);
}

TEST(ChargeTest, DecaysExistingUsageFirst) {
  DecayedUsage u{1'000'000, 0};
  DecayedUsage c = Charge(u, 1000, kHour, kHour, kHour);  // empty interval
  EXPECT_EQ(c, (DecayedUsage{500'000, kHour}));
}

TEST(ChargeTest, LateReportIsDecayedForward) {
  // Usage known as of t = 2h; an allocation over [0, 1h] reported late.
  DecayedUsage u{0, 2 * kHour};
  DecayedUsage late = Charge(u, 1000, 0, kHour, kHour);
  DecayedUsage on_time = Decay(Charge({}, 1000, 0, kHour, kHour), 2 * kHour, kHour);
  EXPECT_EQ(late.as_of_ms, 2 * kHour);
  EXPECT_NEAR(static_cast<double>(late.milli_ms), static_cast<double>(on_time.milli_ms), 2.0);
}

TEST(ChargeTest, NothingForEmptyOrNegativeInput) {
  DecayedUsage u{42, 0};
  EXPECT_EQ(Charge(u, 1000, 10, 5, 0).milli_ms, 42);
  EXPECT_EQ(Charge(u, 0, 0, 100, 0).milli_ms, 42);
  EXPECT_EQ(Charge(u, -5, 0, 100, 0).milli_ms, 42);
}

TEST(ChargeTest, SaturatesInsteadOfOverflowing) {
  DecayedUsage u = Charge({}, int64_t{1} << 40, 0, int64_t{1} << 40, 0);
  EXPECT_EQ(u.milli_ms, std::numeric_limits<int64_t>::max());
  DecayedUsage v = Charge(u, 1000, u.as_of_ms, u.as_of_ms + 1000, 0);
  EXPECT_EQ(v.milli_ms, std::numeric_limits<int64_t>::max());
}

// ---------------------------------------------------------------------------
// Queue order.

GroupState Group(std::string name, int64_t weight, int64_t usage, int64_t guaranteed = 0,
                 int64_t allocated = 0) {
  GroupState g;
  g.name = std::move(name);
  g.weight = weight;
  g.usage = {usage, 0};
  g.guaranteed_milli = guaranteed;
  g.allocated_milli = allocated;
  return g;
}

QueuedJob Job(int64_t id, std::string group, PriorityClass p, int64_t submit,
              int64_t milli = 1000) {
  return {id, std::move(group), p, submit, milli};
}

std::vector<int64_t> Ids(const std::vector<QueueEntry>& q) {
  std::vector<int64_t> ids;
  for (const auto& e : q) ids.push_back(e.job_id);
  return ids;
}

constexpr auto kI = PriorityClass::kInteractive;
constexpr auto kN = PriorityClass::kNormal;
constexpr auto kO = PriorityClass::kOpportunistic;

TEST(OrderQueueTest, ClassThenFairShareThenSubmitTimeThenId) {
  std::vector<GroupState> groups = {Group("heavy", 1, 9'000), Group("light", 1, 1'000)};
  std::vector<QueuedJob> jobs = {
      Job(1, "heavy", kO, 0),   Job(2, "light", kN, 50), Job(3, "heavy", kN, 10),
      Job(4, "light", kN, 20),  Job(5, "heavy", kI, 99), Job(6, "heavy", kN, 10),
      Job(7, "light", kO, 500),
  };
  auto q = OrderQueue(groups, jobs, {});
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  // interactive: 5; normal: light (4 @20, 2 @50) then heavy (3, 6 @10 by id);
  // opportunistic: light 7 before heavy 1 despite its later submit.
  EXPECT_EQ(Ids(*q), (std::vector<int64_t>{5, 4, 2, 3, 6, 7, 1}));
  for (size_t k = 0; k < q->size(); ++k) EXPECT_EQ((*q)[k].position, static_cast<int64_t>(k) + 1);
}

TEST(OrderQueueTest, GroupThatUsedALotGoesBehindAnIdleGroup) {
  GroupState busy = Group("vision", 1, 0);
  busy.usage = Charge({}, 8000, 0, 10 * kHour, kDay);  // 8 GPUs for 10 hours
  std::vector<GroupState> groups = {busy, Group("nlp", 1, 0)};
  std::vector<QueuedJob> jobs = {Job(1, "vision", kN, 0), Job(2, "nlp", kN, 5 * kHour)};
  auto q = OrderQueue(groups, jobs, {10 * kHour, kDay});
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(Ids(*q), (std::vector<int64_t>{2, 1}));
  EXPECT_DOUBLE_EQ((*q)[0].fair_share_factor, 1.0);
  EXPECT_DOUBLE_EQ((*q)[1].usage_fraction, 1.0);
  EXPECT_DOUBLE_EQ((*q)[1].fair_share_factor, 0.25);  // 2^(-1 / 0.5)
}

TEST(OrderQueueTest, DecayLetsAGroupComeBack) {
  // vision used a lot long ago, nlp a little recently: after enough
  // half-lives vision's old usage counts less than nlp's recent one.
  GroupState vision = Group("vision", 1, 0);
  vision.usage = Charge({}, 8000, 0, kDay, kDay);
  GroupState nlp = Group("nlp", 1, 0);
  nlp.usage = Charge({}, 1000, 9 * kDay, 10 * kDay, kDay);
  std::vector<GroupState> groups = {vision, nlp};
  std::vector<QueuedJob> jobs = {Job(1, "vision", kN, 100), Job(2, "nlp", kN, 0)};
  auto late = OrderQueue(groups, jobs, {10 * kDay, kDay});
  ASSERT_TRUE(late.ok());
  EXPECT_EQ(Ids(*late), (std::vector<int64_t>{1, 2}));
  // Without further decay, vision's older, larger usage keeps it behind.
  auto no_decay = OrderQueue(groups, jobs, {10 * kDay, 0});
  ASSERT_TRUE(no_decay.ok());
  EXPECT_EQ(Ids(*no_decay), (std::vector<int64_t>{2, 1}));
}

TEST(OrderQueueTest, WeightsScaleTheShare) {
  // a used twice as much as b but has three times the shares: a goes first.
  std::vector<GroupState> groups = {Group("a", 3, 2'000), Group("b", 1, 1'000)};
  std::vector<QueuedJob> jobs = {Job(1, "b", kN, 0), Job(2, "a", kN, 1)};
  auto q = OrderQueue(groups, jobs, {});
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(Ids(*q), (std::vector<int64_t>{2, 1}));
  // Equal usage per share: ties fall to submit time.
  groups = {Group("a", 2, 2'000), Group("b", 1, 1'000)};
  q = OrderQueue(groups, jobs, {});
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(Ids(*q), (std::vector<int64_t>{1, 2}));
}

TEST(OrderQueueTest, ExplanationNamesShareAndGuarantee) {
  std::vector<GroupState> groups = {Group("vision", 1, 31, 2000, 1000),
                                    Group("nlp", 3, 69, 4000, 0)};
  std::vector<QueuedJob> jobs = {Job(1, "vision", kN, 0, 1000), Job(2, "vision", kN, 1, 500)};
  auto q = OrderQueue(groups, jobs, {});
  ASSERT_TRUE(q.ok());
  ASSERT_EQ(q->size(), 2u);
  EXPECT_EQ(ExplanationText((*q)[0].position, (*q)[0]),
            "position 1 (normal): group vision: 31% of recent use, fair share 25%; within its "
            "guarantee (2.000 of 2.000 GPUs with the jobs ahead of it)");
  EXPECT_FALSE((*q)[0].borrowing);
  EXPECT_TRUE((*q)[1].borrowing);
  EXPECT_NE(ExplanationText((*q)[1].position, (*q)[1])
                .find("would borrow beyond its guarantee (2.500 of 2.000 GPUs"),
            std::string::npos);
  EXPECT_DOUBLE_EQ((*q)[0].share_fraction, 0.25);
  EXPECT_DOUBLE_EQ((*q)[0].usage_fraction, 0.31);
}

TEST(OrderQueueTest, BorrowingFollowsQueueOrderAcrossClasses) {
  std::vector<GroupState> groups = {Group("g", 1, 0, 2000, 500)};
  std::vector<QueuedJob> jobs = {Job(1, "g", kN, 0, 1000), Job(2, "g", kI, 5, 1000),
                                 Job(3, "g", kO, 0, 0)};
  auto q = OrderQueue(groups, jobs, {});
  ASSERT_TRUE(q.ok());
  ASSERT_EQ(Ids(*q), (std::vector<int64_t>{2, 1, 3}));
  EXPECT_FALSE((*q)[0].borrowing);  // 500 + 1000 <= 2000
  EXPECT_TRUE((*q)[1].borrowing);   // 1500 + 1000 > 2000
  EXPECT_FALSE((*q)[2].borrowing);  // asks for no GPU
}

TEST(OrderQueueTest, RejectsBadInput) {
  std::vector<QueuedJob> none;
  EXPECT_EQ(OrderQueue({Group("a", 0, 0)}, none, {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(OrderQueue({Group("", 1, 0)}, none, {}).status().code(), StatusCode::kInvalidArgument);
  auto dup = OrderQueue({Group("a", 1, 0), Group("a", 2, 0)}, none, {});
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.status().message().find("duplicate group"), std::string::npos);
  auto unknown = OrderQueue({Group("a", 1, 0)}, {Job(7, "b", kN, 0)}, {});
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().message(), "jobs[0] (id 7).group: unknown group \"b\"");
  auto dup_job = OrderQueue({Group("a", 1, 0)}, {Job(7, "a", kN, 0), Job(7, "a", kN, 1)}, {});
  EXPECT_FALSE(dup_job.ok());
  EXPECT_FALSE(OrderQueue({Group("a", 1, 0)}, {Job(7, "a", kN, 0, -1)}, {}).ok());
  EXPECT_FALSE(OrderQueue({Group("a", 1, 0, -1)}, none, {}).ok());
}

TEST(OrderQueueTest, DeterministicAndIndependentOfInputOrder) {
  std::mt19937_64 rng(7);
  std::vector<GroupState> groups;
  for (int g = 0; g < 6; ++g) {
    groups.push_back(Group("g" + std::to_string(g), 1 + g % 3,
                           static_cast<int64_t>(rng() % 4) * 1'000'000, 2000, 1000));
  }
  std::vector<QueuedJob> jobs;
  for (int64_t id = 0; id < 300; ++id) {
    jobs.push_back(Job(id, "g" + std::to_string(rng() % 6), static_cast<PriorityClass>(rng() % 3),
                       static_cast<int64_t>(rng() % 20), static_cast<int64_t>(rng() % 3) * 500));
  }
  auto first = OrderQueue(groups, jobs, {kDay, kHour});
  ASSERT_TRUE(first.ok());
  for (int round = 0; round < 5; ++round) {
    std::shuffle(jobs.begin(), jobs.end(), rng);
    std::shuffle(groups.begin(), groups.end(), rng);
    auto again = OrderQueue(groups, jobs, {kDay, kHour});
    ASSERT_TRUE(again.ok());
    ASSERT_EQ(Ids(*again), Ids(*first));
    for (size_t k = 0; k < first->size(); ++k) {
      EXPECT_EQ(ExplanationText((*again)[k].position, (*again)[k]),
                ExplanationText((*first)[k].position, (*first)[k]));
      EXPECT_EQ((*again)[k].borrowing, (*first)[k].borrowing);
    }
  }
  // Classes never interleave.
  for (size_t k = 1; k < first->size(); ++k) {
    EXPECT_LE((*first)[k - 1].priority, (*first)[k].priority);
  }
}

// ---------------------------------------------------------------------------
// Borrowing.

TEST(BorrowingTest, WithinGuaranteeOrBeyond) {
  GroupState g = Group("g", 1, 0, 4000, 3000);
  EXPECT_FALSE(IsBorrowing(g, 1000));  // exactly at the guarantee
  EXPECT_TRUE(IsBorrowing(g, 1001));
  EXPECT_FALSE(IsBorrowing(g, 0));
  GroupState none = Group("none", 1, 0, 0, 0);
  EXPECT_TRUE(IsBorrowing(none, 1));
  GroupState over = Group("over", 1, 0, 1000, 3000);
  EXPECT_TRUE(IsBorrowing(over, 250));
}

// ---------------------------------------------------------------------------
// Victim selection.

RunningAttempt Attempt(int64_t id, std::string group, int64_t milli, int64_t last_checkpoint,
                       bool preemptible = true, std::optional<int64_t> last_preempted = {}) {
  RunningAttempt a;
  a.attempt_id = id;
  a.group = std::move(group);
  a.gpu_milli = milli;
  a.started_ms = 0;
  a.last_checkpoint_ms = last_checkpoint;
  a.preemptible = preemptible;
  a.last_preempted_ms = last_preempted;
  return a;
}

constexpr int64_t kNow = 10 * kHour;

TEST(PickVictimsTest, LeastLostWorkFirst) {
  // "owner" is at 0 of 4 GPUs guaranteed; "borrower" holds 4 beyond its 0.
  std::vector<GroupState> groups = {Group("owner", 1, 0, 4000, 0),
                                    Group("borrower", 1, 0, 0, 4000)};
  std::vector<RunningAttempt> running = {
      Attempt(1, "borrower", 1000, kNow - 3 * kHour), Attempt(2, "borrower", 1000, kNow - kHour),
      Attempt(3, "borrower", 1000, kNow - 2 * kHour), Attempt(4, "borrower", 1000, kNow - 5)};
  auto v = PickVictims(groups, running, {"owner", 2000, kNow, kHour});
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->attempt_ids, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(v->freed_milli, 2000);
  EXPECT_EQ(v->lost_work_ms, 5 + kHour);
  EXPECT_TRUE(v->reason.empty());
}

TEST(PickVictimsTest, AntiThrashWindowIsRespected) {
  std::vector<GroupState> groups = {Group("owner", 1, 0, 4000, 0),
                                    Group("borrower", 1, 0, 0, 2000)};
  std::vector<RunningAttempt> running = {
      Attempt(1, "borrower", 1000, kNow, true, kNow - 10 * 60'000),  // 10 min ago
      Attempt(2, "borrower", 1000, kNow - kHour, true, kNow - 2 * kHour)};
  auto v = PickVictims(groups, running, {"owner", 1000, kNow, 30 * 60'000});
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->attempt_ids, (std::vector<int64_t>{2}));  // 1 loses less but is protected
  // With both needed, the window makes it impossible: nothing is chosen.
  auto none = PickVictims(groups, running, {"owner", 2000, kNow, 30 * 60'000});
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->covered());
  EXPECT_NE(none->reason.find("1 preempted within the last"), std::string::npos);
  // Exactly at the window's end it may be preempted again.
  auto edge = PickVictims(groups, running, {"owner", 2000, kNow, 10 * 60'000});
  ASSERT_TRUE(edge.ok());
  EXPECT_EQ(edge->attempt_ids, (std::vector<int64_t>{1, 2}));
}

TEST(PickVictimsTest, AllOrNothing) {
  std::vector<GroupState> groups = {Group("owner", 1, 0, 4000, 0),
                                    Group("borrower", 1, 0, 0, 2000)};
  std::vector<RunningAttempt> running = {Attempt(1, "borrower", 1000, kNow),
                                         Attempt(2, "borrower", 1000, kNow, false)};
  auto v = PickVictims(groups, running, {"owner", 2000, kNow, 0});
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v->attempt_ids.empty());
  EXPECT_EQ(v->freed_milli, 0);
  EXPECT_NE(v->reason.find("only 1.000 of 2.000 GPUs"), std::string::npos);
  EXPECT_NE(v->reason.find("1 borrowing attempts not preemptible"), std::string::npos);
}

TEST(PickVictimsTest, OnlyGroupsOverTheirGuarantee) {
  std::vector<GroupState> groups = {Group("owner", 1, 0, 4000, 0),
                                    Group("within", 1, 0, 4000, 2000),
                                    Group("over", 1, 0, 1000, 2000)};
  std::vector<RunningAttempt> running = {
      Attempt(1, "within", 1000, kNow), Attempt(2, "within", 1000, kNow),
      Attempt(3, "over", 1000, kNow - kHour), Attempt(4, "over", 1000, kNow - 2 * kHour)};
  auto one = PickVictims(groups, running, {"owner", 1000, kNow, 0});
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->attempt_ids, (std::vector<int64_t>{3}));
  // "over" is over by 1 GPU only: after taking 3 it is at its guarantee and
  // 4 stays; "within" is never a source, so 2 GPUs cannot be freed.
  auto two = PickVictims(groups, running, {"owner", 2000, kNow, 0});
  ASSERT_TRUE(two.ok());
  EXPECT_FALSE(two->covered());
}

TEST(PickVictimsTest, ReprievesVictimsNotNeeded) {
  std::vector<GroupState> groups = {Group("owner", 1, 0, 8000, 0),
                                    Group("borrower", 1, 0, 0, 5000)};
  // Least lost first takes 1 (0.5 GPU) then 2 (4 GPUs): 2 alone covers 2 GPUs.
  std::vector<RunningAttempt> running = {Attempt(1, "borrower", 500, kNow - 1),
                                         Attempt(2, "borrower", 4000, kNow - 2),
                                         Attempt(3, "borrower", 500, kNow - 3)};
  auto v = PickVictims(groups, running, {"owner", 2000, kNow, 0});
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->attempt_ids, (std::vector<int64_t>{2}));
  EXPECT_EQ(v->freed_milli, 4000);
}

TEST(PickVictimsTest, BorrowingNeverPreempts) {
  std::vector<GroupState> groups = {Group("owner", 1, 0, 1000, 500),
                                    Group("borrower", 1, 0, 0, 2000)};
  std::vector<RunningAttempt> running = {Attempt(1, "borrower", 2000, kNow)};
  auto v = PickVictims(groups, running, {"owner", 1000, kNow, 0});
  ASSERT_TRUE(v.ok());
  EXPECT_FALSE(v->covered());
  EXPECT_NE(v->reason.find("borrowing does not preempt"), std::string::npos);
}

TEST(PickVictimsTest, NeverItsOwnGroupAndValidatesInput) {
  std::vector<GroupState> groups = {Group("owner", 1, 0, 4000, 0)};
  auto unknown = PickVictims(groups, {}, {"ghost", 1000, kNow, 0});
  EXPECT_EQ(unknown.status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(PickVictims(groups, {}, {"owner", 0, kNow, 0}).ok());
  EXPECT_FALSE(PickVictims(groups, {Attempt(1, "ghost", 1000, 0)}, {"owner", 1000, kNow, 0}).ok());
  EXPECT_FALSE(PickVictims(groups, {Attempt(1, "owner", 1000, 0), Attempt(1, "owner", 1000, 0)},
                           {"owner", 1000, kNow, 0})
                   .ok());
}

TEST(PickVictimsTest, DeterministicUnderPermutation) {
  std::vector<GroupState> groups = {Group("owner", 1, 0, 16000, 0), Group("a", 1, 0, 1000, 9000),
                                    Group("b", 1, 0, 0, 9000)};
  std::vector<RunningAttempt> running;
  for (int64_t id = 0; id < 18; ++id) {
    // Many ties in lost work, broken by size then id.
    running.push_back(Attempt(id, id % 2 ? "a" : "b", 500 + (id % 3) * 250, kNow - (id % 4)));
  }
  std::mt19937_64 rng(3);
  auto first = PickVictims(groups, running, {"owner", 6000, kNow, 0});
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(first->covered());
  for (int round = 0; round < 10; ++round) {
    std::shuffle(running.begin(), running.end(), rng);
    auto again = PickVictims(groups, running, {"owner", 6000, kNow, 0});
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->attempt_ids, first->attempt_ids);
    EXPECT_EQ(again->freed_milli, first->freed_milli);
  }
}

}  // namespace
}  // namespace gpupool::sched
