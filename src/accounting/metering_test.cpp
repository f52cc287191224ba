// Metering: an attempt's holding becomes charges per posting period, with
// lending credits, every interval charged exactly once.
#include "accounting/metering.h"

#include <map>
#include <random>

#include <gtest/gtest.h>

#include "accounting/accounting_testing.h"

namespace gpupool::accounting {
namespace {

using namespace testing;

PriceBook Book(std::vector<PriceVersion> v = {}) {
  if (v.empty()) v.push_back({1, PricedResource::kGpu, "A100", 2 * kCredit, 0, "admin"});
  return PriceBook(std::move(v));
}

Holding Held(int64_t from, int64_t freed = 0) {
  Holding h;
  h.attempt_id = "7.1";
  h.job_id = 7;
  h.user = "alice";
  h.group = "vision";
  h.node_id = "n-1";
  h.provider_group = "physics";
  h.use = {"A100", 1000, 0, 0};
  h.held_from_ms = from;
  h.freed_ms = freed;
  return h;
}

Micros Sum(const std::vector<LedgerEntry>& es, EntryKind kind) {
  Micros s = 0;
  for (const auto& e : es)
    if (e.kind == kind) s += e.amount;
  return s;
}

TEST(MeteringTest, ARunningAttemptIsPostedPerPeriodOverAndOwesTheRest) {
  MeteringRules rules;
  Holding h = Held(10 * kHour + 30 * kMin);
  // Half past ten to quarter past twelve: 10:30-11:00 and 11:00-12:00 are over.
  auto due = EntriesDue(h, 0, 12 * kHour + 15 * kMin, Book(), rules);
  std::vector<LedgerEntry> charges;
  for (auto& e : due)
    if (e.kind == EntryKind::kCharge) charges.push_back(e);
  ASSERT_EQ(charges.size(), 2u);
  EXPECT_EQ(charges[0].from_ms, 10 * kHour + 30 * kMin);
  EXPECT_EQ(charges[0].at_ms, 11 * kHour);
  EXPECT_EQ(charges[0].amount, kCredit);  // half an hour at 2
  EXPECT_EQ(charges[1].amount, 2 * kCredit);
  EXPECT_EQ(charges[0].key, "charge:7.1/0:" + std::to_string(10 * kHour + 30 * kMin));
  EXPECT_EQ(charges[0].debit, "group:vision");
  EXPECT_EQ(charges[0].credit, "pool");
  EXPECT_EQ(charges[0].GpuMilliMs(), 1000 * 30 * kMin);
  // The quarter hour under way is owed, not posted.
  EXPECT_EQ(Unposted(h, 12 * kHour, 12 * kHour + 15 * kMin, Book()), kCredit / 2);
  // Nothing more is due until the next hour is over.
  EXPECT_TRUE(EntriesDue(h, 12 * kHour, 12 * kHour + 59 * kMin, Book(), rules).empty());
}

// Storage is charged per GiB-month (30 days), once per period that is over,
// at the bytes stored when counted, under a key naming account and period.
TEST(MeteringTest, StorageIsChargedPerPeriodOverByTheGibMonth) {
  const int64_t gib = int64_t{1} << 30;
  MeteringRules rules;  // hour periods
  PriceBook none({{1, PricedResource::kGpu, "A100", 2 * kCredit, 0, "admin"}});
  EXPECT_FALSE(none.PricesStorage());
  EXPECT_FALSE(StorageChargeDue("group:vision", gib, 10 * kHour + 30 * kMin, none, rules));
  PriceBook book({{1, PricedResource::kStorage, "", kCredit, 0, "admin"},
                  {2, PricedResource::kStorage, "", 2 * kCredit, 9 * kHour + 30 * kMin, "admin"}});
  EXPECT_TRUE(book.PricesStorage());
  // 30 GiB for the hour from 08:00: 30/720 credits; from 09:00, half the
  // hour at 1.00 and half at 2.00.
  auto due = StorageChargeDue("group:vision", 30 * gib, 9 * kHour + 5 * kMin, book, rules);
  ASSERT_TRUE(due);
  EXPECT_EQ(due->from_ms, 8 * kHour);
  EXPECT_EQ(due->at_ms, 9 * kHour);
  EXPECT_EQ(due->amount, 30 * kCredit / 720);
  EXPECT_EQ(due->key, "storage:group:vision:" + std::to_string(8 * kHour));
  EXPECT_EQ(due->debit, "group:vision");
  EXPECT_EQ(due->credit, "pool");
  EXPECT_EQ(due->group, "vision");
  EXPECT_EQ(due->gpu_class, "storage");
  EXPECT_EQ(due->GpuMilliMs(), 0);
  due = StorageChargeDue("user:alice", 30 * gib, 10 * kHour, book, rules);  // at the boundary
  ASSERT_TRUE(due);
  EXPECT_EQ(due->from_ms, 9 * kHour);
  EXPECT_EQ(due->amount, 62'500);  // 30 GiB x 1.5 credit-hours / 720 hours, exactly
  EXPECT_EQ(due->user, "alice");
  // Too little to cost a micro-credit: nothing.
  EXPECT_FALSE(StorageChargeDue("user:alice", 1, 10 * kHour, book, rules));
}

// What a lab lent, back in the fair-share units of the borrowers' GPU time,
// decayed like usage.
TEST(MeteringTest, LendingCountsAgainstTheLendersUsageDecayedLikeIt) {
  MeteringRules rules;  // lending credits are 80% of the charge
  const int64_t day = 24 * kHour;
  // An A100-hour at 2.00 earns 1.60; with the cheapest GPU at 0.50 that
  // hour counted 4 GPU-hours in fair share.
  const std::vector<std::pair<int64_t, Micros>> lent = {{10 * day, 8 * kCredit / 5}};
  const int64_t four_gpu_hours = 4 * 1000 * kHour;
  const int64_t midday = 10 * day + 12 * kHour;
  EXPECT_EQ(LendingBonusMilliMs(lent, midday, 0, kCredit / 2, rules, 1000), four_gpu_hours);
  EXPECT_EQ(LendingBonusMilliMs(lent, midday, 0, kCredit / 2, rules, 500), four_gpu_hours / 2);
  // One half-life after the day's middle it counts half.
  EXPECT_NEAR(LendingBonusMilliMs(lent, midday + 7 * day, 7 * day, kCredit / 2, rules, 1000),
              four_gpu_hours / 2, 1);
  // Off, without GPU prices, or without lending credits: nothing.
  EXPECT_EQ(LendingBonusMilliMs(lent, midday, 0, kCredit / 2, rules, 0), 0);
  EXPECT_EQ(LendingBonusMilliMs(lent, midday, 0, 0, rules, 1000), 0);
  MeteringRules no_credit;
  no_credit.lending_permille = 0;
  EXPECT_EQ(LendingBonusMilliMs(lent, midday, 0, kCredit / 2, no_credit, 1000), 0);
}

TEST(MeteringTest, AnEndedAttemptIsPostedToItsEndAndNoFurther) {
  MeteringRules rules;
  Holding h = Held(10 * kHour, 10 * kHour + 20 * kMin);
  auto due = EntriesDue(h, 0, 15 * kHour, Book(), rules);
  EXPECT_EQ(Sum(due, EntryKind::kCharge), 2 * kCredit / 3);
  ASSERT_FALSE(due.empty());
  EXPECT_EQ(due.front().at_ms, 10 * kHour + 20 * kMin);
  // Posted: nothing is due again, whatever the clock says.
  EXPECT_TRUE(EntriesDue(h, 10 * kHour + 20 * kMin, 16 * kHour, Book(), rules).empty());
  EXPECT_EQ(Unposted(h, 10 * kHour + 20 * kMin, 16 * kHour, Book()), 0);
}

TEST(MeteringTest, LendingEarnsTheOwnerGroupItsShareButNotForItsOwnJobs) {
  MeteringRules rules;  // 80%
  Holding h = Held(0, kHour);
  auto due = EntriesDue(h, 0, kHour, Book(), rules);
  ASSERT_EQ(due.size(), 2u);
  EXPECT_EQ(due[1].kind, EntryKind::kLending);
  EXPECT_EQ(due[1].debit, "pool");
  EXPECT_EQ(due[1].credit, "group:physics");
  EXPECT_EQ(due[1].amount, 2 * kCredit * 8 / 10);
  EXPECT_EQ(due[1].key, "lending:7.1/0:0");
  h.provider_group = "vision";  // its own machine
  EXPECT_EQ(Sum(EntriesDue(h, 0, kHour, Book(), rules), EntryKind::kLending), 0);
  h.provider_group = "";  // a machine of no group
  EXPECT_EQ(EntriesDue(h, 0, kHour, Book(), rules).size(), 1u);
  rules.lending_permille = 500;
  h.provider_group = "physics";
  EXPECT_EQ(Sum(EntriesDue(h, 0, kHour, Book(), rules), EntryKind::kLending), kCredit);
  // A job of no group pays from its owner's account, and lends to the group.
  h.group = "default";
  EXPECT_EQ(EntriesDue(h, 0, kHour, Book(), rules)[0].debit, "user:alice");
  EXPECT_EQ(EntriesDue(h, 0, kHour, Book(), rules)[1].credit, "group:physics");
  // A group that is not a lab pays nothing: its owner does.
  h.group = "open-queue";
  h.group_pays = false;
  EXPECT_EQ(EntriesDue(h, 0, kHour, Book(), rules)[0].debit, "user:alice");
}

TEST(MeteringTest, AJobAcrossAPriceChangePaysEachPriceForItsTime) {
  PriceBook book =
      Book({{1, PricedResource::kGpu, "A100", 2 * kCredit, 0, "admin"},
            {2, PricedResource::kGpu, "A100", 5 * kCredit, kHour + 30 * kMin, "admin"}});
  Holding h = Held(kHour, 2 * kHour);
  EXPECT_EQ(Sum(EntriesDue(h, 0, 2 * kHour, book, {}), EntryKind::kCharge),
            kCredit + 5 * kCredit / 2);
}

TEST(MeteringTest, APreemptedJobPaysForEachAttemptNotForTheQueueBetween) {
  // Attempt 1 held 9:00-9:40 (preempted); the job waited until 11:00;
  // attempt 2 held 11:00-11:30.
  Holding first = Held(9 * kHour, 9 * kHour + 40 * kMin);
  Holding second = Held(11 * kHour, 11 * kHour + 30 * kMin);
  second.attempt_id = "7.2";
  auto a = EntriesDue(first, 0, 12 * kHour, Book(), {});
  auto b = EntriesDue(second, 0, 12 * kHour, Book(), {});
  EXPECT_EQ(Sum(a, EntryKind::kCharge) + Sum(b, EntryKind::kCharge), 2 * kCredit * 70 / 60);
  EXPECT_NE(a[0].key, b[0].key);
}

TEST(MeteringTest, AShareAndAGangRankPayWhatTheyHold) {
  Holding share = Held(0, kHour);
  share.use.gpu_milli = 250;
  EXPECT_EQ(Sum(EntriesDue(share, 0, kHour, Book(), {}), EntryKind::kCharge), kCredit / 2);
  // Each rank of a gang is a holding of its own: its node, its GPUs.
  Holding rank1 = Held(0, kHour);
  rank1.rank = 1;
  rank1.use.gpu_milli = 2000;
  auto due = EntriesDue(rank1, 0, kHour, Book(), {});
  EXPECT_EQ(Sum(due, EntryKind::kCharge), 4 * kCredit);
  EXPECT_EQ(due[0].key, "charge:7.1/1:0");
}

TEST(MeteringTest, AFreeUseIsRecordedWithNoLendingCredit) {
  Holding h = Held(0, kHour);
  h.use.gpu_class = "";  // no class priced
  auto due = EntriesDue(h, 0, kHour, Book(), {});
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].amount, 0);
  EXPECT_EQ(due[0].GpuMilliMs(), 1000 * kHour);
}

TEST(MeteringTest, TheClockMovingBackChargesNothingTwice) {
  Holding h = Held(10 * kHour);
  h.provider_group = "";  // charges only
  auto first = EntriesDue(h, 0, 13 * kHour, Book(), {});
  ASSERT_FALSE(first.empty());
  int64_t posted_to = first.back().at_ms;
  EXPECT_EQ(posted_to, 13 * kHour);
  // The clock goes back two hours: nothing is due, nothing is owed.
  EXPECT_TRUE(EntriesDue(h, posted_to, 11 * kHour, Book(), {}).empty());
  EXPECT_EQ(Unposted(h, posted_to, 11 * kHour, Book()), 0);
  // Forward again: the next entry starts where the last ended.
  auto next = EntriesDue(h, posted_to, 14 * kHour + 1, Book(), {});
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].from_ms, 13 * kHour);
}

// Posting at random moments (a tick, a crash and a restart, the end) gives
// the same entries as posting once at the end: no gap, no overlap, the same
// keys.
TEST(MeteringTest, PostingInPiecesGivesTheEntriesOfPostingOnce) {
  std::mt19937_64 rng(11);
  PriceBook book = Book({{1, PricedResource::kGpu, "A100", 2'345'678, 0, "admin"},
                         {2, PricedResource::kGpu, "A100", 999'999, 7 * kHour + 13, "admin"},
                         {3, PricedResource::kCpu, "", 111'111, 2 * kHour, "admin"}});
  MeteringRules rules;
  rules.period_ms = 15 * kMin;
  for (int round = 0; round < 100; ++round) {
    int64_t start = static_cast<int64_t>(rng() % (10 * kHour));
    int64_t end = start + 1 + static_cast<int64_t>(rng() % (5 * kHour));
    Holding live = Held(start);
    live.use.cpu_milli = static_cast<int64_t>(rng() % 8000);
    Holding ended = live;
    ended.freed_ms = end;
    std::map<std::string, LedgerEntry> ledger;
    int64_t posted_to = 0;
    for (int64_t now = start; now < end; now += 1 + static_cast<int64_t>(rng() % (40 * kMin))) {
      for (auto& e : EntriesDue(live, posted_to, now, book, rules)) {
        if (e.kind == EntryKind::kCharge) posted_to = e.at_ms;
        ASSERT_TRUE(ledger.emplace(e.key, e).second) << e.key;
      }
    }
    for (auto& e : EntriesDue(ended, posted_to, end + kHour, book, rules)) {
      ASSERT_TRUE(ledger.emplace(e.key, e).second) << e.key;
    }
    std::map<std::string, LedgerEntry> once;
    for (auto& e : EntriesDue(ended, 0, end, book, rules)) once.emplace(e.key, e);
    ASSERT_EQ(ledger, once) << "round " << round;
    Micros total = 0;
    for (auto& [k, e] : once)
      if (e.kind == EntryKind::kCharge) total += e.amount;
    EXPECT_EQ(total, book.CostSince(ended.use, start, end));
  }
}

}  // namespace
}  // namespace gpupool::accounting
