// The Store conformance suite (store/store_conformance.h): the accounting
// facet (AccountingTx): price versions, the ledger (idempotent by key,
// never partly written), the balances it moves, usage reports.
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "accounting/budgets.h"
#include "store/store_conformance.h"
#include "store/store_conformance_testing.h"

namespace gpupool {
namespace {

using namespace ::gpupool::conformance;  // NOLINT: the suite's own helpers
using accounting::AccountBalance;
using accounting::EntryKind;
using accounting::LedgerEntry;
using accounting::Micros;

constexpr int64_t kHourMs = 3'600'000;
// 2026-11-26T00:00:00Z.
constexpr int64_t kNov26 = 1'795'651'200'000;

LedgerEntry Charge(std::string attempt, int32_t rank, int64_t from, int64_t to, Micros amount,
                   std::string user = "alice", std::string group = "vision") {
  LedgerEntry e;
  e.key = "charge:" + attempt + "/" + std::to_string(rank) + ":" + std::to_string(from);
  e.kind = EntryKind::kCharge;
  e.debit = group.empty() ? "user:" + user : "group:" + group;
  e.credit = "pool";
  e.amount = amount;
  e.at_ms = to;
  e.attempt_id = attempt;
  e.rank = rank;
  e.job_id = std::stoll(attempt.substr(0, attempt.find('.')));
  e.user = std::move(user);
  e.group = std::move(group);
  e.node_id = "n-1";
  e.provider_group = "physics";
  e.gpu_class = "A100";
  e.from_ms = from;
  e.gpu_milli = 1000;
  e.cpu_milli = 2000;
  e.memory_mib = 4096;
  return e;
}

LedgerEntry Grant(std::string key, std::string account, Micros amount, int64_t at) {
  LedgerEntry e;
  e.key = std::move(key);
  e.kind = EntryKind::kGrant;
  e.debit = "pool";
  e.credit = std::move(account);
  e.amount = amount;
  e.at_ms = at;
  e.from_ms = at;
  e.actor = "admin";
  e.note = "fall allocation";
  return e;
}

// A query with the fields `set` sets (designated initializers would have
// to name every field to keep -Wextra quiet).
template <typename Q, typename F>
Q With(F set) {
  Q q;
  set(q);
  return q;
}

std::map<std::string, Micros> Balances(Store& store) {
  auto all = InTx(store, [](Tx& tx) { return tx.ListBalances(); });
  EXPECT_TRUE(all.ok()) << all.status().ToString();
  std::map<std::string, Micros> out;
  if (all.ok())
    for (const AccountBalance& b : *all) out[b.account] = b.balance;
  return out;
}

}  // namespace

TEST_P(StoreConformanceTest, PriceVersionsAreKeptInOrderAndNeverReplaced) {
  accounting::PriceVersion a{0, accounting::PricedResource::kGpu, "A100", 2'500'000, 100, "root"};
  accounting::PriceVersion b = a;
  b.per_unit = 3'000'000;
  b.from_ms = 200;
  accounting::PriceVersion c{0, accounting::PricedResource::kMemory, "", 10'000, 150, "root"};
  CONF_ASSERT_OK_AND_ASSIGN(int64_t ida, InTx(store(), [&](Tx& tx) { return tx.AddPrice(a); }));
  CONF_ASSERT_OK_AND_ASSIGN(int64_t idb, InTx(store(), [&](Tx& tx) { return tx.AddPrice(b); }));
  CONF_ASSERT_OK_AND_ASSIGN(int64_t idc, InTx(store(), [&](Tx& tx) { return tx.AddPrice(c); }));
  EXPECT_LT(ida, idb);
  EXPECT_LT(idb, idc);
  CONF_ASSERT_OK_AND_ASSIGN(auto all, InTx(store(), [](Tx& tx) { return tx.ListPrices(); }));
  ASSERT_EQ(all.size(), 3u);
  a.id = ida;
  b.id = idb;
  c.id = idc;
  EXPECT_EQ(all[0], a);
  EXPECT_EQ(all[1], b);
  EXPECT_EQ(all[2], c);
}

TEST_P(StoreConformanceTest, PostingMovesBalancesOnceByKey) {
  LedgerEntry charge = Charge("7.1", 0, 0, kHourMs, 2'000'000);
  LedgerEntry lending = charge;
  lending.key = "lending:7.1/0:0";
  lending.kind = EntryKind::kLending;
  lending.debit = "pool";
  lending.credit = "group:physics";
  lending.amount = 1'600'000;
  LedgerEntry grant = Grant("grant:1", "group:vision", 10'000'000, 5);
  for (const LedgerEntry* e : {&grant, &charge, &lending}) {
    CONF_ASSERT_OK_AND_ASSIGN(bool posted, InTx(store(), [&](Tx& tx) { return tx.PostEntry(*e); }));
    EXPECT_TRUE(posted) << e->key;
  }
  // The same key again, even with another amount, changes nothing.
  LedgerEntry again = charge;
  again.amount = 999'000'000;
  CONF_ASSERT_OK_AND_ASSIGN(bool posted,
                            InTx(store(), [&](Tx& tx) { return tx.PostEntry(again); }));
  EXPECT_FALSE(posted);
  auto balances = Balances(store());
  EXPECT_EQ(balances["group:vision"], 10'000'000 - 2'000'000);
  EXPECT_EQ(balances["group:physics"], 1'600'000);
  EXPECT_EQ(balances["pool"], -10'000'000 + 2'000'000 - 1'600'000);
  Micros sum = 0;
  for (const auto& [account, b] : balances) sum += b;
  EXPECT_EQ(sum, 0);
  CONF_ASSERT_OK_AND_ASSIGN(AccountBalance vision,
                            InTx(store(), [](Tx& tx) { return tx.GetBalance("group:vision"); }));
  EXPECT_EQ(vision.entries, 2);
  CONF_ASSERT_OK_AND_ASSIGN(AccountBalance none,
                            InTx(store(), [](Tx& tx) { return tx.GetBalance("user:nobody"); }));
  EXPECT_EQ(none, (AccountBalance{"user:nobody", 0, 0}));
  // Stored as posted, ids assigned in order.
  CONF_ASSERT_OK_AND_ASSIGN(auto ledger,
                            InTx(store(), [](Tx& tx) { return tx.ListLedger(LedgerQuery{}); }));
  ASSERT_EQ(ledger.size(), 3u);
  EXPECT_LT(ledger[0].id, ledger[1].id);
  LedgerEntry stored = ledger[1];
  stored.id = 0;
  EXPECT_EQ(stored, charge);
  EXPECT_EQ(ledger[0].note, "fall allocation");
}

TEST_P(StoreConformanceTest, AFailedTransactionPostsNothing) {
  Status st = store().Transact([&](Tx& tx) -> Status {
    GP_RETURN_IF_ERROR(tx.PostEntry(Grant("grant:x", "group:vision", 5, 1)).status());
    return Status::Internal("the server died");
  });
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(Balances(store()).empty());
  CONF_ASSERT_OK_AND_ASSIGN(auto ledger,
                            InTx(store(), [](Tx& tx) { return tx.ListLedger(LedgerQuery{}); }));
  EXPECT_TRUE(ledger.empty());
  // The key was not taken either.
  CONF_ASSERT_OK_AND_ASSIGN(bool posted, InTx(store(), [](Tx& tx) {
                              return tx.PostEntry(Grant("grant:x", "group:vision", 5, 1));
                            }));
  EXPECT_TRUE(posted);
}

TEST_P(StoreConformanceTest, PostedToIsTheEndOfARanksLastCharge) {
  for (const LedgerEntry& e :
       {Charge("7.1", 0, 0, kHourMs, 1), Charge("7.1", 0, kHourMs, 2 * kHourMs, 1),
        Charge("7.1", 1, 0, kHourMs / 2, 1), Charge("8.1", 0, 0, 3 * kHourMs, 1)}) {
    CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) { return tx.PostEntry(e); }));
  }
  LedgerEntry lending = Charge("7.1", 0, 2 * kHourMs, 9 * kHourMs, 1);
  lending.kind = EntryKind::kLending;
  lending.key = "lending:late";
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) { return tx.PostEntry(lending); }));
  auto posted_to = [&](const char* attempt, int32_t rank) {
    auto r = InTx(store(), [&](Tx& tx) { return tx.PostedTo(attempt, rank); });
    EXPECT_TRUE(r.ok());
    return r.ok() ? *r : -1;
  };
  EXPECT_EQ(posted_to("7.1", 0), 2 * kHourMs);  // lending entries do not count
  EXPECT_EQ(posted_to("7.1", 1), kHourMs / 2);
  EXPECT_EQ(posted_to("8.1", 0), 3 * kHourMs);
  EXPECT_EQ(posted_to("9.1", 0), 0);
}

TEST_P(StoreConformanceTest, LedgerPagesByAccountKindAndTime) {
  std::vector<LedgerEntry> entries = {Grant("g1", "group:vision", 100, 10),
                                      Charge("7.1", 0, 0, 20, 5), Grant("g2", "user:bob", 7, 30),
                                      Charge("8.1", 0, 0, 40, 6, "bob", ""),
                                      Grant("g3", "group:vision", 1, 50)};
  for (const LedgerEntry& e : entries) {
    CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) { return tx.PostEntry(e); }));
  }
  auto keys = [&](LedgerQuery q) {
    std::vector<std::string> out;
    auto r = InTx(store(), [&](Tx& tx) { return tx.ListLedger(q); });
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (r.ok())
      for (const auto& e : *r) out.push_back(e.key);
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(keys(With<LedgerQuery>([](auto& q) { q.account = "group:vision"; })),
            (V{"g1", entries[1].key, "g3"}));
  EXPECT_EQ(keys(With<LedgerQuery>([](auto& q) { q.account = "user:bob"; })),
            (V{"g2", entries[3].key}));
  EXPECT_EQ(keys(With<LedgerQuery>([](auto& q) { q.kind = EntryKind::kGrant; })),
            (V{"g1", "g2", "g3"}));
  EXPECT_EQ(keys(With<LedgerQuery>([](auto& q) {
              q.since_ms = 20;
              q.until_ms = 50;
            })),
            (V{entries[1].key, "g2", entries[3].key}));
  EXPECT_EQ(keys(With<LedgerQuery>([](auto& q) {
              q.account = "group:vision";
              q.limit = 2;
            })),
            (V{"g1", entries[1].key}));
  CONF_ASSERT_OK_AND_ASSIGN(auto first, InTx(store(), [](Tx& tx) {
                              return tx.ListLedger(With<LedgerQuery>([](auto& q) { q.limit = 2; }));
                            }));
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(keys(With<LedgerQuery>([&](auto& q) { q.after_id = first[1].id; })),
            (V{"g2", entries[3].key, "g3"}));
}

TEST_P(StoreConformanceTest, UsageIsSummedPerKeyOverCharges) {
  // Alice (vision) on two days, Bob (no group) once; a grant is not use.
  LedgerEntry a1 = Charge("7.1", 0, kNov26 - kHourMs, kNov26, 1'000'000);  // Nov 25, 23:00
  LedgerEntry a2 = Charge("7.1", 0, kNov26, kNov26 + kHourMs / 2, 500'000);
  a2.cpu_milli = 0;
  LedgerEntry b1 = Charge("12.1", 1, kNov26 + kHourMs, kNov26 + 2 * kHourMs, 3'000'000, "bob", "");
  b1.gpu_class = "T4";
  b1.node_id = "n-2";
  for (const LedgerEntry& e : {a1, a2, b1, Grant("g", "group:vision", 9, kNov26)}) {
    CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) { return tx.PostEntry(e); }));
  }
  auto usage = [&](UsageQuery q) {
    auto r = InTx(store(), [&](Tx& tx) { return tx.SumUsage(q); });
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : std::vector<UsageRow>{};
  };
  using Rows = std::vector<UsageRow>;
  const int64_t h = kHourMs;
  EXPECT_EQ(usage(With<UsageQuery>([](auto& q) { q.by = UsageBy::kUser; })),
            (Rows{{"alice", 1000 * (h + h / 2), 2000 * h, 1'500'000, 2},
                  {"bob", 1000 * h, 2000 * h, 3'000'000, 1}}));
  EXPECT_EQ(usage(With<UsageQuery>([](auto& q) { q.by = UsageBy::kGroup; })),
            (Rows{{"", 1000 * h, 2000 * h, 3'000'000, 1},
                  {"vision", 1000 * (h + h / 2), 2000 * h, 1'500'000, 2}}));
  EXPECT_EQ(usage(With<UsageQuery>([](auto& q) { q.by = UsageBy::kAccount; }))[1].key, "user:bob");
  EXPECT_EQ(usage(With<UsageQuery>([](auto& q) { q.by = UsageBy::kModel; }))[1].key, "T4");
  EXPECT_EQ(usage(With<UsageQuery>([](auto& q) { q.by = UsageBy::kNode; }))[1].key, "n-2");
  Rows by_job =
      usage(With<UsageQuery>([](auto& q) { q.by = UsageBy::kJob; }));  // numerically: 7 before 12
  ASSERT_EQ(by_job.size(), 2u);
  EXPECT_EQ(by_job[0].key, "7");
  EXPECT_EQ(by_job[1].key, "12");
  Rows by_day = usage(With<UsageQuery>([](auto& q) { q.by = UsageBy::kDay; }));
  ASSERT_EQ(by_day.size(), 2u);
  EXPECT_EQ(by_day[0].key, "2026-11-25");
  EXPECT_EQ(by_day[0].cost, 1'000'000);
  EXPECT_EQ(by_day[1].key, "2026-11-26");
  EXPECT_EQ(by_day[1].cost, 3'500'000);
  EXPECT_EQ(usage(With<UsageQuery>([](auto& q) { q.by = UsageBy::kMonth; })).at(0).key, "2026-11");
  // Filters: by interval start, by group, by user.
  EXPECT_EQ(usage(With<UsageQuery>([](auto& q) {
              q.by = UsageBy::kUser;
              q.since_ms = kNov26;
            }))
                .at(0)
                .cost,
            500'000);
  EXPECT_EQ(usage(With<UsageQuery>([](auto& q) {
              q.by = UsageBy::kUser;
              q.until_ms = kNov26;
            })).size(),
            1u);
  EXPECT_EQ(usage(With<UsageQuery>([](auto& q) {
              q.by = UsageBy::kUser;
              q.group = "vision";
            })).size(),
            1u);
  EXPECT_EQ(usage(With<UsageQuery>([](auto& q) {
              q.by = UsageBy::kDay;
              q.user = "bob";
            }))
                .at(0)
                .cost,
            3'000'000);
}

// The books balance after any sequence of postings, repeats and rolled
// back transactions: every balance is what its entries say, and all sum
// to zero.
TEST_P(StoreConformanceTest, TheBooksAlwaysBalance) {
  std::mt19937_64 rng(5);
  const char* accounts[] = {"pool", "group:a", "group:b", "user:x", "user:y"};
  std::vector<LedgerEntry> tried;
  for (int i = 0; i < 300; ++i) {
    LedgerEntry e;
    bool repeat = !tried.empty() && rng() % 4 == 0;
    if (repeat) {
      e = tried[rng() % tried.size()];
    } else {
      e = Grant("k" + std::to_string(i), accounts[rng() % 5], static_cast<Micros>(rng() % 1000),
                static_cast<int64_t>(i));
      e.debit = accounts[rng() % 5];
      e.kind = static_cast<EntryKind>(rng() % 3);
    }
    bool fail = rng() % 5 == 0;
    Status st = store().Transact([&](Tx& tx) -> Status {
      GP_RETURN_IF_ERROR(tx.PostEntry(e).status());
      return fail ? Status::Internal("rolled back") : Status::Ok();
    });
    EXPECT_EQ(st.ok(), !fail);
    if (!fail && !repeat) tried.push_back(e);
  }
  CONF_ASSERT_OK_AND_ASSIGN(
      auto ledger, InTx(store(), [](Tx& tx) {
        return tx.ListLedger(With<LedgerQuery>([](auto& q) { q.limit = 100000; }));
      }));
  std::map<std::string, Micros> expected;
  std::map<std::string, int> seen;
  for (const LedgerEntry& e : ledger) {
    EXPECT_EQ(++seen[e.key], 1) << e.key;
    expected[e.debit] -= e.amount;
    expected[e.credit] += e.amount;
  }
  EXPECT_EQ(ledger.size(), tried.size());
  auto balances = Balances(store());
  Micros sum = 0;
  for (const auto& [account, b] : balances) {
    EXPECT_EQ(b, expected[account]) << account;
    sum += b;
  }
  EXPECT_EQ(sum, 0);
}

}  // namespace gpupool

namespace gpupool {

TEST_P(StoreConformanceTest, AJobsSpendSumsItsAttemptsCharges) {
  for (const auto& e : {Charge("7.1", 0, 0, 10, 100), Charge("7.2", 0, 20, 30, 50),
                        Charge("7.2", 1, 20, 30, 25), Charge("8.1", 0, 0, 10, 1)}) {
    CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) { return tx.PostEntry(e); }));
  }
  LedgerEntry lending = Charge("7.1", 0, 10, 20, 999);
  lending.kind = EntryKind::kLending;
  lending.key = "lending:x";
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) { return tx.PostEntry(lending); }));
  auto spend = [&](int64_t job) {
    auto r = InTx(store(), [&](Tx& tx) { return tx.JobSpend(job); });
    EXPECT_TRUE(r.ok());
    return r.ok() ? *r : -1;
  };
  EXPECT_EQ(spend(7), 175);
  EXPECT_EQ(spend(8), 1);
  EXPECT_EQ(spend(9), 0);
}

TEST_P(StoreConformanceTest, BudgetsAreSetReplacedAndDeletedByAccount) {
  accounting::Budget a{"group:vision", 100'000'000, accounting::BudgetAction::kStop, 5, "root"};
  accounting::Budget b{"user:bob", 0, accounting::BudgetAction::kHold, 6, "root"};
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) { return tx.PutBudget(a); }));
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) { return tx.PutBudget(b); }));
  a.monthly = 5;
  CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) { return tx.PutBudget(a); }));
  CONF_ASSERT_OK_AND_ASSIGN(auto all, InTx(store(), [](Tx& tx) { return tx.ListBudgets(); }));
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0], a);
  EXPECT_EQ(all[1], b);
  CONF_ASSERT_OK(InTx(store(), [](Tx& tx) { return tx.DeleteBudget("group:vision"); }));
  CONF_ASSERT_OK(InTx(store(), [](Tx& tx) { return tx.DeleteBudget("group:none"); }));
  CONF_ASSERT_OK_AND_ASSIGN(all, InTx(store(), [](Tx& tx) { return tx.ListBudgets(); }));
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0], b);
}

}  // namespace gpupool

namespace gpupool {

// Reports over whole days and months may be kept apart from the ledger
// (SQLite's rollups); whatever a backend does, every report equals the sum
// of the ledger's charges, over any window, by any key, with any filter,
// after repeated posts and rolled-back transactions; and an account's
// daily flows equal its entries'.
TEST_P(StoreConformanceTest, UsageReportsAndFlowsEqualTheLedgersOverAnyWindow) {
  std::mt19937_64 rng(11);
  const char* users[] = {"alice", "bob", "carol", "dan"};
  const char* groups[] = {"vision", "nlp", ""};
  const char* classes[] = {"A100", "T4", "", "MIG 1g.10gb"};
  const int64_t oct1 = accounting::MonthOf(kNov26).from_ms - 31 * 24 * kHourMs;
  std::vector<LedgerEntry> posted;
  for (int i = 0; i < 400; ++i) {
    const bool repeat = !posted.empty() && rng() % 5 == 0;
    LedgerEntry e;
    if (repeat) {
      e = posted[rng() % posted.size()];
    } else {
      const int64_t from = oct1 + static_cast<int64_t>(rng() % (92 * 24)) * kHourMs;
      e = Charge(std::to_string(1 + rng() % 40) + "." + std::to_string(i), 0, from,
                 from + kHourMs / static_cast<int64_t>(1 + rng() % 4),
                 static_cast<Micros>(rng() % 5'000'000), users[rng() % 4], groups[rng() % 3]);
      e.node_id = "n-" + std::to_string(rng() % 3);
      e.gpu_class = classes[rng() % 4];
      e.gpu_milli = static_cast<int32_t>(250 * (1 + rng() % 8));
    }
    const bool fail = rng() % 6 == 0;
    Status st = store().Transact([&](Tx& tx) -> Status {
      GP_RETURN_IF_ERROR(tx.PostEntry(e).status());
      return fail ? Status::Internal("rolled back") : Status::Ok();
    });
    ASSERT_EQ(st.ok(), !fail);
    if (!fail && !repeat) posted.push_back(e);
    if (i % 50 == 0) {
      CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) {
        return tx.PostEntry(Grant("g" + std::to_string(i), "group:nlp", 7, e.from_ms));
      }));
    }
    if (i % 7 == 0) {
      LedgerEntry lend = e;
      lend.key = "lending:" + e.key;
      lend.kind = EntryKind::kLending;
      lend.debit = "pool";
      lend.credit = "group:vision";
      lend.amount = e.amount * 4 / 5;
      CONF_ASSERT_OK(InTx(store(), [&](Tx& tx) { return tx.PostEntry(lend); }));
    }
  }
  const int64_t day = 24 * kHourMs;
  const std::pair<int64_t, int64_t> windows[] = {
      {INT64_MIN, INT64_MAX},
      {kNov26 - 25 * day, INT64_MAX},                  // from Nov 1
      {INT64_MIN, kNov26 - 25 * day},                  // until Nov 1
      {kNov26 - 25 * day, kNov26 + 5 * day},           // Nov 1 to Dec 1
      {kNov26 - 3 * day, kNov26 + 2 * day},            // five days
      {kNov26 - 3 * day + kHourMs, kNov26 + 2 * day},  // not whole days
      {kNov26 - 40 * day + 5 * kHourMs, kNov26 - 9 * kHourMs}};
  const UsageBy keys[] = {UsageBy::kJob,  UsageBy::kUser,  UsageBy::kGroup, UsageBy::kAccount,
                          UsageBy::kNode, UsageBy::kModel, UsageBy::kDay,   UsageBy::kMonth};
  for (const auto& [since, until] : windows) {
    for (UsageBy by : keys) {
      for (int filter = 0; filter < 4; ++filter) {
        UsageQuery q;
        q.by = by;
        q.since_ms = since;
        q.until_ms = until;
        if (filter == 1) q.group = "vision";
        if (filter == 2) q.user = "bob";
        if (filter == 3) q.account = "user:carol";
        std::map<std::string, UsageRow> want;
        for (const LedgerEntry& e : posted) {
          if (e.from_ms < since || e.from_ms >= until) continue;
          if (!q.group.empty() && e.group != q.group) continue;
          if (!q.user.empty() && e.user != q.user) continue;
          if (!q.account.empty() && e.debit != q.account) continue;
          UsageRow& r = want[UsageKeyOf(e, by)];
          r.key = UsageKeyOf(e, by);
          r.gpu_milli_ms += e.GpuMilliMs();
          r.cpu_milli_ms += e.cpu_milli * (e.at_ms - e.from_ms);
          r.cost += e.amount;
          ++r.charges;
        }
        CONF_ASSERT_OK_AND_ASSIGN(auto rows, InTx(store(), [&](Tx& tx) { return tx.SumUsage(q); }));
        std::map<std::string, UsageRow> got;
        for (const UsageRow& r : rows) EXPECT_TRUE(got.emplace(r.key, r).second) << r.key;
        EXPECT_EQ(got, want) << "by " << UsageByName(by) << " from " << since << " to " << until
                             << " filter " << filter;
      }
    }
    // An account's flows per day and kind are its entries', both sides.
    CONF_ASSERT_OK_AND_ASSIGN(
        auto ledger, InTx(store(), [](Tx& tx) {
          return tx.ListLedger(With<LedgerQuery>([](auto& q) { q.limit = 100000; }));
        }));
    for (const char* account : {"group:vision", "group:nlp", "user:bob", "pool", "group:none"}) {
      std::map<std::pair<int64_t, EntryKind>, AccountFlow> want;
      for (const LedgerEntry& e : ledger) {
        if (e.from_ms < since || e.from_ms >= until) continue;
        if (e.debit != account && e.credit != account) continue;
        AccountFlow& f = want[{e.from_ms - e.from_ms % (24 * kHourMs), e.kind}];
        f.day_ms = e.from_ms - e.from_ms % (24 * kHourMs);
        f.kind = e.kind;
        (e.credit == account ? f.in : f.out) += e.amount;
        ++f.entries;
      }
      std::vector<AccountFlow> expected;
      for (const auto& [key, f] : want) expected.push_back(f);
      CONF_ASSERT_OK_AND_ASSIGN(auto flows, InTx(store(), [&](Tx& tx) {
                                  return tx.AccountFlows(account, since, until);
                                }));
      EXPECT_EQ(flows, expected) << account << " from " << since << " to " << until;
    }
  }
}

}  // namespace gpupool
