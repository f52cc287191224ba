#include "server/accounting_service.h"

#include <algorithm>
#include <set>

#include "common/ids.h"

namespace gpupool::server {

using accounting::Holding;
using accounting::LedgerEntry;
using accounting::Micros;
using accounting::PriceBook;
using Span = std::pair<std::string, int32_t>;

AccountingService::AccountingService(Store& store, const Clock& clock, AccountingOptions options)
    : store_(store), clock_(clock), options_(std::move(options)) {}

// What metering needs of a node, read once per transaction.
struct AccountingService::NodeFacts {
  std::vector<GpuInfo> gpus;
  // Its owner group, when that is a lab and the node's enrolling provider
  // belongs to it (or the operator's join token enrolled it): an agent
  // names its owner group itself, and must not send lending credits to a
  // lab its provider is not in.
  std::string lending_group;
};

Result<const AccountingService::NodeFacts*> AccountingService::FactsOf(
    Tx& tx, const std::string& node_id, std::map<std::string, NodeFacts>& cache) {
  auto it = cache.find(node_id);
  if (it != cache.end()) return &it->second;
  NodeFacts f;
  GP_ASSIGN_OR_RETURN(auto node, tx.GetNode(node_id));
  if (node) {
    f.gpus = node->gpus;
    if (!node->owner_group.empty()) {
      GP_ASSIGN_OR_RETURN(auto lab, tx.GetGroup(node->owner_group));
      GP_ASSIGN_OR_RETURN(auto credential, tx.GetAgentCredential(node->name));
      bool vouched =
          !credential || credential->owner.empty() ||
          (lab && std::binary_search(lab->members.begin(), lab->members.end(), credential->owner));
      if (lab && vouched) f.lending_group = node->owner_group;
    }
  }
  return &cache.emplace(node_id, std::move(f)).first->second;
}

Result<std::vector<Holding>> AccountingService::HoldingsOf(Tx& tx, const Job& job,
                                                           const Attempt& attempt,
                                                           const PriceBook& book, TxCache& cache) {
  struct Part {
    int32_t rank;
    std::string node_id;
    const std::vector<std::string>* gpus;
    int64_t finished_ms;
  };
  std::vector<Part> parts;
  if (attempt.ranks.empty()) {
    parts.push_back({0, attempt.node_id, &attempt.gpu_uuids, attempt.finished_ms});
  } else {
    for (const AttemptRank& r : attempt.ranks) {
      // A rank that ended before the others freed its node then (0 while
      // it holds it).
      int64_t freed = !IsLive(r.state) && r.finished_ms > 0 ? r.finished_ms : attempt.finished_ms;
      parts.push_back({r.rank, r.node_id, &r.gpu_uuids, freed});
    }
  }
  auto lab = cache.labs.find(job.spec.group);
  if (lab == cache.labs.end()) {
    GP_ASSIGN_OR_RETURN(auto group, tx.GetGroup(job.spec.group));
    lab = cache.labs.emplace(job.spec.group, group.has_value()).first;
  }
  std::vector<Holding> out;
  for (const Part& p : parts) {
    Holding h;
    h.attempt_id = attempt.id;
    h.rank = p.rank;
    h.job_id = job.id;
    h.user = job.owner;
    h.group = job.spec.group;
    h.group_pays = lab->second;
    h.node_id = p.node_id;
    GP_ASSIGN_OR_RETURN(const NodeFacts* node, FactsOf(tx, p.node_id, cache.nodes));
    h.provider_group = node->lending_group;
    for (const GpuInfo& g : node->gpus) {
      if (!p.gpus->empty() && g.uuid == p.gpus->front()) h.use.gpu_class = book.ClassOf(g);
    }
    h.use.gpu_milli =
        static_cast<int64_t>(attempt.gpu_milli) * static_cast<int64_t>(p.gpus->size());
    h.use.cpu_milli = job.spec.resources.cpu_milli;
    h.use.memory_mib = job.spec.resources.memory_mib;
    h.held_from_ms = attempt.created_ms;
    h.freed_ms = p.finished_ms > 0 ? std::max(p.finished_ms, attempt.created_ms) : 0;
    out.push_back(std::move(h));
  }
  return out;
}

Status AccountingService::Post(Tx& tx, const std::vector<LedgerEntry>& entries,
                               std::map<Span, int64_t>* posted) {
  for (const LedgerEntry& e : entries) {
    GP_RETURN_IF_ERROR(tx.PostEntry(e).status());
    if (posted && e.kind == accounting::EntryKind::kCharge) {
      (*posted)[{e.attempt_id, e.rank}] = e.at_ms;
    }
  }
  return Status::Ok();
}

Status AccountingService::AttemptClosed(Tx& tx, const Job& job, const Attempt& attempt) {
  GP_ASSIGN_OR_RETURN(auto versions, tx.ListPrices());
  PriceBook book(std::move(versions));
  TxCache cache;
  GP_ASSIGN_OR_RETURN(auto holdings, HoldingsOf(tx, job, attempt, book, cache));
  int64_t now = clock_.NowMs();
  for (const Holding& h : holdings) {
    GP_ASSIGN_OR_RETURN(int64_t posted_to, tx.PostedTo(h.attempt_id, h.rank));
    GP_RETURN_IF_ERROR(
        Post(tx, accounting::EntriesDue(h, posted_to, now, book, options_.rules), nullptr));
    // Posted whole: it owes nothing more (should the transaction fail, the
    // next tick counts it again).
    accruing_.erase({h.attempt_id, h.rank});
    posted_to_.erase({h.attempt_id, h.rank});
  }
  return Status::Ok();
}

Result<int64_t> AccountingService::Tick() {
  int64_t now = clock_.NowMs();
  int64_t posted_count = 0;
  std::map<Span, Owed> accruing;
  std::map<int64_t, Micros> max_cost;
  std::set<std::string> labs;
  std::map<Span, int64_t> posted_to = posted_to_;
  std::set<Span> live;
  int64_t storage_done = storage_posted_for_;
  std::map<std::string, int64_t> bonus;
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(auto versions, tx.ListPrices());
    PriceBook book(std::move(versions));
    cached_prices_ = book;
    AttemptQuery live_only;
    live_only.live_only = true;
    GP_ASSIGN_OR_RETURN(auto attempts, tx.ListAttempts(live_only));
    std::map<int64_t, Job> jobs;
    TxCache cache;
    GP_ASSIGN_OR_RETURN(auto groups, tx.ListGroups());
    for (const GroupRecord& g : groups) labs.insert(g.name);
    for (const Attempt& a : attempts) {
      auto it = jobs.find(a.job_id);
      if (it == jobs.end()) {
        GP_ASSIGN_OR_RETURN(auto job, tx.GetJob(a.job_id));
        if (!job) continue;
        it = jobs.emplace(a.job_id, *std::move(job)).first;
      }
      if (it->second.spec.max_cost_micros > 0) max_cost[a.job_id] = it->second.spec.max_cost_micros;
      GP_ASSIGN_OR_RETURN(auto holdings, HoldingsOf(tx, it->second, a, book, cache));
      for (const Holding& h : holdings) {
        Span span{h.attempt_id, h.rank};
        live.insert(span);
        auto known = posted_to.find(span);
        if (known == posted_to.end()) {
          GP_ASSIGN_OR_RETURN(int64_t stored, tx.PostedTo(h.attempt_id, h.rank));
          known = posted_to.emplace(span, stored).first;
        }
        auto due = accounting::EntriesDue(h, known->second, now, book, options_.rules);
        posted_count += static_cast<int64_t>(due.size());
        GP_RETURN_IF_ERROR(Post(tx, due, &posted_to));
        accruing[span] = {h.Account(), h.job_id,
                          accounting::Unposted(h, posted_to[span], now, book)};
      }
    }
    GP_ASSIGN_OR_RETURN(int64_t stored, PostStorage(tx, book, now, &storage_done));
    posted_count += stored;
    GP_ASSIGN_OR_RETURN(bonus, LendingBonusOf(tx, labs, book, now));
    return Status::Ok();
  }));
  storage_posted_for_ = storage_done;
  lending_bonus_ = std::move(bonus);
  // Committed: keep what the ledger now says, for running spans only.
  std::erase_if(posted_to, [&](const auto& kv) { return !live.count(kv.first); });
  posted_to_ = std::move(posted_to);
  accruing_ = std::move(accruing);
  max_cost_ = std::move(max_cost);
  labs_ = std::move(labs);
  return posted_count;
}

Result<std::map<std::string, int64_t>> AccountingService::LendingBonusOf(
    Tx& tx, const std::set<std::string>& labs, const PriceBook& book, int64_t now) {
  std::map<std::string, int64_t> out;
  const int32_t permille = options_.lending_fair_share_permille;
  const Micros cheapest = book.CheapestGpu(now);
  if (permille <= 0 || cheapest <= 0) return out;
  // Ten half-lives back (a thousandth of its weight left), or a year
  // without decay.
  constexpr int64_t kYearMs = 365LL * 86'400'000;
  const int64_t half_life = options_.half_life_ms;
  const int64_t since = now - (half_life > 0 ? std::min(10 * half_life, kYearMs) : kYearMs);
  for (const std::string& lab : labs) {
    GP_ASSIGN_OR_RETURN(auto flows, tx.AccountFlows(accounting::GroupAccount(lab), since, now + 1));
    std::vector<std::pair<int64_t, Micros>> lent;
    for (const AccountFlow& f : flows)
      if (f.kind == accounting::EntryKind::kLending && f.in > 0) lent.emplace_back(f.day_ms, f.in);
    const int64_t bonus =
        accounting::LendingBonusMilliMs(lent, now, half_life, cheapest, options_.rules, permille);
    if (bonus > 0) out[lab] = bonus;
  }
  return out;
}

Result<int64_t> AccountingService::PostStorage(Tx& tx, const PriceBook& book, int64_t now,
                                               int64_t* done) {
  // Once per period: the period over is charged at the bytes stored now
  // (posting is idempotent by key, so a restart within the next period
  // charges nothing twice).
  const int64_t period = std::max<int64_t>(options_.rules.period_ms, 1);
  const int64_t period_over = now - now % period;
  if (!book.PricesStorage() || period_over == storage_posted_for_) return 0;
  GP_ASSIGN_OR_RETURN(auto stored, tx.StorageByAccount());
  int64_t posted = 0;
  for (const auto& [account, bytes] : stored) {
    auto due = accounting::StorageChargeDue(account, bytes, now, book, options_.rules);
    if (!due) continue;
    GP_ASSIGN_OR_RETURN(bool fresh, tx.PostEntry(*due));
    posted += fresh ? 1 : 0;
  }
  *done = period_over;
  return posted;
}

Result<accounting::PriceVersion> AccountingService::SetPrice(accounting::PricedResource resource,
                                                             const std::string& gpu_class,
                                                             Micros per_unit,
                                                             const std::string& by) {
  accounting::PriceVersion v{0, resource, gpu_class, per_unit, clock_.NowMs(), by};
  GP_RETURN_IF_ERROR(accounting::CheckPriceVersion(v));
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(v.id, tx.AddPrice(v));
    GP_ASSIGN_OR_RETURN(auto versions, tx.ListPrices());
    cached_prices_.emplace(std::move(versions));
    return Status::Ok();
  }));
  return v;
}

Status AccountingService::LoadPrices() {
  GP_ASSIGN_OR_RETURN(PriceBook book, Prices());
  cached_prices_ = std::move(book);
  return Status::Ok();
}

Result<PriceBook> AccountingService::Prices() {
  std::vector<accounting::PriceVersion> versions;
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(versions, tx.ListPrices());
    return Status::Ok();
  }));
  return PriceBook(std::move(versions));
}

Result<LedgerEntry> AccountingService::Grant(const std::string& account, Micros amount,
                                             const std::string& note, const std::string& by) {
  GP_RETURN_IF_ERROR(accounting::CheckAccountName(account));
  if (account == accounting::kPoolAccount) {
    return Status::InvalidArgument(
        "account: credits are granted to a group or a user, not the pool");
  }
  if (amount <= 0) return Status::InvalidArgument("amount: must be more than zero");
  if (note.size() > 1024) return Status::InvalidArgument("note: at most 1024 bytes");
  LedgerEntry e;
  e.key = "grant:" + RandomHex(8);
  e.kind = accounting::EntryKind::kGrant;
  e.debit = std::string(accounting::kPoolAccount);
  e.credit = account;
  e.amount = amount;
  e.at_ms = clock_.NowMs();
  e.from_ms = e.at_ms;
  e.actor = by;
  e.note = note;
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status { return tx.PostEntry(e).status(); }));
  return e;
}

Result<std::vector<AccountMoney>> AccountingService::Accounts() {
  std::map<std::string, AccountMoney> out;
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(auto balances, tx.ListBalances());
    for (const auto& b : balances) out[b.account] = {b.account, b.balance, 0};
    return Status::Ok();
  }));
  for (const auto& [account, owed] : Running().accruing_by_account) {
    AccountMoney& m = out[account];
    m.account = account;
    m.accruing = owed;
  }
  std::vector<AccountMoney> list;
  for (auto& [account, m] : out) list.push_back(std::move(m));
  return list;
}

Result<AccountMoney> AccountingService::Account(const std::string& account) {
  AccountMoney m{account, 0, 0};
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(auto b, tx.GetBalance(account));
    m.posted = b.balance;
    return Status::Ok();
  }));
  for (const auto& [span, owed] : accruing_) {
    if (owed.account == account) m.accruing += owed.amount;
  }
  return m;
}

std::string AccountingService::AccountOf(const Job& job) const {
  return labs_.count(job.spec.group) ? accounting::GroupAccount(job.spec.group)
                                     : accounting::UserAccount(job.owner);
}

RunningWork AccountingService::Running() const {
  RunningWork w;
  for (const auto& [span, owed] : accruing_) {
    w.accruing_by_account[owed.account] += owed.amount;
    w.accruing_by_job[owed.job_id] += owed.amount;
    w.jobs_by_account[owed.account].insert(owed.job_id);
  }
  for (const auto& [job, limit] : max_cost_) {
    if (w.accruing_by_job.count(job)) w.max_cost[job] = limit;
  }
  return w;
}

}  // namespace gpupool::server
