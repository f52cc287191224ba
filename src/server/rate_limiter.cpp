#include "server/rate_limiter.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace gpupool::server {

Result<RateLimit> ParseRateLimit(std::string_view text) {
  const std::string form = "expected RATE/UNIT[,BURST] such as 1/s, 30/m or 100/h,500; got \"" +
                           std::string(text) + "\"";
  double rate = 0, burst = 0;
  char unit = 0;
  char extra = 0;
  std::string t(text);
  int n = std::sscanf(t.c_str(), "%lf/%c,%lf%c", &rate, &unit, &burst, &extra);
  if (n < 2 || n > 3 || rate < 0 || !std::isfinite(rate) || (n == 3 && burst < 1)) {
    return Status::InvalidArgument(form);
  }
  // Nothing may follow the unit but ",BURST".
  size_t slash = t.find('/');
  if (slash + 2 < t.size() && (t[slash + 2] != ',' || n != 3)) {
    return Status::InvalidArgument(form);
  }
  double per = unit == 's' ? 1 : unit == 'm' ? 60 : unit == 'h' ? 3600 : 0;
  if (per == 0) return Status::InvalidArgument(form);
  RateLimit out;
  out.per_second = rate / per;
  out.burst = n == 3 ? burst : std::max(1.0, 4 * rate);
  return out;
}

std::string DescribeRateLimit(const RateLimit& limit) {
  if (limit.per_second <= 0) return "no limit";
  auto number = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return std::string(buf);
  };
  std::string rate;
  if (limit.per_second >= 1) {
    rate = number(limit.per_second) + " a second";
  } else if (limit.per_second * 60 >= 1) {
    rate = number(limit.per_second * 60) + " a minute";
  } else {
    rate = number(limit.per_second * 3600) + " an hour";
  }
  return number(limit.burst) + " at once, then " + rate;
}

void RateLimiter::Give(const std::string& key) {
  if (limit_.per_second <= 0) return;
  auto it = buckets_.find(key);
  if (it == buckets_.end()) return;  // full already
  it->second.tokens = std::min(limit_.burst, it->second.tokens + 1.0);
}

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
