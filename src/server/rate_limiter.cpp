#include "server/rate_limiter.h"

#include <algorithm>
#include <cmath>

namespace gpupool::server {

int64_t RateLimiter::Take(const std::string& key) {
  if (limit_.per_second <= 0) return 0;
  const int64_t now = clock_.MonoMs();  // a stepped wall clock neither refills nor drains
  if (now - last_sweep_ms_ > 60'000) ForgetFullBuckets(now);
  auto [it, inserted] = buckets_.try_emplace(key, Bucket{limit_.burst, now});
  Bucket& b = it->second;
  if (!inserted) {
    b.tokens = std::min(limit_.burst, b.tokens + (now - b.at_ms) * limit_.per_second / 1000.0);
    b.at_ms = now;
  }
  if (b.tokens >= 1.0) {
    b.tokens -= 1.0;
    return 0;
  }
  return std::max<int64_t>(
      1, static_cast<int64_t>(std::ceil((1.0 - b.tokens) * 1000.0 / limit_.per_second)));
}

// A bucket that has refilled is the same as no bucket; dropping those keeps
// the map as small as the set of recently busy keys.
void RateLimiter::ForgetFullBuckets(int64_t now) {
  last_sweep_ms_ = now;
  std::erase_if(buckets_, [&](const auto& kv) {
    const Bucket& b = kv.second;
    return b.tokens + (now - b.at_ms) * limit_.per_second / 1000.0 >= limit_.burst;
  });
}

}  // namespace gpupool::server
