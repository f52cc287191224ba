#include "accounting/prices.h"

#include <algorithm>

namespace gpupool::accounting {

namespace {

constexpr int64_t kMsPerHour = 3'600'000;
// Units: GPU and CPU milli (1000 per unit), memory MiB (1024 per GiB). All
// numerators are scaled to one denominator so they can be summed.
constexpr __int128 kDenominator = static_cast<__int128>(1000) * 1024 * kMsPerHour;
int64_t ScaleOf(PricedResource r) { return r == PricedResource::kMemory ? 1000 : 1024; }

}  // namespace

Status CheckPriceVersion(const PriceVersion& v) {
  if (v.resource == PricedResource::kGpu) {
    if (v.gpu_class.empty() || v.gpu_class.size() > 64) {
      return Status::InvalidArgument(
          "class: a GPU class is 1 to 64 characters (e.g. A100, T4, "
          "3g.40gb, default)");
    }
    for (char c : v.gpu_class) {
      bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '.' || c == '-' || c == '_';
      if (!ok) {
        return Status::InvalidArgument("class: \"" + v.gpu_class +
                                       "\" may hold only letters, digits, '.', '-' and '_'");
      }
    }
  } else if (!v.gpu_class.empty()) {
    return Status::InvalidArgument("class: only GPU prices have a class, not " +
                                   std::string(PricedResourceName(v.resource)) + " prices");
  }
  if (v.per_unit < 0) return Status::InvalidArgument("price: must not be negative");
  if (v.per_unit > kMaxPricePerUnit) {
    return Status::InvalidArgument("price: " + FormatCredits(v.per_unit) +
                                   " is more than the most a unit may cost (" +
                                   FormatCredits(kMaxPricePerUnit) + ")");
  }
  return Status::Ok();
}

PriceBook::PriceBook(std::vector<PriceVersion> versions) : versions_(std::move(versions)) {
  std::stable_sort(versions_.begin(), versions_.end(), [](const auto& x, const auto& y) {
    return x.from_ms != y.from_ms ? x.from_ms < y.from_ms : x.id < y.id;
  });
  for (size_t i = 0; i < versions_.size(); ++i) {
    by_key_[{versions_[i].resource, versions_[i].gpu_class}].push_back(i);
  }
}

std::string PriceBook::ClassOf(const GpuInfo& gpu) const {
  std::string best;
  bool has_default = false;
  for (const auto& [key, idx] : by_key_) {
    if (key.first != PricedResource::kGpu) continue;
    const std::string& cls = key.second;
    if (cls == kDefaultGpuClass) {
      has_default = true;
      continue;
    }
    bool names =
        GpuModelMatches(gpu.name, cls) || (!gpu.mig_profile.empty() && gpu.mig_profile == cls);
    if (names && (cls.size() > best.size() || (cls.size() == best.size() && cls < best))) {
      best = cls;
    }
  }
  if (best.empty() && has_default) best = std::string(kDefaultGpuClass);
  return best;
}

std::vector<PriceVersion> PriceBook::InForce(int64_t at_ms) const {
  std::vector<PriceVersion> out;
  for (const auto& [key, idx] : by_key_) {
    const PriceVersion* current = nullptr;
    for (size_t i : idx) {
      if (versions_[i].from_ms <= at_ms) current = &versions_[i];
    }
    if (current) out.push_back(*current);
  }
  return out;
}

Micros PriceBook::PriceAt(PricedResource resource, const std::string& gpu_class,
                          int64_t at_ms) const {
  auto it = by_key_.find({resource, gpu_class});
  if (it == by_key_.end()) return 0;
  Micros price = 0;
  for (size_t i : it->second) {
    if (versions_[i].from_ms <= at_ms) price = versions_[i].per_unit;
  }
  return price;
}

__int128 PriceBook::Numerator(PricedResource r, const std::string& gpu_class, int64_t units,
                              int64_t a, int64_t b) const {
  if (units <= 0 || b <= a) return 0;
  auto it = by_key_.find({r, gpu_class});
  if (it == by_key_.end()) return 0;
  const std::vector<size_t>& idx = it->second;
  __int128 sum = 0;
  // Version k is in force over [from_k, from_{k+1}).
  for (size_t k = 0; k < idx.size(); ++k) {
    const PriceVersion& v = versions_[idx[k]];
    int64_t lo = std::max(a, v.from_ms);
    int64_t hi = k + 1 < idx.size() ? std::min(b, versions_[idx[k + 1]].from_ms) : b;
    if (hi <= lo) continue;
    sum += static_cast<__int128>(v.per_unit) * units * (hi - lo);
  }
  return sum * ScaleOf(r);
}

Micros PriceBook::CostSince(const MeteredUse& use, int64_t start_ms, int64_t t_ms) const {
  __int128 n = 0;
  if (!use.gpu_class.empty()) {
    n += Numerator(PricedResource::kGpu, use.gpu_class, use.gpu_milli, start_ms, t_ms);
  }
  n += Numerator(PricedResource::kCpu, "", use.cpu_milli, start_ms, t_ms);
  n += Numerator(PricedResource::kMemory, "", use.memory_mib, start_ms, t_ms);
  return static_cast<Micros>(n / kDenominator);
}

Micros PriceBook::Charge(const MeteredUse& use, int64_t start_ms, int64_t a_ms,
                         int64_t b_ms) const {
  if (b_ms <= a_ms) return 0;
  return CostSince(use, start_ms, b_ms) - CostSince(use, start_ms, a_ms);
}

Micros PriceBook::PerHour(const MeteredUse& use, int64_t at_ms) const {
  auto part = [&](PricedResource r, const std::string& cls, int64_t units) -> __int128 {
    return static_cast<__int128>(PriceAt(r, cls, at_ms)) * units * kMsPerHour * ScaleOf(r);
  };
  __int128 n = part(PricedResource::kCpu, "", use.cpu_milli) +
               part(PricedResource::kMemory, "", use.memory_mib);
  if (!use.gpu_class.empty()) n += part(PricedResource::kGpu, use.gpu_class, use.gpu_milli);
  return static_cast<Micros>(n / kDenominator);
}

Micros PriceBook::StorageCost(int64_t bytes, int64_t a_ms, int64_t b_ms) const {
  constexpr __int128 kGiB = __int128{1} << 30;
  constexpr __int128 kMonthMs = __int128{30} * 24 * kMsPerHour;
  return static_cast<Micros>(Numerator(PricedResource::kStorage, "", bytes, a_ms, b_ms) /
                             (kGiB * kMonthMs * ScaleOf(PricedResource::kStorage)));
}

bool PriceBook::PricesStorage() const { return by_key_.count({PricedResource::kStorage, ""}) > 0; }

Micros PriceBook::CheapestGpu(int64_t at_ms) const {
  Micros cheapest = 0;
  for (const PriceVersion& v : InForce(at_ms)) {
    if (v.resource == PricedResource::kGpu && v.per_unit > 0 &&
        (cheapest == 0 || v.per_unit < cheapest))
      cheapest = v.per_unit;
  }
  return cheapest;
}

int64_t PriceBook::UsageWeightMilli(const GpuInfo& gpu, int64_t at_ms) const {
  const Micros cheapest = CheapestGpu(at_ms);
  if (cheapest == 0) return 1000;
  const Micros price = std::max(PriceAt(PricedResource::kGpu, ClassOf(gpu), at_ms), cheapest);
  return static_cast<int64_t>(static_cast<__int128>(price) * 1000 / cheapest);
}

}  // namespace gpupool::accounting
