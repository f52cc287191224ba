// Metering: the ledger entries an attempt's holding owes, from the times
// the pool recorded (held from placement until freed) and the price book.
//
// An attempt (each rank of a gang on its own) is charged from the moment
// its GPUs are held until they are freed: its checkpoint and stop time
// included, the queue not. Its charges are posted per posting period
// (rules.period_ms, aligned to multiples of it since the epoch, so with
// the default hour they fall on UTC hours, days and months): one charge per
// period it held resources in, posted once the period is over or the
// holding has ended. What it owes for the period under way is Unposted():
// balances and budgets add it, so they act on running work.
//
// Exactly once: a holding's entries cover [held_from, freed) without a gap
// or an overlap, each interval starting where the posted ones ended
// (`posted_to`, what the ledger holds), and each entry's key names its
// attempt, rank and interval start, so posting one again changes nothing.
// The wall clock moving back charges nothing until it passes `posted_to`
// again; moving forward, the next entry starts where the last ended.
//
// Contract: pure; times are arguments.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "accounting/prices.h"
#include "accounting/records.h"

namespace gpupool::accounting {

struct MeteringRules {
  int64_t period_ms = 3'600'000;  // --ledger-period
  // A provider's owner group earns this share of what others pay for time
  // on its machines (--lending-credit, 0..1000 permille).
  int32_t lending_permille = 800;
};

// One attempt's (or gang rank's) holding, as metering charges it.
struct Holding {
  std::string attempt_id;
  int32_t rank = 0;
  int64_t job_id = 0;
  std::string user;   // the job's owner
  std::string group;  // the job's group ("" = none: its owner pays)
  std::string node_id;
  std::string provider_group;  // the node's owner group ("" = none)
  MeteredUse use;
  int64_t held_from_ms = 0;
  int64_t freed_ms = 0;  // 0 = still held

  // Whether its group is a lab, whose account pays; a job of no group, or
  // of a group that is not a lab (open to anyone, an account of no one),
  // pays from its owner's.
  bool group_pays = true;

  std::string Account() const { return group_pays ? JobAccount(user, group) : UserAccount(user); }
  // Charges' keys are "charge:" + SpanId() + ":" + from_ms.
  std::string SpanId() const { return attempt_id + "/" + std::to_string(rank); }
};

// The entries due for `h` whose charges were posted up to `posted_to_ms`
// (0 or less: nothing posted yet), as of `now_ms`: a charge for each
// posting period that is over (or, once freed, up to freed_ms), each with
// its lending credit when the holding ran on a machine of a group other
// than the job's and the charge is not zero. In time order.
std::vector<LedgerEntry> EntriesDue(const Holding& h, int64_t posted_to_ms, int64_t now_ms,
                                    const PriceBook& prices, const MeteringRules& rules);

// Storage: an account pays for the bytes it stores (checkpoints, and the
// inputs of its live jobs) once per posting period, at the bytes stored
// when the first accrual tick after the period's end counts them. The
// charge for the last period over at `now_ms`, keyed by account and
// period ("storage:group:vision:<from_ms>"; attempt "storage:<account>",
// class "storage", job 0); nullopt when it costs nothing.
std::optional<LedgerEntry> StorageChargeDue(const std::string& account, int64_t bytes,
                                            int64_t now_ms, const PriceBook& prices,
                                            const MeteringRules& rules);

// Lending in fair share (--lending-fair-share): what a lab lent counts
// against its own fair-share usage. `lending_by_day` is its lending credits
// per UTC day (the day's first ms -> micro-credits); each day's is decayed
// from the day's middle with `half_life_ms` (<= 0: no decay), converted back
// into what the borrowers' GPU time counted in fair share (the credits
// over the lending share, over the cheapest GPU class's price per hour:
// weighted GPU-milli x ms, see PriceBook::UsageWeightMilli) and scaled by
// `bonus_permille` (1000: a lent GPU-hour offsets one of the lab's own).
// 0 without GPU prices or lending credits.
int64_t LendingBonusMilliMs(const std::vector<std::pair<int64_t, Micros>>& lending_by_day,
                            int64_t now_ms, int64_t half_life_ms, Micros cheapest_gpu_per_hour,
                            const MeteringRules& rules, int32_t bonus_permille);

// What `h` owes beyond posted_to_ms as of now_ms (up to freed_ms once
// freed): the charge for the period under way.
Micros Unposted(const Holding& h, int64_t posted_to_ms, int64_t now_ms, const PriceBook& prices);

}  // namespace gpupool::accounting
