// BudgetKeeper: budgets per account and jobs' spending limits, enforced
// (accounting/budgets.h has the rules; docs/user-guide.md#budgets-and-what-happens-at-the-limit).
//
// Evaluate(), after each accrual tick and after every grant or budget
// change, reads each budget's account (this month's charges and its
// balance, running work's accruing charges counted in both) and:
// - keeps which accounts are at their limit (Held(): the pool's passes
//   leave their pending jobs waiting, with the reason);
// - for an account at a `stop` limit, stops each of its running jobs as a
//   preemption (checkpointing) and requeues it (hooks.stop_and_requeue);
// - for a running job whose charges reached its max_cost, stops it for
//   good, checkpointing first (hooks.stop_for_good);
// - says when the set of held accounts changed (hooks.limits_changed), so
//   that a pass runs at once when money came back;
// - when an account's alert rises (75%, 90%, its limit) within a month,
//   writes it as an event into the log of each of its running jobs
//   (hooks.job_event). The first Evaluate after a start only notes where
//   each account stands, so a restart repeats no alert.
//
// Threading: the server's event loop.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "accounting/budgets.h"
#include "common/clock.h"
#include "server/accounting_service.h"
#include "store/store.h"

namespace gpupool::server {

struct BudgetHooks {
  std::function<void(int64_t job_id, const std::string& reason)> stop_and_requeue;
  std::function<void(int64_t job_id, const std::string& reason)> stop_for_good;
  std::function<void()> limits_changed;
  std::function<void(int64_t job_id, const std::string& text)> job_event;
};

class BudgetKeeper {
 public:
  BudgetKeeper(Store& store, const Clock& clock, AccountingService& accounting, BudgetHooks hooks);

  // Sets (replaces) an account's budget. InvalidArgument names a bad field;
  // NotFound for a lab or user that does not exist is the caller's check.
  Result<accounting::Budget> SetBudget(const std::string& account, accounting::Micros monthly,
                                       accounting::BudgetAction action, const std::string& by);
  Status ClearBudget(const std::string& account);

  // Applies the budgets and spending limits to the work running now.
  Status Evaluate();

  // Each budget's standing as of the last Evaluate, by account.
  const std::map<std::string, accounting::BudgetStanding>& Standings() const { return standings_; }
  // Accounts at their limit -> why.
  std::map<std::string, std::string> Held() const;

 private:
  Store& store_;
  const Clock& clock_;
  AccountingService& accounting_;
  BudgetHooks hooks_;
  // Writes the alerts that rose since the last Evaluate (see above).
  void Alert(const std::map<std::string, accounting::BudgetStanding>& standings,
             const RunningWork& work);

  std::map<std::string, accounting::BudgetStanding> standings_;
  // Account -> the month and alert level last announced.
  std::map<std::string, std::pair<std::string, int32_t>> alerted_;
  bool primed_ = false;
};

}  // namespace gpupool::server
