#include "accounting/budgets.h"

#include <algorithm>
#include <ctime>

namespace gpupool::accounting {

UtcMonth MonthOf(int64_t ms) {
  std::time_t t = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char name[16];
  std::strftime(name, sizeof name, "%Y-%m", &tm);
  std::tm first{};
  first.tm_year = tm.tm_year;
  first.tm_mon = tm.tm_mon;
  first.tm_mday = 1;
  std::tm next = first;
  next.tm_mon += 1;  // timegm normalises December + 1
  return {name, static_cast<int64_t>(timegm(&first)) * 1000,
          static_cast<int64_t>(timegm(&next)) * 1000};
}

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

std::string AlertText(const BudgetStanding& s) {
  if (s.at_limit || s.alert >= 100) return "budget: " + s.reason;
  return "budget: " + Who(s.budget.account) + " has spent " + std::to_string(s.percent) +
         "% of its " + s.month + " budget (" + FormatCredits(s.spent) + " of " +
         FormatCredits(s.budget.monthly) + " credits)";
}

std::string MaxCostReason(Micros max_cost, Micros spent) {
  return "its spending limit of " + FormatCredits(max_cost) + " credits was reached (it spent " +
         FormatCredits(spent) + ")";
}

}  // namespace gpupool::accounting
