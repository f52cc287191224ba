// AccountingService: the pool's money (docs/user-guide.md#paying-for-gpus):
// it meters every attempt into the ledger, keeps what running work owes,
// grants credits and sets prices. The pure parts are accounting/ (prices,
// metering); the records are the store's (store/store.h AccountingTx).
//
// Lending credits go to a node's owner group only when that is a lab and
// the provider who enrolled the node belongs to it (or the operator's join
// token enrolled it): an agent names its owner group itself.
//
// Metering: an attempt is charged for what it holds (per rank of a gang:
// its node's GPUs, their class, the job's CPUs and memory) from its
// placement (Attempt::created_ms) until it is freed (finished_ms, a rank's
// own for a gang), at the prices in force second by second.
// - When an attempt closes, the pool calls AttemptClosed in the closing
//   transaction (PoolHooks::attempt_closed): the rest of its charges are
//   posted with it, so a crash can neither lose nor double them.
// - Tick() (every `tick_ms`, at least once a minute) posts the charges of
//   running attempts for the posting periods that are over, in one
//   transaction, and recomputes what they owe for the period under way
//   (accruing): balances and budgets count it, so they act on running
//   work. A killed server's next tick posts what is due from the ledger's
//   own record (PostedTo), so nothing is lost or charged twice.
// - Storage (accounting::StorageChargeDue): the first tick after each
//   period's end charges every account for the bytes it stores then
//   (Tx::StorageByAccount) over that period; a period that ends while the
//   server is down is not charged.
//
// Threading: the server's event loop; time from the injected Clock.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "accounting/metering.h"
#include "accounting/prices.h"
#include "common/clock.h"
#include "store/store.h"

namespace gpupool::server {

struct AccountingOptions {
  accounting::MeteringRules rules;  // --ledger-period, --lending-credit
  int64_t tick_ms = 60'000;         // how often running work accrues
  // --lending-fair-share (permille; 0 = off): what a lab lent counts
  // against its fair-share usage, decayed with the scheduler's half-life.
  int32_t lending_fair_share_permille = 0;
  int64_t half_life_ms = 0;
};

// What the last tick saw of running work (for budgets and max_cost).
struct RunningWork {
  std::map<std::string, accounting::Micros> accruing_by_account;
  std::map<int64_t, accounting::Micros> accruing_by_job;
  std::map<std::string, std::set<int64_t>> jobs_by_account;  // live jobs
  std::map<int64_t, accounting::Micros> max_cost;            // of live jobs that have one
};

// An account's money as the API shows it.
struct AccountMoney {
  std::string account;
  accounting::Micros posted = 0;    // what its ledger entries sum to
  accounting::Micros accruing = 0;  // what its running attempts owe since
  accounting::Micros balance() const { return posted - accruing; }
};

class AccountingService {
 public:
  AccountingService(Store& store, const Clock& clock, AccountingOptions options);

  // ---- metering
  // Posts the rest of a closed attempt's charges (all its ranks), in the
  // pool's closing transaction.
  Status AttemptClosed(Tx& tx, const Job& job, const Attempt& attempt);
  // Posts what running attempts owe for the periods that are over and
  // recomputes what they are accruing. Returns the entries posted.
  Result<int64_t> Tick();

  // ---- prices
  // A new version of a price from now on. InvalidArgument (the field named)
  // for a bad one; nothing is stored then.
  Result<accounting::PriceVersion> SetPrice(accounting::PricedResource resource,
                                            const std::string& gpu_class,
                                            accounting::Micros per_unit, const std::string& by);
  Result<accounting::PriceBook> Prices();
  // The price book kept in memory for fair-share weights (the scheduler
  // reads it every pass, and the pool in its closing transactions, so it
  // never reads the store itself): as of LoadPrices (at start), the last
  // Tick or SetPrice; nullptr before any.
  Status LoadPrices();
  // Lab -> what its lending takes off its fair-share usage (weighted
  // GPU-milli x ms; accounting::LendingBonusMilliMs), as of the last tick;
  // empty when --lending-fair-share is off.
  const std::map<std::string, int64_t>& LendingBonus() const { return lending_bonus_; }
  const accounting::PriceBook* CachedPrices() const {
    return cached_prices_ ? &*cached_prices_ : nullptr;
  }

  // ---- accounts
  // Credits `amount` (> 0) to `account` from the pool, with a note.
  Result<accounting::LedgerEntry> Grant(const std::string& account, accounting::Micros amount,
                                        const std::string& note, const std::string& by);
  // The money of each account with ledger entries or running work, by
  // account; of one (zero when it has none).
  Result<std::vector<AccountMoney>> Accounts();
  Result<AccountMoney> Account(const std::string& account);

  // Running work as of the last tick (a closed attempt's part leaves at
  // once).
  RunningWork Running() const;
  // The account job `job` pays from: its group's when that is a lab (as of
  // the last tick), else its owner's.
  std::string AccountOf(const Job& job) const;

  int64_t tick_ms() const { return options_.tick_ms; }
  const accounting::MeteringRules& rules() const { return options_.rules; }

 private:
  struct NodeFacts;
  Result<const NodeFacts*> FactsOf(Tx& tx, const std::string& node_id,
                                   std::map<std::string, NodeFacts>& cache);
  // What a transaction has read: nodes' facts, and whether groups are labs.
  struct TxCache {
    std::map<std::string, NodeFacts> nodes;
    std::map<std::string, bool> labs;
  };
  // Every holding of `attempt` (one per rank), charged as of the price
  // book's classes and the nodes' records (read through `nodes`).
  Result<std::vector<accounting::Holding>> HoldingsOf(Tx& tx, const Job& job,
                                                      const Attempt& attempt,
                                                      const accounting::PriceBook& book,
                                                      TxCache& cache);
  // Posts the storage charges of the period last over unless they were
  // (storage_posted_for_); `*done` is that period's end once posted.
  // Returns the entries posted.
  // Each lab's lending bonus (LendingBonus) from its ledger.
  Result<std::map<std::string, int64_t>> LendingBonusOf(Tx& tx, const std::set<std::string>& labs,
                                                        const accounting::PriceBook& book,
                                                        int64_t now);
  Result<int64_t> PostStorage(Tx& tx, const accounting::PriceBook& book, int64_t now,
                              int64_t* done);
  // Posts `entries`; the posted_to of each charge's span in `posted`.
  Status Post(Tx& tx, const std::vector<accounting::LedgerEntry>& entries,
              std::map<std::pair<std::string, int32_t>, int64_t>* posted);

  Store& store_;
  const Clock& clock_;
  AccountingOptions options_;
  // What each running span owes beyond the ledger, and its account, as of
  // the last tick (recomputed whole each time; a closed attempt's spans
  // leave at once).
  struct Owed {
    std::string account;
    int64_t job_id = 0;
    accounting::Micros amount = 0;
  };
  std::map<std::pair<std::string, int32_t>, Owed> accruing_;
  std::optional<accounting::PriceBook> cached_prices_;
  std::map<std::string, int64_t> lending_bonus_;
  // The period whose storage charges were posted (its end); a failed
  // transaction leaves it for the next tick to try again.
  int64_t storage_posted_for_ = 0;
  // The labs, as of the last tick (for AccountOf).
  std::set<std::string> labs_;
  // Live jobs' max_cost, as of the last tick.
  std::map<int64_t, accounting::Micros> max_cost_;
  // Where each running span's charges end in the ledger (spans of closed
  // attempts are dropped at each tick); filled from the store on a miss.
  std::map<std::pair<std::string, int32_t>, int64_t> posted_to_;
};

}  // namespace gpupool::server
