// RateLimiter: token buckets by key (a token's id, or a client address for
// logins). Each key may make `burst` requests at once and `per_second` more
// every second after that. Pure: time comes from the injected Clock's
// monotonic clock.
// Single-threaded.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/clock.h"
#include "common/status.h"

namespace gpupool::server {

struct RateLimit {
  double per_second = 0;  // 0 = no limit
  double burst = 0;
};

// "50/s", "1/m,10", "100/h,500": a rate per second, minute or hour and an
// optional burst (default: 4 seconds', minutes' or hours' worth, at least 1).
// "0/s" is no limit. InvalidArgument saying the expected form.
Result<RateLimit> ParseRateLimit(std::string_view text);
// "1 a second, bursts of 10" for messages.
std::string DescribeRateLimit(const RateLimit& limit);

class RateLimiter {
 public:
  RateLimiter(const Clock& clock, RateLimit limit) : clock_(clock), limit_(limit) {}

  // Takes one request from `key`'s bucket: 0 when it may proceed, else how
  // many milliseconds until it may (for Retry-After).
  int64_t Take(const std::string& key);
  // Puts one request back into `key`'s bucket (never above the burst): a
  // request that turned out not to count.
  void Give(const std::string& key);

  size_t tracked_keys() const { return buckets_.size(); }

 private:
  struct Bucket {
    double tokens = 0;
    int64_t at_ms = 0;
  };
  void ForgetFullBuckets(int64_t now);

  const Clock& clock_;
  RateLimit limit_;
  std::unordered_map<std::string, Bucket> buckets_;
  int64_t last_sweep_ms_ = 0;
};

}  // namespace gpupool::server
