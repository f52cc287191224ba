// RateLimiter: token buckets by key (a token's id, or a client address for
// logins). Each key may make `burst` requests at once and `per_second` more
// every second after that. Pure: time comes from the injected Clock's
// monotonic clock.
// Single-threaded.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>

#include "common/clock.h"

namespace gpupool::server {

struct RateLimit {
  double per_second = 0;  // 0 = no limit
  double burst = 0;
};

class RateLimiter {
 public:
  RateLimiter(const Clock& clock, RateLimit limit) : clock_(clock), limit_(limit) {}

  // Takes one request from `key`'s bucket: 0 when it may proceed, else how
  // many milliseconds until it may (for Retry-After).
  int64_t Take(const std::string& key);

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
