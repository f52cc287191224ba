// MemoryTx's accounting facet (store/store.h AccountingTx): price
// versions, the ledger with its key index, and the balances it moves.
#include <algorithm>

#include "store/memory_tables.h"

namespace gpupool {

using accounting::AccountBalance;
using accounting::LedgerEntry;
using accounting::PriceVersion;

Result<int64_t> MemoryTx::AddPrice(const PriceVersion& v) {
  PriceVersion stored = v;
  stored.id = s_.prices.empty() ? 1 : s_.prices.back().id + 1;
  s_.prices.push_back(stored);
  j_.Record([this] { s_.prices.pop_back(); });
  return stored.id;
}

Result<std::vector<PriceVersion>> MemoryTx::ListPrices() { return s_.prices; }

Result<bool> MemoryTx::PostEntry(const LedgerEntry& e) {
  if (s_.ledger_keys.count(e.key)) return false;
  LedgerEntry stored = e;
  stored.id = s_.ledger.empty() ? 1 : s_.ledger.rbegin()->first + 1;
  j_.Put(s_.ledger_keys, stored.key, stored.id);
  if (stored.kind == accounting::EntryKind::kCharge) {
    j_.Put(s_.job_spend, stored.job_id, s_.job_spend[stored.job_id] + stored.amount);
    std::pair<std::string, int32_t> span{stored.attempt_id, stored.rank};
    auto it = s_.posted.find(span);
    if (it == s_.posted.end() || it->second < stored.at_ms) j_.Put(s_.posted, span, stored.at_ms);
  }
  auto move = [&](const std::string& account, accounting::Micros delta) {
    auto it = s_.balances.find(account);
    AccountBalance b = it == s_.balances.end() ? AccountBalance{account, 0, 0} : it->second;
    b.balance += delta;
    b.entries += 1;
    j_.Put(s_.balances, account, b);
  };
  move(stored.debit, -stored.amount);
  move(stored.credit, stored.amount);
  j_.Put(s_.ledger, stored.id, std::move(stored));
  return true;
}

Result<std::vector<LedgerEntry>> MemoryTx::ListLedger(const LedgerQuery& q) {
  std::vector<LedgerEntry> out;
  for (auto it = s_.ledger.upper_bound(q.after_id); it != s_.ledger.end(); ++it) {
    if (static_cast<int32_t>(out.size()) >= q.limit) break;
    const LedgerEntry& e = it->second;
    if (!q.account.empty() && e.debit != q.account && e.credit != q.account) continue;
    if (q.kind && e.kind != *q.kind) continue;
    if (e.at_ms < q.since_ms || e.at_ms >= q.until_ms) continue;
    out.push_back(e);
  }
  return out;
}

Result<int64_t> MemoryTx::PostedTo(const std::string& attempt_id, int32_t rank) {
  auto it = s_.posted.find({attempt_id, rank});
  return it == s_.posted.end() ? 0 : it->second;
}

Result<std::vector<AccountBalance>> MemoryTx::ListBalances() {
  std::vector<AccountBalance> out;
  for (const auto& [account, b] : s_.balances) out.push_back(b);
  return out;
}

Result<AccountBalance> MemoryTx::GetBalance(const std::string& account) {
  auto it = s_.balances.find(account);
  return it == s_.balances.end() ? AccountBalance{account, 0, 0} : it->second;
}

Result<std::vector<UsageRow>> MemoryTx::SumUsage(const UsageQuery& q) {
  std::map<std::string, UsageRow> rows;
  for (const auto& [id, e] : s_.ledger) {
    if (e.kind != accounting::EntryKind::kCharge) continue;
    if (e.from_ms < q.since_ms || e.from_ms >= q.until_ms) continue;
    if (!q.group.empty() && e.group != q.group) continue;
    if (!q.user.empty() && e.user != q.user) continue;
    if (!q.account.empty() && e.debit != q.account) continue;
    std::string key = UsageKeyOf(e, q.by);
    UsageRow& r = rows[key];
    r.key = key;
    r.gpu_milli_ms += e.GpuMilliMs();
    r.cpu_milli_ms += e.cpu_milli * (e.at_ms - e.from_ms);
    r.cost += e.amount;
    r.charges += 1;
  }
  std::vector<UsageRow> out;
  for (auto& [key, r] : rows) out.push_back(std::move(r));
  if (q.by == UsageBy::kJob) {
    std::sort(out.begin(), out.end(), [](const UsageRow& a, const UsageRow& b) {
      return std::stoll(a.key) < std::stoll(b.key);
    });
  }
  return out;
}

Result<accounting::Micros> MemoryTx::JobSpend(int64_t job_id) {
  auto it = s_.job_spend.find(job_id);
  return it == s_.job_spend.end() ? 0 : it->second;
}

Result<std::vector<AccountFlow>> MemoryTx::AccountFlows(const std::string& account,
                                                        int64_t since_ms, int64_t until_ms) {
  constexpr int64_t kDayMs = 86'400'000;
  std::map<std::pair<int64_t, accounting::EntryKind>, AccountFlow> flows;
  for (const auto& [id, e] : s_.ledger) {
    if (e.from_ms < since_ms || e.from_ms >= until_ms) continue;
    if (e.debit != account && e.credit != account) continue;
    const int64_t day = e.from_ms - e.from_ms % kDayMs;
    AccountFlow& f = flows[{day, e.kind}];
    f.day_ms = day;
    f.kind = e.kind;
    if (e.credit == account) f.in += e.amount;
    if (e.debit == account) f.out += e.amount;
    ++f.entries;
  }
  std::vector<AccountFlow> out;
  for (auto& [key, f] : flows) out.push_back(f);
  return out;
}

Status MemoryTx::PutBudget(const accounting::Budget& b) {
  j_.Put(s_.budgets, b.account, b);
  return Status::Ok();
}

Status MemoryTx::DeleteBudget(const std::string& account) {
  j_.Erase(s_.budgets, account);
  return Status::Ok();
}

Result<std::vector<accounting::Budget>> MemoryTx::ListBudgets() {
  std::vector<accounting::Budget> out;
  for (const auto& [account, b] : s_.budgets) out.push_back(b);
  return out;
}

}  // namespace gpupool
