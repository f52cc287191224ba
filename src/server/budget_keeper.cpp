#include "server/budget_keeper.h"

namespace gpupool::server {

using accounting::Micros;
using accounting::MonthOf;
using accounting::UtcMonth;

BudgetKeeper::BudgetKeeper(Store& store, const Clock& clock, AccountingService& accounting,
                           BudgetHooks hooks)
    : store_(store), clock_(clock), accounting_(accounting), hooks_(std::move(hooks)) {}

Result<accounting::Budget> BudgetKeeper::SetBudget(const std::string& account, Micros monthly,
                                                   accounting::BudgetAction action,
                                                   const std::string& by) {
  GP_RETURN_IF_ERROR(accounting::CheckAccountName(account));
  if (account == accounting::kPoolAccount) {
    return Status::InvalidArgument("account: budgets are for labs and users, not the pool");
  }
  if (monthly < 0) return Status::InvalidArgument("monthly: must not be negative");
  accounting::Budget b{account, monthly, action, clock_.NowMs(), by};
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) { return tx.PutBudget(b); }));
  GP_RETURN_IF_ERROR(Evaluate());
  return b;
}

Status BudgetKeeper::ClearBudget(const std::string& account) {
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) { return tx.DeleteBudget(account); }));
  return Evaluate();
}

namespace {

// The accounts of `standings` at their limit -> why.
std::map<std::string, std::string> AtLimit(
    const std::map<std::string, accounting::BudgetStanding>& standings) {
  std::map<std::string, std::string> out;
  for (const auto& [account, s] : standings)
    if (s.at_limit) out[account] = s.reason;
  return out;
}

}  // namespace

std::map<std::string, std::string> BudgetKeeper::Held() const { return AtLimit(standings_); }

Status BudgetKeeper::Evaluate() {
  const RunningWork work = accounting_.Running();
  const UtcMonth month = MonthOf(clock_.NowMs());
  std::map<std::string, accounting::BudgetStanding> standings;
  std::map<int64_t, Micros> spent_by_job;
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(auto budgets, tx.ListBudgets());
    std::map<std::string, Micros> spent;
    if (!budgets.empty()) {
      UsageQuery q;
      q.by = UsageBy::kAccount;
      q.since_ms = month.from_ms;
      q.until_ms = month.to_ms;
      GP_ASSIGN_OR_RETURN(auto rows, tx.SumUsage(q));
      for (const UsageRow& r : rows) spent[r.key] = r.cost;
    }
    for (const accounting::Budget& b : budgets) {
      GP_ASSIGN_OR_RETURN(auto balance, tx.GetBalance(b.account));
      auto accruing = work.accruing_by_account.find(b.account);
      Micros owed = accruing == work.accruing_by_account.end() ? 0 : accruing->second;
      standings[b.account] =
          accounting::Standing(b, month.name, spent[b.account] + owed, balance.balance - owed);
    }
    for (const auto& [job, limit] : work.max_cost) {
      GP_ASSIGN_OR_RETURN(spent_by_job[job], tx.JobSpend(job));
    }
    return Status::Ok();
  }));
  bool changed = Held() != AtLimit(standings);

  Alert(standings, work);
  standings_ = std::move(standings);
  if (changed && hooks_.limits_changed) hooks_.limits_changed();
  // Stopping runs the pool's own transactions, after this one.
  for (const auto& [account, s] : standings_) {
    if (!s.at_limit || s.budget.action != accounting::BudgetAction::kStop) continue;
    auto jobs = work.jobs_by_account.find(account);
    if (jobs == work.jobs_by_account.end() || !hooks_.stop_and_requeue) continue;
    for (int64_t job : jobs->second) hooks_.stop_and_requeue(job, "stopped: " + s.reason);
  }
  for (const auto& [job, limit] : work.max_cost) {
    auto accruing = work.accruing_by_job.find(job);
    Micros spent =
        spent_by_job[job] + (accruing == work.accruing_by_job.end() ? 0 : accruing->second);
    if (spent >= limit && hooks_.stop_for_good) {
      hooks_.stop_for_good(job, accounting::MaxCostReason(limit, spent));
    }
  }
  return Status::Ok();
}

void BudgetKeeper::Alert(const std::map<std::string, accounting::BudgetStanding>& standings,
                         const RunningWork& work) {
  for (const auto& [account, s] : standings) {
    auto& [month, level] = alerted_[account];
    const bool rose = s.alert > (month == s.month ? level : 0);
    month = s.month;
    level = s.alert;
    if (!primed_ || !rose || !hooks_.job_event) continue;
    auto jobs = work.jobs_by_account.find(account);
    if (jobs == work.jobs_by_account.end()) continue;
    for (int64_t job : jobs->second) hooks_.job_event(job, accounting::AlertText(s));
  }
  primed_ = true;
}

}  // namespace gpupool::server
