#include "accounting/budgets.h"

#include <algorithm>

namespace gpupool::accounting {

namespace {

std::string Who(const std::string& account) {
  if (account.rfind("group:", 0) == 0) return "group " + account.substr(6);
  if (account.rfind("user:", 0) == 0) return "user " + account.substr(5);
  return account;
}

}  // namespace

BudgetStanding Standing(const Budget& budget, const std::string& month, Micros spent,
                        Micros balance) {
  BudgetStanding s;
  s.budget = budget;
  s.month = month;
  s.spent = spent;
  s.balance = balance;
  if (budget.monthly > 0) {
    __int128 p = static_cast<__int128>(std::max<Micros>(spent, 0)) * 100 / budget.monthly;
    s.percent = static_cast<int32_t>(std::min<__int128>(p, 1'000'000));
    for (int32_t threshold : {75, 90, 100})
      if (s.percent >= threshold) s.alert = threshold;
  }
  if (budget.monthly > 0 && spent >= budget.monthly) {
    s.at_limit = true;
    s.reason = Who(budget.account) + " reached its budget: " + FormatCredits(spent) + " of " +
               FormatCredits(budget.monthly) + " credits spent in " + month +
               " (until the next month, or an admin raises the budget)";
  } else if (balance <= 0) {
    s.at_limit = true;
    s.alert = 100;
    s.reason = Who(budget.account) + " has no credits left (balance " + FormatCredits(balance) +
               "; an admin can grant credits)";
  }
  return s;
}

std::string MaxCostReason(Micros max_cost, Micros spent) {
  return "its spending limit of " + FormatCredits(max_cost) + " credits was reached (it spent " +
         FormatCredits(spent) + ")";
}

}  // namespace gpupool::accounting
