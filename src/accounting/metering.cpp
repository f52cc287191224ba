#include "accounting/metering.h"

#include <algorithm>
#include <cmath>

namespace gpupool::accounting {

namespace {

int64_t NextBoundary(int64_t t, int64_t period) {
  int64_t p = std::max<int64_t>(period, 1);
  int64_t floor = t >= 0 ? t / p * p : -((-t + p - 1) / p) * p;
  return floor + p;
}

LedgerEntry ChargeEntry(const Holding& h, int64_t from, int64_t to, Micros amount) {
  LedgerEntry e;
  e.key = "charge:" + h.SpanId() + ":" + std::to_string(from);
  e.kind = EntryKind::kCharge;
  e.debit = h.Account();
  e.credit = std::string(kPoolAccount);
  e.amount = amount;
  e.at_ms = to;
  e.attempt_id = h.attempt_id;
  e.rank = h.rank;
  e.job_id = h.job_id;
  e.user = h.user;
  e.group = h.group;
  e.node_id = h.node_id;
  e.provider_group = h.provider_group;
  e.gpu_class = h.use.gpu_class;
  e.from_ms = from;
  e.gpu_milli = h.use.gpu_milli;
  e.cpu_milli = h.use.cpu_milli;
  e.memory_mib = h.use.memory_mib;
  return e;
}

}  // namespace

std::vector<LedgerEntry> EntriesDue(const Holding& h, int64_t posted_to_ms, int64_t now_ms,
                                    const PriceBook& prices, const MeteringRules& rules) {
  std::vector<LedgerEntry> out;
  int64_t from = std::max(posted_to_ms, h.held_from_ms);
  // Charged up to the end of the last period that is over, or to the end
  // of the holding once it has ended (and the clock has seen it end).
  int64_t end = h.freed_ms > 0 ? h.freed_ms : now_ms;
  bool lends =
      !h.provider_group.empty() && h.provider_group != h.group && rules.lending_permille > 0;
  while (from < end) {
    int64_t boundary = NextBoundary(from, rules.period_ms);
    int64_t to = std::min(boundary, end);
    // A period still under way is not posted (unless the holding ended in it).
    if (to < boundary && h.freed_ms == 0) break;
    Micros amount = prices.Charge(h.use, h.held_from_ms, from, to);
    out.push_back(ChargeEntry(h, from, to, amount));
    if (lends && amount > 0) {
      LedgerEntry credit = out.back();
      credit.key = "lending:" + h.SpanId() + ":" + std::to_string(from);
      credit.kind = EntryKind::kLending;
      credit.debit = std::string(kPoolAccount);
      credit.credit = GroupAccount(h.provider_group);
      credit.amount = static_cast<Micros>(static_cast<__int128>(amount) *
                                          std::min(rules.lending_permille, 1000) / 1000);
      if (credit.amount > 0) out.push_back(std::move(credit));
    }
    from = to;
  }
  return out;
}

std::optional<LedgerEntry> StorageChargeDue(const std::string& account, int64_t bytes,
                                            int64_t now_ms, const PriceBook& prices,
                                            const MeteringRules& rules) {
  const int64_t to = NextBoundary(now_ms, rules.period_ms) - std::max<int64_t>(rules.period_ms, 1);
  const int64_t from = to - std::max<int64_t>(rules.period_ms, 1);
  const Micros amount = prices.StorageCost(bytes, from, to);
  if (amount <= 0) return std::nullopt;
  LedgerEntry e;
  e.key = "storage:" + account + ":" + std::to_string(from);
  e.kind = EntryKind::kCharge;
  e.debit = account;
  e.credit = std::string(kPoolAccount);
  e.amount = amount;
  e.at_ms = to;
  e.from_ms = from;
  e.attempt_id = "storage:" + account;
  e.gpu_class = "storage";
  if (account.rfind("user:", 0) == 0) e.user = account.substr(5);
  if (account.rfind("group:", 0) == 0) e.group = account.substr(6);
  e.note = std::to_string(bytes) + " bytes stored";
  return e;
}

int64_t LendingBonusMilliMs(const std::vector<std::pair<int64_t, Micros>>& lending_by_day,
                            int64_t now_ms, int64_t half_life_ms, Micros cheapest_gpu_per_hour,
                            const MeteringRules& rules, int32_t bonus_permille) {
  if (cheapest_gpu_per_hour <= 0 || rules.lending_permille <= 0 || bonus_permille <= 0) return 0;
  constexpr int64_t kHalfDayMs = 43'200'000;
  double credits = 0;  // decayed micro-credits
  for (const auto& [day, amount] : lending_by_day) {
    const double age = static_cast<double>(std::max<int64_t>(now_ms - (day + kHalfDayMs), 0));
    credits += static_cast<double>(amount) *
               (half_life_ms > 0 ? std::exp2(-age / static_cast<double>(half_life_ms)) : 1.0);
  }
  // Credits -> what the borrowers paid -> weighted GPU-milli x ms.
  const double paid = credits * 1000.0 / rules.lending_permille;
  const double milli_ms = paid / static_cast<double>(cheapest_gpu_per_hour) * 1000.0 * 3'600'000.0;
  return static_cast<int64_t>(milli_ms * bonus_permille / 1000.0);
}

Micros Unposted(const Holding& h, int64_t posted_to_ms, int64_t now_ms, const PriceBook& prices) {
  int64_t from = std::max(posted_to_ms, h.held_from_ms);
  int64_t to = h.freed_ms > 0 ? h.freed_ms : now_ms;
  return prices.Charge(h.use, h.held_from_ms, from, to);
}

}  // namespace gpupool::accounting
