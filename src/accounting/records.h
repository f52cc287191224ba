// What the accounting stores (store/store.h's AccountingTx keeps them):
// price versions, ledger entries and account balances. Plain values.
//
// Accounts are named "group:<name>" (a lab), "user:<name>" (a user, for
// jobs that name no group) and "pool" (the pool itself: it receives every
// charge and pays every grant and lending credit). The ledger is
// double-entry: every entry moves `amount` from its debit account to its
// credit account, so the balances of all accounts always sum to zero.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/money.h"
#include "common/status.h"

namespace gpupool::accounting {

inline constexpr std::string_view kPoolAccount = "pool";
std::string GroupAccount(std::string_view group);  // "group:vision"
std::string UserAccount(std::string_view user);    // "user:alice"
// The group of every job that names none (no lab may take the name).
inline constexpr std::string_view kNoGroup = "default";
// The account a job pays from: its group's, or its owner's when it names
// none ("" or "default").
std::string JobAccount(std::string_view owner, std::string_view group);
// "group:vision", "user:alice" or "pool"; InvalidArgument otherwise.
Status CheckAccountName(std::string_view account);

// ---------------------------------------------------------------------------
// Prices.

enum class PricedResource { kGpu, kCpu, kMemory, kStorage };
// "gpu", "cpu", "memory", "storage".
std::string_view PricedResourceName(PricedResource r);
Result<PricedResource> ParsePricedResource(std::string_view name);

// One price from `from_ms` on, until a later version of the same resource
// and class replaces it. Versions are never changed or removed: a change
// is a new version, so nothing already charged is charged again.
struct PriceVersion {
  int64_t id = 0;  // assigned by the store, increasing
  PricedResource resource = PricedResource::kGpu;
  // kGpu: the GPU class ("A100", "T4", a MIG profile "3g.40gb", or
  // "default" for GPUs of no priced class); "" for the others.
  std::string gpu_class;
  // Credits per GPU-hour (a share pays its fraction), CPU-hour, GiB-hour
  // of memory, or GiB-month of checkpoint storage.
  Micros per_unit = 0;
  int64_t from_ms = 0;
  std::string set_by;
  friend bool operator==(const PriceVersion&, const PriceVersion&) = default;
};

// ---------------------------------------------------------------------------
// The ledger.

enum class EntryKind {
  kCharge,   // a job's account pays the pool for an interval of held resources
  kLending,  // the pool pays a provider's owner group its share of a charge
  kGrant,    // an admin grants credits (the pool pays the account)
};
std::string_view EntryKindName(EntryKind k);  // "charge", "lending", "grant"
Result<EntryKind> ParseEntryKind(std::string_view name);

struct LedgerEntry {
  int64_t id = 0;  // assigned by the store, increasing
  // Unique: posting an entry whose key is already in the ledger changes
  // nothing. Charges: "charge:<attempt>/<rank>:<from_ms>"; lending
  // credits: "lending:<attempt>/<rank>:<from_ms>"; grants: a fresh id.
  std::string key;
  EntryKind kind = EntryKind::kCharge;
  std::string debit;   // the account the amount leaves
  std::string credit;  // the account it goes to
  Micros amount = 0;   // >= 0 (a charge at a price of 0 still records the use)
  // A charge's and lending credit's interval end; a grant's time.
  int64_t at_ms = 0;

  // Charges and lending credits: what was held, where, for whom, when.
  std::string attempt_id;
  int32_t rank = 0;
  int64_t job_id = 0;
  std::string user;   // the job's owner
  std::string group;  // the job's group ("" = none)
  std::string node_id;
  std::string provider_group;  // the node's owner group ("" = none)
  std::string gpu_class;       // the priced class its GPUs were charged as
  int64_t from_ms = 0;         // [from_ms, at_ms)
  int64_t gpu_milli = 0;       // held over the interval (1000 = one GPU)
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;

  // Grants: who granted it and why.
  std::string actor;
  std::string note;

  // GPU milli x ms of the interval (0 for grants).
  int64_t GpuMilliMs() const { return gpu_milli * (at_ms - from_ms); }
  friend bool operator==(const LedgerEntry&, const LedgerEntry&) = default;
};

// ---------------------------------------------------------------------------
// Budgets.

// What happens to an account's work at its limit: `hold` (new work waits)
// or `stop` (running work also checkpoints and stops, and is requeued).
enum class BudgetAction { kHold, kStop };
std::string_view BudgetActionName(BudgetAction a);  // "hold", "stop"
Result<BudgetAction> ParseBudgetAction(std::string_view name);

// An account with a budget may spend at most `monthly` in each calendar
// month (UTC; 0 = no monthly cap), and never more than its balance.
struct Budget {
  std::string account;
  Micros monthly = 0;
  BudgetAction action = BudgetAction::kHold;
  int64_t set_ms = 0;
  std::string set_by;
  friend bool operator==(const Budget&, const Budget&) = default;
};

// An account's balance: what it was credited minus what it was debited.
struct AccountBalance {
  std::string account;
  Micros balance = 0;
  int64_t entries = 0;  // ledger entries on either side
  friend bool operator==(const AccountBalance&, const AccountBalance&) = default;
};

}  // namespace gpupool::accounting
