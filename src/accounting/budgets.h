// Budgets: where an account stands against its budget, and what its work
// may do (docs/user-guide.md#budgets-and-what-happens-at-the-limit).
//
// An account with a budget may spend at most its monthly amount in each
// calendar month (UTC), and never more than its balance: it is at its
// limit once this month's charges reach the monthly amount, or its balance
// reaches zero (running work's accruing charges counted in both). At the
// limit its pending jobs wait (hold and stop); with `stop` its running jobs
// also checkpoint, stop and wait. Money coming back (a grant, lending
// credits, a raised budget, the next month) lifts the limit. Alerts at 75%
// and 90% of the monthly amount.
//
// Contract: pure.
#pragma once

#include <cstdint>
#include <string>

#include "accounting/records.h"

namespace gpupool::accounting {

// "2026-11" and its first and the next month's first millisecond (UTC).
struct UtcMonth {
  std::string name;
  int64_t from_ms = 0, to_ms = 0;
};
UtcMonth MonthOf(int64_t ms);

struct BudgetStanding {
  Budget budget;
  std::string month;    // "2026-11"
  Micros spent = 0;     // this month's charges, accruing ones included
  Micros balance = 0;   // accruing charges taken off
  int32_t percent = 0;  // of the monthly amount spent (0 without one)
  // 0, 75, 90 or 100: the highest alert threshold reached.
  int32_t alert = 0;
  bool at_limit = false;
  // Why its work waits or stopped, for a job's reason: "group vision
  // reached its budget: 100.00 of 100.00 credits spent in 2026-11 (until
  // the next month, or an admin raises the budget)".
  std::string reason;
};

BudgetStanding Standing(const Budget& budget, const std::string& month, Micros spent,
                        Micros balance);

// What a running job's log says when its account's alert rises: "budget:
// group vision has spent 78% of its 2026-11 budget (780.00 of 1000.00
// credits)", or at the limit "budget: " + the reason.
std::string AlertText(const BudgetStanding& s);

// "a job's spending limit of 50.00 credits reached (it spent 50.01)".
std::string MaxCostReason(Micros max_cost, Micros spent);

}  // namespace gpupool::accounting
