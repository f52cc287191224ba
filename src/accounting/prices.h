// The price book: what holding resources costs, at any moment, from the
// versions the admins set (records.h PriceVersion), and the exact cost of
// holding something over an interval.
//
// Exactness: a cost is computed in 128-bit integers as the sum over the
// price versions in force during the interval, then rounded down once to a
// micro-credit. The cost of holding since `start` until t, C(t), is what
// an attempt owes at t; an interval [a, b) is charged C(b) - C(a), so the
// charges of consecutive intervals add up to the whole cost exactly,
// however the time is cut (by posting periods, crashes or price changes).
//
// Contract: pure; no clock (times are arguments).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "accounting/records.h"
#include "model/resources.h"

namespace gpupool::accounting {

inline constexpr std::string_view kDefaultGpuClass = "default";
inline constexpr Micros kMaxPricePerUnit = 1'000'000 * kMicrosPerCredit;

// A new version's fields checked: a known GPU class spelling (1 to 64 of
// letters, digits, '.', '-', '_'; "" for the other resources), 0 <= price
// <= a million credits. InvalidArgument names the field.
Status CheckPriceVersion(const PriceVersion& v);

// What one attempt (or one gang rank) holds, as charged.
struct MeteredUse {
  std::string gpu_class;  // "" = its GPUs are free (no class priced)
  int64_t gpu_milli = 0;  // in all (1000 per whole GPU)
  int64_t cpu_milli = 0;  // 1000 per CPU
  int64_t memory_mib = 0;
  friend bool operator==(const MeteredUse&, const MeteredUse&) = default;
};

class PriceBook {
 public:
  PriceBook() = default;
  explicit PriceBook(std::vector<PriceVersion> versions);

  // The class GPU `gpu` is charged as: among the priced GPU classes, the
  // longest that names it (GpuModelMatches on its name, or its MIG
  // profile exactly); else "default" when that is priced; else "" (free).
  std::string ClassOf(const GpuInfo& gpu) const;

  // The versions in force at `at_ms`, one per resource and class, by
  // resource then class.
  std::vector<PriceVersion> InForce(int64_t at_ms) const;
  // The price of one unit of `resource` (`gpu_class` for GPUs) at `at_ms`;
  // 0 when none is set.
  Micros PriceAt(PricedResource resource, const std::string& gpu_class, int64_t at_ms) const;

  // What holding `use` from `start_ms` until `t_ms` costs, rounded down.
  Micros CostSince(const MeteredUse& use, int64_t start_ms, int64_t t_ms) const;
  // The charge of [a_ms, b_ms) of a holding that began at start_ms:
  // CostSince(b) - CostSince(a).
  Micros Charge(const MeteredUse& use, int64_t start_ms, int64_t a_ms, int64_t b_ms) const;
  // Credits per hour `use` costs at `at_ms` (the price a job is shown).
  Micros PerHour(const MeteredUse& use, int64_t at_ms) const;

  // What storing `bytes` over [a_ms, b_ms) costs at the storage prices in
  // force (per GiB-month; a month is 30 days), rounded down.
  Micros StorageCost(int64_t bytes, int64_t a_ms, int64_t b_ms) const;
  // Whether a storage price was ever set (none: storage is not metered).
  bool PricesStorage() const;

  // What an hour of `gpu` counts in fair share, in thousandths of a
  // GPU-hour, as Slurm's billing weights do: its class's GPU-hour price
  // over the cheapest priced GPU class's at `at_ms` (an A100 at 2.00 next to
  // a T4 at 0.50 counts 4000). 1000 when no GPU class has a price; a GPU of
  // no price (free, or unpriced) counts as the cheapest.
  int64_t UsageWeightMilli(const GpuInfo& gpu, int64_t at_ms) const;
  // The lowest positive GPU-hour price in force at `at_ms`; 0 without one.
  Micros CheapestGpu(int64_t at_ms) const;

  const std::vector<PriceVersion>& versions() const { return versions_; }

 private:
  // Exact cost numerator over [a, b) for one resource key (see prices.cpp).
  __int128 Numerator(PricedResource r, const std::string& gpu_class, int64_t units, int64_t a,
                     int64_t b) const;
  std::vector<PriceVersion> versions_;  // by from_ms, then id
  // (resource, class) -> indexes into versions_, by from_ms.
  std::map<std::pair<PricedResource, std::string>, std::vector<size_t>> by_key_;
};

}  // namespace gpupool::accounting
