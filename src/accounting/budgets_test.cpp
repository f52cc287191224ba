// Budgets: the limit is the monthly amount or the balance, whichever comes
// first; alerts at 75% and 90%.
#include "accounting/budgets.h"

#include <gtest/gtest.h>

#include "accounting/accounting_testing.h"

namespace gpupool::accounting {
namespace {

using namespace testing;

Budget Of(Micros monthly, BudgetAction action = BudgetAction::kHold) {
  return {"group:vision", monthly, action, 0, "root"};
}

TEST(BudgetsTest, AlertsAt75And90AndStopsAtTheMonthlyAmount) {
  EXPECT_EQ(Standing(Of(100 * kCredit), "2026-11", 74 * kCredit, kCredit).alert, 0);
  EXPECT_EQ(Standing(Of(100 * kCredit), "2026-11", 75 * kCredit, kCredit).alert, 75);
  auto ninety = Standing(Of(100 * kCredit), "2026-11", 95 * kCredit, kCredit);
  EXPECT_EQ(ninety.alert, 90);
  EXPECT_EQ(ninety.percent, 95);
  EXPECT_FALSE(ninety.at_limit);
  auto full = Standing(Of(100 * kCredit), "2026-11", 100 * kCredit, kCredit);
  EXPECT_TRUE(full.at_limit);
  EXPECT_EQ(full.alert, 100);
  EXPECT_EQ(full.reason,
            "group vision reached its budget: 100.00 of 100.00 credits spent in 2026-11 (until "
            "the next month, or an admin raises the budget)");
}

TEST(BudgetsTest, AnAlertSaysWhoSpentHowMuchOfWhichMonth) {
  EXPECT_EQ(AlertText(Standing(Of(100 * kCredit), "2026-11", 78 * kCredit, kCredit)),
            "budget: group vision has spent 78% of its 2026-11 budget (78.00 of 100.00 credits)");
  EXPECT_EQ(AlertText(Standing(Of(0), "2026-11", 5 * kCredit, 0)),
            "budget: group vision has no credits left (balance 0.00; an admin can grant credits)");
}

TEST(BudgetsTest, NoMoneyLeftIsALimitWithOrWithoutAMonthlyAmount) {
  auto broke = Standing(Of(0), "2026-11", 5 * kCredit, 0);
  EXPECT_TRUE(broke.at_limit);
  EXPECT_EQ(broke.reason,
            "group vision has no credits left (balance 0.00; an admin can grant credits)");
  EXPECT_TRUE(Standing(Of(100 * kCredit), "2026-11", kCredit, -1).at_limit);
  EXPECT_FALSE(Standing(Of(0), "2026-11", 500 * kCredit, 1).at_limit);
  EXPECT_EQ(Standing(Of(0), "2026-11", 500 * kCredit, 1).alert, 0);
}

TEST(BudgetsTest, MaxCostSaysWhatWasSpent) {
  EXPECT_EQ(MaxCostReason(50 * kCredit, 50 * kCredit + 10'000),
            "its spending limit of 50.00 credits was reached (it spent 50.01)");
}

}  // namespace
}  // namespace gpupool::accounting
